// verify/plan.cpp: laws of redistribution plans (include/reshard/plan.hpp): exact cover, local
// copies, cost == lower bound, load balance, minimal rank lists; MindSpore's rank_list example;
// plans and their costs at compile time.
#include "laws/plan.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "reshard.hpp"

using namespace reshard;
using verify::layout_pair;

// @post every target rank's box is covered exactly once by the boxes it receives; each
// transfer lies inside its source's and target's box; each (src, dst) pair at most once;
// transfers grouped by ascending target.
RC_GTEST_PROP(Plan, CoversEveryTargetExactlyOnce, (const layout_pair& lp)) {
  RC_LAW(laws::exact_cover(plan(lp.src, lp.dst)));
}

// @post a target that holds a piece in `src` (same global rank id) copies it locally, and only
// such data is copied locally.
RC_GTEST_PROP(Plan, CopiesLocallyExactlyWhatTargetsHold, (const layout_pair& lp)) {
  RC_LAW(laws::local_where_held(plan(lp.src, lp.dst)));
}

// @post cross-rank bytes == lower bound == sum over targets of the bytes they lack, the lower
// bound recomputed here from box_of; the other cost fields agree with the transfers.
RC_GTEST_PROP(Plan, CrossBytesEqualTheLowerBound, (const layout_pair& lp)) {
  const auto elem = static_cast<index_t>(*verify::element_sizes());
  RC_LAW(laws::cost_is_consistent(plan(lp.src, lp.dst), elem));
}

// plan(A, A) moves nothing between ranks: one local copy per rank with data.
RC_GTEST_PROP(Plan, SelfPlanIsAllLocal, (const layout& l)) {
  const transfer_plan p = plan(l, l);
  const plan_cost c = p.cost(4);
  RC_ASSERT(c.cross_bytes == 0);
  RC_ASSERT(c.messages == 0);
  RC_ASSERT(c.max_sent_bytes == 0);
  index_t held = 0, ranks_with_data = 0;
  for (const box& b : laws::boxes(l)) {
    held += volume(b);
    ranks_with_data += volume(b) > 0 ? 1 : 0;
  }
  RC_ASSERT(c.local_bytes == 4 * held);
  RC_ASSERT(static_cast<index_t>(p.transfers.size()) == ranks_with_data);
  for (const transfer& x : p.transfers) {
    RC_ASSERT(x.src == x.dst);
    RC_ASSERT(x.where == box_of(l, x.dst));
  }
}

// Load balance: per source region, the least-loaded-replica choice stays within Graham's list
// scheduling bound g * max <= S + (g - 1) * P, and is optimal when the pieces are equal.
RC_GTEST_PROP(Plan, LoadWithinGrahamBound, (const layout_pair& lp)) {
  RC_LAW(laws::load_within_graham_bound(plan(lp.src, lp.dst)));
}

// A fully replicated source (dev [k], map all -1) to a target whose boxes all have v elements:
// m targets that are not source ranks each fetch v elements from one of k replicas, so no plan
// can send less than ceil(m / k) * v from its busiest rank, and this one sends exactly that,
// i.e. max_sent <= ceil(mean_sent / v) * v.
RC_GTEST_PROP(Plan, ReplicatedSourceBalancesPerfectly, ()) {
  verify::gen_options o;
  o.chunk = o.balanced = o.explicit_sizes = false;  // equal target boxes
  const index_list shape = *verify::shapes(o);
  const index_t k = *verify::rank_counts(64);
  const layout src = mindspore_layout({k}, tensor_map(shape.size(), map_entry(-1)), shape);
  const layout dst = *verify::layouts_of(shape, o);
  const auto elem = static_cast<index_t>(*verify::element_sizes());
  const transfer_plan p = plan(src, dst);
  const plan_cost c = p.cost(elem);
  const index_t v = volume(box_of(dst, dst.first_rank)) * elem;
  index_t m = 0;
  for (index_t t = dst.first_rank; t < dst.first_rank + num_ranks(dst); ++t)
    m += (t >= k && v > 0) ? 1 : 0;
  RC_ASSERT(c.cross_bytes == m * v);
  RC_ASSERT(c.max_sent_bytes == (m + k - 1) / k * v);
  if (v > 0) {
    RC_ASSERT(static_cast<double>(c.max_sent_bytes) <= c.mean_sent_bytes + static_cast<double>(v));
  }
}

// @post rank_list is sufficient (its boxes in src cover the target's box) and minimal (one rank
// per distinct source region overlapping the target's box); the plan reads a target's data
// from as many ranks as rank_list names.
RC_GTEST_PROP(Plan, RankListIsSufficientAndMinimal, (const layout_pair& lp)) {
  const transfer_plan p = plan(lp.src, lp.dst);
  for (index_t t = lp.dst.first_rank; t < lp.dst.first_rank + num_ranks(lp.dst); ++t) {
    const std::vector<index_t> list = rank_list(lp.src, lp.dst, t);
    RC_LAW(laws::rank_list_law(lp.src, lp.dst, t, list));
    std::set<index_t> senders;
    for (const transfer& x : p.transfers)
      if (x.dst == t) senders.insert(x.src);
    RC_ASSERT(senders.size() == list.size());
  }
}

// plan() is a function: the same layouts give the same plan.
RC_GTEST_PROP(Plan, IsDeterministic, (const layout_pair& lp)) {
  RC_ASSERT(plan(lp.src, lp.dst) == plan(lp.src, lp.dst));
  RC_ASSERT(plan(lp.src, lp.dst).cost(8) == plan(lp.src, lp.dst).cost(8));
}

// The pair generator draws M and N independently: most pairs have M != N, many have neither
// dividing the other (8 -> 3, 6 -> 4, 5 -> 7, ...), and both layouts describe one shape.
TEST(Plan, PairGeneratorMixesDeviceCounts) {
  const int n = 2000;
  int differ = 0, coprime_ish = 0, offset = 0;
  const auto gen = verify::layout_pairs();
  for (int i = 0; i < n; ++i) {
    const layout_pair lp = gen(rc::Random(static_cast<std::uint64_t>(i)), 100).value();
    ASSERT_EQ(lp.src.shape, lp.dst.shape);
    const index_t m = num_ranks(lp.src), k = num_ranks(lp.dst);
    differ += m != k ? 1 : 0;
    coprime_ish += (m % k != 0 && k % m != 0) ? 1 : 0;
    offset += lp.src.first_rank != lp.dst.first_rank ? 1 : 0;
  }
  std::printf("  M != N %.1f%%, neither divides %.1f%%, different first ranks %.1f%%\n",
              100.0 * differ / n, 100.0 * coprime_ish / n, 100.0 * offset / n);
  EXPECT_GE(differ, n / 2);
  EXPECT_GE(coprime_ish, n / 4);
  EXPECT_GE(offset, n / 5);
}

// ---------------------------------------------------------------------------------------------
// Examples

// MindSpore's rank_list_for_transform example: src dev (32,1,8) map (2,-1,0), dst dev (2,64,2)
// map (2,1,0), shape (32,64,128). Target rank 1 holds rows 0:16, all of dim 1's slice 0:1 and
// cols 64:128; in src each rank holds one row and 16 cols, so 16 rows x 4 col blocks = 64
// distinct source regions. MindSpore asks for 128 ranks (whole all-gather groups).
TEST(Plan, MindSporeRankListExampleNeeds64Ranks) {
  const layout src = mindspore_layout({32, 1, 8}, {2, -1, 0}, {32, 64, 128});
  const layout dst = mindspore_layout({2, 64, 2}, {2, 1, 0}, {32, 64, 128});
  const std::vector<index_t> list = rank_list(src, dst, 1);
  EXPECT_EQ(list.size(), 64u);
  EXPECT_LAW(laws::rank_list_law(src, dst, 1, list));
  // rows r = 0..15 live on ranks 8r .. 8r+7; cols 64:128 are col blocks 4..7
  std::vector<index_t> want;
  for (index_t r = 0; r < 16; ++r)
    for (index_t c = 4; c < 8; ++c) want.push_back(8 * r + c);
  EXPECT_EQ(list, want);
}

// dev [2,4] map [1,-1] -> dev [4] map [0,-1], shape [8,4]: targets 0 and 1 hold their rows
// already (source ranks 0-3 hold rows 0:4); targets 2 and 3 fetch 2x4 each from ranks 4-7.
TEST(Plan, TwoByFourToFour) {
  const layout a = mindspore_layout({2, 4}, {1, -1}, {8, 4});
  const layout b = mindspore_layout({4}, {0, -1}, {8, 4});
  const transfer_plan p = plan(a, b);
  ASSERT_EQ(p.transfers.size(), 4u);
  EXPECT_EQ(p.transfers[0], (transfer{0, 0, box{{0, 0}, {2, 4}}}));
  EXPECT_EQ(p.transfers[1], (transfer{1, 1, box{{2, 0}, {2, 4}}}));
  EXPECT_EQ(p.transfers[2].dst, 2);
  EXPECT_EQ(p.transfers[3].dst, 3);
  EXPECT_GE(p.transfers[2].src, 4);
  EXPECT_NE(p.transfers[2].src, p.transfers[3].src);  // the two fetches go to different replicas
  EXPECT_EQ(p.cost(4), (plan_cost{64, 64, 64, 2, 32, 8.0}));  // 2 ranks x 8 elements kept locally
}

// ---------------------------------------------------------------------------------------------
// Compile time: plan() and cost() are constexpr.

// The example above: targets 2 and 3 each lack 2x4 elements -> 16 elements x 4 bytes = 64.
static_assert(reshard::plan(reshard::mindspore_layout({2, 4}, {1, -1}, {8, 4}),
                            reshard::mindspore_layout({4}, {0, -1}, {8, 4}))
                  .cost(4)
                  .cross_bytes == 64);
// Row-sharded to column-sharded over 8 ranks, shape [8,8]: rank r holds row r, then column r;
// it keeps element (r,r) and fetches 7 single elements from the 7 other ranks:
// 8 * 7 = 56 messages of 1 element, x 2 bytes = 112 bytes.
static_assert(reshard::plan(reshard::mindspore_layout({8}, {0, -1}, {8, 8}),
                            reshard::mindspore_layout({8}, {-1, 0}, {8, 8}))
                  .cost(2)
                  .cross_bytes == 112);
static_assert(reshard::plan(reshard::mindspore_layout({8}, {0, -1}, {8, 8}),
                            reshard::mindspore_layout({8}, {-1, 0}, {8, 8}))
                  .cost(2)
                  .messages == 56);
// 8 -> 3 ranks, 24 elements: source rank r holds [3r, 3r+3), target t holds [8t, 8t+8).
// Target 0 keeps [0,3) and lacks 5; targets 1 and 2 hold nothing of theirs (source ranks 1, 2
// hold [3,9)): 5 + 8 + 8 = 21 elements x 4 bytes = 84 bytes; 3 elements x 4 = 12 local.
static_assert(reshard::plan(reshard::mindspore_layout({8}, {0}, {24}),
                            reshard::mindspore_layout({3}, {0}, {24}))
                  .cost(4)
                  .cross_bytes == 84);
static_assert(reshard::plan(reshard::mindspore_layout({8}, {0}, {24}),
                            reshard::mindspore_layout({3}, {0}, {24}))
                  .cost(4)
                  .local_bytes == 12);
// A layout to itself moves nothing: dev [2,2,2] map [2,0] (a replicated middle axis).
static_assert(reshard::plan(reshard::mindspore_layout({2, 2, 2}, {2, 0}, {4, 6}),
                            reshard::mindspore_layout({2, 2, 2}, {2, 0}, {4, 6}))
                  .cost(8)
                  .cross_bytes == 0);
// rank_list is constexpr too: in the 8 -> 3 example target 1 = [8,16) needs source ranks 2..5
// ([6,9) .. [15,18)).
static_assert(reshard::rank_list(reshard::mindspore_layout({8}, {0}, {24}),
                                 reshard::mindspore_layout({3}, {0}, {24}),
                                 1) == std::vector<reshard::index_t>{2, 3, 4, 5});
