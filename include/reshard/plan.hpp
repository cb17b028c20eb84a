// reshard/plan.hpp: minimal redistribution plans between two layouts of one tensor.
//
// plan(src, dst) lists transfers (source rank, target rank, box) such that
//   @post every target rank's box is covered exactly once by the boxes it receives;
//   @post a transfer's box lies inside its source rank's box and its target rank's box;
//   @post a target that holds a piece in `src` (same global rank id) copies it locally;
//   @post cross-rank elements == lower bound == sum over targets of the elements they lack;
//   @post each (source, target) pair appears at most once (pieces are coalesced);
//   @post apply(plan(A, B), shards of x under A) == shards of x under B.
// Cost grows with the size of the plan (number of transfers), not with M * N: the pieces of a
// target region are found by per-dim interval intersection (binary search in the source's slice
// boundaries), computed once per distinct target region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"

namespace reshard {

/// One piece of data moving from a source rank to a target rank (global rank ids).
struct transfer {
  index_t src;
  index_t dst;
  box where;  ///< global tensor coordinates
  friend constexpr bool operator==(const transfer&, const transfer&) = default;
};

/// The cost of a plan in bytes, for a given element size.
struct plan_cost {
  index_t cross_bytes = 0;        ///< bytes that move between different ranks
  index_t local_bytes = 0;        ///< bytes a rank copies from its own source shard
  index_t lower_bound_bytes = 0;  ///< sum over targets of the bytes they do not already hold
  index_t messages = 0;           ///< cross-rank transfers
  index_t max_sent_bytes = 0;     ///< most bytes sent by one source rank
  double mean_sent_bytes = 0;     ///< cross bytes / number of source ranks
  friend constexpr bool operator==(const plan_cost&, const plan_cost&) = default;
};

/// A redistribution plan: the two layouts and the transfers, grouped by target rank.
struct transfer_plan {
  layout src;
  layout dst;
  std::vector<transfer> transfers;

  /// Elements that cross ranks, are copied locally, and the lower bound on crossing elements.
  constexpr plan_cost cost(index_t element_bytes = 1) const;
  friend constexpr bool operator==(const transfer_plan&, const transfer_plan&) = default;
};

namespace detail {

constexpr void expect_same_shape(const layout& src, const layout& dst, const char* op) {
  if (src.shape != dst.shape)
    report_error(std::string(op) + ": the layouts describe different tensors: source " +
                 to_string(src) + " has shape " + to_string(src.shape) + ", target " +
                 to_string(dst) + " has shape " + to_string(dst.shape));
}

// The source regions overlapping a target box: per dim the range of overlapping source leaves.
struct piece_ranges {
  extents lo, hi;  // leaf index range [lo, hi) per dim
  bool empty = false;
};

constexpr piece_ranges overlapping_leaves(const geometry& s, const box& t) {
  piece_ranges r;
  const std::size_t n = t.offset.size();
  r.lo = extents(n, 0);
  r.hi = extents(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const index_t a = t.offset[i], b = a + t.extent[i];
    if (b <= a) {
      r.empty = true;
      return r;
    }
    const auto& bd = s.bounds[i];
    // last leaf starting at or before a; first leaf starting at or after b
    r.lo[i] = (std::upper_bound(bd.begin(), bd.end(), a) - bd.begin()) - 1;
    r.hi[i] = std::lower_bound(bd.begin(), bd.end(), b) - bd.begin();
  }
  return r;
}

// Calls f(source region id, piece box) for each non-empty piece of target box `t`.
template <class F>
constexpr void for_each_piece(const geometry& s, const box& t, F&& f) {
  const piece_ranges r = overlapping_leaves(s, t);
  if (r.empty) return;
  const std::size_t n = t.offset.size();
  extents k = r.lo;
  box piece;
  piece.offset = extents(n, 0);
  piece.extent = extents(n, 0);
  while (true) {
    bool nonempty = true;
    index_t id = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& bd = s.bounds[i];
      const index_t lo = std::max(bd[k[i]], t.offset[i]);
      const index_t hi = std::min(bd[k[i] + 1], t.offset[i] + t.extent[i]);
      piece.offset[i] = lo;
      piece.extent[i] = hi - lo;
      nonempty = nonempty && hi > lo;
      id = id * s.leaves[i] + k[i];
    }
    if (nonempty) f(id, static_cast<const box&>(piece));
    // odometer over the leaf ranges, last dim fastest
    std::size_t i = n;
    while (i > 0) {
      --i;
      if (++k[i] < r.hi[i]) break;
      k[i] = r.lo[i];
      if (i == 0) return;
    }
    if (n == 0) return;
  }
}

// Elements of target rank t's box that t already holds in the source layout.
constexpr index_t already_held(const geometry& s, const box& t_box, index_t t) {
  const index_t r = t - s.first_rank;
  if (r < 0 || r >= s.ranks) return 0;
  return volume(intersect(t_box, s.region_box(s.rank_region[r])));
}

}  // namespace detail

/// Derives a minimal plan moving a tensor from layout `src` to layout `dst` (any rank counts).
constexpr transfer_plan plan(const layout& src, const layout& dst) {
  validate(src, "plan: source layout");
  validate(dst, "plan: target layout");
  detail::expect_same_shape(src, dst, "plan");
  transfer_plan p{src, dst, {}};
  const detail::geometry gs = detail::make_geometry(src);
  const detail::geometry gd = detail::make_geometry(dst);
  // Reserve for the most pieces each target can have: the product of its overlapping ranges,
  // computed once per target region.
  std::vector<index_t> bound = detail::filled<index_t>(static_cast<std::size_t>(gd.regions), 0);
  for (index_t rd = 0; rd < gd.regions; ++rd) {
    if (gd.owner_start[rd] == gd.owner_start[rd + 1]) continue;
    const detail::piece_ranges pr = detail::overlapping_leaves(gs, gd.region_box(rd));
    if (pr.empty) continue;
    index_t n = 1;
    for (std::size_t i = 0; i < pr.lo.size(); ++i) n *= pr.hi[i] - pr.lo[i];
    bound[rd] = n;
  }
  std::size_t total = 0;
  for (index_t r = 0; r < gd.ranks; ++r)
    total += static_cast<std::size_t>(bound[gd.rank_region[r]]);
  p.transfers.reserve(total);
  // Least-loaded replica: each source rank owns one region, so the candidates for a piece of
  // region k are k's owners, and their loads come from k's pieces alone. One min-heap of
  // (elements sent, owner) per region, laid out like gs.owners: O(log g) a piece, not O(g).
  using entry = std::pair<index_t, index_t>;
  std::vector<entry> heap;
  heap.reserve(gs.owners.size());
  for (index_t o : gs.owners) heap.push_back({0, o});  // ascending: already a min-heap
  const auto later = [](const entry& a, const entry& b) { return a > b; };
  index_t t = 0;
  const auto emit = [&](index_t region, const box& b) {
    if (gs.holds(t, region)) {
      p.transfers.push_back({t, t, b});
      return;
    }
    const auto first = heap.begin() + gs.owner_start[region];
    const auto last = heap.begin() + gs.owner_start[region + 1];
    std::pop_heap(first, last, later);
    (last - 1)->first += volume(b);
    const index_t best = (last - 1)->second;
    std::push_heap(first, last, later);
    p.transfers.push_back({best, t, b});
  };
  // The pieces of a target region held by several ranks are found once, on its first rank,
  // and kept for its replicas; a region with one owner is walked directly.
  struct piece {
    index_t region;
    box where;
  };
  std::vector<piece> cache;
  const auto nregions = static_cast<std::size_t>(gd.regions);
  std::vector<index_t> cache_begin = detail::filled<index_t>(nregions, -1);
  std::vector<index_t> cache_end = detail::filled<index_t>(nregions, -1);
  // Targets in rank order; a piece the target holds in `src` is a local copy, any other piece
  // comes from the least-loaded replica of its region.
  for (index_t r = 0; r < gd.ranks; ++r) {
    t = gd.first_rank + r;
    const index_t rd = gd.rank_region[r];
    if (gd.owner_start[rd + 1] - gd.owner_start[rd] == 1) {
      detail::for_each_piece(gs, gd.region_box(rd), emit);
      continue;
    }
    if (cache_begin[rd] < 0) {
      cache_begin[rd] = static_cast<index_t>(cache.size());
      detail::for_each_piece(gs, gd.region_box(rd),
                             [&](index_t region, const box& b) { cache.push_back({region, b}); });
      cache_end[rd] = static_cast<index_t>(cache.size());
    }
    for (index_t k = cache_begin[rd]; k < cache_end[rd]; ++k)
      emit(cache[static_cast<std::size_t>(k)].region, cache[static_cast<std::size_t>(k)].where);
  }
  return p;
}

constexpr plan_cost transfer_plan::cost(index_t element_bytes) const {
  plan_cost c;
  const detail::geometry gs = detail::make_geometry(src);
  const detail::geometry gd = detail::make_geometry(dst);
  std::vector<index_t> sent = detail::filled<index_t>(static_cast<std::size_t>(gs.ranks), 0);
  for (const transfer& x : transfers) {
    const index_t v = volume(x.where) * element_bytes;
    if (x.src == x.dst) {
      c.local_bytes += v;
    } else {
      c.cross_bytes += v;
      ++c.messages;
      sent[x.src - gs.first_rank] += v;
    }
  }
  for (index_t r = 0; r < gd.ranks; ++r) {
    const box b = gd.region_box(gd.rank_region[r]);
    c.lower_bound_bytes += (volume(b) - detail::already_held(gs, b, gd.first_rank + r)) *
                           element_bytes;
  }
  for (index_t s : sent) c.max_sent_bytes = std::max(c.max_sent_bytes, s);
  c.mean_sent_bytes = gs.ranks ? static_cast<double>(c.cross_bytes) / static_cast<double>(gs.ranks)
                               : 0.0;
  return c;
}

/// The minimal set of source ranks target rank `target` needs: one per distinct source region
/// overlapping its box (itself where it holds that region), ascending.
// @post the boxes of rank_list(src, dst, t) in src cover box_of(dst, t)
// @post no two ranks of rank_list(src, dst, t) hold the same region of src
constexpr std::vector<index_t> rank_list(const layout& src, const layout& dst, index_t target) {
  validate(src, "rank_list: source layout");
  validate(dst, "rank_list: target layout");
  detail::expect_same_shape(src, dst, "rank_list");
  detail::expect_rank(dst, target, "rank_list");
  const detail::geometry gs = detail::make_geometry(src);
  std::vector<index_t> out;
  detail::for_each_piece(gs, box_of(dst, target), [&](index_t id, const box&) {
    if (gs.holds(target, id)) {
      out.push_back(target);
      return;
    }
    const index_t o_begin = gs.owner_start[id], g = gs.owner_start[id + 1] - o_begin;
    out.push_back(gs.owners[o_begin + (target - dst.first_rank) % g]);
  });
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace reshard
