// verify/partition.cpp: laws of include/reshard/partition.hpp. A tabulated and an arithmetic
// partition of one layout answer alike; a rank's region box is box_of; the regions partition the
// tensor, each with `replicas` owners; for_each_piece cuts a box into disjoint pieces, each in the
// region it names.
#include "reshard/partition.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "laws/plan.hpp"
#include "reshard.hpp"

using namespace reshard;

namespace {

// @post region_of, owners_of and region_box agree between the two modes, and with box_of
std::string modes_agree(const layout& l) {
  const partition t(l), a(l, partition::mode::arithmetic);
  const std::string where = " in " + to_string(l);
  if (!t.tabulated() || a.tabulated()) return "the modes are not what was asked" + where;
  if (t.regions != a.regions || t.replicas != a.replicas || t.ranks != num_ranks(l) ||
      t.first_rank != l.first_rank || t.bounds != a.bounds || t.leaves != a.leaves)
    return "the modes disagree on counts or bounds" + where;
  std::vector<index_t> tb, ab;
  for (index_t r = l.first_rank; r < l.first_rank + num_ranks(l); ++r) {
    const index_t k = t.region_of(r);
    if (a.region_of(r) != k) return "region_of(" + std::to_string(r) + ") differs" + where;
    if (t.box_of_rank(r) != box_of(l, r)) return "box_of_rank(" + std::to_string(r) + ") is not box_of" + where;
    if (!t.holds(r, k) || !a.holds(r, k)) return "rank " + std::to_string(r) + " does not hold its region" + where;
  }
  for (index_t k = 0; k < t.regions; ++k) {
    const auto ot = t.owners_of(k, tb);
    const auto oa = a.owners_of(k, ab);
    if (std::vector<index_t>(ot.begin(), ot.end()) != std::vector<index_t>(oa.begin(), oa.end()))
      return "owners_of(" + std::to_string(k) + ") differs" + where;
    if (static_cast<index_t>(ot.size()) != t.replicas)
      return "region " + std::to_string(k) + " has " + std::to_string(ot.size()) + " owners, not " +
             std::to_string(t.replicas) + where;
    for (index_t o : ot)
      if (t.region_of(o) != k) return "an owner of region " + std::to_string(k) + " holds another" + where;
  }
  return {};
}

// @post the pieces for_each_piece gives for box b are disjoint, lie in the regions they name
// and add up to b's volume
std::string pieces_cover(const layout& l, const box& b) {
  const partition p(l);
  index_t total = 0, last = -1;
  std::vector<box> seen;
  std::string why;
  for_each_piece(p, b, [&](index_t k, const box& piece) {
    if (!why.empty()) return;
    if (k <= last) why = "regions not ascending";
    last = k;
    if (intersect(piece, p.region_box(k)) != piece || intersect(piece, b) != piece)
      why = "piece " + to_string(piece) + " is not inside region " + to_string(p.region_box(k)) + " and " + to_string(b);
    for (const box& s : seen)
      if (volume(intersect(s, piece)) != 0) why = "pieces overlap";
    seen.push_back(piece);
    total += volume(piece);
  });
  if (!why.empty()) return why + " in " + to_string(l);
  if (total != volume(b)) return "the pieces of " + to_string(b) + " do not add up to its volume in " + to_string(l);
  return {};
}

}  // namespace

RC_GTEST_PROP(Partition, TabulatedAndArithmeticAgree, (const layout& l)) { RC_LAW(modes_agree(l)); }

// Every rank's box of another layout of the same tensor is cut exactly by the regions.
RC_GTEST_PROP(Partition, PiecesCoverABox, (const verify::layout_pair& lp)) {
  for (index_t r = lp.dst.first_rank; r < lp.dst.first_rank + num_ranks(lp.dst); ++r)
    RC_LAW(pieces_cover(lp.src, box_of(lp.dst, r)));
}

TEST(Partition, OptimizerShardingSplitsDimZeroAmongReplicas) {
  // dev [2,4], dim 0 split by the axis of 2, optimizer sharding over the replica group of 4
  layout l = mindspore_layout({2, 4}, {1, -1}, {16, 4});
  l.opt = {1, 4};
  const partition p(l), a(l, partition::mode::arithmetic);
  EXPECT_EQ(p.regions, 8);
  EXPECT_EQ(p.replicas, 1);
  EXPECT_EQ(p.leaves, (index_list{8, 1}));
  EXPECT_EQ(p.region_box(p.region_of(5)), (box{{8 + 2, 0}, {2, 4}}));  // slice 1, part 1
  EXPECT_EQ(a.region_of(5), p.region_of(5));
  EXPECT_LAW(modes_agree(l));
}

TEST(Partition, ZeroDimTensorHasOneRegionOwnedByAll) {
  const layout l = mindspore_layout({3}, {}, {});
  const partition p(l);
  std::vector<index_t> buf;
  EXPECT_EQ(p.regions, 1);
  const auto o = p.owners_of(0, buf);
  EXPECT_EQ(std::vector<index_t>(o.begin(), o.end()), (std::vector<index_t>{0, 1, 2}));
}
