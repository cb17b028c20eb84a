// reshard/plan.hpp: minimal redistribution plans between two layouts of one tensor.
//
// plan(src, dst) lists transfers (source rank, target rank, box) such that
//   @post every target rank's box is covered exactly once by the boxes it receives;
//   @post a transfer's box lies inside its source rank's box and its target rank's box;
//   @post a target that holds a piece in `src` (same global rank id) copies it locally;
//   @post cross-rank elements == lower bound == sum over targets of the elements they lack;
//   @post each (source, target) pair appears at most once (pieces are coalesced);
//   @post apply(plan(A, B), shards of x under A) == shards of x under B.
// Cost grows with the size of the plan (number of transfers), not with M * N: per dim, one merge
// of the two layouts' slice boundaries gives each target slice's overlapping source slices; the
// pieces of each distinct target region are then an odometer over those lists, found once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
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

namespace detail {

// The overlaps of one dim's target leaves with its source leaves, from one merge of the two
// boundary lists: target leaf k meets the segments [first[k], first[k + 1]), in source order;
// segment j lies in source leaf leaf[j] and covers [lo[j], lo[j] + len[j]).
struct dim_overlaps {
  std::vector<index_t> first, leaf, lo, len;
};

constexpr dim_overlaps overlaps(const extents& sb, const extents& tb) {
  dim_overlaps o;
  const std::size_t ns = sb.size() - 1, nt = tb.size() - 1;
  o.first.reserve(nt + 1);
  const std::size_t guess = ns + nt;  // every segment ends at a source or a target boundary
  o.leaf.reserve(guess);
  o.lo.reserve(guess);
  o.len.reserve(guess);
  std::size_t s = 0;  // the source leaf holding the target leaf's start; only moves forward
  for (std::size_t k = 0; k < nt; ++k) {
    o.first.push_back(static_cast<index_t>(o.leaf.size()));
    const index_t a = tb[k], b = tb[k + 1];
    if (b <= a) continue;
    while (s + 1 < ns && sb[s + 1] <= a) ++s;
    for (std::size_t j = s; j < ns && sb[j] < b; ++j) {
      const index_t lo = sb[j] > a ? sb[j] : a;
      const index_t hi = sb[j + 1] < b ? sb[j + 1] : b;
      if (hi <= lo) continue;
      o.leaf.push_back(static_cast<index_t>(j));
      o.lo.push_back(lo);
      o.len.push_back(hi - lo);
    }
  }
  o.first.push_back(static_cast<index_t>(o.leaf.size()));
  return o;
}

// The least-loaded replica of each source region, as one tournament tree per region with
// several owners. Leaves are the region's owners in ascending rank order (padded to a power of
// two with unbeatable loads); each inner node holds the leaf that wins below it, the lighter one,
// the left one on a tie, i.e. the lowest rank. Taking the winner and adding to its load replays
// its path to the root: one load comparison a level.
struct sender_trees {
  std::vector<index_t> base;  // per region: first slot of its tree and loads
  std::vector<index_t> size;  // per region: leaves, a power of two (0: fewer than two owners)
  std::vector<index_t> load;  // per slot: the elements leaf `slot - base` sends so far
  std::vector<index_t> node;  // per slot: the winning leaf under node `slot - base` (1 = root)

  constexpr explicit sender_trees(const geometry& g) {
    const auto regions = static_cast<std::size_t>(g.regions);
    base = filled<index_t>(regions, 0);
    size = filled<index_t>(regions, 0);
    index_t slots = 0;
    for (std::size_t k = 0; k < regions; ++k) {
      const index_t owners = g.owner_start[k + 1] - g.owner_start[k];
      if (owners < 2) continue;
      index_t p = 2;
      while (p < owners) p *= 2;
      base[k] = slots;
      size[k] = p;
      slots += 2 * p;
    }
    load = filled<index_t>(static_cast<std::size_t>(slots), 0);
    node = filled<index_t>(static_cast<std::size_t>(slots), 0);
    for (std::size_t k = 0; k < regions; ++k) {
      const index_t p = size[k];
      if (p == 0) continue;
      const index_t owners = g.owner_start[k + 1] - g.owner_start[k];
      index_t* l = load.data() + base[k];
      index_t* w = node.data() + base[k];
      for (index_t i = owners; i < p; ++i) l[i] = std::numeric_limits<index_t>::max();
      for (index_t i = 0; i < p; ++i) w[p + i] = i;
      for (index_t i = p - 1; i >= 1; --i) w[i] = w[2 * i];  // all loads 0: the leftmost wins
    }
  }

  // The position among region k's owners of the least-loaded one, after adding v to its load.
  constexpr index_t take(index_t k, index_t v) {
    const index_t p = size[static_cast<std::size_t>(k)];
    index_t* l = load.data() + base[static_cast<std::size_t>(k)];
    index_t* w = node.data() + base[static_cast<std::size_t>(k)];
    const index_t best = w[1];
    l[best] += v;
    // Up the path with the winner so far in registers: each level reads only the sibling's
    // winner, never a node this walk just wrote, and picks without a branch (which side wins is
    // data: a branch on it mispredicts half the time).
    index_t cur = best, cur_load = l[best];
    for (index_t i = p + best; i > 1; i /= 2) {
      const index_t sib = w[i ^ 1], sib_load = l[sib];
      const bool cur_right = (i & 1) != 0;  // then the sibling is left and wins ties
      const bool sib_wins = sib_load < cur_load || (cur_right && sib_load == cur_load);
      const index_t mask = -static_cast<index_t>(sib_wins);
      cur ^= (cur ^ sib) & mask;
      cur_load ^= (cur_load ^ sib_load) & mask;
      w[i / 2] = cur;
    }
    return best;
  }
};

}  // namespace detail

/// Derives a minimal plan moving a tensor from layout `src` to layout `dst` (any rank counts).
constexpr transfer_plan plan(const layout& src, const layout& dst) {
  validate(src, "plan: source layout");
  validate(dst, "plan: target layout");
  detail::expect_same_shape(src, dst, "plan");
  transfer_plan p{src, dst, {}};
  const detail::geometry gs = detail::make_geometry(src);
  const detail::geometry gd = detail::make_geometry(dst);
  const std::size_t n = src.shape.size();
  // Per dim, which source leaves each target leaf meets (one linear merge per dim).
  std::vector<detail::dim_overlaps> ov;
  ov.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ov.push_back(detail::overlaps(gs.bounds[i], gd.bounds[i]));
  // The pieces of every target region that has an owner, found once with an odometer over the
  // target leaves and the segments (no division, no search): piece q of region k is
  // [piece_first[k], piece_first[k + 1]), its source region piece_src[q], its box
  // piece_lo / piece_len[q * n .. q * n + n). The last dim runs fastest, as in for_each_piece.
  const auto nregions = static_cast<std::size_t>(gd.regions);
  // pass 1: piece counts, the product of the segment counts of the region's leaves
  std::vector<index_t> piece_first = detail::filled<index_t>(nregions + 1, 0);
  std::vector<index_t> k = detail::filled<index_t>(n, 0), seg = detail::filled<index_t>(n, 0);
  for (std::size_t rd = 0; rd < nregions; ++rd) {
    index_t count = gd.owner_start[rd] != gd.owner_start[rd + 1] ? 1 : 0;
    for (std::size_t i = 0; i < n; ++i) count *= ov[i].first[k[i] + 1] - ov[i].first[k[i]];
    piece_first[rd + 1] = piece_first[rd] + count;
    for (std::size_t i = n; i-- > 0;) {  // next target region, row-major
      if (++k[i] < gd.leaves[i]) break;
      k[i] = 0;
    }
  }
  // pass 2: the pieces
  const auto pieces = static_cast<std::size_t>(piece_first[nregions]);
  std::vector<index_t> piece_src = detail::filled<index_t>(pieces, 0);
  std::vector<index_t> piece_vol = detail::filled<index_t>(pieces, 0);
  std::vector<index_t> piece_lo = detail::filled<index_t>(pieces * n, 0);
  std::vector<index_t> piece_len = detail::filled<index_t>(pieces * n, 0);
  for (std::size_t i = 0; i < n; ++i) k[i] = 0;
  for (std::size_t rd = 0, q = 0; rd < nregions; ++rd) {
    if (piece_first[rd + 1] > piece_first[rd]) {
      for (std::size_t i = 0; i < n; ++i) seg[i] = ov[i].first[k[i]];
      while (true) {
        index_t id = 0, vol = 1;
        for (std::size_t i = 0; i < n; ++i) {
          const auto j = static_cast<std::size_t>(seg[i]);
          id = id * gs.leaves[i] + ov[i].leaf[j];
          piece_lo[q * n + i] = ov[i].lo[j];
          piece_len[q * n + i] = ov[i].len[j];
          vol *= ov[i].len[j];
        }
        piece_src[q] = id;
        piece_vol[q] = vol;
        ++q;
        bool done = true;
        for (std::size_t i = n; i-- > 0;) {
          if (++seg[i] < ov[i].first[k[i] + 1]) {
            done = false;
            break;
          }
          seg[i] = ov[i].first[k[i]];
        }
        if (done) break;
      }
    }
    for (std::size_t i = n; i-- > 0;) {
      if (++k[i] < gd.leaves[i]) break;
      k[i] = 0;
    }
  }
  std::size_t total = 0;
  for (index_t r = 0; r < gd.ranks; ++r) {
    const index_t rd = gd.rank_region[r];
    total += static_cast<std::size_t>(piece_first[rd + 1] - piece_first[rd]);
  }
  p.transfers.reserve(total);
  // Least-loaded replica: each source rank owns one region, so the candidates for a piece of
  // region k are k's owners, and their loads come from k's pieces alone. One tournament tree of
  // (elements sent, owner) per region: O(log g) a piece, not O(g).
  detail::sender_trees senders(gs);
  // Targets in rank order; a piece the target holds in `src` is a local copy, any other piece
  // comes from the least-loaded replica of its region.
  for (index_t r = 0; r < gd.ranks; ++r) {
    const index_t t = gd.first_rank + r;
    const index_t rd = gd.rank_region[r];
    const index_t mine = t - gs.first_rank >= 0 && t - gs.first_rank < gs.ranks
                             ? gs.rank_region[t - gs.first_rank]
                             : -1;
    for (index_t q = piece_first[rd]; q < piece_first[rd + 1]; ++q) {
      const index_t region = piece_src[q];
      transfer& x = p.transfers.emplace_back();
      x.dst = t;
      const auto at = static_cast<std::size_t>(q) * n;
      x.where.offset.assign_n(piece_lo.data() + at, n);
      x.where.extent.assign_n(piece_len.data() + at, n);
      if (region == mine) {
        x.src = t;
        continue;
      }
      const index_t o_begin = gs.owner_start[region], g = gs.owner_start[region + 1] - o_begin;
      x.src = g == 1 ? gs.owners[o_begin]
                     : gs.owners[o_begin + senders.take(region, piece_vol[q])];
    }
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
