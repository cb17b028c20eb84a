// reshard/io/work_split.hpp: one transform split among workers (processes, machines). Sizes the
// target ranks (transform_stage_bytes: from one target per pipeline stage, reading a few source
// indexes; transform_target_bytes: every target, reading the indexes of every source a target
// reads), balances them by bytes in contiguous runs of ranks (balance_targets), and runs one
// worker's share (transform_checkpoints_for_ranks, or transform_job_for_ranks to step it in
// agreement with the others: reshard/mpi/transform.hpp), which opens only the source files
// that share reads.
#pragma once

#include <reshard/error.hpp>
#include <reshard/partition.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/engine.hpp>
#include <reshard/io/plan_file.hpp>  // balance_targets
#include <reshard/io/rank_list.hpp>
#include <reshard/io/strategy_layouts.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// one transform split among workers (processes, machines): see reshard/mpi/transform.hpp

namespace detail {

// The transform_job of the targets `targets` (ranks of `dst`; their paths may be empty for a
// preview), from a DCP checkpoint or a strategy's rank files. With a strategy, the shapes are
// taken first from the source files these targets read (needed_sources), so that the job opens
// only those (and the targets' base files). Of the rank directories the targets do not read,
// share `check` is checked to exist (rank_files): with check = {i, k}, the i-th of k equal runs
// of the source ranks; {0, 1} (the default) all of them, {0, 0} none.
inline transform_job job_for_targets(const std::filesystem::path& src_dir, const std::filesystem::path& src_strategy,
                                     strategy_layouts dst, std::vector<transform_target> targets,
                                     const transform_options& opts, std::pair<index_t, index_t> check = {0, 1}) {
  const std::string op = "transform_checkpoints";
  if (is_dcp_directory(src_dir))  // its chunks are its layout: no strategy, no shape hint
    return detail::dcp_job(op, src_dir, src_strategy, std::move(dst), std::move(targets), opts);
  strategy_layouts src(src_strategy);
  std::set<index_t> hint;
  bool hinted = false;
  std::vector<std::int64_t> valid;
  for (const auto& t : targets)
    if (t.rank >= 0 && t.rank < dst.ranks()) valid.push_back(t.rank);
  try {
    // the tables of a tabulated partition cost O(M + N) a parameter: for the few targets of a
    // sizing (one per stage) the arithmetic partitions answer at once (as rank_list_for_transform)
    const bool few = valid.size() * 64 < static_cast<std::size_t>(src.ranks() + dst.ranks());
    hint = detail::needed_sources(valid, src, dst, few ? partition::mode::arithmetic : partition::mode::tabulated);
    hinted = true;
  } catch (const reshard::error&) {
    // a hint only: the engine reports what is wrong with the strategies
  }
  // the files of the ranks these targets read (the rank directories of `check` checked to
  // exist): the senders the engine plans are those ranks (needed_sources), so the plan is the same
  std::vector<std::string> warnings;
  const index_t M = src.ranks();
  const std::pair<index_t, index_t> dirs =
      check.second > 0 ? std::pair<index_t, index_t>{M * check.first / check.second, M * (check.first + 1) / check.second}
                       : std::pair<index_t, index_t>{0, 0};
  auto files = detail::rank_files(src_dir, M, op, warnings, hinted ? &hint : nullptr, dirs);
  transform_job job(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, op,
                    std::move(warnings));
  job.set_shape_hint(std::move(hint));
  return job;
}

// The tensor bytes each of the target ranks `ranks` gets: the preview of their plan (the
// indexes of the source files they need; no tensor data). `check`: the share of the rank
// directories they do not read that is checked to exist (job_for_targets).
inline std::vector<std::uint64_t> preview_target_bytes(const std::filesystem::path& src_dir,
                                                       const std::filesystem::path& src_strategy,
                                                       const strategy_layouts& dst, std::span<const index_t> ranks,
                                                       const transform_options& opts,
                                                       std::pair<index_t, index_t> check = {0, 1}) {
  transform_options o = opts;
  o.progress = nullptr;
  o.manifest.clear();
  o.max_memory = 0;  // sizing only: no jobs are fitted
  std::vector<transform_target> targets;
  for (index_t t : ranks) targets.push_back({t, {}});
  transform_job e = job_for_targets(src_dir, src_strategy, dst, std::move(targets), o, check);
  e.preview();
  std::vector<std::uint64_t> out;
  for (const auto& t : e.plan().targets) out.push_back(totals_of(t).bytes_written);
  return out;
}

}  // namespace detail

/// The tensor bytes that transform_checkpoints(src_dir, ...) writes to each target rank (index =
/// target rank): what the progress counts, without the files' framing; the bytes written of each
/// target of the checkpoint plan (its preview: the indexes of every source file a target reads,
/// no tensor data).
inline std::vector<std::uint64_t> transform_target_bytes(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  strategy_layouts dst(dst_strategy);
  std::vector<index_t> all;
  for (index_t t = 0; t < dst.ranks(); ++t) all.push_back(t);
  return detail::preview_target_bytes(src_dir, src_strategy, dst, all, {});
}

/// The sizes a split of a transform among workers is balanced by, without reading every
/// source's index (what transform_target_bytes reads): each target rank is given the tensor
/// bytes of the first rank of its pipeline stage (the preview of one target per stage: the
/// indexes of the few source files those read). Exact when the ranks of a stage get equal
/// slices (every dimension split evenly) and the same unlisted parameters, as a strategy's do;
/// otherwise within the difference of a stage's slices. `opts`: its names and casts (which
/// change what a target gets) are applied. Of the rank directories, only those the first targets
/// read are looked at (the workers' jobs check the others).
inline std::vector<std::uint64_t> transform_stage_bytes(const std::filesystem::path& src_dir,
                                                        const std::filesystem::path& src_strategy,
                                                        const std::filesystem::path& dst_strategy,
                                                        const transform_options& opts = {}) {
  strategy_layouts dst(dst_strategy);
  std::vector<index_t> firsts;  // the first rank of each stage
  for (index_t t = 0; t < dst.ranks(); t += dst.stage_ranks()) firsts.push_back(t);
  const auto sizes = detail::preview_target_bytes(src_dir, src_strategy, dst, firsts, opts, {0, 0});
  std::vector<std::uint64_t> out(static_cast<std::size_t>(dst.ranks()));
  for (index_t t = 0; t < dst.ranks(); ++t) out[static_cast<std::size_t>(t)] = sizes[static_cast<std::size_t>(dst.stage_of(t))];
  return out;
}

/// The transform_job of transform_checkpoints_for_ranks, not yet run: for callers that step it
/// (check, stage, commit) in agreement with other workers (reshard/mpi/transform.hpp).
/// `check` = {i, k}: of the source rank directories its targets do not read, it checks that the
/// i-th of k equal runs of ranks exist ({0, 1}, the default: all; workers that agree on failures
/// split the check, worker i of k taking {i, k}).
inline transform_job transform_job_for_ranks(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                             std::string_view prefix, const std::filesystem::path& src_strategy,
                                             const std::filesystem::path& dst_strategy,
                                             std::span<const std::int64_t> ranks, const transform_options& opts = {},
                                             std::pair<index_t, index_t> check = {0, 1}) {
  const std::string op = "transform_checkpoints";
  strategy_layouts dst(dst_strategy);
  std::set<index_t> seen;
  std::vector<transform_target> targets;
  for (std::int64_t t : ranks) {
    if (!seen.insert(t).second)
      report_error(op + ": ranks: target rank " + std::to_string(t) + " is listed twice");
    // a DCP checkpoint: one directory, all ranks (the engine refuses some of them)
    targets.push_back({t, opts.format == checkpoint_format::dcp ? dst_dir : rank_checkpoint_path(dst_dir, prefix, t, opts.format)});
  }
  return detail::job_for_targets(src_dir, src_strategy, std::move(dst), std::move(targets), opts, check);
}

/// transform_checkpoints for the target ranks `ranks` only: writes
/// `dst_dir/rank_<t>/<prefix><t>.<format>` for each t in `ranks` and nothing else, byte for byte
/// what transform_checkpoints writes for t. One worker's share of a transform split by
/// balance_targets. Of the source files it opens those its targets read (their base file t % M
/// and the ranks rank_list_for_transform names), preferring them for the parameters' shapes;
/// the files' CRC trailers are checked and their data read as transform_checkpoints would.
/// Progress and summary cover these targets only. An empty `ranks` writes nothing.
inline transform_summary transform_checkpoints_for_ranks(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& dst_dir, std::string_view prefix,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy,
                                                         std::span<const std::int64_t> ranks,
                                                         const transform_options& opts = {}) {
  return transform_job_for_ranks(src_dir, dst_dir, prefix, src_strategy, dst_strategy, ranks, opts).run();
}

}  // namespace reshard::io
