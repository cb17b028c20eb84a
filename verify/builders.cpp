// verify/builders.cpp: the layout builders (include/reshard/layout.hpp): mindspore_layout against
// the worked examples of the MindSpore reference (docs/formats.md#1-layouts), dtensor_layout and jax_layout
// against mindspore_layout, DTensor's nested chunking against torch's own formula, full_layout.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "laws/layout.hpp"
#include "laws/reference.hpp"
#include "reshard.hpp"

using namespace reshard;

namespace {
box rows_cols(index_t r0, index_t r1, index_t c0, index_t c1) {
  return box{{r0, c0}, {r1 - r0, c1 - c0}};
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// mindspore_layout: the worked examples, exactly.

TEST(MindSporeLayout, RowsSplitByTheFirstAxis) {
  // dev [2,4], map [1,-1], shape [8,4]: ranks 0-3 [0:4, 0:4], ranks 4-7 [4:8, 0:4]
  const layout l = mindspore_layout({2, 4}, {1, -1}, {8, 4});
  for (index_t r = 0; r < 8; ++r)
    EXPECT_EQ(box_of(l, r), r < 4 ? rows_cols(0, 4, 0, 4) : rows_cols(4, 8, 0, 4)) << r;
  EXPECT_EQ(replica_group(l, 2), (std::vector<index_t>{0, 1, 2, 3}));
  EXPECT_EQ(l.dim_axes, (std::vector<std::vector<int>>{{0}, {}}));  // right-counted 1 = left axis 0
}

TEST(MindSporeLayout, BothDimsSplit) {
  // dev [2,4], map [0,1], shape [8,4]: r0 [0:2,0:2], r1 [2:4,0:2], r2 [4:6,0:2], r3 [6:8,0:2],
  // r4 [0:2,2:4], r5 [2:4,2:4], r6 [4:6,2:4], r7 [6:8,2:4]
  const layout l = mindspore_layout({2, 4}, {0, 1}, {8, 4});
  for (index_t r = 0; r < 8; ++r)
    EXPECT_EQ(box_of(l, r), rows_cols(2 * (r % 4), 2 * (r % 4) + 2, 2 * (r / 4), 2 * (r / 4) + 2))
        << r;
  EXPECT_EQ(regions(l).size(), 8u);
}

TEST(MindSporeLayout, MiddleAxisRepeats) {
  // dev [2,2,2], map [2,0], shape [4,6]: r0,r2 [0:2,0:3]; r1,r3 [0:2,3:6]; r4,r6 [2:4,0:3];
  // r5,r7 [2:4,3:6]
  const layout l = mindspore_layout({2, 2, 2}, {2, 0}, {4, 6});
  const box want[8] = {rows_cols(0, 2, 0, 3), rows_cols(0, 2, 3, 6), rows_cols(0, 2, 0, 3),
                       rows_cols(0, 2, 3, 6), rows_cols(2, 4, 0, 3), rows_cols(2, 4, 3, 6),
                       rows_cols(2, 4, 0, 3), rows_cols(2, 4, 3, 6)};
  for (index_t r = 0; r < 8; ++r) EXPECT_EQ(box_of(l, r), want[r]) << r;
  EXPECT_EQ(replica_group(l, 0), (std::vector<index_t>{0, 2}));
  EXPECT_EQ(replica_group(l, 7), (std::vector<index_t>{5, 7}));
}

TEST(MindSporeLayout, TupleEntryLeftmostAxisOutermost) {
  // dev [4,2,2], map [[2,1],0], shape [8,8]: rank 0 rows 0:1 cols 0:4; rank 1 rows 0:1 cols 4:8;
  // rank 2 rows 1:2 cols 0:4; rank 4 rows 2:3 cols 0:4. In general rank r = 4 a0 + 2 a1 + a2
  // holds row 2 a0 + a1 = r / 2 and column block a2 = r % 2.
  const layout l = mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8});
  EXPECT_EQ(box_of(l, 0), rows_cols(0, 1, 0, 4));
  EXPECT_EQ(box_of(l, 1), rows_cols(0, 1, 4, 8));
  EXPECT_EQ(box_of(l, 2), rows_cols(1, 2, 0, 4));
  EXPECT_EQ(box_of(l, 4), rows_cols(2, 3, 0, 4));
  for (index_t r = 0; r < 16; ++r)
    EXPECT_EQ(box_of(l, r), rows_cols(r / 2, r / 2 + 1, 4 * (r % 2), 4 * (r % 2) + 4)) << r;
  EXPECT_EQ(to_string(l), "dev[4,2,2] map[[2,1],0] shape[8,8]");
  // the other tuple order makes axis 1 outermost: row = 4 a1 + a0
  const layout m = mindspore_layout({4, 2, 2}, {{1, 2}, 0}, {8, 8});
  for (index_t r = 0; r < 16; ++r) {
    const index_t a0 = r / 4, a1 = (r / 2) % 2;
    EXPECT_EQ(box_of(m, r).offset[0], 4 * a1 + a0) << r;
  }
}

TEST(MindSporeLayout, OptimizerShardingSize4) {
  // dev [4,2], map [-1,0], step 2, size 4, shape [8,4]: rank r holds rows 2((r/2)%4) .. +2,
  // cols 2(r%2) .. +2
  const layout l = mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 4}});
  for (index_t r = 0; r < 8; ++r) {
    const index_t row = 2 * ((r / 2) % 4), col = 2 * (r % 2);
    EXPECT_EQ(box_of(l, r), rows_cols(row, row + 2, col, col + 2)) << r;
  }
  EXPECT_EQ(to_string(l), "dev[4,2] map[-1,0] shape[8,4] opt[step=2,size=4]");
}

TEST(MindSporeLayout, OptimizerShardingSize2) {
  // same with size 2: ranks 0,1,4,5 hold rows 0..4, ranks 2,3,6,7 rows 4..8; cols by r%2
  const layout l = mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 2}});
  for (index_t r = 0; r < 8; ++r) {
    const index_t row = (r == 2 || r == 3 || r == 6 || r == 7) ? 4 : 0, col = 2 * (r % 2);
    EXPECT_EQ(box_of(l, r), rows_cols(row, row + 4, col, col + 2)) << r;
  }
  EXPECT_EQ(replica_group(l, 0), (std::vector<index_t>{0, 4}));
}

TEST(MindSporeLayout, OptimizerShardingWholeGroup) {
  // dev [8], map [-1,-1], step 1, size 8, shape [16,2]: rank r holds rows 2r .. 2r+2; size -1
  // (the whole replica group) is the same here
  for (const index_t size : {index_t{8}, index_t{-1}}) {
    const layout l = mindspore_layout({8}, {-1, -1}, {16, 2}, {.opt = {1, size}});
    for (index_t r = 0; r < 8; ++r) EXPECT_EQ(box_of(l, r), rows_cols(2 * r, 2 * r + 2, 0, 2)) << r;
    EXPECT_EQ(replica_group(l, 3), (std::vector<index_t>{3}));
  }
}

// With a single repeat axis, the part a rank holds is (rank / step) % size (MindSpore's
// formula), step being the rank stride of the repeat axis.
RC_GTEST_PROP(MindSporeLayout, OptimizerPartIsRankOverStepModSize, ()) {
  const index_t outer = *rc::gen::inRange<index_t>(1, 4), rep = *rc::gen::inRange<index_t>(2, 7),
                inner = *rc::gen::inRange<index_t>(1, 4);
  std::vector<index_t> sizes;
  for (index_t s = 2; s <= rep; ++s)
    if (rep % s == 0) sizes.push_back(s);
  const index_t size = *rc::gen::elementOf(sizes),
                rows = outer * size * *rc::gen::inRange<index_t>(1, 4);
  // dev [outer, rep, inner], map [2, 0]: dim 0 by the outer axis, dim 1 by the inner one
  const layout l =
      mindspore_layout({outer, rep, inner}, {2, 0}, {rows, inner}, {.opt = {inner, size}});
  const index_t slice = rows / outer, part = slice / size;
  for (index_t r = 0; r < num_ranks(l); ++r) {
    const index_t k = (r / inner) % size;
    RC_ASSERT(box_of(l, r).offset[0] == (r / (rep * inner)) * slice + k * part);
    RC_ASSERT(box_of(l, r).extent[0] == part);
  }
}

TEST(MindSporeLayout, PipelineStageOffsetsRanks) {
  // stage s of a 8-device stage: global ranks 8s .. 8s+7, holding what local ranks 0..7 hold
  const layout base = mindspore_layout({2, 4}, {0, 1}, {8, 4});
  const layout l = mindspore_layout({2, 4}, {0, 1}, {8, 4}, {.stage = 2});
  EXPECT_EQ(l.first_rank, 16);
  for (index_t r = 0; r < 8; ++r) EXPECT_EQ(box_of(l, 16 + r), box_of(base, r));
  EXPECT_EQ(to_string(l), "dev[2,4] map[0,1] shape[8,4] ranks[16..23]");
  EXPECT_THROW(box_of(l, 0), reshard::error);
  EXPECT_EQ(replica_group(mindspore_layout({2, 4}, {1, -1}, {8, 4}, {.stage = 1}), 9),
            (std::vector<index_t>{8, 9, 10, 11}));
}

TEST(MindSporeLayout, ParamSplitShapeGivesExplicitRows) {
  // MindSpore's manual uneven split of dim 0: slice k has param_split_shape[k] rows
  const layout l = mindspore_layout({4}, {0, -1}, {10, 2}, {.param_split_shape = {1, 2, 3, 4}});
  EXPECT_EQ(box_of(l, 0), rows_cols(0, 1, 0, 2));
  EXPECT_EQ(box_of(l, 1), rows_cols(1, 3, 0, 2));
  EXPECT_EQ(box_of(l, 2), rows_cols(3, 6, 0, 2));
  EXPECT_EQ(box_of(l, 3), rows_cols(6, 10, 0, 2));
  EXPECT_EQ(to_string(l), "dev[4] map[0,-1] shape[10,2] sizes0=[1,2,3,4]");
}

TEST(MindSporeLayout, UnevenModes) {
  // 10 rows on 4 ranks: chunk 3,3,3,1; balanced 3,3,2,2
  const layout c = mindspore_layout({4}, {0}, {10}, {.mode = split_mode::chunk});
  const layout b = mindspore_layout({4}, {0}, {10}, {.mode = split_mode::balanced});
  const index_t chunk[] = {3, 3, 3, 1}, balanced[] = {3, 3, 2, 2};
  for (index_t r = 0; r < 4; ++r) {
    EXPECT_EQ(slice_shape(c, r), index_list{chunk[r]});
    EXPECT_EQ(slice_shape(b, r), index_list{balanced[r]});
  }
}

TEST(FullLayout, OneRankHoldsEverything) {
  const layout l = full_layout({3, 5}, 7);
  EXPECT_EQ(num_ranks(l), 1);
  EXPECT_EQ(box_of(l, 7), (box{{0, 0}, {3, 5}}));
  layout m = mindspore_layout({1}, {-1, -1}, {3, 5});
  m.first_rank = 7;
  EXPECT_EQ(l, m);
  EXPECT_EQ(box_of(full_layout({}), 0), (box{{}, {}}));
}

// ---------------------------------------------------------------------------------------------
// The same device grid in three notations.

namespace {


std::vector<placement> placements_of(const layout& l) {
  std::vector<placement> p(l.dev_matrix.size(), replicate{});
  for (std::size_t d = 0; d < l.dim_axes.size(); ++d)
    for (int a : l.dim_axes[d]) p[static_cast<std::size_t>(a)] = shard{static_cast<index_t>(d)};
  return p;
}

}  // namespace

// A device grid described by MindSpore's right-counted map, a JAX mesh + partition spec and
// DTensor placements (+ shard_order) gives equal boxes for every rank; DTensor only where its
// nested chunking coincides with one flat split (divisible mode, or one axis per dim).
RC_GTEST_PROP(Builders, SameGridInThreeNotationsGivesEqualBoxes, ()) {
  verify::gen_options o;
  o.opt = o.explicit_sizes = o.offsets = false;
  const layout g = *verify::layouts(o);
  const layout ms = mindspore_layout(g.dev_matrix, reshard::mindspore_tensor_map(g), g.shape, {.mode = g.mode});
  RC_ASSERT(ms == g);

  named_mesh mesh;
  for (std::size_t a = 0; a < g.dev_matrix.size(); ++a)
    mesh.axis_names.push_back("ax" + std::to_string(a));
  mesh.axis_sizes = g.dev_matrix;
  partition_spec spec;
  for (const auto& ax : g.dim_axes) {
    spec.emplace_back();
    for (int a : ax) spec.back().push_back(mesh.axis_names[static_cast<std::size_t>(a)]);
  }
  while (!spec.empty() && spec.back().empty() && *rc::gen::arbitrary<bool>()) spec.pop_back();
  const index_t off = *rc::gen::inRange<index_t>(0, 40);
  const layout jx = jax_layout(mesh, spec, g.shape, g.mode, off);

  bool unsorted = false, nested = false;
  for (const auto& ax : g.dim_axes) {
    unsorted = unsorted || !std::is_sorted(ax.begin(), ax.end());
    nested = nested || ax.size() > 1;
  }
  dtensor_options dopt{.shard_order = {}, .mode = g.mode, .first_rank = off};
  if (unsorted || *rc::gen::arbitrary<bool>()) dopt.shard_order = g.dim_axes;
  const layout dt = dtensor_layout(g.dev_matrix, placements_of(g), g.shape, dopt);

  for (index_t r = 0; r < num_ranks(g); ++r) {
    RC_ASSERT(box_of(jx, off + r) == box_of(ms, r));
    if (!nested || g.mode == split_mode::divisible) RC_ASSERT(box_of(dt, off + r) == box_of(ms, r));
  }
  RC_LAW(laws::regions_partition(dt));
}

// DTensor with several mesh axes on one uneven dim: each axis chunks the previous axis's chunk,
// computed here the torch way (DTensor's _local_shard_size_and_offset, mesh axis by mesh axis,
// or in shard_order).
RC_GTEST_PROP(Builders, DtensorNestedChunkMatchesTorch, ()) {
  const std::size_t naxes = *rc::gen::inRange<std::size_t>(2, 4);
  index_list mesh;
  for (std::size_t a = 0; a < naxes; ++a) mesh.push_back(*rc::gen::inRange<index_t>(1, 5));
  const std::size_t nd = *rc::gen::inRange<std::size_t>(1, 4);
  index_list shape;
  for (std::size_t d = 0; d < nd; ++d) shape.push_back(*rc::gen::inRange<index_t>(0, 24));
  // at least two axes shard dim `d0`; the others replicate or shard any dim
  const std::size_t d0 = *rc::gen::inRange<std::size_t>(0, nd);
  const std::size_t a0 = *rc::gen::inRange<std::size_t>(0, naxes);
  const std::size_t a1 = (a0 + *rc::gen::inRange<std::size_t>(1, naxes)) % naxes;
  std::vector<placement> pl(naxes, replicate{});
  std::vector<std::vector<int>> axes(nd);
  for (std::size_t a = 0; a < naxes; ++a) {
    if (a == a0 || a == a1) {
      pl[a] = shard{static_cast<index_t>(d0)};
    } else if (*rc::gen::arbitrary<bool>()) {
      pl[a] = shard{static_cast<index_t>(*rc::gen::inRange<std::size_t>(0, nd))};
    }
    if (const auto* s = std::get_if<shard>(&pl[a]))
      axes[static_cast<std::size_t>(s->dim)].push_back(static_cast<int>(a));
  }
  dtensor_options o;
  if (*rc::gen::arbitrary<bool>()) {  // a random shard order
    for (auto& ax : axes)
      for (std::size_t k = ax.size(); k > 1; --k)
        std::swap(ax[k - 1], ax[*rc::gen::inRange<std::size_t>(0, k)]);
    o.shard_order = axes;
  }
  const layout l = dtensor_layout(mesh, pl, shape, o);
  for (index_t r = 0; r < num_ranks(l); ++r) {
    const index_list coord = laws::reference_coord(mesh, r);
    box want;
    for (std::size_t d = 0; d < nd; ++d) {
      index_list sizes, c;
      for (int a : axes[d]) {
        sizes.push_back(mesh[static_cast<std::size_t>(a)]);
        c.push_back(coord[static_cast<std::size_t>(a)]);
      }
      const auto [lo, hi] = laws::torch_nested_chunk(shape[d], sizes, c);
      want.offset.push_back(lo);
      want.extent.push_back(hi - lo);
    }
    RC_ASSERT(box_of(l, r) == want);
  }
}

TEST(DtensorLayout, NestedChunkExamples) {
  // mesh [2,2], (Shard(0), Shard(0)), 5 rows: chunk 5 -> 3, 2; then 3 -> 2, 1 and 2 -> 1, 1.
  // One flat chunk into 4 would give 2, 2, 1, 0 instead.
  const layout a = dtensor_layout({2, 2}, {shard{0}, shard{0}}, {5});
  const index_t lo[] = {0, 2, 3, 4}, len[] = {2, 1, 1, 1};
  for (index_t r = 0; r < 4; ++r) EXPECT_EQ(box_of(a, r), (box{{lo[r]}, {len[r]}})) << r;
  EXPECT_EQ(to_string(a), "dev[2,2] map[[1,0]] shape[5] split=chunk sizes0=[2,1,1,1]");
  // mesh [2,3], 7 rows: chunk 7 -> 4, 3; 4 -> 2, 2, 0 (empty, at the end); 3 -> 1, 1, 1
  const layout b = dtensor_layout({2, 3}, {shard{0}, shard{0}}, {7});
  const box bw[] = {{{0}, {2}}, {{2}, {2}}, {{4}, {0}}, {{4}, {1}}, {{5}, {1}}, {{6}, {1}}};
  for (index_t r = 0; r < 6; ++r) EXPECT_EQ(box_of(b, r), bw[r]) << r;
  // shard_order {1, 0}: the size-3 axis first: 7 -> 3, 3, 1; then each in 2:
  // [0,2) [2,3) | [3,5) [5,6) | [6,7) [7,7); rank 3 c0 + c1 takes piece (c1, c0)
  const layout c = dtensor_layout({2, 3}, {shard{0}, shard{0}}, {7}, {.shard_order = {{1, 0}}});
  const box cw[] = {{{0}, {2}}, {{3}, {2}}, {{6}, {1}}, {{2}, {1}}, {{5}, {1}}, {{7}, {0}}};
  for (index_t r = 0; r < 6; ++r) EXPECT_EQ(box_of(c, r), cw[r]) << r;
  // evenly divisible: nested == flat, no explicit sizes recorded
  EXPECT_TRUE(dtensor_layout({2, 2}, {shard{0}, shard{0}}, {8}).split_sizes.empty());
}

TEST(DtensorLayout, ReplicateAndShardAcrossDims) {
  // mesh [2,3]: Shard(1) on axis 0, Replicate on axis 1 = MindSpore dev [2,3] map [-1,1]
  const layout d =
      dtensor_layout({2, 3}, {shard{1}, replicate{}}, {4, 6}, {.mode = split_mode::divisible});
  EXPECT_EQ(d, mindspore_layout({2, 3}, {-1, 1}, {4, 6}));
  EXPECT_EQ(replica_group(d, 4), (std::vector<index_t>{3, 4, 5}));
}

TEST(JaxLayout, TrailingDimsUnsplitAndMajorAxisFirst) {
  const named_mesh mesh{{"data", "model"}, {2, 4}};
  // P('model') on a 3-d tensor: dim 0 by 'model', dims 1, 2 unsplit
  const layout a = jax_layout(mesh, {{"model"}}, {8, 3, 5});
  EXPECT_EQ(a, mindspore_layout({2, 4}, {0, -1, -1}, {8, 3, 5}));
  // P(('data', 'model'), None): 'data' major
  const layout b = jax_layout(mesh, {{"data", "model"}, {}}, {8, 2});
  EXPECT_EQ(b, mindspore_layout({2, 4}, {{1, 0}, -1}, {8, 2}));
  EXPECT_EQ(box_of(b, 5), (box{{5, 0}, {1, 2}}));
  EXPECT_EQ(box_of(jax_layout(mesh, {}, {}, split_mode::divisible, 3), 10), (box{{}, {}}));
}
