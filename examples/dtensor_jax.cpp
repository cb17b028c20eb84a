// examples/dtensor_jax.cpp: one layout, three spellings. MindSpore (device matrix + tensor map
// counted from the right), PyTorch DTensor (mesh + one placement per mesh axis) and JAX (named
// mesh + partition spec) describe the same thing; reshard turns each into the same `layout`.
#include <cstdio>
#include <string>
#include <vector>

#include "reshard.hpp"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("   %-57s %s\n", what, ok ? "yes" : "NO");
  if (!ok) ++failures;
}

// Every rank holds the same box under both layouts.
bool same_boxes(const reshard::layout& a, const reshard::layout& b) {
  if (reshard::num_ranks(a) != reshard::num_ranks(b)) return false;
  for (reshard::index_t r = 0; r < reshard::num_ranks(a); ++r)
    if (reshard::box_of(a, r) != reshard::box_of(b, r)) return false;
  return true;
}

}  // namespace

int main() {
  using namespace reshard;

  // 1. A [8, 4] tensor on 2 x 4 devices, rows split over the outer mesh axis, replicated over
  //    the inner one.
  //      MindSpore: dev_matrix [2,4], tensor_map [1,-1]  (axis 1 from the right = the size-2 axis)
  //      DTensor:   mesh (2,4), placements [Shard(0), Replicate()]
  //      JAX:       Mesh(('dp','tp'), (2,4)), PartitionSpec('dp', None)
  const layout ms1 = mindspore_layout({2, 4}, {1, -1}, {8, 4});
  const layout dt1 = dtensor_layout({2, 4}, {shard{0}, replicate{}}, {8, 4},
                                    {.mode = split_mode::divisible});
  const layout jx1 = jax_layout({{"dp", "tp"}, {2, 4}}, {{"dp"}, {}}, {8, 4});
  std::printf("1. rows over the outer mesh axis, replicated over the inner one\n");
  std::printf("   MindSpore %s\n   DTensor   %s\n   JAX       %s\n", to_string(ms1).c_str(),
              to_string(dt1).c_str(), to_string(jx1).c_str());
  check(ms1 == dt1 && dt1 == jx1, "the three layouts are equal");
  check(box_of(ms1, 5) == box{{4, 0}, {4, 4}}, "rank 5 holds rows 4:8, all columns");

  // 2. Two mesh axes on one dim (MindSpore's tuple entry): a [8, 8] tensor on 4 x 2 x 2 devices,
  //    rows split by the first two axes (the first outermost), columns by the last.
  //      MindSpore: dev_matrix [4,2,2], tensor_map [[2,1],0]
  //      DTensor:   mesh (4,2,2), placements [Shard(0), Shard(0), Shard(1)]
  //      JAX:       Mesh(('a','b','c'), (4,2,2)), PartitionSpec(('a','b'), 'c')
  const layout ms2 = mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8});
  const layout dt2 = dtensor_layout({4, 2, 2}, {shard{0}, shard{0}, shard{1}}, {8, 8},
                                    {.mode = split_mode::divisible});
  const layout jx2 = jax_layout({{"a", "b", "c"}, {4, 2, 2}}, {{"a", "b"}, {"c"}}, {8, 8});
  std::printf("\n2. two mesh axes on the rows (a tuple entry)\n");
  std::printf("   MindSpore %s\n   DTensor   %s\n   JAX       %s\n", to_string(ms2).c_str(),
              to_string(dt2).c_str(), to_string(jx2).c_str());
  check(ms2 == dt2 && dt2 == jx2, "the three layouts are equal");
  check(box_of(ms2, 4) == box{{2, 0}, {1, 4}}, "rank 4 holds row 2:3, columns 0:4");

  // 3. DTensor pads uneven dims like torch.chunk; MindSpore requires even splits. With a shape
  //    that divides evenly the two conventions give the same boxes, and a plan between them
  //    moves nothing, although the layouts differ as values (their split modes differ).
  const layout dt3 = dtensor_layout({2, 4}, {shard{0}, replicate{}}, {8, 4});  // chunk
  std::printf("\n3. DTensor's default split mode (chunk) on an even shape\n");
  std::printf("   DTensor   %s\n", to_string(dt3).c_str());
  check(dt3 != ms1 && same_boxes(dt3, ms1), "differs from MindSpore's, same boxes");
  check(plan(ms1, dt3).cost().cross_bytes == 0, "a plan between them moves no data");

  if (failures) return 1;
  std::printf("\nverified\n");
  return 0;
}
