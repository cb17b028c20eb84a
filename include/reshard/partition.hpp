// reshard/partition.hpp: how a layout cuts its tensor into regions, and which ranks hold each.
//
// A layout splits each dim at its slice bounds (dim 0 includes the optimizer-sharding parts).
// The product of the per-dim slices gives the regions: distinct, disjoint boxes covering the
// tensor, numbered in row-major order of their slices. Every rank holds exactly one region; the
// ranks holding the same region (its owners, or replicas) hold the same bytes. The planners,
// convert, the checkpoint engine and MPI all ask these questions here, and only here:
//
//   p.bounds[i], p.leaves[i]   the slice offsets (leaves + 1 of them) and the slice count of dim i
//   p.region_box(k)            the box of region k
//   p.region_of(rank)          the region a global rank holds
//   p.owners_of(k, buf)        the global ranks holding region k, ascending
//   for_each_piece(p, b, f)    the non-empty intersections of a box b with the regions
//
// A partition is built in one of two modes that answer alike:
//   tabulated   every rank's region and every region's owners in tables: O(ranks) to build, O(1)
//               to ask. For whole plans.
//   arithmetic  only the slice bounds; a rank's region from its device coordinates (O(dims)),
//               a region's owners by enumerating its replica coordinates (O(replicas)). Building
//               costs O(slices), not O(ranks). For one rank's part of a plan.
//
//   @post p.region_box(p.region_of(r)) == box_of(l, r) for every rank r of l
//   @post the region boxes are disjoint and cover the tensor
//   @post r is in p.owners_of(p.region_of(r)); every region has p.replicas owners
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"

namespace reshard {

/// The regions of a layout and their owners (see the top of this header).
struct partition {
  enum class mode : std::uint8_t {
    tabulated,   ///< tables of every rank's region and every region's owners
    arithmetic,  ///< no per-rank tables: answers from the layout's arithmetic
  };

  index_t first_rank = 0;       ///< global id of the layout's local rank 0
  index_t ranks = 0;            ///< ranks of the layout
  std::vector<index_list> bounds;  ///< per dim: the slice offsets, leaves[i] + 1 of them
  index_list leaves;               ///< per dim: the number of slices
  index_t regions = 0;          ///< the product of leaves
  index_t replicas = 0;         ///< owners of each region (the same for every region)
  // tabulated only (empty in arithmetic mode):
  std::vector<index_t> rank_region;  ///< per local rank: its region
  std::vector<index_t> owner_start;  ///< CSR offsets, regions + 1 of them, into owners
  std::vector<index_t> owners;       ///< global ranks, ascending within each region

  constexpr partition() = default;

  /// The partition of a valid layout `l` (the caller validates it).
  constexpr explicit partition(const layout& l, mode m = mode::tabulated)
      : first_rank(l.first_rank), ranks(num_ranks(l)), bounds(detail::dim_bounds(l)), lay_(l),
        parts_(detail::opt_parts(l)), rep_(detail::repeat_axes(l)), tabulated_(m == mode::tabulated) {
    leaves = index_list(l.shape.size(), 0);
    regions = 1;
    for (std::size_t i = 0; i < l.shape.size(); ++i) {
      leaves[i] = static_cast<index_t>(bounds[i].size()) - 1;
      regions *= leaves[i];
    }
    index_t group = 1;
    for (int a : rep_) group *= l.dev_matrix[a];
    replicas = group / parts_;
    stride_ = index_list(l.dev_matrix.size(), 1);
    for (std::size_t a = l.dev_matrix.size(); a-- > 1;) stride_[a - 1] = stride_[a] * l.dev_matrix[a];
    if (tabulated_) tabulate();
  }

  constexpr bool tabulated() const { return tabulated_; }
  constexpr bool has_rank(index_t rank) const { return rank >= first_rank && rank < first_rank + ranks; }

  /// The box of region k.
  constexpr box region_box(index_t k) const {
    box b;
    const std::size_t n = bounds.size();
    b.offset = index_list(n, 0);
    b.extent = index_list(n, 0);
    for (std::size_t i = n; i-- > 0;) {
      const index_t j = k % leaves[i];
      k /= leaves[i];
      b.offset[i] = bounds[i][j];
      b.extent[i] = bounds[i][j + 1] - bounds[i][j];
    }
    return b;
  }

  /// The region global rank `rank` holds. @pre has_rank(rank)
  constexpr index_t region_of(index_t rank) const {
    RESHARD_EXPECTS(has_rank(rank), "partition: region_of: not a rank of the layout");
    if (tabulated_) return rank_region[static_cast<std::size_t>(rank - first_rank)];
    index_list coord, leaf;
    detail::leaf_of(lay_, rank - first_rank, parts_, rep_, coord, leaf);
    index_t id = 0;
    for (std::size_t i = 0; i < leaf.size(); ++i) id = id * leaves[i] + leaf[i];
    return id;
  }

  /// The box global rank `rank` holds. @pre has_rank(rank)
  constexpr box box_of_rank(index_t rank) const { return region_box(region_of(rank)); }

  /// Does global rank `rank` hold region k?
  constexpr bool holds(index_t rank, index_t k) const { return has_rank(rank) && region_of(rank) == k; }

  /// The owners of region k, ascending: a view of the tables, or computed into `buf`.
  constexpr std::span<const index_t> owners_of(index_t k, std::vector<index_t>& buf) const {
    if (tabulated_)
      return {owners.data() + owner_start[static_cast<std::size_t>(k)],
              owners.data() + owner_start[static_cast<std::size_t>(k) + 1]};
    // the region's slice per dim, then the coordinates of the axes that split each dim
    const std::size_t n = leaves.size();
    index_list leaf(n, 0);
    for (std::size_t i = n; i-- > 0;) {
      leaf[i] = k % leaves[i];
      k /= leaves[i];
    }
    index_t part = 0, base = first_rank;
    if (parts_ > 1) part = leaf[0] % parts_, leaf[0] /= parts_;
    for (std::size_t i = 0; i < n; ++i) {
      index_t s = leaf[i];
      const auto& axes = lay_.dim_axes[i];
      for (std::size_t j = axes.size(); j-- > 0;) {
        const auto a = static_cast<std::size_t>(axes[j]);
        base += (s % lay_.dev_matrix[a]) * stride_[a];
        s /= lay_.dev_matrix[a];
      }
    }
    // the replica coordinates: position pos in the group (last repeat axis fastest), with
    // pos % parts == part
    buf.clear();
    const index_t group = replicas * parts_;
    for (index_t pos = part; pos < group; pos += parts_) {
      index_t r = base, q = pos;
      for (std::size_t j = rep_.size(); j-- > 0;) {
        const auto a = static_cast<std::size_t>(rep_[j]);
        r += (q % lay_.dev_matrix[a]) * stride_[a];
        q /= lay_.dev_matrix[a];
      }
      buf.push_back(r);
    }
    std::sort(buf.begin(), buf.end());
    return buf;
  }

 private:
  layout lay_{};
  index_t parts_ = 1;     // optimizer-sharding parts of dim 0
  std::vector<int> rep_;  // repeat axes (enumerate a replica group), outermost first
  index_list stride_;        // rank stride of each device axis (row-major)
  bool tabulated_ = false;

  constexpr void tabulate() {
    rank_region = detail::filled<index_t>(static_cast<std::size_t>(ranks), 0);
    owner_start = detail::filled<index_t>(static_cast<std::size_t>(regions) + 1, 0);
    const layout& l = lay_;
    if (parts_ == 1) {
      // Without optimizer sharding the region id is linear in the device coordinates,
      // id = sum over axes of coord[a] * weight[a]: walk the ranks with an odometer, no division.
      const std::size_t nd = l.dev_matrix.size();
      index_list weight(nd, 0), coord(nd, 0);
      index_t later_leaves = 1;
      for (std::size_t i = l.shape.size(); i-- > 0;) {
        index_t w = later_leaves;
        for (std::size_t k = l.dim_axes[i].size(); k-- > 0;) {
          const int a = l.dim_axes[i][k];
          weight[a] = w;
          w *= l.dev_matrix[a];
        }
        later_leaves *= leaves[i];
      }
      index_t* region_at = rank_region.data();
      index_t* count = owner_start.data() + 1;
      if (nd == 0) {
        region_at[0] = 0;
        ++count[0];
      } else {
        // the last axis in a tight loop; the others step once per row of it
        const index_t last = l.dev_matrix[nd - 1], w = weight[nd - 1];
        index_t id = 0;  // region of the row's first rank
        for (index_t r = 0; r < ranks; r += last) {
          for (index_t c = 0; c < last; ++c) {
            region_at[r + c] = id + c * w;
            ++count[id + c * w];
          }
          for (std::size_t a = nd - 1; a-- > 0;) {
            id += weight[a];
            if (++coord[a] < l.dev_matrix[a]) break;
            id -= coord[a] * weight[a];
            coord[a] = 0;
          }
        }
      }
    } else {
      index_list coord, leaf;
      for (index_t r = 0; r < ranks; ++r) {
        detail::leaf_of(l, r, parts_, rep_, coord, leaf);
        index_t id = 0;
        for (std::size_t i = 0; i < leaf.size(); ++i) id = id * leaves[i] + leaf[i];
        rank_region[static_cast<std::size_t>(r)] = id;
        ++owner_start[static_cast<std::size_t>(id) + 1];
      }
    }
    for (index_t k = 0; k < regions; ++k) owner_start[k + 1] += owner_start[k];
    owners = detail::filled<index_t>(static_cast<std::size_t>(ranks), 0);
    std::vector<index_t> fill(owner_start.begin(), owner_start.end() - 1);
    for (index_t r = 0; r < ranks; ++r) owners[fill[rank_region[r]]++] = first_rank + r;
  }
};

namespace detail {

// The source regions overlapping a target box: per dim the range of overlapping slices.
struct piece_ranges {
  index_list lo, hi;  // slice index range [lo, hi) per dim
  bool empty = false;
};

constexpr piece_ranges overlapping_leaves(const partition& s, const box& t) {
  piece_ranges r;
  const std::size_t n = t.offset.size();
  r.lo = index_list(n, 0);
  r.hi = index_list(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const index_t a = t.offset[i], b = a + t.extent[i];
    if (b <= a) {
      r.empty = true;
      return r;
    }
    const auto& bd = s.bounds[i];
    // last slice starting at or before a; first slice starting at or after b
    r.lo[i] = (std::upper_bound(bd.begin(), bd.end(), a) - bd.begin()) - 1;
    r.hi[i] = std::lower_bound(bd.begin(), bd.end(), b) - bd.begin();
  }
  return r;
}

}  // namespace detail

/// Calls f(region, piece) for each non-empty intersection `piece` of box `t` with a region of
/// `p`, in ascending region order (row-major order of the slices).
// @post the pieces are disjoint and cover t (when t lies inside the tensor)
template <class F>
constexpr void for_each_piece(const partition& p, const box& t, F&& f) {
  const detail::piece_ranges r = detail::overlapping_leaves(p, t);
  if (r.empty) return;
  const std::size_t n = t.offset.size();
  index_list k = r.lo;
  box piece;
  piece.offset = index_list(n, 0);
  piece.extent = index_list(n, 0);
  while (true) {
    bool nonempty = true;
    index_t id = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& bd = p.bounds[i];
      const index_t lo = std::max(bd[k[i]], t.offset[i]);
      const index_t hi = std::min(bd[k[i] + 1], t.offset[i] + t.extent[i]);
      piece.offset[i] = lo;
      piece.extent[i] = hi - lo;
      nonempty = nonempty && hi > lo;
      id = id * p.leaves[i] + k[i];
    }
    if (nonempty) f(id, static_cast<const box&>(piece));
    // odometer over the slice ranges, last dim fastest
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

/// The ranks that hold the same data as `rank` (itself included), ascending.
// @post every r in replica_group(l, x): box_of(l, r) == box_of(l, x)
constexpr std::vector<index_t> replica_group(const layout& l, index_t rank) {
  validate(l);
  detail::expect_rank(l, rank, "replica_group");
  const partition p(l, partition::mode::arithmetic);
  std::vector<index_t> buf;
  const auto o = p.owners_of(p.region_of(rank), buf);
  return {o.begin(), o.end()};
}

/// A distinct piece of the tensor and the ranks that hold it.
struct region {
  box where;
  std::vector<index_t> owners;  ///< global ranks, ascending
  friend constexpr bool operator==(const region&, const region&) = default;
};

/// The distinct regions of `l` (disjoint, covering the tensor), in row-major order of slices.
// @post the regions' boxes partition the tensor; every rank owns exactly one region
constexpr std::vector<region> regions(const layout& l) {
  validate(l);
  const partition p(l);
  std::vector<region> out;
  out.reserve(static_cast<std::size_t>(p.regions));
  std::vector<index_t> buf;
  for (index_t k = 0; k < p.regions; ++k) {
    const auto o = p.owners_of(k, buf);
    out.push_back({p.region_box(k), {o.begin(), o.end()}});
  }
  return out;
}

}  // namespace reshard
