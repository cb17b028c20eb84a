// bench/naive_planner.hpp: the raw baseline beside reshard::plan in bench/planner.cpp.
//
// The planner PyTorch DCP runs at load time: every target rank tests every source rank's box for
// intersection (all pairs, O(M * N) box tests), takes the first owner of each distinct piece it
// needs (its own copy when it has one, as reshard does), and emits the same transfer list shape
// as reshard::plan (reshard::transfer, grouped by target rank).
//
// The boxes of every rank are an input (DCP reads them from the checkpoint metadata), so deriving
// them is not part of the timed work; the inner loop is a flat, allocation-free box test. Both
// choices favour the baseline.
#pragma once

#include <cstddef>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard_bench {

using reshard::index_t;

/// The boxes of all ranks of one layout, flattened: rank r's dim i is [lo[r*n+i], hi[r*n+i]).
struct rank_boxes {
  index_t first_rank = 0;
  std::size_t ranks = 0;
  std::size_t dims = 0;
  std::vector<index_t> lo, hi;
};

inline rank_boxes boxes_of(const reshard::layout& l) {
  rank_boxes b;
  b.first_rank = l.first_rank;
  b.ranks = static_cast<std::size_t>(reshard::num_ranks(l));
  b.dims = l.shape.size();
  b.lo.reserve(b.ranks * b.dims);
  b.hi.reserve(b.ranks * b.dims);
  for (std::size_t r = 0; r < b.ranks; ++r) {
    const reshard::box x = reshard::box_of(l, l.first_rank + static_cast<index_t>(r));
    for (std::size_t i = 0; i < b.dims; ++i) {
      b.lo.push_back(x.offset[i]);
      b.hi.push_back(x.offset[i] + x.extent[i]);
    }
  }
  return b;
}

/// All-pairs plan: for each target rank, each source rank, intersect; keep the first owner of
/// each distinct piece (the target itself if it is an owner).
inline std::vector<reshard::transfer> naive_plan(const rank_boxes& src, const rank_boxes& dst) {
  std::vector<reshard::transfer> out;
  const std::size_t n = dst.dims;
  std::vector<index_t> lo(n), hi(n);
  for (std::size_t t = 0; t < dst.ranks; ++t) {
    const index_t tg = dst.first_rank + static_cast<index_t>(t);
    const index_t* tlo = &dst.lo[t * n];
    const index_t* thi = &dst.hi[t * n];
    bool empty_target = false;
    for (std::size_t i = 0; i < n; ++i) empty_target = empty_target || thi[i] <= tlo[i];
    if (empty_target) continue;
    const std::size_t first_piece = out.size();
    for (std::size_t s = 0; s < src.ranks; ++s) {
      const index_t* slo = &src.lo[s * n];
      const index_t* shi = &src.hi[s * n];
      bool hit = true;
      for (std::size_t i = 0; i < n; ++i) {
        lo[i] = slo[i] > tlo[i] ? slo[i] : tlo[i];
        hi[i] = shi[i] < thi[i] ? shi[i] : thi[i];
        hit = hit && hi[i] > lo[i];
      }
      if (!hit) continue;
      const index_t sg = src.first_rank + static_cast<index_t>(s);
      // a replica of a piece already taken: pieces of distinct regions are disjoint, so equal
      // boxes mean equal regions
      std::size_t k = first_piece;
      for (; k < out.size(); ++k) {
        const reshard::box& w = out[k].where;
        bool same = true;
        for (std::size_t i = 0; i < n && same; ++i)
          same = w.offset[i] == lo[i] && w.extent[i] == hi[i] - lo[i];
        if (same) break;
      }
      if (k < out.size()) {
        if (sg == tg) out[k].src = sg;  // prefer the local copy
        continue;
      }
      reshard::box w;
      w.offset.assign(lo.begin(), lo.end());
      w.extent.resize(n);
      for (std::size_t i = 0; i < n; ++i) w.extent[i] = hi[i] - lo[i];
      out.push_back({sg, tg, std::move(w)});
    }
  }
  return out;
}

/// Totals of a transfer list, to check the baseline against reshard::plan.
struct plan_totals {
  std::size_t transfers = 0;
  index_t volume = 0;
  index_t cross_volume = 0;
  friend bool operator==(const plan_totals&, const plan_totals&) = default;
};

inline plan_totals totals(const std::vector<reshard::transfer>& v) {
  plan_totals s;
  s.transfers = v.size();
  for (const auto& x : v) {
    const index_t vol = reshard::volume(x.where);
    s.volume += vol;
    if (x.src != x.dst) s.cross_volume += vol;
  }
  return s;
}

/// True when the transfers are an exact cover: every transfer's box lies inside its source and
/// target boxes, the boxes a target receives are pairwise disjoint, and their volumes add up to
/// the volume of the target's box.
inline bool is_cover(const std::vector<reshard::transfer>& v, const rank_boxes& src,
                     const rank_boxes& dst) {
  const std::size_t n = dst.dims;
  std::vector<index_t> got(dst.ranks, 0);
  std::vector<std::vector<const reshard::box*>> by_target(dst.ranks);
  for (const auto& x : v) {
    const std::size_t s = static_cast<std::size_t>(x.src - src.first_rank);
    const std::size_t t = static_cast<std::size_t>(x.dst - dst.first_rank);
    if (s >= src.ranks || t >= dst.ranks) return false;
    for (std::size_t i = 0; i < n; ++i) {
      const index_t a = x.where.offset[i], b = a + x.where.extent[i];
      if (a < src.lo[s * n + i] || b > src.hi[s * n + i]) return false;
      if (a < dst.lo[t * n + i] || b > dst.hi[t * n + i]) return false;
    }
    got[t] += reshard::volume(x.where);
    for (const reshard::box* y : by_target[t])
      if (reshard::volume(reshard::intersect(*y, x.where)) != 0) return false;
    by_target[t].push_back(&x.where);
  }
  for (std::size_t t = 0; t < dst.ranks; ++t) {
    index_t want = 1;
    for (std::size_t i = 0; i < n; ++i) want *= dst.hi[t * n + i] - dst.lo[t * n + i];
    if (got[t] != want) return false;
  }
  return true;
}

}  // namespace reshard_bench
