// verify/rank_plan.cpp: laws of per-rank plans (include/reshard/rank_plan.hpp): plan_by_ranks
// obeys the laws of plan() (exact cover, local copies, cost == lower bound) with the same pieces;
// every rank's plan_for_rank is exactly its part of plan_by_ranks; replicas take turns evenly.
#include "reshard/rank_plan.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "laws/data.hpp"
#include "laws/plan.hpp"
#include "reshard.hpp"

using namespace reshard;
using verify::layout_pair;

namespace {

// A total order on transfers, to compare lists as multisets.
bool before(const transfer& a, const transfer& b) {
  return std::tie(a.src, a.dst) < std::tie(b.src, b.dst) ||
         (std::tie(a.src, a.dst) == std::tie(b.src, b.dst) &&
          a.where.offset.to_vector() < b.where.offset.to_vector());
}

std::vector<transfer> sorted(std::vector<transfer> v) {
  std::sort(v.begin(), v.end(), before);
  return v;
}

// Every global rank of either layout.
std::vector<index_t> all_ranks(const layout& a, const layout& b) {
  std::vector<index_t> r;
  for (index_t k = 0; k < num_ranks(a); ++k) r.push_back(a.first_rank + k);
  for (index_t k = 0; k < num_ranks(b); ++k) r.push_back(b.first_rank + k);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// @post the transfers of plan_for_rank(A, B, r) are those of plan_by_ranks(A, B) involving r:
// its receives in plan order, then its sends.
std::string parts_agree(const layout& src, const layout& dst) {
  const transfer_plan whole = plan_by_ranks(src, dst);
  for (index_t r : all_ranks(src, dst)) {
    const transfer_plan part = plan_for_rank(src, dst, r);
    if (part.src != src || part.dst != dst) return "plan_for_rank changed the layouts" + laws::in(whole);
    std::vector<transfer> recv, send;
    for (const transfer& x : whole.transfers) {
      if (x.dst == r) recv.push_back(x);
      else if (x.src == r) send.push_back(x);
    }
    const std::size_t nr = recv.size();
    if (part.transfers.size() != nr + send.size() ||
        !std::equal(recv.begin(), recv.end(), part.transfers.begin()) ||
        sorted(send) != sorted({part.transfers.begin() + static_cast<std::ptrdiff_t>(
                                    std::min(nr, part.transfers.size())),
                                part.transfers.end()}))
      return "plan_for_rank(" + std::to_string(r) + ") is not rank " + std::to_string(r) +
             "'s part of plan_by_ranks" + laws::in(whole);
  }
  return {};
}

// Replicas take turns: per source region, the pieces its replicas send differ in number by at
// most one between any two replicas.
std::string turns_are_even(const transfer_plan& p) {
  std::map<index_t, index_t> sent;
  for (const transfer& x : p.transfers)
    if (x.src != x.dst) ++sent[x.src];
  for (const region& g : regions(p.src)) {
    index_t lo = -1, hi = 0;
    for (index_t r : g.owners) {
      const index_t n = sent.count(r) ? sent[r] : 0;
      lo = lo < 0 ? n : std::min(lo, n);
      hi = std::max(hi, n);
    }
    if (hi - lo > 1)
      return "replicas of region " + to_string(g.where) + " send between " + std::to_string(lo) +
             " and " + std::to_string(hi) + " pieces" + laws::in(p);
  }
  return {};
}

}  // namespace

RC_GTEST_PROP(RankPlan, CoversEveryTargetExactlyOnce, (const layout_pair& lp)) {
  RC_LAW(laws::exact_cover(plan_by_ranks(lp.src, lp.dst)));
}

RC_GTEST_PROP(RankPlan, CopiesLocallyExactlyWhatTargetsHold, (const layout_pair& lp)) {
  RC_LAW(laws::local_where_held(plan_by_ranks(lp.src, lp.dst)));
}

RC_GTEST_PROP(RankPlan, CrossBytesEqualTheLowerBound, (const layout_pair& lp)) {
  const auto elem = static_cast<index_t>(*verify::element_sizes());
  RC_LAW(laws::cost_is_consistent(plan_by_ranks(lp.src, lp.dst), elem));
}

// The same pieces as plan(), in the same order; only the choice among replicas may differ, and
// not at all when no region is replicated.
RC_GTEST_PROP(RankPlan, SamePiecesAsPlan, (const layout_pair& lp)) {
  const transfer_plan a = plan(lp.src, lp.dst), b = plan_by_ranks(lp.src, lp.dst);
  RC_ASSERT(a.transfers.size() == b.transfers.size());
  bool replicated = false;
  for (const region& g : regions(lp.src)) replicated = replicated || g.owners.size() > 1;
  for (std::size_t i = 0; i < a.transfers.size(); ++i) {
    RC_ASSERT(a.transfers[i].dst == b.transfers[i].dst);
    RC_ASSERT(a.transfers[i].where == b.transfers[i].where);
    RC_ASSERT((a.transfers[i].src == a.transfers[i].dst) == (b.transfers[i].src == b.transfers[i].dst));
    if (!replicated) RC_ASSERT(a.transfers[i].src == b.transfers[i].src);
  }
}

RC_GTEST_PROP(RankPlan, EveryRankDerivesItsOwnPart, (const layout_pair& lp)) {
  RC_LAW(parts_agree(lp.src, lp.dst));
}

RC_GTEST_PROP(RankPlan, ReplicasTakeTurns, (const layout_pair& lp)) {
  RC_LAW(turns_are_even(plan_by_ranks(lp.src, lp.dst)));
}

// @post apply(plan_by_ranks(A, B), shards of x under A) == shards of x under B
RC_GTEST_PROP(RankPlan, ConvertsLikeSplit, (const layout_pair& lp)) {
  const std::size_t elem = *verify::element_sizes();
  const laws::bytes full = laws::distinct_tensor(lp.src.shape, elem);
  const laws::shard_set got =
      laws::convert_shards(plan_by_ranks(lp.src, lp.dst), laws::naive_split(lp.src, full, elem), elem);
  RC_LAW(laws::same_shards(lp.dst, got, laws::naive_split(lp.dst, full, elem), elem,
                           laws::in(lp.src, lp.dst)));
}

// One replica policy: a tabulated rank_planner (the checkpoint engine's, several ranks of one
// layout pair) and an arithmetic one (plan_for_rank's, rank_list's) give every rank the same
// receives and sends, and plan(A, B, round_robin) is their union.
RC_GTEST_PROP(RankPlan, TabulatedPlannerEqualsArithmetic, (const layout_pair& lp)) {
  const rank_planner t(lp.src, lp.dst), a(lp.src, lp.dst, partition::mode::arithmetic);
  std::vector<transfer> all;
  for (index_t r : all_ranks(lp.src, lp.dst)) {
    std::vector<transfer> xt, xa, st, sa;
    t.receives(r, xt);
    a.receives(r, xa);
    t.sends(r, st);
    a.sends(r, sa);
    RC_ASSERT(xt == xa);
    RC_ASSERT(st == sa);
    all.insert(all.end(), xt.begin(), xt.end());
  }
  RC_ASSERT(all == plan(lp.src, lp.dst, replica_policy::round_robin).transfers);
}

// @post rank_list(A, B, t) == the sorted sources of the transfers to t in plan(A, B, round_robin):
// the files a by-rank transform reads are exactly those its plan reads.
RC_GTEST_PROP(RankPlan, RankListIsTheSendersOfThePlan, (const layout_pair& lp)) {
  const transfer_plan p = plan(lp.src, lp.dst, replica_policy::round_robin);
  for (index_t k = 0; k < num_ranks(lp.dst); ++k) {
    const index_t t = lp.dst.first_rank + k;
    std::vector<index_t> want;
    for (const transfer& x : p.transfers)
      if (x.dst == t) want.push_back(x.src);
    std::sort(want.begin(), want.end());
    RC_ASSERT(rank_list(lp.src, lp.dst, t) == want);
  }
}

// Cross-mesh gather: 4 ranks replicate the tensor, 6 others each take a slice; the 4 replicas
// serve the 6 targets in turn (2, 2, 1, 1 pieces).
TEST(RankPlan, ReplicasServeTargetsInTurn) {
  const layout src = mindspore_layout({4}, {-1}, {12});
  layout dst = mindspore_layout({6}, {0}, {12});
  dst.first_rank = 4;
  const transfer_plan p = plan_by_ranks(src, dst);
  ASSERT_EQ(p.transfers.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p.transfers[i].src, static_cast<index_t>(i % 4));
    EXPECT_EQ(p.transfers[i].dst, static_cast<index_t>(4 + i));
  }
  const transfer_plan p0 = plan_for_rank(src, dst, 0);
  ASSERT_EQ(p0.transfers.size(), 2u);  // rank 0 serves targets 4 and 8
  EXPECT_EQ(p0.transfers[0].dst, 4);
  EXPECT_EQ(p0.transfers[1].dst, 8);
  EXPECT_TRUE(plan_for_rank(src, dst, 10).transfers.empty());  // in neither layout
}

// Targets that hold the region copy it and take no turn.
TEST(RankPlan, HoldersTakeNoTurn) {
  const layout src = mindspore_layout({2}, {-1}, {8});      // ranks 0, 1 hold everything
  const layout dst = mindspore_layout({4}, {0}, {8});       // ranks 0..3 take a quarter each
  const transfer_plan p = plan_by_ranks(src, dst);
  ASSERT_EQ(p.transfers.size(), 4u);
  EXPECT_EQ(p.transfers[0].src, 0);  // local
  EXPECT_EQ(p.transfers[1].src, 1);  // local
  EXPECT_EQ(p.transfers[2].src, 0);  // first turn
  EXPECT_EQ(p.transfers[3].src, 1);  // second turn
  EXPECT_LAW(parts_agree(src, dst));
}

TEST(RankPlan, BadInputIsReported) {
  const layout a = mindspore_layout({2}, {0}, {8});
  const layout b = mindspore_layout({2}, {0}, {6});
  EXPECT_THROW(plan_for_rank(a, b, 0), error);
  EXPECT_THROW(plan_by_ranks(a, b), error);
}

// Usable in constant expressions, like plan().
static_assert(plan_for_rank(mindspore_layout({2}, {0}, {8}), mindspore_layout({4}, {0}, {8}), 1)
                  .transfers.size() == 3);  // rank 1 receives [2:4] from 0, sends [4:6] to 2, [6:8] to 3
