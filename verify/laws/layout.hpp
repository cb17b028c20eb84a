// verify/laws/layout.hpp: laws of a single layout (box_of, regions, replica groups).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "reference.hpp"
#include "reshard.hpp"

namespace reshard::laws {

inline std::string in(const layout& l) { return " in " + to_string(l); }

/// Every box of the tensor `shape` lies inside it.
inline bool inside(const box& b, const index_list& shape) {
  if (b.offset.size() != shape.size() || b.extent.size() != shape.size()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (b.offset[i] < 0 || b.extent[i] < 0 || b.offset[i] + b.extent[i] > shape[i]) return false;
  return true;
}

/// `inner` lies inside `outer` (an empty box is inside any box of the same rank).
inline bool inside(const box& inner, const box& outer) {
  if (inner.offset.size() != outer.offset.size()) return false;
  if (volume(inner) == 0) return true;
  for (std::size_t i = 0; i < inner.offset.size(); ++i)
    if (inner.offset[i] < outer.offset[i] ||
        inner.offset[i] + inner.extent[i] > outer.offset[i] + outer.extent[i])
      return false;
  return true;
}

/// The boxes of all local ranks, through the public box_of.
inline std::vector<box> boxes(const layout& l) {
  std::vector<box> out;
  for (index_t r = 0; r < num_ranks(l); ++r) out.push_back(box_of(l, l.first_rank + r));
  return out;
}

/// @post box_of(l, r) equals the independent reference model, for every rank; slice_shape is
/// its extent.
inline std::string box_of_matches_reference(const layout& l) {
  const std::vector<box> want = reference_boxes(l);
  for (index_t r = 0; r < num_ranks(l); ++r) {
    const box got = box_of(l, l.first_rank + r);
    if (got != want[static_cast<std::size_t>(r)])
      return "box_of rank " + std::to_string(l.first_rank + r) + " is " + to_string(got) +
             ", the reference says " + to_string(want[static_cast<std::size_t>(r)]) + in(l);
    if (slice_shape(l, l.first_rank + r) != got.extent)
      return "slice_shape of rank " + std::to_string(l.first_rank + r) +
             " is not its box's extent" + in(l);
    if (!inside(got, l.shape))
      return "box of rank " + std::to_string(l.first_rank + r) + " " + to_string(got) +
             " is outside the tensor" + in(l);
  }
  return {};
}

/// @post regions(l) are disjoint, cover the tensor, and every rank owns exactly one of them;
/// the owners of a region are its replica group (ascending) and their box_of is its box.
inline std::string regions_partition(const layout& l) {
  const std::vector<region> rs = regions(l);
  index_t covered = 0;
  std::vector<int> owned(static_cast<std::size_t>(num_ranks(l)), 0);
  for (std::size_t k = 0; k < rs.size(); ++k) {
    const region& g = rs[k];
    if (!inside(g.where, l.shape))
      return "region " + to_string(g.where) + " is outside the tensor" + in(l);
    covered += volume(g.where);
    for (std::size_t j = 0; j < k; ++j)
      if (volume(intersect(g.where, rs[j].where)) != 0)
        return "regions " + to_string(rs[j].where) + " and " + to_string(g.where) + " overlap" +
               in(l);
    if (g.owners.empty()) return "region " + to_string(g.where) + " has no owner" + in(l);
    for (std::size_t j = 0; j < g.owners.size(); ++j) {
      const index_t r = g.owners[j];
      if (r < l.first_rank || r >= l.first_rank + num_ranks(l))
        return "region " + to_string(g.where) + " names rank " + std::to_string(r) +
               ", not a rank of the layout" + in(l);
      if (j > 0 && g.owners[j - 1] >= r)
        return "owners of region " + to_string(g.where) + " are not ascending" + in(l);
      ++owned[static_cast<std::size_t>(r - l.first_rank)];
      if (box_of(l, r) != g.where)
        return "rank " + std::to_string(r) + " owns region " + to_string(g.where) +
               " but box_of says " + to_string(box_of(l, r)) + in(l);
      if (replica_group(l, r) != g.owners)
        return "replica_group of rank " + std::to_string(r) +
               " differs from the owners of its region" + in(l);
    }
  }
  if (covered != volume(l.shape))
    return "regions hold " + std::to_string(covered) + " elements, the tensor " +
           std::to_string(volume(l.shape)) + in(l);
  for (std::size_t r = 0; r < owned.size(); ++r)
    if (owned[r] != 1)
      return "rank " + std::to_string(l.first_rank + static_cast<index_t>(r)) + " owns " +
             std::to_string(owned[r]) + " regions" + in(l);
  return {};
}

/// @post members of a replica group have equal boxes; ranks with equal non-empty boxes are in
/// one replica group; every rank is in its own group.
inline std::string replica_groups_consistent(const layout& l) {
  const std::vector<box> bs = boxes(l);
  for (index_t r = 0; r < num_ranks(l); ++r) {
    const index_t gr = l.first_rank + r;
    const std::vector<index_t> group = replica_group(l, gr);
    if (std::find(group.begin(), group.end(), gr) == group.end())
      return "rank " + std::to_string(gr) + " is not in its own replica group" + in(l);
    for (index_t m : group)
      if (box_of(l, m) != bs[static_cast<std::size_t>(r)])
        return "ranks " + std::to_string(gr) + " and " + std::to_string(m) +
               " share a replica group but hold different boxes" + in(l);
    for (index_t q = 0; q < num_ranks(l); ++q) {
      const bool same_box = bs[static_cast<std::size_t>(q)] == bs[static_cast<std::size_t>(r)] &&
                            volume(bs[static_cast<std::size_t>(r)]) > 0;
      const bool listed = std::find(group.begin(), group.end(), l.first_rank + q) != group.end();
      if (same_box && !listed)
        return "ranks " + std::to_string(gr) + " and " + std::to_string(l.first_rank + q) +
               " hold the same box " + to_string(bs[static_cast<std::size_t>(r)]) +
               " but are not one replica group" + in(l);
    }
  }
  return {};
}

}  // namespace reshard::laws
