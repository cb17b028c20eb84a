// reshard/io/rank_list.hpp: MindSpore's rank_list_for_transform, minimal: the source ranks whose
// files a target rank reads, from the strategies alone. They are by construction the senders
// of the plans the engine (engine.hpp) executes for that rank, plus its base file rank % M.
#pragma once

#include <reshard/check_plan.hpp>
#include <reshard/error.hpp>
#include <reshard/ext/json.hpp>
#include <reshard/layout.hpp>
#include <reshard/partition.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/strategy_layouts.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// rank lists

namespace detail {

// Checks target ranks `ranks` against the target strategy, and the parameters only the target
// strategy lists against their tensor_shape, as the transform does.
inline void check_targets(std::span<const std::int64_t> ranks, const strategy_layouts& src, const strategy_layouts& dst,
                          const char* op) {
  const index_t N = dst.ranks();
  for (std::int64_t t : ranks)
    if (t < 0 || t >= N)
      report_error(std::string(op) + ": target rank " + std::to_string(t) + " is not a rank of " +
                   (dst.present() ? "the target strategy " + dst.source() : std::string("the target (no strategy)")) +
                   ", which has " + std::to_string(N) + " rank" + (N == 1 ? "" : "s"));
  // a parameter the source does not list is read whole from t % M; its target layouts, where a
  // tensor_shape gives their shape, must hold it
  for (const auto& name : dst.names())
    if (!src.find(name))
      for (const auto& e : *dst.find(name))
        if (!e.stored.tensor_shape.empty())
          to_layout(e.stored,
                    index_list(e.stored.tensor_shape.begin(), e.stored.tensor_shape.end()), e.stage,
                    "strategy: " + dst.source() + ": parameter " + quote_name(name));
}

// For each parameter of the source strategy and each target stage that holds it (or the whole
// tensor on every target), the source and target layouts the engine plans with, checked as the
// transform checks them: f(name, stage, source layout, target layout, the ranks of `ranks` on
// that stage).
template <class F>
void for_each_parameter_layouts(std::span<const std::int64_t> ranks, const strategy_layouts& src,
                                const strategy_layouts& dst, F&& f) {
  const index_t N = dst.ranks();
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
    for (const auto& entry : stages) {
      // named variables, not structured bindings: the lambda below captures them (clang 14
      // cannot capture a structured binding)
      const param_layout* const dl = entry.first;
      const std::uint32_t stage = entry.second;
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
      f(name, stage, sl, *tl, std::span<const std::int64_t>(mine));
    }
  }
}

// The source ranks that target ranks `ranks` read, from the strategies alone: each target's base
// file t % M, and per parameter the senders of its transfers in the plan the engine executes
// (rank_planner: the same layouts, the same replica policy). `m`: arithmetic partitions for a
// few targets, tabulated ones (O(M + N) per parameter) for many.
inline std::set<index_t> needed_sources(std::span<const std::int64_t> ranks, const strategy_layouts& src,
                                        const strategy_layouts& dst, partition::mode m) {
  check_targets(ranks, src, dst, "rank_list_for_transform");
  std::set<index_t> out;
  for (std::int64_t t : ranks) out.insert(t % src.ranks());
  std::vector<transfer> xs;
  for_each_parameter_layouts(ranks, src, dst,
                             [&](const std::string&, std::uint32_t, const layout& sl, const layout& tl,
                                 std::span<const std::int64_t> mine) {
                               const rank_planner rp(sl, tl, m, transform_replica_policy);
                               for (std::int64_t t : mine) {
                                 xs.clear();
                                 rp.receives(t, xs);
                                 for (const transfer& x : xs) out.insert(x.src);
                               }
                             });
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

/// One parameter a rank list does not cover: the parts of the target rank's box of it that no
/// listed rank holds.
struct parameter_gap {
  std::string name;            ///< the parameter
  index_list shape;            ///< the shape its boxes are in: the strategies' tensor_shape, else the
                               ///< smallest one both layouts slice (probe_shape; the rank lists are the same)
  box target;                  ///< the target rank's box of it
  std::vector<box> uncovered;  ///< the parts of `target` no listed rank holds
};

/// The verdict on a rank list for one target rank of a checkpoint transformation (MindSpore's
/// rank list: the source ranks whose checkpoint files the rank reads), against every parameter
/// of the strategies.
struct transform_rank_list_check {
  bool sufficient = true;              ///< every parameter covered and the base file listed
  std::int64_t base_rank = 0;          ///< rank % M: the file the parameters no strategy lists come from
  bool base_listed = true;             ///< base_rank is in the list
  std::vector<parameter_gap> missing;  ///< the parameters the list does not cover, in strategy order
  std::vector<std::int64_t> superfluous;  ///< listed ranks that can all be dropped together, ascending
  std::vector<std::int64_t> kept;         ///< the listed ranks that are not superfluous, ascending (when
                                          ///< sufficient: none of them can be spared)
  std::vector<std::int64_t> minimal;      ///< rank_list_for_transform(rank, src, dst): one rank per slice
                                          ///< of each parameter (kept may be shorter)
  std::size_t parameters = 0;          ///< the parameters (times target stages) checked
};

/// Checks `ranks` as the source ranks whose files target rank `rank` reads: per parameter of the
/// source strategy reshard::check_rank_list on the layouts the transform plans with (the listed
/// ranks of the parameter's stage), and the base file rank % M. A rank is kept when some
/// parameter keeps it (rank_list_for_transform's ranks preferred) or it is the base file; then,
/// for a sufficient list, each kept rank (highest first) whose files the others make unneeded is
/// dropped, so that no kept rank can be spared. The others are superfluous: dropping them all
/// leaves the list as sufficient as it was. `kept` can be shorter than rank_list_for_transform's
/// list, which takes one rank per slice of each parameter by the engine's replica policy.
/// @throws reshard::error for a target or listed rank out of range, or strategies the transform
///         refuses
inline transform_rank_list_check check_rank_list_for_transform(std::int64_t rank, std::span<const std::int64_t> ranks,
                                                               const strategy_layouts& src,
                                                               const strategy_layouts& dst) {
  const std::int64_t one[1] = {rank};
  const std::set<index_t> need = detail::needed_sources(one, src, dst, partition::mode::arithmetic);
  transform_rank_list_check out;
  out.minimal.assign(need.begin(), need.end());
  const index_t M = src.ranks();
  std::vector<index_t> listed(ranks.begin(), ranks.end());
  std::sort(listed.begin(), listed.end());
  listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
  for (index_t r : listed)
    if (r < 0 || r >= M)
      report_error("check_rank_list_for_transform: rank " + std::to_string(r) + " is not a rank of " +
                   (src.present() ? "the source strategy " + src.source() : std::string("the source (no strategy)")) +
                   ", which has " + std::to_string(M) + " rank" + (M == 1 ? "" : "s"));
  out.base_rank = rank % M;
  out.base_listed = std::binary_search(listed.begin(), listed.end(), out.base_rank);
  // per parameter: check_rank_list with the ranks of `list` that hold a part of it; f(name, check, layout)
  std::vector<index_t> of_stage;
  const auto each_check = [&](const std::vector<index_t>& list, auto&& f) {
    detail::for_each_parameter_layouts(
        one, src, dst,
        [&](const std::string& name, std::uint32_t, const layout& sl, const layout& tl, std::span<const std::int64_t>) {
          of_stage.clear();
          for (index_t r : list)
            if (r >= sl.first_rank && r < sl.first_rank + num_ranks(sl)) of_stage.push_back(r);
          f(name, check_rank_list(sl, tl, rank, of_stage, out.minimal, transform_replica_policy), tl);
        });
  };
  std::set<index_t> kept;
  if (out.base_listed) kept.insert(out.base_rank);
  each_check(listed, [&](const std::string& name, const rank_list_check& c, const layout& tl) {
    ++out.parameters;
    kept.insert(c.kept.begin(), c.kept.end());
    if (!c.sufficient) out.missing.push_back({name, tl.shape, box_of(tl, rank), c.uncovered});
  });
  out.kept.assign(kept.begin(), kept.end());
  // one rank per slice of each parameter may still keep a rank that another parameter's ranks
  // make unneeded (the parameters replicate differently): drop each such one, highest first
  if (out.base_listed && out.missing.empty())
    for (std::size_t i = out.kept.size(); i-- > 0;) {
      if (out.kept[i] == out.base_rank) continue;
      std::vector<index_t> less = out.kept;
      less.erase(less.begin() + static_cast<std::ptrdiff_t>(i));
      bool enough = true;
      each_check(less, [&](const std::string&, const rank_list_check& c, const layout&) { enough = enough && c.sufficient; });
      if (enough) out.kept = std::move(less);
    }
  out.sufficient = out.base_listed && out.missing.empty();
  std::set_difference(listed.begin(), listed.end(), out.kept.begin(), out.kept.end(),
                      std::back_inserter(out.superfluous));
  return out;
}

/// The verdict of check_rank_list_for_transform as JSON: {"sufficient", "minimal_list" (sufficient
/// with no superfluous rank), "parameters", "base_rank", "base_listed", "missing": [{"name",
/// "shape", "target", "uncovered"}...] (boxes as {"offset", "shape"}), "superfluous", "kept",
/// "rank_list"}.
inline nlohmann::json to_json(const transform_rank_list_check& r) {
  nlohmann::json missing = nlohmann::json::array();
  for (const auto& m : r.missing) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const box& b : m.uncovered) boxes.push_back(reshard::to_json(b));
    missing.push_back({{"name", m.name}, {"shape", m.shape}, {"target", reshard::to_json(m.target)}, {"uncovered", std::move(boxes)}});
  }
  return {{"sufficient", r.sufficient},   {"minimal_list", r.sufficient && r.superfluous.empty()},
          {"parameters", r.parameters},   {"base_rank", r.base_rank},
          {"base_listed", r.base_listed}, {"missing", std::move(missing)},
          {"superfluous", r.superfluous}, {"kept", r.kept},
          {"rank_list", r.minimal}};
}

}  // namespace reshard::io
