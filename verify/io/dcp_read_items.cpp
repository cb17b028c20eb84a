// verify/io/dcp_read_items.cpp: laws of check_dcp_read_items (include/reshard/io/dcp_read_items.hpp)
// on DCP-like chunk layouts: the read items made from reshard's own plan between two random
// layouts (the saved chunks: the source's distinct boxes, each written by its first owner; the
// target chunks: each target rank's box) are clean, and every single mutation of one item is
// caught. The committed examples torch made are checked by verify/cli/check_plan_dcp.sh.
#include <reshard/io/dcp_read_items.hpp>
#include <reshard/plan.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "layouts.hpp"  // verify/gen/

using namespace reshard;
using namespace reshard::io;
using verify::layout_pair;

namespace {

// The items DCP would read to go from `src` (as saved) to `dst`, made from reshard's plan.
dcp_read_items items_of(const layout& src, const layout& dst) {
  dcp_tensor_items t;
  t.fqn = "w";
  t.size = src.shape;
  t.element_bytes = 2;
  for (index_t r = src.first_rank; r < src.first_rank + num_ranks(src); ++r) {
    const box b = box_of(src, r);
    if (volume(b) == 0) continue;
    if (std::none_of(t.saved.begin(), t.saved.end(), [&](const dcp_held_chunk& c) { return c.offsets == b.offset; }))
      t.saved.push_back({r, b.offset, b.extent});  // a replica is saved once, by its first owner
  }
  for (index_t r = dst.first_rank; r < dst.first_rank + num_ranks(dst); ++r) {
    const box b = box_of(dst, r);
    if (volume(b) > 0) t.targets.push_back({r, b.offset, b.extent});
  }
  std::vector<std::size_t> per_rank(static_cast<std::size_t>(dst.first_rank + num_ranks(dst)), 0);
  for (const transfer& x : plan(src, dst).transfers) {
    if (volume(x.where) == 0) continue;
    const box s = box_of(src, x.src), d = box_of(dst, x.dst);
    dcp_read_item it{x.dst, per_rank[static_cast<std::size_t>(x.dst)]++, d.offset, x.where.offset, s.offset,
                     x.where.offset, x.where.extent};
    for (std::size_t i = 0; i < x.where.offset.size(); ++i) {
      it.dest_offsets[i] -= d.offset[i];
      it.storage_offsets[i] -= s.offset[i];
    }
    t.items.push_back(std::move(it));
  }
  dcp_read_items out;
  out.origin = "generated";
  out.tensors.push_back(std::move(t));
  return out;
}

}  // namespace

RC_GTEST_PROP(DcpReadItems, ReadItemsOfReshardsPlanAreClean, (const layout_pair& lp)) {
  const auto in = items_of(lp.src, lp.dst);
  const auto r = check_dcp_read_items(in);
  RC_ASSERT(r.ok());
  RC_ASSERT(r.problem_count() == 0u);
  if (in.tensors[0].targets.empty()) {  // an empty tensor: nothing asked for, nothing checked
    RC_ASSERT(r.tensors.empty());
    return;
  }
  const auto& t = r.tensors.at(0);
  RC_ASSERT(t.read_bytes == t.target_bytes);
  RC_ASSERT(t.items <= t.meeting_pairs || lp.src.shape.empty());
}

RC_GTEST_PROP(DcpReadItems, EverySingleMutationIsCaught, (const layout_pair& lp)) {
  auto in = items_of(lp.src, lp.dst);
  auto& t = in.tensors[0];
  RC_PRE(!t.items.empty());
  const std::size_t nd = t.size.size();
  const std::size_t k = *rc::gen::inRange<std::size_t>(0, t.items.size());
  dcp_read_item& x = t.items[k];
  const int kind = *rc::gen::inRange(0, nd == 0 ? 3 : 8);
  const auto d = nd == 0 ? 0 : *rc::gen::inRange<std::size_t>(0, nd);
  switch (kind) {
    case 0:  // dropped
      t.items.erase(t.items.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    case 1:  // duplicated
      t.items.push_back(x);
      break;
    case 2: {  // another saved chunk (or one that does not exist)
      std::vector<index_list> others;
      for (const auto& c : t.saved)
        if (c.offsets != x.storage_index) others.push_back(c.offsets);
      if (others.empty() || nd == 0) {
        if (nd == 0) {  // a 0-d tensor has one chunk: drop the item instead
          t.items.erase(t.items.begin() + static_cast<std::ptrdiff_t>(k));
          break;
        }
        ++x.storage_index[d];
      } else {
        x.storage_index = others[*rc::gen::inRange<std::size_t>(0, others.size())];
      }
      break;
    }
    case 3:  // dest_offsets shifted by one
      x.dest_offsets[d] += 1;
      break;
    case 4:  // storage_offsets shifted by one
      x.storage_offsets[d] += 1;
      break;
    case 5:  // grown by one
      ++x.lengths[d];
      break;
    case 6:  // shrunk by one
      --x.lengths[d];
      break;
    case 7:  // dest_offsets shifted back (where it can be)
      if (x.dest_offsets[d] > 0) --x.dest_offsets[d]; else ++x.dest_offsets[d];
      break;
  }
  const auto r = check_dcp_read_items(in);
  RC_ASSERT(!r.ok());
  RC_ASSERT(r.problem_count() > 0u);
}

TEST(DcpReadItems, NamesTheTensorTheItemAndTheReason) {
  // 4 x 2 saved as rows 2 + 2 by ranks 0, 1; read whole by rank 0
  const char* text = R"({"dcp_read_items": 1, "tensors": {"w": {"size": [4, 2], "dtype": "float32",
      "chunks": [{"rank": 0, "offsets": [0, 0], "sizes": [2, 2]}, {"rank": 1, "offsets": [2, 0], "sizes": [2, 2]}]}},
    "ranks": [{"rank": 0, "chunks": {"w": [{"offsets": [0, 0], "sizes": [4, 2]}]}, "read_items": [
      {"fqn": "w", "dest_index": [0, 0], "dest_offsets": [0, 0], "storage_index": [0, 0], "storage_offsets": [0, 0], "lengths": [2, 2]},
      {"fqn": "w", "dest_index": [0, 0], "dest_offsets": [2, 0], "storage_index": [2, 0], "storage_offsets": [0, 0], "lengths": [2, 2]}]}]})";
  auto in = dcp_read_items_from_text(text, "items.json");
  auto r = check_dcp_read_items(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.tensors[0].read_bytes, 32);
  EXPECT_EQ(r.tensors[0].check.cost.cross_bytes, 16);  // rows 2..3 from rank 1's file
  EXPECT_EQ(r.tensors[0].meeting_pairs, 2u);
  in.tensors[0].items[1].storage_index = {0, 0};  // the first chunk read for the second half
  r = check_dcp_read_items(in);
  ASSERT_FALSE(r.ok());
  ASSERT_FALSE(r.tensors[0].extra.empty());
  EXPECT_NE(r.tensors[0].extra[0].find("tensor 'w': misplaced: read item 1 of rank 0"), std::string::npos) << r.tensors[0].extra[0];
  EXPECT_NE(r.tensors[0].check.problems.at(0).what.find("sender does not hold it: target chunk [0:4,0:2] of rank 0"),
            std::string::npos)
      << r.tensors[0].check.problems[0].what;
  // malformed: the file, the place, the reason
  try {
    (void)dcp_read_items_from_text(R"({"dcp_read_items": 1, "tensors": {}, "ranks": [{"rank": 0, "chunks": {}, "read_items": [{"fqn": "v"}]}]})",
                                   "items.json");
    ADD_FAILURE() << "no error";
  } catch (const reshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("items.json: ranks[0].read_items[0]: tensor 'v' is not in \"tensors\""), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)dcp_read_items_from_text("[]", "items.json"), reshard::error);
  EXPECT_THROW((void)dcp_read_items_from_text(R"({"dcp_read_items": 1, "tensors": {}, "ranks": [], "rank": 0})", "items.json"),
               reshard::error);
}
