// verify/placement.cpp: operators placed on workers (include/reshard/placement.hpp): a whole
// worker is full_layout at its rank; an edge is the plan between its ends' layouts, skipped when
// nothing crosses workers; backward reverses the edges; sharded placements; bad graphs.
#include "reshard/placement.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "gen/layouts.hpp"
#include "reshard.hpp"
#include "testing.hpp"

using namespace reshard;

namespace {

// "a3", "t0": built by appending (GCC 12's -Wrestrict misfires on "a" + std::to_string(i)).
std::string name(const char* prefix, std::size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

// A chain a0 -> a1 -> ... with the given workers, one tensor per edge.
op_graph chain(const std::vector<index_t>& workers, const std::vector<index_list>& shapes,
               index_t elem = 4) {
  op_graph g;
  for (std::size_t i = 0; i < workers.size(); ++i)
    g.ops.push_back({name("a", i), on_worker(workers[i])});
  for (std::size_t i = 0; i + 1 < workers.size(); ++i)
    g.edges.push_back({name("a", i), name("a", i + 1), name("t", i), shapes[i], elem});
  return g;
}

}  // namespace

// @post layout_for(on_worker(k), s) == full_layout(s, k)
RC_GTEST_PROP(Placement, AWorkerHoldsTheWholeTensor, ()) {
  const index_list shape = *verify::shapes();
  const auto k = *rc::gen::inRange<index_t>(0, 1000);
  RC_ASSERT(layout_for(on_worker(k), shape) == full_layout(shape, k));
}

// A chain on random workers: one whole-tensor transfer per edge whose ends differ, none for the
// others; backward has the same edges reversed, in reverse order.
RC_GTEST_PROP(Placement, CrossWorkerEdgesAreWholeTensorTransfers, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(2, 8);
  const auto workers = *rc::gen::container<std::vector<index_t>>(n, rc::gen::inRange<index_t>(0, 4));
  std::vector<index_list> shapes;
  for (std::size_t i = 0; i + 1 < n; ++i) shapes.push_back(*verify::shapes({.zero_dims = false}));
  const auto elem = static_cast<index_t>(*verify::element_sizes());
  const op_graph g = chain(workers, shapes, elem);
  const auto fwd = forward_plans(g), bwd = backward_plans(g);
  std::size_t k = 0;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (workers[i] == workers[i + 1] || volume(shapes[i]) == 0) continue;
    RC_ASSERT(k < fwd.size());
    const edge_plan& e = fwd[k];
    RC_ASSERT(e.tensor == name("t", i));
    RC_ASSERT(e.dir == direction::forward);
    RC_ASSERT(e.plan == plan(full_layout(shapes[i], workers[i]), full_layout(shapes[i], workers[i + 1])));
    RC_ASSERT(e.plan.transfers.size() == 1u);
    RC_ASSERT(e.plan.transfers[0].src == workers[i]);
    RC_ASSERT(e.plan.transfers[0].dst == workers[i + 1]);
    RC_ASSERT(e.bytes == volume(shapes[i]) * elem);
    const edge_plan& b = bwd[bwd.size() - 1 - k];
    RC_ASSERT(b.dir == direction::backward);
    RC_ASSERT(b.from == e.to);
    RC_ASSERT(b.to == e.from);
    RC_ASSERT(b.plan == plan(full_layout(shapes[i], workers[i + 1]), full_layout(shapes[i], workers[i])));
    ++k;
  }
  RC_ASSERT(fwd.size() == k);
  RC_ASSERT(bwd.size() == k);
  RC_ASSERT(total_bytes(fwd) == total_bytes(bwd));
}

// A sharded operator: the edge is plan() between the two placements' layouts, and only the
// pieces a consumer lacks cross.
TEST(Placement, ShardedOperatorsMoveOnlyMissingPieces) {
  op_graph g;
  g.ops = {{"embed", on_worker(1)},
           {"mlp", on_mesh({2}, {shard{0}}, 0)},            // batch split over workers 0, 1
           {"head", on_mesh({2, 2}, {shard{0}, shard{1}}, 4)}};  // workers 4..7
  g.edges = {{"embed", "mlp", "h", {8, 6}, 2}, {"mlp", "head", "y", {8, 6}, 2}};
  const auto fwd = forward_plans(g);
  ASSERT_EQ(fwd.size(), 2u);
  EXPECT_EQ(fwd[0].plan, plan(full_layout({8, 6}, 1), dtensor_layout({2}, {shard{0}}, {8, 6})));
  // worker 1 keeps rows 4:8 and sends rows 0:4 to worker 0: 4 * 6 * 2 bytes
  EXPECT_EQ(fwd[0].bytes, 48);
  ASSERT_EQ(fwd[0].plan.transfers.size(), 2u);
  EXPECT_EQ(fwd[0].plan.transfers[0], (transfer{1, 0, {{0, 0}, {4, 6}}}));
  EXPECT_EQ(fwd[0].plan.transfers[1], (transfer{1, 1, {{4, 0}, {4, 6}}}));
  // 2x2 mesh at rank 4: all 96 bytes cross, in 4 pieces
  EXPECT_EQ(fwd[1].bytes, 96);
  EXPECT_EQ(fwd[1].plan.dst.first_rank, 4);
  EXPECT_EQ(fwd[1].plan.transfers.size(), 4u);
  EXPECT_EQ(to_string(fwd[0]), "forward h: embed -> mlp [8,6], 48 bytes: 1->0 [0:4,0:6]");
}

TEST(Placement, SameWorkerEdgesAreLocal) {
  const op_graph g = chain({2, 2, 2}, {{4, 4}, {4}});
  EXPECT_TRUE(forward_plans(g).empty());
  EXPECT_TRUE(backward_plans(g).empty());
  // the same mesh on both ends: all local too
  op_graph m;
  m.ops = {{"a", on_mesh({4}, {shard{1}}, 8)}, {"b", on_mesh({4}, {shard{1}}, 8)}};
  m.edges = {{"a", "b", "t", {3, 8}, 4}};
  EXPECT_TRUE(forward_plans(m).empty());
}

TEST(Placement, BadGraphsAreReported) {
  const auto message = [](const op_graph& g) {
    return reshard_test::error_of([&] { (void)forward_plans(g); });
  };
  op_graph g = chain({0, 1}, {{4}});
  g.edges[0].consumer = "nope";
  EXPECT_EQ(message(g), "placement: edge 't0' names consumer 'nope', which the graph does not have");
  g = chain({0, 1}, {{4}});
  g.ops[1].name = "a0";
  EXPECT_EQ(message(g), "placement: two operators are named 'a0'");
  g = chain({0, 1}, {{4}}, 0);
  EXPECT_EQ(message(g), "placement: edge 't0' has element size 0");
  g = chain({0, 1}, {{4}});
  g.ops[1].where = on_mesh({2}, {shard{1}});
  EXPECT_EQ(message(g), "placement: operator 'a1' shards dim 1 but its tensor 't0' has shape [4]");
  g.ops[1].where = on_mesh({2, 2}, {shard{0}});
  EXPECT_EQ(message(g), "placement: operator 'a1' has 1 placements for a mesh of 2 axes [2,2]");
  g.ops[1].where = on_worker(-1);
  EXPECT_THROW((void)forward_plans(g), error);  // full_layout rejects the rank
}

// Usable in constant expressions (GCC; clang 14 with libstdc++ 12 cannot constant-evaluate the
// std::string names).
#if defined(__GNUC__) && !defined(__clang__)
static_assert([] {
  op_graph g;
  g.ops = {{"a", on_worker(3)}, {"b", on_worker(0)}};
  g.edges = {{"a", "b", "x", {32, 6, 28, 28}, 4}};
  const auto f = forward_plans(g);
  return f.size() == 1 && f[0].bytes == 602112 && f[0].plan.transfers[0].src == 3;
}());
#endif
