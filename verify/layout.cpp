// verify/layout.cpp: laws of layouts (include/reshard/layout.hpp): box_of against an independent
// model, regions partition the tensor, replica groups, slice shapes, the printed notation.
#include "laws/layout.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "laws/reference.hpp"
#include "reshard.hpp"

using namespace reshard;

namespace {

bool has_tuple(const layout& l) {
  for (const auto& ax : l.dim_axes)
    if (ax.size() > 1) return true;
  return false;
}
bool has_uneven(const layout& l) {
  for (index_t r = l.first_rank; r < l.first_rank + num_ranks(l); ++r)
    if (box_of(l, r).extent != box_of(l, l.first_rank).extent) return true;
  return false;
}

}  // namespace

// The generator makes only valid layouts and reaches every edge case the suite relies on: each
// feature shows up in at least 2% of 2000 layouts (the table is printed).
TEST(Layout, GeneratorReachesEveryEdgeCase) {
  const std::vector<std::pair<std::string, bool (*)(const layout&)>> features{
      {"0-d tensor", [](const layout& l) { return l.shape.empty(); }},
      {"size-0 dim", [](const layout& l) { return !l.shape.empty() && volume(l.shape) == 0; }},
      {"size-1 dim",
       [](const layout& l) {
         return std::find(l.shape.begin(), l.shape.end(), 1) != l.shape.end();
       }},
      {"4-d tensor", [](const layout& l) { return l.shape.size() == 4; }},
      {"1 rank", [](const layout& l) { return num_ranks(l) == 1; }},
      {"> 32 ranks", [](const layout& l) { return num_ranks(l) > 32; }},
      {"size-1 axis",
       [](const layout& l) {
         return num_ranks(l) > 1 &&
                std::find(l.dev_matrix.begin(), l.dev_matrix.end(), 1) != l.dev_matrix.end();
       }},
      {"4 axes", [](const layout& l) { return l.dev_matrix.size() == 4; }},
      {"replicated", [](const layout& l) { return replica_group(l, l.first_rank).size() > 1; }},
      {"tuple", has_tuple},
      {"opt", [](const layout& l) { return l.opt.size > 1; }},
      {"opt -1", [](const layout& l) { return l.opt.size == -1; }},
      {"uneven", has_uneven},
      {"empty slice",
       [](const layout& l) {
         for (index_t r = l.first_rank; r < l.first_rank + num_ranks(l); ++r)
           if (volume(box_of(l, r)) == 0 && volume(l.shape) != 0) return true;
         return false;
       }},
      {"chunk", [](const layout& l) { return l.mode == split_mode::chunk; }},
      {"balanced", [](const layout& l) { return l.mode == split_mode::balanced; }},
      {"explicit sizes", [](const layout& l) { return !l.split_sizes.empty(); }},
      {"offset", [](const layout& l) { return l.first_rank != 0; }},
  };
  std::vector<int> hits(features.size(), 0);
  const int n = 2000;
  const auto gen = verify::layouts();
  for (int i = 0; i < n; ++i) {
    const layout l = gen(rc::Random(static_cast<std::uint64_t>(i)), 100).value();
    ASSERT_NO_THROW(validate(l)) << to_string(l);
    for (std::size_t f = 0; f < features.size(); ++f) hits[f] += features[f].second(l) ? 1 : 0;
  }
  for (std::size_t f = 0; f < features.size(); ++f) {
    std::printf("  %-16s %5.1f%%\n", features[f].first.c_str(), 100.0 * hits[f] / n);
    EXPECT_GE(hits[f], n / 50) << features[f].first;
  }
}

// @post box_of(l, r) follows the definitions (MindSpore coordinates, tuple order, split modes,
// explicit sizes, optimizer sharding by position in the replica group); slice_shape is its extent.
RC_GTEST_PROP(Layout, BoxOfMatchesReferenceModel, (const layout& l)) {
  RC_LAW(laws::box_of_matches_reference(l));
}

// @post regions are disjoint, cover the tensor, every rank owns exactly one; owners are the
// replica groups; box_of agrees with the region a rank owns.
RC_GTEST_PROP(Layout, RegionsPartitionTheTensor, (const layout& l)) {
  RC_LAW(laws::regions_partition(l));
}

// @post replica_group members hold equal boxes, and ranks holding the same non-empty box are
// one group.
RC_GTEST_PROP(Layout, ReplicaGroupsHoldEqualBoxes, (const layout& l)) {
  RC_LAW(laws::replica_groups_consistent(l));
}

// The number of regions is the product of the slice counts (times the optimizer parts), and
// every region has the same number of owners (the replica group size over the parts).
RC_GTEST_PROP(Layout, RegionCountsFollowTheDeviceMatrix, (const layout& l)) {
  index_t used = 1;
  for (const auto& ax : l.dim_axes)
    for (int a : ax) used *= l.dev_matrix[static_cast<std::size_t>(a)];
  const index_t group = num_ranks(l) / used;
  const index_t parts = (l.opt.size == 0 || l.opt.size == 1) ? 1
                        : l.opt.size == -1                   ? group
                                                             : l.opt.size;
  const std::vector<region> rs = regions(l);
  RC_ASSERT(static_cast<index_t>(rs.size()) == used * parts);
  for (const region& g : rs) RC_ASSERT(static_cast<index_t>(g.owners.size()) == group / parts);
}

// to_string is deterministic: equal layouts print equally, twice, and starts with the device
// matrix. Layouts differing in what they hold print differently.
RC_GTEST_PROP(Layout, ToStringIsStable, (const layout& l)) {
  const layout copy = l;
  RC_ASSERT(to_string(l) == to_string(copy));
  RC_ASSERT(to_string(l) == to_string(l));
  RC_ASSERT(to_string(l).rfind("dev" + to_string(l.dev_matrix) + " map[", 0) == 0);
  RC_ASSERT(to_string(l).find(" shape" + to_string(l.shape)) != std::string::npos);
  layout other = l;
  other.first_rank += 1;
  RC_ASSERT(to_string(other) != to_string(l));
}

// Out-of-range ranks are errors in every query.
RC_GTEST_PROP(Layout, QueriesRejectForeignRanks, (const layout& l)) {
  const index_t past = l.first_rank + num_ranks(l);
  RC_ASSERT_THROWS_AS(box_of(l, past), reshard::error);
  RC_ASSERT_THROWS_AS(replica_group(l, past), reshard::error);
  if (l.first_rank > 0) RC_ASSERT_THROWS_AS(slice_shape(l, l.first_rank - 1), reshard::error);
}

// ---------------------------------------------------------------------------------------------
// Examples

TEST(Layout, ToStringNotation) {
  EXPECT_EQ(to_string(mindspore_layout({2, 4}, {1, -1}, {8, 4})), "dev[2,4] map[1,-1] shape[8,4]");
  // the notation of the header's doc comment (printing does not validate)
  layout l;
  l.dev_matrix = {4, 2, 2};
  l.dim_axes = {{0, 1}, {2}};
  l.shape = {8, 8};
  l.opt = {2, 4};
  l.mode = split_mode::chunk;
  l.first_rank = 8;
  EXPECT_EQ(to_string(l),
            "dev[4,2,2] map[[2,1],0] shape[8,8] opt[step=2,size=4] split=chunk ranks[8..23]");
  l.split_sizes = {{}, {1, 2, 5}};
  EXPECT_EQ(to_string(l),
            "dev[4,2,2] map[[2,1],0] shape[8,8] opt[step=2,size=4] split=chunk sizes1=[1,2,5] "
            "ranks[8..23]");
  EXPECT_EQ(to_string(full_layout({})), "dev[1] map[] shape[]");
  EXPECT_EQ(to_string(full_layout({3, 0}, 5)), "dev[1] map[-1,-1] shape[3,0] ranks[5..5]");
  EXPECT_STREQ(to_string(split_mode::balanced), "balanced");
}

TEST(Layout, ZeroDimTensorHasOneRegion) {
  const layout l = mindspore_layout({2, 3}, {}, {});
  EXPECT_EQ(regions(l).size(), 1u);
  EXPECT_EQ(regions(l)[0].owners.size(), 6u);
  EXPECT_EQ(box_of(l, 5), (box{{}, {}}));
  EXPECT_EQ(volume(box_of(l, 5)), 1);
}

TEST(Layout, ChunkModeLeavesTrailingSlicesEmpty) {
  // torch.chunk(5 rows, 4): 2, 2, 1, 0
  const layout l = mindspore_layout({4}, {0}, {5}, {.mode = split_mode::chunk});
  EXPECT_EQ(box_of(l, 0), (box{{0}, {2}}));
  EXPECT_EQ(box_of(l, 1), (box{{2}, {2}}));
  EXPECT_EQ(box_of(l, 2), (box{{4}, {1}}));
  EXPECT_EQ(box_of(l, 3), (box{{5}, {0}}));
  // balanced: 2, 1, 1, 1
  const layout b = mindspore_layout({4}, {0}, {5}, {.mode = split_mode::balanced});
  EXPECT_EQ(box_of(b, 0), (box{{0}, {2}}));
  EXPECT_EQ(box_of(b, 3), (box{{4}, {1}}));
}

// ---------------------------------------------------------------------------------------------
// Compile time: box_of and slice_shape are constexpr.

// dev [2,4] map [0,1] shape [8,4]: dim 0 by the last axis (4 slices of 2 rows), dim 1 by the
// first (2 slices of 2 cols); rank 5 = coord (1,1): rows 2:4, cols 2:4.
static_assert(reshard::slice_shape(reshard::mindspore_layout({2, 4}, {0, 1}, {8, 4}), 5) ==
              reshard::index_list{2, 2});
static_assert(reshard::box_of(reshard::mindspore_layout({2, 4}, {0, 1}, {8, 4}), 5) ==
              reshard::box{{2, 2}, {2, 2}});
// dev [8] map [-1,-1] shape [16,2], optimizer sharding over all 8 replicas: 2 rows each.
static_assert(reshard::slice_shape(reshard::mindspore_layout({8}, {-1, -1}, {16, 2},
                                                             {.opt = {1, 8}}),
                                   3) == reshard::index_list{2, 2});
// 10 rows over 4 ranks in chunk mode: ceil(10/4) = 3, so 3, 3, 3, 1.
static_assert(reshard::slice_shape(reshard::mindspore_layout({4}, {0}, {10},
                                                             {.mode = reshard::split_mode::chunk}),
                                   3) == reshard::index_list{1});
// pipeline stage 1 of a 4-device stage: global rank 6 is local rank 2.
static_assert(reshard::box_of(reshard::mindspore_layout({4}, {0}, {8}, {.stage = 1}), 6) ==
              reshard::box{{4}, {2}});
static_assert(reshard::num_ranks(reshard::mindspore_layout({2, 2, 2}, {2, 0}, {4, 6})) == 8);
static_assert(reshard::replica_group(reshard::mindspore_layout({2, 2, 2}, {2, 0}, {4, 6}), 1) ==
              std::vector<reshard::index_t>{1, 3});
