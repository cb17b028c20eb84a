// verify/convert.cpp: laws of in-memory conversion (include/reshard/convert.hpp): convert agrees
// with split, round trips, merge inverts split, null buffers, threads, the typed overload; the
// MatMul-weight seed scenario.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "laws/data.hpp"
#include "laws/plan.hpp"
#include "reshard.hpp"

using namespace reshard;
using laws::bytes;
using laws::shard_set;
using verify::layout_pair;

namespace {
std::string ctx(const layout_pair& lp, std::size_t elem) {
  return "(" + std::to_string(elem) + "-byte elements) in plan " + to_string(lp.src) + " -> " +
         to_string(lp.dst);
}
}  // namespace

// split() agrees with slicing the tensor element by element at box_of.
RC_GTEST_PROP(Convert, SplitMatchesNaiveSlicing, (const layout& l)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(l.shape, elem, 7);
  RC_LAW(laws::same_shards(l, laws::split_shards(l, x, elem), laws::naive_split(l, x, elem), elem,
                           "split vs slicing, " + to_string(l)));
}

// @post convert(plan(A, B), split(x, A)) == split(x, B), with 1 and 2 threads.
RC_GTEST_PROP(Convert, ConvertOfSplitIsSplit, (const layout_pair& lp)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(lp.src.shape, elem, 1);
  const transfer_plan p = plan(lp.src, lp.dst);
  const shard_set a = laws::split_shards(lp.src, x, elem);
  const shard_set want = laws::naive_split(lp.dst, x, elem);
  RC_LAW(laws::same_shards(lp.dst, laws::convert_shards(p, a, elem, 1), want, elem, ctx(lp, elem)));
  RC_LAW(laws::same_shards(lp.dst, laws::convert_shards(p, a, elem, 2), want, elem,
                           "with 2 threads " + ctx(lp, elem)));
}

// Round trip: A -> B -> A gives back the original shards.
RC_GTEST_PROP(Convert, RoundTripRestoresShards, (const layout_pair& lp)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(lp.src.shape, elem, 2);
  const shard_set a = laws::split_shards(lp.src, x, elem);
  const shard_set b = laws::convert_shards(plan(lp.src, lp.dst), a, elem);
  const shard_set back = laws::convert_shards(plan(lp.dst, lp.src), b, elem);
  RC_LAW(laws::same_shards(lp.src, back, a, elem, "after the round trip " + ctx(lp, elem)));
}

// @post merge(A, split(x, A)) == x, reading one replica per region (the others may be null).
RC_GTEST_PROP(Convert, MergeInvertsSplit, (const layout& l)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(l.shape, elem, 3);
  const shard_set a = laws::split_shards(l, x, elem);
  RC_LAW(laws::same_tensor(laws::merge_shards(l, a.cptrs(), elem), x, elem,
                           "merging all shards of " + to_string(l)));
  // keep one replica of each region, chosen at random; null the rest
  std::vector<const std::byte*> one(a.buf.size(), nullptr);
  for (const region& g : regions(l)) {
    const index_t keep = g.owners[*rc::gen::inRange<std::size_t>(0, g.owners.size())];
    one[static_cast<std::size_t>(keep - l.first_rank)] =
        a.buf[static_cast<std::size_t>(keep - l.first_rank)].data();
  }
  RC_LAW(laws::same_tensor(laws::merge_shards(l, one, elem, 2), x, elem,
                           "merging one replica per region of " + to_string(l)));
}

// "A source buffer may be null when the plan does not read from that rank."
RC_GTEST_PROP(Convert, UnreadSourceBuffersMayBeNull, (const layout_pair& lp)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(lp.src.shape, elem, 4);
  const transfer_plan p = plan(lp.src, lp.dst);
  shard_set a = laws::split_shards(lp.src, x, elem);
  std::set<index_t> read;
  for (const transfer& t : p.transfers) read.insert(t.src);
  std::vector<const std::byte*> sp = a.cptrs();
  for (std::size_t r = 0; r < sp.size(); ++r)
    if (!read.count(lp.src.first_rank + static_cast<index_t>(r))) sp[r] = nullptr;
  shard_set out = laws::blank_shards(lp.dst, elem);
  auto dp = out.ptrs();
  convert(p, std::span<const std::byte* const>(sp), std::span<std::byte* const>(dp), elem);
  RC_LAW(laws::same_shards(lp.dst, out, laws::naive_split(lp.dst, x, elem), elem, ctx(lp, elem)));
}

// Streaming (non-temporal) stores, forced on with streaming_bytes = 1, copy the same bytes: runs
// of any length and alignment, grouped jobs, 1 and 2 threads.
RC_GTEST_PROP(Convert, StreamingStoresGiveTheSameShards, (const layout_pair& lp)) {
  const std::size_t elem = *verify::element_sizes();
  const bytes x = laws::distinct_tensor(lp.src.shape, elem, 6);
  const transfer_plan p = plan(lp.src, lp.dst);
  const shard_set a = laws::split_shards(lp.src, x, elem);
  const shard_set want = laws::naive_split(lp.dst, x, elem);
  for (unsigned threads : {1u, 2u})
    RC_LAW(laws::same_shards(lp.dst,
                             laws::convert_shards(p, a, elem, {.threads = threads, .streaming_bytes = 1}),
                             want, elem,
                             "streaming with " + std::to_string(threads) + " threads " + ctx(lp, elem)));
}

// The typed overload (spans of T, sizes checked) does what the byte overload does.
RC_GTEST_PROP(Convert, TypedOverloadMatchesBytes, (const layout_pair& lp)) {
  const bytes x = laws::distinct_tensor(lp.src.shape, sizeof(std::uint16_t), 5);
  const transfer_plan p = plan(lp.src, lp.dst);
  const shard_set a = laws::split_shards(lp.src, x, 2);
  std::vector<std::vector<std::uint16_t>> in, out;
  for (const bytes& b : a.buf) {
    in.emplace_back(b.size() / 2);
    if (!b.empty()) std::memcpy(in.back().data(), b.data(), b.size());
  }
  for (const box& b : laws::boxes(lp.dst)) out.emplace_back(static_cast<std::size_t>(volume(b)));
  std::vector<std::span<const std::uint16_t>> sin(in.begin(), in.end());
  std::vector<std::span<std::uint16_t>> sout(out.begin(), out.end());
  convert<std::uint16_t>(p, sin, sout);
  const shard_set want = laws::naive_split(lp.dst, x, 2);
  for (std::size_t r = 0; r < out.size(); ++r) {
    RC_ASSERT(out[r].size() * 2 == want.buf[r].size());
    if (!out[r].empty())
      RC_ASSERT(std::memcmp(out[r].data(), want.buf[r].data(), want.buf[r].size()) == 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Threads: run_jobs splits work only above 1 MiB, so the properties above rarely start a
// thread. These cases are 1-2 MiB, drawn from the layout generators with fixed seeds.
TEST(Convert, LargeTensorsAgreeAcrossThreadCounts) {
  verify::gen_options o;
  o.max_volume = index_t{1} << 18;
  o.max_ranks = 16;
  o.zero_dims = false;
  const auto gen = verify::layout_pairs(o);
  int threaded = 0;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const layout_pair lp = gen(rc::Random(seed), 100).value();
    const std::size_t elem = 8;
    const bytes x = laws::distinct_tensor(lp.src.shape, elem, seed);
    const transfer_plan p = plan(lp.src, lp.dst);
    const shard_set a = laws::split_shards(lp.src, x, elem, 3);
    const shard_set want = laws::naive_split(lp.dst, x, elem);
    EXPECT_LAW(laws::same_shards(lp.src, a, laws::naive_split(lp.src, x, elem), elem,
                                 "split with 3 threads of " + to_string(lp.src)));
    for (unsigned threads : {1u, 2u, 3u, 0u})
      EXPECT_LAW(
          laws::same_shards(lp.dst, laws::convert_shards(p, a, elem, threads), want, elem,
                            "with " + std::to_string(threads) + " threads " + ctx(lp, elem)));
    for (unsigned threads : {1u, 2u})  // streaming stores forced on
      EXPECT_LAW(laws::same_shards(
          lp.dst, laws::convert_shards(p, a, elem, {.threads = threads, .streaming_bytes = 1}), want,
          elem, "streaming with " + std::to_string(threads) + " threads " + ctx(lp, elem)));
    EXPECT_LAW(laws::same_tensor(
        laws::merge_shards(lp.dst, laws::convert_shards(p, a, elem, 2).cptrs(), elem, 2), x, elem,
        "merge with 2 threads " + ctx(lp, elem)));
    index_t moved = 0;
    for (const transfer& t : p.transfers) moved += volume(t.where);
    threaded += moved * static_cast<index_t>(elem) >= (index_t{1} << 20) ? 1 : 0;
  }
  EXPECT_GE(threaded, 6) << "too few cases reach the threaded path";
}

// The copy engine's shapes, each 4-8 MiB so that threads run: 16 targets taking column blocks of
// the same source rows (one group of 16 strided jobs), two targets walking a 3-d source alike
// (a group with two outer dims), and single runs of 4 MiB cut into pieces across threads.
TEST(Convert, GroupedJobsAndSplitRunsAgreeWithSlicing) {
  const std::size_t elem = 4;
  const std::vector<std::pair<layout, layout>> cases = {
      {full_layout({256, 4096}), mindspore_layout({16}, {-1, 0}, {256, 4096})},
      {mindspore_layout({2}, {-1, -1, 0}, {8, 64, 2048}),
       mindspore_layout({2, 4}, {-1, 1, 0}, {8, 64, 2048})},
      {full_layout({2048, 1024}), mindspore_layout({2}, {0, -1}, {2048, 1024})},
      {mindspore_layout({4}, {0, -1}, {2048, 1024}), mindspore_layout({3}, {-1, 0}, {2048, 1024},
                                                                      {.mode = split_mode::balanced})}};
  for (const auto& [a, b] : cases) {
    const transfer_plan p = plan(a, b);
    const bytes x = laws::distinct_tensor(a.shape, elem, 13);
    const shard_set in = laws::split_shards(a, x, elem);
    const shard_set want = laws::naive_split(b, x, elem);
    for (unsigned threads : {1u, 2u, 3u})
      for (std::size_t streaming : {std::size_t{0}, std::size_t{1}})
        EXPECT_LAW(laws::same_shards(
            b, laws::convert_shards(p, in, elem, {.threads = threads, .streaming_bytes = streaming}),
            want, elem,
            to_string(a) + " -> " + to_string(b) + " with " + std::to_string(threads) +
                " threads, streaming " + std::to_string(streaming)));
  }
}

// ---------------------------------------------------------------------------------------------
// The seed scenario: a MatMul weight [784, 512] with strategy (1, 2) on 8 ranks, data parallel
// 2 x 2 repeated: dev [2,2,1,2] map [1,0] (dim 0 by the size-1 axis, dim 1 by the last axis,
// axes 0 and 1 repeat). Target: 4 ranks, dev [2,2,1] map [1,0] (dim 0 by axis 1, dim 1 by the
// size-1 axis, axis 0 repeats) with optimizer sharding over the 2 replicas (step 2, size 2):
// each rank holds 392 / 2 = 196 rows x 512 cols. 1.6 MB of float32, so 2 threads really run.
TEST(Convert, SeedScenarioMatMulWeight8To4WithOptimizerSharding) {
  const layout src = mindspore_layout({2, 2, 1, 2}, {1, 0}, {784, 512});
  const layout dst = mindspore_layout({2, 2, 1}, {1, 0}, {784, 512}, {.opt = {2, 2}});
  for (index_t r = 0; r < 8; ++r)
    EXPECT_EQ(box_of(src, r), (box{{0, 256 * (r % 2)}, {784, 256}})) << r;
  // rank = 2 * a0 + a1: a1 picks the 392-row half, a0 (the replica position) the 196-row part
  EXPECT_EQ(box_of(dst, 0), (box{{0, 0}, {196, 512}}));
  EXPECT_EQ(box_of(dst, 1), (box{{392, 0}, {196, 512}}));
  EXPECT_EQ(box_of(dst, 2), (box{{196, 0}, {196, 512}}));
  EXPECT_EQ(box_of(dst, 3), (box{{588, 0}, {196, 512}}));
  for (const auto& [a, b] : {std::pair{src, dst}, std::pair{dst, src}}) {
    const transfer_plan p = plan(a, b);
    EXPECT_LAW(laws::exact_cover(p));
    EXPECT_LAW(laws::cost_is_consistent(p, 4));
    const bytes x = laws::distinct_tensor(a.shape, 4, 11);
    const shard_set in = laws::split_shards(a, x, 4);
    const shard_set want = laws::split_shards(b, x, 4);
    EXPECT_LAW(
        laws::same_shards(b, want, laws::naive_split(b, x, 4), 4, "split of " + to_string(b)));
    for (unsigned threads : {1u, 2u})
      EXPECT_LAW(laws::same_shards(b, laws::convert_shards(p, in, 4, threads), want, 4,
                                   to_string(a) + " -> " + to_string(b)));
  }
  // 8 -> 4: every target keeps what it holds as the same rank id (rows 0:196 of cols 0:256 on
  // rank 0, ...) and fetches the rest: 4 targets x 196 x 512 - kept.
  const plan_cost c = plan(src, dst).cost(4);
  EXPECT_EQ(c.cross_bytes + c.local_bytes, 784 * 512 * 4);
  EXPECT_EQ(c.local_bytes, 4 * 196 * 256 * 4);
  // the source also with optimizer sharding over its 4 replicas: 196 rows each
  const layout src_opt = mindspore_layout({2, 2, 1, 2}, {1, 0}, {784, 512}, {.opt = {2, 4}});
  EXPECT_EQ(slice_shape(src_opt, 5), (index_list{196, 256}));
  const bytes x = laws::distinct_tensor(src.shape, 4, 12);
  EXPECT_LAW(laws::same_shards(
      dst, laws::convert_shards(plan(src_opt, dst), laws::split_shards(src_opt, x, 4), 4, 2),
      laws::naive_split(dst, x, 4), 4, "from the opt-sharded source"));
}
