// reshard/io/work_split.hpp: one transform split among workers (processes, machines). Sizes the
// target ranks from the source headers (transform_target_bytes), balances them by bytes
// (balance_targets), and runs one worker's share (transform_checkpoints_for_ranks, or
// transform_job_for_ranks to step it in agreement with the others: reshard/mpi/transform.hpp).
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

/// The tensor bytes that transform_checkpoints(src_dir, ...) writes to each target rank (index =
/// target rank): what the progress counts, without the files' framing; the bytes written of each
/// target of the checkpoint plan (its preview: the sources' indexes, no tensor data).
inline std::vector<std::uint64_t> transform_target_bytes(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  const std::string op = "transform_checkpoints";
  strategy_layouts dst(dst_strategy);
  std::vector<transform_target> targets;
  for (index_t t = 0; t < dst.ranks(); ++t) targets.push_back({t, {}});
  transform_job e = is_dcp_directory(src_dir)
                        ? detail::dcp_job(op, src_dir, src_strategy, std::move(dst), std::move(targets), {})
                        : [&] {
                            strategy_layouts src(src_strategy);
                            std::vector<std::string> warnings;
                            auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
                            return transform_job(std::move(src), std::move(dst), std::move(files), std::move(targets), {}, op);
                          }();
  e.preview();
  std::vector<std::uint64_t> out;
  for (const auto& t : e.plan().targets) out.push_back(totals_of(t).bytes_written);
  return out;
}

/// The transform_job of transform_checkpoints_for_ranks, not yet run: for callers that step it
/// (check, stage, commit) in agreement with other workers (reshard/mpi/transform.hpp).
inline transform_job transform_job_for_ranks(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                             std::string_view prefix, const std::filesystem::path& src_strategy,
                                             const std::filesystem::path& dst_strategy,
                                             std::span<const std::int64_t> ranks, const transform_options& opts = {}) {
  const std::string op = "transform_checkpoints";
  strategy_layouts dst(dst_strategy);
  std::set<index_t> seen, hint;
  std::vector<transform_target> targets;
  std::vector<std::int64_t> valid;
  for (std::int64_t t : ranks) {
    if (!seen.insert(t).second)
      report_error(op + ": ranks: target rank " + std::to_string(t) + " is listed twice");
    // a DCP checkpoint: one directory, all ranks (the engine refuses some of them)
    targets.push_back({t, opts.format == checkpoint_format::dcp ? dst_dir : rank_checkpoint_path(dst_dir, prefix, t, opts.format)});
    if (t >= 0 && t < dst.ranks()) valid.push_back(t);
  }
  if (is_dcp_directory(src_dir))  // its chunks are its layout: no strategy, no shape hint
    return detail::dcp_job(op, src_dir, src_strategy, std::move(dst), std::move(targets), opts);
  strategy_layouts src(src_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  try {
    hint = detail::needed_sources(valid, src, dst, partition::mode::tabulated);
  } catch (const reshard::error&) {
    // a hint only: the engine reports what is wrong with the strategies
  }
  transform_job job(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, op,
                    std::move(warnings));
  job.set_shape_hint(std::move(hint));
  return job;
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
