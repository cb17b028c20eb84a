// verify/io/plan_holds.cpp: the plan's source table (checkpoint_plan::holds) searched by rank.
// held_boxes finds a rank of a dense table (ranks 0, 1, 2, ... once each) at its index without a
// search; whatever the table, it must give what a binary search gives: the rank's entries, in
// order. held_box gives a rank's one box as it is, and of several the one a box lies in.
#include <reshard/io/checkpoint_plan.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

using namespace reshard::io;
using reshard::box;
using reshard::index_list;
using reshard::index_t;

namespace {

// A 1-d box [at, at + n).
box line(index_t at, index_t n) { return box{index_list{at}, index_list{n}}; }

// The reference: the entries of `rank`, by binary search.
std::vector<std::pair<index_t, box>> entries_of(const rank_boxes& holds, index_t rank) {
  const auto lo = std::lower_bound(holds.begin(), holds.end(), rank,
                                   [](const std::pair<index_t, box>& e, index_t r) { return e.first < r; });
  const auto hi = std::upper_bound(holds.begin(), holds.end(), rank,
                                   [](index_t r, const std::pair<index_t, box>& e) { return r < e.first; });
  return {lo, hi};
}

}  // namespace

// Tables of every kind: dense (each rank of 0..n-1 once, the strategies' when every rank is read),
// ranks left out, ranks listed several times (DCP chunks), ranks not from 0; queried at every rank
// listed, at ranks between and beyond them, and at negative ones.
RC_GTEST_PROP(plan_holds, held_boxes_is_the_binary_searchs_range, ()) {
  const auto n = *rc::gen::inRange<index_t>(0, 40);
  const auto kind = *rc::gen::inRange(0, 4);
  rank_boxes holds;
  for (index_t r = 0; r < n; ++r) {
    const int copies = kind == 0 ? 1 : kind == 1 ? *rc::gen::inRange(0, 2) : kind == 2 ? *rc::gen::inRange(0, 4) : 1;
    const index_t rank = kind == 3 ? r + *rc::gen::inRange<index_t>(1, 3) : r;  // shifted: no rank 0
    for (int c = 0; c < copies; ++c) holds.emplace_back(rank, line(c * 10 + r, 1 + c));
  }
  sort_by_rank(holds);
  for (index_t q = -2; q < n + 4; ++q) {
    const auto got = held_boxes(holds, q);
    const auto want = entries_of(holds, q);
    const std::vector<std::pair<index_t, box>> found(got.begin(), got.end());
    RC_ASSERT(found == want);
    if (!got.empty()) RC_ASSERT(got.data() >= holds.data() && got.data() + got.size() <= holds.data() + holds.size());
  }
}

TEST(plan_holds, held_box_of_one_box_or_the_one_a_box_lies_in) {
  rank_boxes holds{{0, line(0, 4)}, {1, line(4, 4)}, {1, line(8, 4)}, {3, line(12, 4)}};
  sort_by_rank(holds);
  EXPECT_EQ(held_box(holds, 0, line(1, 2)), &holds[0].second);
  EXPECT_EQ(held_box(holds, 0, line(6, 1)), &holds[0].second) << "one box: given as is (the caller checks it)";
  EXPECT_EQ(held_box(holds, 1, line(9, 2)), &holds[2].second) << "of several: the one the box lies in";
  EXPECT_EQ(held_box(holds, 1, line(4, 1)), &holds[1].second);
  EXPECT_EQ(held_box(holds, 1, line(0, 1)), &holds[1].second) << "of several, none holding it: the first";
  EXPECT_EQ(held_box(holds, 2, line(0, 1)), nullptr);
  EXPECT_EQ(held_box(holds, 3, line(12, 4)), &holds[3].second);
  EXPECT_EQ(held_box(holds, 4, line(0, 1)), nullptr);
  EXPECT_EQ(held_box(holds, -1, line(0, 1)), nullptr);
}

// sort_by_rank gives what a stable sort by (rank, offset) less the repeated pairs gives: for
// tables in order (which it returns at once), in order with repeats, and shuffled.
RC_GTEST_PROP(plan_holds, sort_by_rank_is_the_stable_sort_less_repeats, ()) {
  const auto n = *rc::gen::inRange<index_t>(0, 30);
  const auto kind = *rc::gen::inRange(0, 3);
  rank_boxes holds;
  for (index_t r = 0; r < n; ++r) {
    const int copies = *rc::gen::inRange(0, 3);
    for (int c = 0; c < copies; ++c) holds.emplace_back(r, line(c * 10 + r, 1 + c));
    if (kind == 1 && copies > 0 && *rc::gen::arbitrary<bool>()) holds.push_back(holds.back());  // a repeat
  }
  if (kind == 2) {  // shuffled
    std::mt19937 g(*rc::gen::arbitrary<std::uint32_t>());
    std::shuffle(holds.begin(), holds.end(), g);
  }
  rank_boxes want = holds;
  std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return std::lexicographical_compare(a.second.offset.begin(), a.second.offset.end(), b.second.offset.begin(),
                                        b.second.offset.end());
  });
  want.erase(std::unique(want.begin(), want.end()), want.end());
  sort_by_rank(holds);
  RC_ASSERT(holds == want);
}
