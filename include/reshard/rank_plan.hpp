// reshard/rank_plan.hpp: the part of a redistribution plan that involves one rank, derived
// without deriving the rest.
//
// plan(src, dst) lists every transfer of every rank and picks among the replicas of a source
// piece greedily (the least-loaded owner so far), so one rank's transfers depend on all the others
// and a rank must derive the whole plan to know its own part. plan_for_rank(src, dst, r) instead
// uses a rule every rank can evaluate alone: the targets that need a source region and do not hold
// it, listed in a fixed order (target regions in row-major order, then their owners ascending),
// take the region's owners in turn (round robin). Target rank t computes its own sender; source
// rank s finds the targets whose turn falls on it. Both sides agree without communicating.
//
//   @post plan_for_rank(A, B, r).transfers == the transfers of plan_by_ranks(A, B) whose source
//         or target is r (receives first, in plan order; then sends)
//   @post plan_by_ranks(A, B) covers every target rank's box exactly once, copies locally what a
//         target holds in A, moves exactly the lower bound across ranks, and lists each
//         (source, target) pair at most once: the laws of plan(), with another choice of replica
//   @post apply(plan_by_ranks(A, B), shards of x under A) == shards of x under B
//
// Cost for one rank: no per-rank tables. The slice boundaries of both layouts (O(slices per dim)),
// then O(pieces of its box) to receive and O(targets it serves) to send, each step computing
// ranks' regions and regions' owners from the layouts' arithmetic (O(replicas) per region). It
// does not grow with the number of ranks, only with the number of slices along a dim (for
// example dp with optimizer sharding) and the number of replicas of a piece.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

namespace detail {

// A layout's geometry with every rank's region and every region's owners tabulated
// (make_geometry, O(ranks)): for whole plans.
struct dense_geometry {
  geometry g;

  explicit constexpr dense_geometry(const layout& l) : g(make_geometry(l)) {}
  constexpr index_t region_of(index_t rank) const { return g.rank_region[rank - g.first_rank]; }
  constexpr index_t owner_count() const {
    return g.regions ? g.owner_start[1] - g.owner_start[0] : 0;
  }
  // The owners of region k, ascending.
  constexpr std::span<const index_t> owners(index_t k, std::vector<index_t>&) const {
    return {g.owners.data() + g.owner_start[k], g.owners.data() + g.owner_start[k + 1]};
  }
};

// The same questions answered from the layout's arithmetic, without tables: a rank's region by
// its device coordinates, a region's owners by enumerating its replica coordinates. Only the slice
// boundaries are stored (for for_each_piece): for one rank's part of a plan.
struct sparse_geometry {
  geometry g;  // first_rank, ranks, bounds, leaves, regions; no rank_region, no owners
  const layout* l;
  index_t parts;          // optimizer-sharding parts of dim 0
  std::vector<int> rep;   // repeat axes (enumerate a replica group), outermost first
  index_t group = 1;      // ranks of a replica group
  extents stride;         // rank stride of each device axis (row-major)

  explicit constexpr sparse_geometry(const layout& lay)
      : l(&lay), parts(opt_parts(lay)), rep(repeat_axes(lay)) {
    g.first_rank = lay.first_rank;
    g.ranks = num_ranks(lay);
    g.bounds = dim_bounds(lay);
    g.leaves = extents(lay.shape.size(), 0);
    g.regions = 1;
    for (std::size_t i = 0; i < lay.shape.size(); ++i) {
      g.leaves[i] = static_cast<index_t>(g.bounds[i].size()) - 1;
      g.regions *= g.leaves[i];
    }
    for (int a : rep) group *= lay.dev_matrix[a];
    stride = extents(lay.dev_matrix.size(), 1);
    for (std::size_t a = lay.dev_matrix.size(); a-- > 1;)
      stride[a - 1] = stride[a] * lay.dev_matrix[a];
  }
  constexpr index_t region_of(index_t rank) const {
    extents coord, leaf;
    leaf_of(*l, rank - g.first_rank, parts, rep, coord, leaf);
    index_t id = 0;
    for (std::size_t i = 0; i < leaf.size(); ++i) id = id * g.leaves[i] + leaf[i];
    return id;
  }
  constexpr index_t owner_count() const { return group / parts; }
  // The owners of region k, ascending, computed into `buf`.
  constexpr std::span<const index_t> owners(index_t k, std::vector<index_t>& buf) const {
    // the region's leaf per dim, then the coordinates of the axes that split each dim
    const std::size_t n = g.leaves.size();
    extents leaf(n, 0);
    for (std::size_t i = n; i-- > 0;) {
      leaf[i] = k % g.leaves[i];
      k /= g.leaves[i];
    }
    index_t part = 0, base = g.first_rank;
    if (parts > 1) part = leaf[0] % parts, leaf[0] /= parts;
    for (std::size_t i = 0; i < n; ++i) {
      index_t s = leaf[i];
      const auto& axes = l->dim_axes[i];
      for (std::size_t j = axes.size(); j-- > 0;) {
        const auto a = static_cast<std::size_t>(axes[j]);
        base += (s % l->dev_matrix[a]) * stride[a];
        s /= l->dev_matrix[a];
      }
    }
    // the replica coordinates: position pos in the group (last repeat axis fastest), with
    // pos % parts == part
    buf.clear();
    for (index_t pos = part; pos < group; pos += parts) {
      index_t r = base, p = pos;
      for (std::size_t j = rep.size(); j-- > 0;) {
        const auto a = static_cast<std::size_t>(rep[j]);
        r += (p % l->dev_matrix[a]) * stride[a];
        p /= l->dev_matrix[a];
      }
      buf.push_back(r);
    }
    std::sort(buf.begin(), buf.end());
    return buf;
  }
};

template <class G>
constexpr bool has_rank(const G& x, index_t rank) {
  return rank >= x.g.first_rank && rank < x.g.first_rank + x.g.ranks;
}
template <class G>
constexpr bool holds(const G& x, index_t rank, index_t region) {
  return has_rank(x, rank) && x.region_of(rank) == region;
}

// The target ranks that hold source region k themselves, as sorted (target region, rank): they
// copy k locally and take no turn.
struct holders {
  std::vector<std::pair<index_t, index_t>> list;

  template <class GS, class GD>
  constexpr holders(const GS& gs, const GD& gd, index_t k, std::vector<index_t>& buf) {
    for (index_t o : gs.owners(k, buf))
      if (has_rank(gd, o)) list.push_back({gd.region_of(o), o});
    std::sort(list.begin(), list.end());
  }
  // Holders in target region `region` with a rank below `below`.
  constexpr index_t count(index_t region, index_t below = max_ranks) const {
    const auto lo =
        std::lower_bound(list.begin(), list.end(), std::pair<index_t, index_t>{region, -1});
    const auto hi = std::lower_bound(lo, list.end(), std::pair<index_t, index_t>{region, below});
    return hi - lo;
  }
};

// The owner of source region k that sends it to target rank t (t does not hold k): the owners
// take turns over the targets that need k, in the order target regions overlapping k (row-major),
// then each region's owners ascending. Counts turns without listing the targets.
template <class GS, class GD>
constexpr index_t sender_of(const GS& gs, const GD& gd, index_t k, index_t t,
                            std::vector<index_t>& buf) {
  const index_t g = gs.owner_count();
  RESHARD_EXPECTS(g > 0, "plan_for_rank: a source region without owners");
  if (g == 1) return gs.owners(k, buf)[0];
  const holders held(gs, gd, k, buf);
  const index_t mine = gd.region_of(t), count = gd.owner_count();
  index_t turn = 0;
  bool found = false;
  for_each_piece(gd.g, gs.g.region_box(k), [&](index_t region, const box&) {
    if (found) return;
    if (region != mine) {
      turn += count - held.count(region);
      return;
    }
    // t's position among its region's owners, less the holders of k listed before it
    const std::span<const index_t> owners = gd.owners(region, buf);
    turn += (std::lower_bound(owners.begin(), owners.end(), t) - owners.begin()) -
            held.count(region, t);
    found = true;
  });
  RESHARD_EXPECTS(found, "plan_for_rank: the target does not overlap the source region");
  return gs.owners(k, buf)[static_cast<std::size_t>(turn % g)];
}

// Appends the transfers target rank t receives (local copies included), in source-region order.
template <class GS, class GD>
constexpr void receives_of(const GS& gs, const GD& gd, index_t t, std::vector<transfer>& out,
                           std::vector<index_t>& buf) {
  const box mine = gd.g.region_box(gd.region_of(t));
  const index_t held = has_rank(gs, t) ? gs.region_of(t) : -1;  // t's own source region
  for_each_piece(gs.g, mine, [&](index_t k, const box& b) {
    out.push_back({k == held ? t : sender_of(gs, gd, k, t, buf), t, b});
  });
}

// Appends the transfers source rank s sends to other ranks, in the turn order of its region.
template <class GS, class GD>
constexpr void sends_of(const GS& gs, const GD& gd, index_t s, std::vector<transfer>& out,
                        std::vector<index_t>& buf) {
  const index_t k = gs.region_of(s), g = gs.owner_count();
  const std::span<const index_t> mine = gs.owners(k, buf);
  // s's index among the owners of k: it serves turns me, me + g, me + 2g, ...
  const index_t me = std::lower_bound(mine.begin(), mine.end(), s) - mine.begin();
  const holders held(gs, gd, k, buf);
  const index_t count = gd.owner_count();
  index_t turn = 0;  // turns taken before the current target region
  for_each_piece(gd.g, gs.g.region_box(k), [&](index_t region, const box& b) {
    const index_t h = held.count(region);
    const std::span<const index_t> owners = gd.owners(region, buf);
    if (h == 0) {  // the region's owners take turns turn, turn + 1, ...: jump to s's
      for (index_t j = ((me - turn) % g + g) % g; j < count; j += g)
        out.push_back({s, owners[static_cast<std::size_t>(j)], b});
    } else {
      index_t n = 0;  // turns taken in this region
      for (index_t o : owners) {
        if (holds(gs, o, k)) continue;
        if ((turn + n) % g == me) out.push_back({s, o, b});
        ++n;
      }
    }
    turn += count - h;
  });
}

}  // namespace detail

/// The transfers of plan_by_ranks(src, dst) that involve global rank `rank`: first what it
/// receives (including local copies, src == dst == rank), then what it sends to other ranks.
/// A rank of neither layout gets no transfers. Every rank can derive its own part alone; the parts
/// agree (a transfer s -> t appears in both s's and t's part).
// @post the transfers of plan_for_rank(A, B, r) are those of plan_by_ranks(A, B) that involve r
constexpr transfer_plan plan_for_rank(const layout& src, const layout& dst, index_t rank) {
  validate(src, "plan_for_rank: source layout");
  validate(dst, "plan_for_rank: target layout");
  detail::expect_same_shape(src, dst, "plan_for_rank");
  transfer_plan p{src, dst, {}};
  const detail::sparse_geometry gs(p.src), gd(p.dst);
  std::vector<index_t> buf;
  if (detail::has_rank(gd, rank)) detail::receives_of(gs, gd, rank, p.transfers, buf);
  if (detail::has_rank(gs, rank)) detail::sends_of(gs, gd, rank, p.transfers, buf);
  return p;
}

/// The whole plan whose per-rank parts plan_for_rank derives: a minimal plan like plan(src, dst)
/// (same pieces, same cost), with replicas chosen by the per-rank rule; grouped by target rank.
// @post every target rank's box is covered exactly once; cross bytes == lower bound
constexpr transfer_plan plan_by_ranks(const layout& src, const layout& dst) {
  validate(src, "plan_by_ranks: source layout");
  validate(dst, "plan_by_ranks: target layout");
  detail::expect_same_shape(src, dst, "plan_by_ranks");
  transfer_plan p{src, dst, {}};
  const detail::dense_geometry gs(src), gd(dst);
  std::vector<index_t> buf;
  for (index_t r = 0; r < gd.g.ranks; ++r)
    detail::receives_of(gs, gd, gd.g.first_rank + r, p.transfers, buf);
  return p;
}

}  // namespace reshard
