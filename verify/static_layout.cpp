// Compile-time layouts: slice shapes and plan costs are checked by the compiler (static_assert),
// and the dynamic twin of each static layout agrees with it at run time.
#include <reshard/static_layout.hpp>

#include <gtest/gtest.h>

namespace {

using reshard::c;
using reshard::list;
namespace hana = boost::hana;

// dev[2,4] map[1,-1] shape[8,4]: dim 0 split by the axis of size 2 -> slices [4,4].
constexpr auto rows2 = reshard::make_static_layout(list<2, 4>, list<1, -1>, list<8, 4>);
// dev[4] map[0,-1] shape[8,4]: dim 0 split 4 ways -> slices [2,4].
constexpr auto rows4 = reshard::make_static_layout(list<4>, list<0, -1>, list<8, 4>);
// dev[4,2,2] map[[2,1],0] shape[8,8]: dim 0 split by 4*2 = 8, dim 1 by 2 -> [1,4].
constexpr auto tuple_map = reshard::make_static_layout(
    list<4, 2, 2>, hana::make_tuple(reshard::axes<2, 1>, c<0>), list<8, 8>);

static_assert(reshard::static_slice_shape(rows2) == list<4, 4>);
static_assert(reshard::static_slice_shape(rows4) == list<2, 4>);
static_assert(reshard::static_slice_shape(tuple_map) == list<1, 4>);
static_assert(reshard::static_num_ranks(tuple_map) == c<16>);

// rows2 -> rows4, float32. Target ranks 0..3 need rows 2r..2r+2 (32 bytes each = 128 in all).
// Target 0 holds rows 0:2 already (source rank 0 holds rows 0:4), target 1 rows 2:4 (source rank
// 1 also holds rows 0:4); targets 2 and 3 need rows 4:8, which source ranks 2, 3 do not hold.
// So local = 64 bytes, cross = lower bound = 64 bytes in 2 messages.
constexpr reshard::plan_cost rows_cost = reshard::static_plan_cost(rows2, rows4, c<4>);
static_assert(rows_cost.cross_bytes == 64);
static_assert(rows_cost.local_bytes == 64);
static_assert(rows_cost.lower_bound_bytes == 64);
static_assert(rows_cost.messages == 2);

// Planning with dynamic layouts inside one constant expression works too.
static_assert(reshard::plan(reshard::mindspore_layout({2, 4}, {0, 1}, {8, 4}),
                            reshard::full_layout({8, 4}))
                  .cost(2)
                  .cross_bytes == (8 * 4 - 2 * 2) * 2);  // rank 0 keeps its 2x2 block

// A static tuple entry with a dynamic shape entry: the slice of the dynamic dim is dynamic.
TEST(StaticLayout, MixedStaticAndDynamicEntriesStayStaticWherePossible) {
  const auto l = reshard::make_static_layout(list<2, 4>, list<1, -1>,
                                             hana::make_tuple(reshard::index_t{16}, c<4>));
  const auto s = reshard::static_slice_shape(l);
  EXPECT_EQ(hana::at_c<0>(s), 8);
  static_assert(std::remove_cvref_t<decltype(hana::at_c<1>(s))>::value == 4,
                "a static dim divided by a static slice count stays static");
}

TEST(StaticLayout, DynamicTwinAgrees) {
  EXPECT_EQ(reshard::to_layout(rows2), reshard::mindspore_layout({2, 4}, {1, -1}, {8, 4}));
  EXPECT_EQ(reshard::to_layout(tuple_map),
            reshard::mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8}));
  EXPECT_EQ(reshard::to_string(reshard::to_layout(tuple_map)), "dev[4,2,2] map[[2,1],0] shape[8,8]");
  const auto p = reshard::plan(reshard::to_layout(rows2), reshard::to_layout(rows4));
  EXPECT_EQ(p.cost(4), rows_cost);
}

TEST(StaticLayout, DynamicEntriesAreValidatedWhenConverted) {
  const auto l = reshard::make_static_layout(list<2, 4>, list<1, -1>,
                                             hana::make_tuple(reshard::index_t{7}, c<4>));
  EXPECT_THROW((void)reshard::to_layout(l), reshard::error);
}

}  // namespace
