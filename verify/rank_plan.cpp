// verify/rank_plan.cpp: laws of per-rank plans (include/reshard/rank_plan.hpp): plan_by_ranks
// obeys the laws of plan() (exact cover, local copies, cost == lower bound) with the same pieces;
// every rank's plan_for_rank is exactly its part of plan_by_ranks; replicas take turns evenly.
#include "reshard/rank_plan.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
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

// One planner per policy (round_robin, nearest): a tabulated rank_planner (the checkpoint
// engine's, several ranks of one layout pair) and an arithmetic one (plan_for_rank's,
// rank_list's) give every rank the same receives and sends; the receives of all targets are
// plan(A, B, policy), the sends its cross transfers.
RC_GTEST_PROP(RankPlan, TabulatedPlannerEqualsArithmetic, (const layout_pair& lp)) {
  const replica_policy policy = *rc::gen::element(replica_policy::round_robin, replica_policy::nearest);
  const rank_planner t(lp.src, lp.dst, partition::mode::tabulated, policy);
  const rank_planner a(lp.src, lp.dst, partition::mode::arithmetic, policy);
  std::vector<transfer> all, sent;
  for (index_t r : all_ranks(lp.src, lp.dst)) {
    std::vector<transfer> xt, xa, st, sa;
    t.receives(r, xt);
    a.receives(r, xa);
    t.sends(r, st);
    a.sends(r, sa);
    RC_ASSERT(xt == xa);
    RC_ASSERT(st == sa);
    all.insert(all.end(), xt.begin(), xt.end());
    sent.insert(sent.end(), st.begin(), st.end());
  }
  const transfer_plan p = plan(lp.src, lp.dst, policy);
  RC_ASSERT(all == p.transfers);
  std::vector<transfer> cross;
  for (const transfer& x : p.transfers)
    if (x.src != x.dst) cross.push_back(x);
  RC_ASSERT(sorted(sent) == sorted(cross));
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

// -- replica_policy::nearest: the same pieces as round robin; each region read from the owners
// nearest to its targets, within twice round robin's load, or else dealt round robin.

namespace {

// The owner of `owners` (ascending) at the least distance from rank t, among those that are
// ranks of `dst` if any is; of two, the upper if target rank t + 1 meets the owners' box `held`
// and t - 1 does not, else the lower: found by a scan, not plan.hpp's search.
index_t nearest_by_scan(const std::vector<index_t>& owners, index_t t, const layout& dst, const box& held) {
  std::vector<index_t> of_dst;
  for (index_t o : owners)
    if (laws::has_rank(dst, o)) of_dst.push_back(o);
  const std::vector<index_t>& among = of_dst.empty() ? owners : of_dst;
  const auto meets = [&](index_t r) { return laws::has_rank(dst, r) && volume(intersect(box_of(dst, r), held)) > 0; };
  const bool up = meets(t + 1) && !meets(t - 1);
  index_t best = among.front();
  for (index_t o : among) {
    const index_t d = o > t ? o - t : t - o, bd = best > t ? best - t : t - best;
    if (d < bd || (d == bd && up)) best = o;
  }
  return best;
}

// Per source region, the cross transfers of plan p that read it (their indexes in p), and the
// region's owners.
struct region_reads {
  std::vector<index_t> owners;
  std::vector<std::size_t> reads;
};
std::vector<region_reads> reads_by_region(const transfer_plan& p) {
  std::vector<region_reads> out;
  std::map<index_t, std::size_t> of_owner;
  for (const region& g : regions(p.src)) {
    for (index_t o : g.owners) of_owner[o] = out.size();
    out.push_back({g.owners, {}});
  }
  for (std::size_t i = 0; i < p.transfers.size(); ++i)
    if (p.transfers[i].src != p.transfers[i].dst) out[of_owner.at(p.transfers[i].src)].reads.push_back(i);
  return out;
}

// The laws of nearest against round robin's plan of the same layouts: the same pieces; per
// region, its senders are the nearest owners if those serve at most 2 ceil(T / g) targets each,
// round robin's otherwise; and with the nearest owners, a target of higher rank never reads from
// an owner of lower rank.
std::string nearest_law(const layout& src, const layout& dst) {
  const transfer_plan rr = plan(src, dst, replica_policy::round_robin);
  const transfer_plan nr = plan(src, dst, replica_policy::nearest);
  if (nr.transfers.size() != rr.transfers.size()) return "nearest: another number of transfers" + laws::in(rr);
  for (std::size_t i = 0; i < rr.transfers.size(); ++i) {
    const transfer &a = rr.transfers[i], &b = nr.transfers[i];
    if (a.dst != b.dst || a.where != b.where || (a.src == a.dst) != (b.src == b.dst) ||
        box_of(src, a.src) != box_of(src, b.src))
      return "nearest: transfer " + laws::show(b) + " is not round robin's " + laws::show(a) +
             " read from another replica" + laws::in(rr);
  }
  for (const region_reads& g : reads_by_region(nr)) {
    const auto owners = static_cast<index_t>(g.owners.size());
    const auto needs = static_cast<index_t>(g.reads.size());
    if (owners < 2 || needs == 0) continue;
    const index_t cap = 2 * ((needs + owners - 1) / owners);
    std::map<index_t, index_t> near_load;
    for (std::size_t i : g.reads) ++near_load[nearest_by_scan(g.owners, nr.transfers[i].dst, dst, box_of(src, g.owners.front()))];
    bool fits = true;
    for (const auto& [o, n] : near_load) fits = fits && n <= cap;
    std::map<index_t, index_t> load;
    index_t last_dst = -1, last_src = -1;
    for (std::size_t i : g.reads) {
      const transfer& x = nr.transfers[i];
      ++load[x.src];
      if (load[x.src] > cap)
        return "nearest: rank " + std::to_string(x.src) + " serves more than " + std::to_string(cap) + " of the " +
               std::to_string(needs) + " targets of its region" + laws::in(rr);
      const index_t want = fits ? nearest_by_scan(g.owners, x.dst, dst, box_of(src, g.owners.front())) : rr.transfers[i].src;
      if (x.src != want)
        return "nearest: target " + std::to_string(x.dst) + " reads from " + std::to_string(x.src) + ", not " +
               std::to_string(want) + (fits ? " (the nearest owner)" : " (round robin's: the nearest do not fit)") +
               laws::in(rr);
      if (fits && x.dst > last_dst && x.src < last_src)
        return "nearest: target " + std::to_string(x.dst) + " reads from a lower owner than target " +
               std::to_string(last_dst) + laws::in(rr);
      if (x.dst > last_dst) last_dst = x.dst, last_src = x.src;
    }
  }
  return {};
}

// Per region where every target has an owner of its own under round robin (T <= g), the
// distinct senders to any contiguous run of target ranks: never more with nearest.
std::string nearest_runs_read_fewer(const layout& src, const layout& dst) {
  const transfer_plan rr = plan(src, dst, replica_policy::round_robin);
  const transfer_plan nr = plan(src, dst, replica_policy::nearest);
  for (const region_reads& g : reads_by_region(rr)) {
    if (g.reads.size() > g.owners.size()) continue;
    std::vector<index_t> targets;
    for (std::size_t i : g.reads) targets.push_back(rr.transfers[i].dst);
    std::sort(targets.begin(), targets.end());
    for (std::size_t a = 0; a < targets.size(); ++a)
      for (std::size_t b = a; b < targets.size(); ++b) {
        std::set<index_t> by_rr, by_nr;
        for (std::size_t i : g.reads)
          if (rr.transfers[i].dst >= targets[a] && rr.transfers[i].dst <= targets[b]) {
            by_rr.insert(rr.transfers[i].src);
            by_nr.insert(nr.transfers[i].src);
          }
        if (by_nr.size() > by_rr.size())
          return "nearest: targets " + std::to_string(targets[a]) + ".." + std::to_string(targets[b]) + " read from " +
                 std::to_string(by_nr.size()) + " ranks, round robin " + std::to_string(by_rr.size()) + laws::in(rr);
      }
  }
  return {};
}

}  // namespace

RC_GTEST_PROP(RankPlan, NearestIsAMinimalPlan, (const layout_pair& lp)) {
  const transfer_plan p = plan(lp.src, lp.dst, replica_policy::nearest);
  RC_LAW(laws::exact_cover(p));
  RC_LAW(laws::local_where_held(p));
  RC_LAW(laws::cost_is_consistent(p, static_cast<index_t>(*verify::element_sizes())));
}

RC_GTEST_PROP(RankPlan, NearestOwnersWithinTwiceRoundRobin, (const layout_pair& lp)) {
  RC_LAW(nearest_law(lp.src, lp.dst));
}

RC_GTEST_PROP(RankPlan, NearestRunsReadNoMoreRanks, (const layout_pair& lp)) {
  RC_LAW(nearest_runs_read_fewer(lp.src, lp.dst));
}

// Source dev [4, 2] (the halves replicated on ranks 0, 2, 4, 6 and 1, 3, 5, 7) to 8 ranks that
// take an eighth each: targets 1 and 3 read the first half, 4 and 6 the second, from the owner
// nearest to each, 0, 2, 5, 5, where round robin's turns give 4 and 6 the owners 1 and 3:
// targets 4..7 then read ranks 1 and 3 beside their own. Ties: target 4 is as near 3 as 5, and
// takes 5, as target 5 needs the second half too and target 3 does not (4 and 5 read one file);
// targets 1 (0 or 2) and 6 (5 or 7) have neighbours on both sides that need their half, and
// take the lower; target 3 (2 or 4) the lower, as target 4 needs the other half.
TEST(RankPlan, NearestReadsNeighbours) {
  const layout src = mindspore_layout({4, 2}, {0}, {16});
  const layout dst = mindspore_layout({8}, {0}, {16});
  const transfer_plan p = plan(src, dst, replica_policy::nearest);
  ASSERT_EQ(p.transfers.size(), 8u);
  const index_t want[8] = {0, 0, 2, 2, 5, 5, 5, 7};
  const transfer_plan rr = plan(src, dst, replica_policy::round_robin);
  EXPECT_EQ(rr.transfers[4].src, 1);
  EXPECT_EQ(rr.transfers[6].src, 3);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(p.transfers[i].dst, static_cast<index_t>(i));
    EXPECT_EQ(p.transfers[i].src, want[i]) << "target " << i;
  }
  EXPECT_LAW(nearest_law(src, dst));
}

// Quarters replicated on ranks k and k + 4, to 4 ranks that each take the whole tensor: target 3
// lacks quarter 0, whose owner 4 is nearer than 0, but 0 is a target rank (its file is read
// anyway, as target 0's own) and 4 is not: every target reads from ranks 0..3 only.
TEST(RankPlan, NearestPrefersOwnersThatAreTargets) {
  const layout src = mindspore_layout({2, 4}, {0}, {8});
  const layout dst = mindspore_layout({4}, {-1}, {8});
  const transfer_plan p = plan(src, dst, replica_policy::nearest);
  ASSERT_EQ(p.transfers.size(), 16u);
  for (const transfer& x : p.transfers) EXPECT_LT(x.src, 4) << laws::show(x);
  EXPECT_LAW(nearest_law(src, dst));
}

// Six targets beside four replicas 0..3 (ranks 4..9): the nearest, rank 3, would serve all six,
// more than 2 ceil(6 / 4) = 4, so the replicas take turns as round robin's.
TEST(RankPlan, NearestFallsBackToTurns) {
  const layout src = mindspore_layout({4}, {-1}, {12});
  layout dst = mindspore_layout({6}, {0}, {12});
  dst.first_rank = 4;
  const transfer_plan p = plan(src, dst, replica_policy::nearest);
  EXPECT_EQ(p.transfers, plan(src, dst, replica_policy::round_robin).transfers);
  EXPECT_LAW(nearest_law(src, dst));
}

TEST(RankPlan, LeastLoadedIsNoPerRankPolicy) {
  const layout a = mindspore_layout({2}, {0}, {8});
  EXPECT_THROW(rank_planner(a, a, partition::mode::tabulated, replica_policy::least_loaded), contract_violation);
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
