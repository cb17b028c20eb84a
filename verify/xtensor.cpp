// xtensor adapter: split, convert and merge xt::xarray shards, and convert into adaptors.
#include <reshard/ext/xtensor.hpp>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include <numeric>

namespace {

using namespace reshard;

TEST(Xtensor, SeedScenario8To4) {
  // layer1 MatMul weight [784, 512]: strategy (1,2) on 8 ranks (repeat 2 prepended) ->
  // (2,1) on 4 ranks with optimizer sharding over the replica group.
  const xt::xarray<float> full = xt::arange<float>(784 * 512).reshape({784, 512});
  const auto A = mindspore_layout({2, 2, 1, 2}, {1, 0}, {784, 512});
  const auto B = mindspore_layout({2, 2, 1}, {1, 0}, {784, 512}, {.opt = {1, -1}});
  const auto shards_a = split(A, full);
  ASSERT_EQ(shards_a.size(), 8u);
  EXPECT_EQ(shards_a[1], xt::view(full, xt::all(), xt::range(256, 512)));
  const auto p = plan(A, B);
  for (unsigned threads : {1u, 2u}) {
    const auto shards_b = convert(p, shards_a, {.threads = threads});
    ASSERT_EQ(shards_b.size(), 4u);
    // rank 1 of B: dim-0 slice 1 (rows 392:784), optimizer part 0 of 2 -> rows 392:588
    EXPECT_EQ(shards_b[1], xt::view(full, xt::range(392, 588), xt::all()));
    EXPECT_EQ(shards_b, split(B, full));
    EXPECT_EQ(merge(B, shards_b), full);
  }
}

TEST(Xtensor, ConvertIntoAdaptorsOverCallerMemory) {
  const xt::xarray<std::int16_t> full = xt::arange<std::int16_t>(6 * 10).reshape({6, 10});
  const auto A = mindspore_layout({3}, {0, -1}, {6, 10});
  const auto B = mindspore_layout({2}, {-1, 0}, {6, 10});
  const auto src = split(A, full);
  std::vector<std::vector<std::int16_t>> memory(2, std::vector<std::int16_t>(30, -1));
  using adaptor = decltype(xt::adapt(memory[0], std::vector<std::size_t>{6, 5}));
  std::vector<adaptor> dst;
  for (auto& m : memory) dst.push_back(xt::adapt(m, std::vector<std::size_t>{6, 5}));
  convert_into(plan(A, B), src, dst);
  EXPECT_EQ(dst[0], xt::view(full, xt::all(), xt::range(0, 5)));
  EXPECT_EQ(dst[1], xt::view(full, xt::all(), xt::range(5, 10)));
  EXPECT_EQ(memory[1][0], 5);  // the caller's buffer was written in place
}

TEST(Xtensor, WrongShapeOrOrderIsAnError) {
  const auto A = mindspore_layout({2}, {0, -1}, {4, 4});
  const xt::xarray<float> wrong = xt::zeros<float>({4, 5});
  EXPECT_THROW(split(A, wrong), error);
  xt::xarray<float, xt::layout_type::column_major> colmajor = xt::zeros<float>({2, 4});
  std::vector<xt::xarray<float, xt::layout_type::column_major>> src{colmajor, colmajor};
  std::vector<xt::xarray<float>> dst{xt::zeros<float>({4, 4})};
  try {
    convert_into(plan(A, full_layout({4, 4})), src, dst);
    FAIL() << "a column-major shard was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("row-major"), std::string::npos) << e.what();
  }
}

RC_GTEST_PROP(Xtensor, SplitMergeRoundTripUneven, ()) {
  const auto rows = *rc::gen::inRange<index_t>(0, 13);
  const auto cols = *rc::gen::inRange<index_t>(1, 9);
  const auto p = *rc::gen::inRange<index_t>(1, 6);
  const auto mode = *rc::gen::element(split_mode::chunk, split_mode::balanced);
  layout l = mindspore_layout({p}, {0, -1}, {rows, cols}, {.mode = mode});
  xt::xarray<int> full = xt::arange<int>(static_cast<int>(rows * cols)).reshape(
      {static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)});
  RC_ASSERT(merge(l, split(l, full)) == full);
}

}  // namespace
