// reshard/io/work_split.hpp: one transform split among workers (processes, machines). Sizes the
// target ranks from the source headers (transform_target_bytes), balances them by bytes
// (balance_targets), and runs one worker's share (transform_checkpoints_for_ranks, or
// transform_job_for_ranks to step it in agreement with the others: reshard/mpi/transform.hpp).
#pragma once

#include <reshard/error.hpp>
#include <reshard/partition.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/engine.hpp>
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
/// target rank): what the progress counts, without the files' framing. Reads the headers of
/// the source files that decide each rank's parameters and their shapes, and no tensor data.
inline std::vector<std::uint64_t> transform_target_bytes(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  const std::string op = "transform_checkpoints";
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::vector<transform_target> targets;
  for (index_t t = 0; t < dst.ranks(); ++t) targets.push_back({t, {}});
  transform_job e(std::move(src), std::move(dst), std::move(files), std::move(targets), {}, op);
  return e.target_bytes();
}

/// Splits the target ranks 0 .. bytes.size()-1 among `parts` workers, balanced by bytes
/// (bytes[t]: what rank t gets): largest first (equal sizes: lower rank first), each to the
/// worker with the fewest bytes so far (ties: the lower worker). Deterministic, so every process
/// computes the same split. Each worker's ranks ascending; workers beyond the ranks get none.
inline std::vector<std::vector<std::int64_t>> balance_targets(std::span<const std::uint64_t> bytes,
                                                              std::size_t parts) {
  if (parts == 0) report_error("balance_targets: parts is 0 (at least one worker is needed)");
  std::vector<std::int64_t> order(bytes.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return bytes[static_cast<std::size_t>(a)] > bytes[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<std::int64_t>> out(parts);
  std::vector<std::uint64_t> load(parts, 0);
  for (std::int64_t t : order) {
    const auto w = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[w].push_back(t);
    load[w] += bytes[static_cast<std::size_t>(t)];
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

/// The transform_job of transform_checkpoints_for_ranks, not yet run: for callers that step it
/// (check, stage, commit) in agreement with other workers (reshard/mpi/transform.hpp).
inline transform_job transform_job_for_ranks(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                             std::string_view prefix, const std::filesystem::path& src_strategy,
                                             const std::filesystem::path& dst_strategy,
                                             std::span<const std::int64_t> ranks, const transform_options& opts = {}) {
  const std::string op = "transform_checkpoints";
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::set<index_t> seen, hint;
  std::vector<transform_target> targets;
  std::vector<std::int64_t> valid;
  for (std::int64_t t : ranks) {
    if (!seen.insert(t).second)
      report_error(op + ": ranks: target rank " + std::to_string(t) + " is listed twice");
    targets.push_back({t, rank_checkpoint_path(dst_dir, prefix, t, opts.format)});
    if (t >= 0 && t < dst.ranks()) valid.push_back(t);
  }
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
