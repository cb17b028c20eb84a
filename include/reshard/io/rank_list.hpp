// reshard/io/rank_list.hpp: MindSpore's rank_list_for_transform, minimal: the source ranks whose
// files a target rank reads, from the strategies alone. They are by construction the senders
// of the plans the engine (engine.hpp) executes for that rank, plus its base file rank % M.
#pragma once

#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/partition.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/strategy_layouts.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// rank lists

namespace detail {

// The source ranks that target ranks `ranks` read, from the strategies alone: each target's base
// file t % M, and per parameter the senders of its transfers in the plan the engine executes
// (rank_planner: the same layouts, the same replica policy). `m`: arithmetic partitions for a
// few targets, tabulated ones (O(M + N) per parameter) for many.
inline std::set<index_t> needed_sources(std::span<const std::int64_t> ranks, const strategy_layouts& src,
                                        const strategy_layouts& dst, partition::mode m) {
  const index_t M = src.ranks(), N = dst.ranks();
  std::set<index_t> out;
  for (std::int64_t t : ranks) {
    if (t < 0 || t >= N)
      report_error("rank_list_for_transform: target rank " + std::to_string(t) + " is not a rank of " +
                   (dst.present() ? "the target strategy " + dst.source() : std::string("the target (no strategy)")) +
                   ", which has " + std::to_string(N) + " rank" + (N == 1 ? "" : "s"));
    out.insert(t % M);
  }
  // a parameter the source does not list is read whole from t % M; its target layouts, where a
  // tensor_shape gives their shape, must hold it
  for (const auto& name : dst.names())
    if (!src.find(name))
      for (const auto& e : *dst.find(name))
        if (!e.stored.tensor_shape.empty())
          to_layout(e.stored,
                    index_list(e.stored.tensor_shape.begin(), e.stored.tensor_shape.end()), e.stage,
                    "strategy: " + dst.source() + ": parameter " + quote_name(name));
  std::vector<transfer> xs;
  for (const auto& name : src.names()) {
    const staged_layout& s = src.find(name)->front();
    const std::string who_s = "strategy: " + src.source() + ": parameter " + quote_name(name);
    const std::string who_d = "strategy: " + dst.source() + ": parameter " + quote_name(name);
    const std::vector<staged_layout>* d = dst.present() ? dst.find(name) : nullptr;
    // per target stage listed (or the whole tensor on every target), one planner
    std::vector<std::pair<const param_layout*, std::uint32_t>> stages;
    if (d) {
      for (const auto& e : *d) stages.push_back({&e.stored, e.stage});
    } else {
      stages.push_back({nullptr, 0});
    }
    for (const auto& [dl, stage] : stages) {
      std::vector<std::int64_t> mine;
      for (std::int64_t t : ranks)
        if (!dl || dst.stage_of(t) == stage) mine.push_back(t);
      if (mine.empty()) continue;
      // checked as the transform checks them: the source layout with the full shape, the target's
      // tensor_shape against it, the target layout with it; but when the shape is the target's
      // tensor_shape (the source gives none), the target goes first, so that an error names it
      const index_list shape = probe_shape(s.stored, dl, who_s, who_d);
      const auto target = [&] {
        if (!dl) return whole_on_targets(shape, N);
        check_tensor_shape(*dl, shape, who_d, "the source strategy " + src.source());
        return to_layout(*dl, shape, stage, who_d);
      };
      std::optional<layout> tl;
      if (s.stored.tensor_shape.empty() && dl && !dl->tensor_shape.empty()) tl = target();
      const layout sl = to_layout(s.stored, shape, s.stage, who_s);
      if (!tl) tl = target();
      validate(sl, who_s);
      validate(*tl, dl ? who_d : who_s);
      const rank_planner rp(sl, *tl, m);
      for (std::int64_t t : mine) {
        xs.clear();
        rp.receives(t, xs);
        for (const transfer& x : xs) out.insert(x.src);
      }
    }
  }
  return out;
}

}  // namespace detail

/// The source ranks whose files target rank `rank` reads (MindSpore's rank_list_for_transform,
/// minimal: one per distinct source slice it needs, and its base file rank % M), ascending. They
/// are by construction the senders of the plans transform_checkpoint_by_rank executes.
inline std::vector<std::int64_t> rank_list_for_transform(std::int64_t rank, const strategy_layouts& src,
                                                         const strategy_layouts& dst) {
  const std::int64_t one[1] = {rank};
  const std::set<index_t> out = detail::needed_sources(one, src, dst, partition::mode::arithmetic);
  return {out.begin(), out.end()};
}

/// rank_list_for_transform with strategy files (an empty path = no strategy).
inline std::vector<std::int64_t> rank_list_for_transform(std::int64_t rank, const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  return rank_list_for_transform(rank, strategy_layouts(src_strategy), strategy_layouts(dst_strategy));
}

}  // namespace reshard::io
