// reshard/io/transform.hpp: MindSpore's checkpoint-transformation workflows, on any M source
// ranks and any N target ranks (see docs/formats.md: #1-layouts, #3-checkpoint-files and
// #5-workflows).
//
//   transform_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy)   a whole directory
//   transform_checkpoint_by_rank(rank, {src_rank: file}, out_file, src, dst)      one target rank
//   rank_list_for_transform(rank, src_strategy, dst_strategy)                     its source ranks
//   load_checkpoint_by_rank(rank, {src_rank: file}, src, dst, allocate)           one rank, in memory
//   transform_dcp_checkpoint_by_rank(rank, dcp_dir, out_file, src, dst)           the same two from
//   load_dcp_checkpoint_by_rank(rank, dcp_dir, src, dst, allocate)                a PyTorch DCP dir
//   verify_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy)      outputs vs sources
//   merge_checkpoints(src_dir, out_file, src_strategy)                            all ranks -> one file
//   split_checkpoint(file, dst_dir, dst_strategy)                                 one file -> ranks
//   convert_checkpoint(in_file, out_file)                                         ckpt <-> safetensors
//   verify_merged_checkpoint, verify_split_checkpoint, verify_converted_checkpoint
//                                                                                 their outputs vs sources
//   transform_checkpoints_for_ranks(src_dir, dst_dir, ..., ranks)                 some target ranks
//
// Each builds a transform_job (engine.hpp: what each target gets and from where, memory, errors
// and atomic outputs) and runs it. This header includes the io layer's parts, each its own
// header: checkpoint.hpp (reading files), strategy_layouts.hpp (strategies as layouts),
// engine.hpp, rank_list.hpp and work_split.hpp (a transform split among workers).
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/engine.hpp>
#include <reshard/io/rank_list.hpp>
#include <reshard/io/strategy_layouts.hpp>
#include <reshard/io/work_split.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// the workflows

namespace detail {
// Every target rank of `dst` and its file `dst_dir/rank_<t>/<prefix><t>.<format>`; for
// checkpoint_format::hf, its Hugging Face checkpoint directory `dst_dir/rank_<t>/<prefix><t>/`
// (rank_checkpoint_path's name with no extension, as work_split and MPI name it too); for
// checkpoint_format::dcp, `dst_dir` itself, the PyTorch DCP directory of all ranks.
inline std::vector<transform_target> rank_targets(const strategy_layouts& dst, const std::filesystem::path& dst_dir,
                                                  std::string_view prefix, checkpoint_format format) {
  std::vector<transform_target> targets;
  for (index_t t = 0; t < dst.ranks(); ++t)  // a PyTorch DCP checkpoint: one directory for all ranks
    targets.push_back({t, format == checkpoint_format::dcp ? dst_dir : rank_checkpoint_path(dst_dir, prefix, t, format)});
  return targets;
}

// The job from the distributed checkpoint of `src_dir` to all the ranks' files under `dst_dir`.
inline transform_job directory_job(std::string op, const std::filesystem::path& src_dir,
                                   const std::filesystem::path& dst_dir, std::string_view prefix,
                                   const std::filesystem::path& src_strategy, const std::filesystem::path& dst_strategy,
                                   const transform_options& opts) {
  if (is_dcp_directory(src_dir)) {
    strategy_layouts dst(dst_strategy);
    auto targets = rank_targets(dst, dst_dir, prefix, opts.format);
    return dcp_job(std::move(op), src_dir, src_strategy, std::move(dst), std::move(targets), opts);
  }
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = rank_files(src_dir, src.ranks(), op, warnings);
  auto targets = rank_targets(dst, dst_dir, prefix, opts.format);
  return transform_job(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, std::move(op),
                       std::move(warnings));
}

// The job from the distributed checkpoint of `src_dir` to one checkpoint of full tensors.
inline transform_job merge_job(std::string op, const std::filesystem::path& src_dir, const std::filesystem::path& out_file,
                               const std::filesystem::path& src_strategy, const transform_options& opts) {
  if (is_dcp_directory(src_dir))
    return dcp_job(std::move(op), src_dir, src_strategy, strategy_layouts(), {transform_target{0, out_file}}, opts);
  strategy_layouts src(src_strategy);
  std::vector<std::string> warnings;
  auto files = rank_files(src_dir, src.ranks(), op, warnings);
  std::vector<transform_target> targets{transform_target{0, out_file}};
  return transform_job(std::move(src), strategy_layouts(), std::move(files), std::move(targets), opts, std::move(op),
                       std::move(warnings));
}

// The job from one checkpoint of full tensors to every target rank of `dst_strategy`.
inline transform_job split_job(std::string op, const std::filesystem::path& checkpoint,
                               const std::filesystem::path& dst_dir, const std::filesystem::path& dst_strategy,
                               std::string_view prefix, const transform_options& opts) {
  strategy_layouts dst(dst_strategy);
  auto targets = rank_targets(dst, dst_dir, prefix, opts.format);
  if (is_dcp_directory(checkpoint)) return dcp_job(std::move(op), checkpoint, {}, std::move(dst), std::move(targets), opts);
  std::map<index_t, std::filesystem::path> files;
  files.emplace(0, checkpoint);
  return transform_job(strategy_layouts(), std::move(dst), std::move(files), std::move(targets), opts, std::move(op));
}

// The job from one checkpoint to another, tensor for tensor.
inline transform_job convert_job(std::string op, const std::filesystem::path& in_file,
                                 const std::filesystem::path& out_file, const transform_options& opts) {
  if (is_dcp_directory(in_file))
    return dcp_job(std::move(op), in_file, {}, strategy_layouts(), {transform_target{0, out_file}}, opts);
  std::map<index_t, std::filesystem::path> files;
  files.emplace(0, in_file);
  std::vector<transform_target> targets{transform_target{0, out_file}};
  return transform_job(strategy_layouts(), strategy_layouts(), std::move(files), std::move(targets), opts,
                       std::move(op));
}
}  // namespace detail

/// Converts the distributed checkpoint of `src_dir` (`src_dir/rank_<r>/<last *.ckpt or
/// *.safetensors>` for every source rank r) from the layouts of `src_strategy` to those of
/// `dst_strategy`, writing `dst_dir/rank_<t>/<prefix><t>.ckpt` (or .safetensors, per
/// `opts.format`) for every target rank t. Any M and N. An empty strategy path = no strategy. A
/// `src_dir` holding `.metadata` is a PyTorch DCP checkpoint, whose chunks are its layout (no
/// `src_strategy`).
/// With opts.format == checkpoint_format::hf every target rank gets a Hugging Face checkpoint
/// directory `dst_dir/rank_<t>/<prefix><t>/` (shards of at most opts.max_shard_bytes and
/// model.safetensors.index.json, or one model.safetensors), all committed together.
inline transform_summary transform_checkpoints(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                               std::string_view prefix, const std::filesystem::path& src_strategy,
                                               const std::filesystem::path& dst_strategy,
                                               const transform_options& opts = {}) {
  return detail::directory_job("transform_checkpoints", src_dir, dst_dir, prefix, src_strategy, dst_strategy, opts)
      .run();
}

/// Checks the distributed checkpoint `dst_dir` (the files transform_checkpoints would write
/// there: `opts.format`, `prefix`) against its sources: every target tensor is made again from
/// `src_dir` by the same plans and compared byte for byte, in chunks (bounded memory). Returns
/// every difference; see transform_job::verify. `opts` must carry the run's selection, renames
/// and casts (opts.names, opts.casts): the tensors expected are those the run wrote. A Hugging
/// Face target (format hf) is compared tensor by tensor, whatever its shards.
inline verify_report verify_checkpoints(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                        std::string_view prefix, const std::filesystem::path& src_strategy,
                                        const std::filesystem::path& dst_strategy, const transform_options& opts = {}) {
  return detail::directory_job("verify_checkpoints", src_dir, dst_dir, prefix, src_strategy, dst_strategy, opts)
      .verify();
}

/// Writes target rank `rank`'s checkpoint `out_file` (ckpt, or safetensors if its name ends in
/// ".safetensors") from the source files `src_files` (source rank -> file). The files needed are
/// rank_list_for_transform(rank, ...); any replica of a needed rank's data also does.
inline transform_summary transform_checkpoint_by_rank(std::int64_t rank, const std::map<std::int64_t, std::filesystem::path>& src_files,
                                                      const std::filesystem::path& out_file,
                                                      const std::filesystem::path& src_strategy,
                                                      const std::filesystem::path& dst_strategy,
                                                      const transform_options& opts = {}) {
  std::map<index_t, std::filesystem::path> files(src_files.begin(), src_files.end());
  std::vector<transform_target> targets{transform_target{rank, out_file}};
  return transform_job(strategy_layouts(src_strategy), strategy_layouts(dst_strategy), std::move(files),
                            std::move(targets), opts, "transform_checkpoint_by_rank")
      .run();
}

/// Loads target rank `rank`'s parameters into memory, from the source files `src_files` (source
/// rank -> file; rank_list_for_transform(rank, ...) names the ones needed) and the two
/// strategies: what transform_checkpoint_by_rank would write, without a file. `allocate` gives
/// the memory of each parameter (see tensor_allocator), in the order the file would hold them;
/// the engine reads only the bytes the rank needs and fills that memory in place.
inline transform_summary load_checkpoint_by_rank(std::int64_t rank, const std::map<std::int64_t, std::filesystem::path>& src_files,
                                                 const std::filesystem::path& src_strategy,
                                                 const std::filesystem::path& dst_strategy, const tensor_allocator& allocate,
                                                 const transform_options& opts = {}) {
  std::map<index_t, std::filesystem::path> files(src_files.begin(), src_files.end());
  std::vector<transform_target> targets{transform_target{rank, {}}};
  return transform_job(strategy_layouts(src_strategy), strategy_layouts(dst_strategy), std::move(files),
                       std::move(targets), opts, "load_checkpoint_by_rank")
      .load(allocate);
}

/// transform_checkpoint_by_rank from a PyTorch DCP checkpoint: target rank `rank` of
/// `dst_strategy` (empty: the full tensors) read from the chunks of `dcp_dir` (a directory holding
/// `.metadata`, whose chunks are its layout: `src_strategy` must be empty; it is the caller's
/// argument, refused naming it). The byte items are left out, with a warning naming them.
inline transform_summary transform_dcp_checkpoint_by_rank(std::int64_t rank, const std::filesystem::path& dcp_dir,
                                                          const std::filesystem::path& out_file,
                                                          const std::filesystem::path& src_strategy,
                                                          const std::filesystem::path& dst_strategy,
                                                          const transform_options& opts = {}) {
  return detail::dcp_job("transform_checkpoint_by_rank", dcp_dir, src_strategy, strategy_layouts(dst_strategy),
                         {transform_target{rank, out_file}}, opts)
      .run();
}

/// load_checkpoint_by_rank from a PyTorch DCP checkpoint `dcp_dir` (as
/// transform_dcp_checkpoint_by_rank): target rank `rank`'s parameters of `dst_strategy` (empty:
/// the full tensors) in the memory `allocate` gives, reading only the chunks' bytes it needs.
inline transform_summary load_dcp_checkpoint_by_rank(std::int64_t rank, const std::filesystem::path& dcp_dir,
                                                     const std::filesystem::path& src_strategy,
                                                     const std::filesystem::path& dst_strategy,
                                                     const tensor_allocator& allocate,
                                                     const transform_options& opts = {}) {
  return detail::dcp_job("load_checkpoint_by_rank", dcp_dir, src_strategy, strategy_layouts(dst_strategy),
                         {transform_target{rank, {}}}, opts)
      .load(allocate);
}

/// Merges the distributed checkpoint of `src_dir` into one checkpoint of full tensors (MindSpore's
/// load_distributed_checkpoint + save, or merge_sliced_parameter for every parameter). A
/// `src_dir` holding `.metadata` is a PyTorch DCP checkpoint: its chunks are its layout, and
/// `src_strategy` must be empty.
inline transform_summary merge_checkpoints(const std::filesystem::path& src_dir, const std::filesystem::path& out_file,
                                           const std::filesystem::path& src_strategy,
                                           const transform_options& opts = {}) {
  return detail::merge_job("merge_checkpoints", src_dir, out_file, src_strategy, opts).run();
}

/// Checks `out_file` (what merge_checkpoints(src_dir, out_file, src_strategy, opts) writes: a
/// ckpt or safetensors file, or with format hf a Hugging Face checkpoint directory) against its
/// sources, as verify_checkpoints does.
inline verify_report verify_merged_checkpoint(const std::filesystem::path& src_dir, const std::filesystem::path& out_file,
                                              const std::filesystem::path& src_strategy,
                                              const transform_options& opts = {}) {
  return detail::merge_job("verify_merged_checkpoint", src_dir, out_file, src_strategy, opts).verify();
}

/// Splits the checkpoint `checkpoint` of full tensors (or a PyTorch DCP checkpoint directory, read
/// from its chunks) by `dst_strategy` into
/// `dst_dir/rank_<t>/<prefix><t>.ckpt` (or .safetensors, per `opts.format`; hf: the Hugging Face
/// checkpoint directories `dst_dir/rank_<t>/<prefix><t>/`, as transform_checkpoints).
inline transform_summary split_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& dst_dir,
                                          const std::filesystem::path& dst_strategy, std::string_view prefix = "checkpoint_",
                                          const transform_options& opts = {}) {
  return detail::split_job("split_checkpoint", checkpoint, dst_dir, dst_strategy, prefix, opts).run();
}

/// Checks `dst_dir` (what split_checkpoint(checkpoint, dst_dir, dst_strategy, prefix, opts)
/// writes) against `checkpoint`, as verify_checkpoints does.
inline verify_report verify_split_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& dst_dir,
                                             const std::filesystem::path& dst_strategy,
                                             std::string_view prefix = "checkpoint_", const transform_options& opts = {}) {
  return detail::split_job("verify_split_checkpoint", checkpoint, dst_dir, dst_strategy, prefix, opts).verify();
}

/// Converts one checkpoint between ckpt and safetensors (by the file names), tensor for tensor; a
/// PyTorch DCP checkpoint directory (`in_file` holds `.metadata`) is read as its whole tensors.
inline transform_summary convert_checkpoint(const std::filesystem::path& in_file, const std::filesystem::path& out_file,
                                            const transform_options& opts = {}) {
  return detail::convert_job("convert_checkpoint", in_file, out_file, opts).run();
}

/// Checks `out_file` (what convert_checkpoint(in_file, out_file, opts) writes) against
/// `in_file`, as verify_checkpoints does.
inline verify_report verify_converted_checkpoint(const std::filesystem::path& in_file,
                                                 const std::filesystem::path& out_file,
                                                 const transform_options& opts = {}) {
  return detail::convert_job("verify_converted_checkpoint", in_file, out_file, opts).verify();
}

}  // namespace reshard::io
