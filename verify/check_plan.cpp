// verify/check_plan.cpp: laws of check_plan (include/reshard/check_plan.hpp): reshard's own plans
// pass, on random layout pairs and both replica policies; every single mutation of a correct plan
// is caught; and on small tensors the verdict agrees with an element-by-element checker written
// here without boxes, in both directions.
#include <reshard/check_plan.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <algorithm>
#include <map>
#include <vector>

#include "gen/layouts.hpp"
#include "reshard.hpp"

using namespace reshard;
using verify::layout_pair;

namespace {

// The element-by-element verdict: (complete, sound). Every element of box_of(dst, t) is received
// by t exactly once; every transfer's elements are held by its sender and lie in its receiver's
// box; a transfer naming a rank outside a layout or a box outside the tensor is unsound.
std::pair<bool, bool> brute_force(const layout& src, const layout& dst, const std::vector<transfer>& xs) {
  const index_t m = num_ranks(src), n = num_ranks(dst);
  const std::size_t nd = src.shape.size();
  const auto inside = [&](const index_list& at, const box& b) {
    for (std::size_t i = 0; i < nd; ++i)
      if (at[i] < b.offset[i] || at[i] >= b.offset[i] + b.extent[i]) return false;
    return true;
  };
  // every element of a box, by its coordinates
  const auto each = [&](const box& b, auto&& f) {
    if (volume(b) == 0) return;
    index_list at = b.offset;
    while (true) {
      f(at);
      std::size_t d = nd;
      while (d > 0) {
        --d;
        if (++at[d] < b.offset[d] + b.extent[d]) break;
        at[d] = b.offset[d];
        if (d == 0) return;
      }
      if (nd == 0) return;
    }
  };
  bool sound = true;
  std::map<std::pair<index_t, std::vector<index_t>>, int> got;  // (target, element) -> times received
  for (const transfer& x : xs) {
    bool formed = x.src >= src.first_rank && x.src < src.first_rank + m && x.dst >= dst.first_rank &&
                  x.dst < dst.first_rank + n && x.where.offset.size() == nd && x.where.extent.size() == nd;
    for (std::size_t i = 0; formed && i < nd; ++i)
      formed = x.where.offset[i] >= 0 && x.where.extent[i] >= 0 && x.where.offset[i] + x.where.extent[i] <= src.shape[i];
    if (!formed) {
      sound = false;
      continue;
    }
    const box sb = box_of(src, x.src), tb = box_of(dst, x.dst);
    bool in_target = true;
    each(x.where, [&](const index_list& at) {
      if (!inside(at, sb)) sound = false;
      if (!inside(at, tb)) sound = false, in_target = false;
    });
    if (!in_target) continue;  // not counted toward the target's cover (as check_plan does)
    each(x.where, [&](const index_list& at) { ++got[{x.dst, std::vector<index_t>(at.begin(), at.end())}]; });
  }
  bool complete = true;
  for (index_t t = dst.first_rank; t < dst.first_rank + n; ++t)
    each(box_of(dst, t), [&](const index_list& at) {
      const auto it = got.find({t, std::vector<index_t>(at.begin(), at.end())});
      if (it == got.end() || it->second != 1) complete = false;
    });
  for (const auto& [key, times] : got)
    if (times > 1) complete = false;
  return {complete, sound};
}

// A random single mutation of a plan with at least one non-empty transfer (see below), and
// whether it must be caught as incomplete (true) or unsound (false).
std::vector<transfer> mutate(const layout& src, std::vector<transfer> xs) {
  std::vector<std::size_t> nonempty;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (volume(xs[i].where) > 0) nonempty.push_back(i);
  const std::size_t i = nonempty[*rc::gen::inRange<std::size_t>(0, nonempty.size())];
  const std::size_t nd = src.shape.size();
  const int kind = nd == 0 ? *rc::gen::element(0, 1, 5) : *rc::gen::inRange(0, 6);
  switch (kind) {
    case 0:  // dropped
      xs.erase(xs.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:  // duplicated
      xs.push_back(xs[i]);
      break;
    case 2: {  // shifted by one element in a dim
      const auto d = *rc::gen::inRange<std::size_t>(0, nd);
      xs[i].where.offset[d] += *rc::gen::element<index_t>(-1, 1);
      break;
    }
    case 3: {  // grown by one in a dim
      const auto d = *rc::gen::inRange<std::size_t>(0, nd);
      ++xs[i].where.extent[d];
      break;
    }
    case 4: {  // shrunk by one in a dim (where it has extent)
      const auto d = *rc::gen::inRange<std::size_t>(0, nd);
      --xs[i].where.extent[d];
      break;
    }
    case 5: {  // a sender that does not hold the box
      const box& b = xs[i].where;
      std::vector<index_t> lacking;
      for (index_t r = src.first_rank; r < src.first_rank + num_ranks(src); ++r)
        if (volume(intersect(box_of(src, r), b)) < volume(b)) lacking.push_back(r);
      if (lacking.empty()) {  // every source rank holds it (all replicas): a rank outside the layout
        xs[i].src = src.first_rank + num_ranks(src);
      } else {
        xs[i].src = lacking[*rc::gen::inRange<std::size_t>(0, lacking.size())];
      }
      break;
    }
  }
  return xs;
}

bool has_nonempty(const std::vector<transfer>& xs) {
  for (const auto& x : xs)
    if (volume(x.where) > 0) return true;
  return false;
}

}  // namespace

RC_GTEST_PROP(CheckPlan, ReshardsOwnPlansPass, (const layout_pair& lp)) {
  for (auto policy : {replica_policy::least_loaded, replica_policy::round_robin}) {
    const auto p = plan(lp.src, lp.dst, policy);
    const auto elem = static_cast<index_t>(*verify::element_sizes());
    const auto r = check_plan(lp.src, lp.dst, p.transfers, {.element_bytes = elem});
    RC_ASSERT(r.ok());
    RC_ASSERT(r.problems.empty() && r.problem_count == 0u);
    const auto c = p.cost(elem);
    RC_ASSERT(r.cost.cross_bytes == c.cross_bytes);
    RC_ASSERT(r.cost.local_bytes == c.local_bytes);
    RC_ASSERT(r.cost.messages == c.messages);
    RC_ASSERT(r.cost.max_sent_bytes == c.max_sent_bytes);
    RC_ASSERT(r.lower_bound_bytes == c.lower_bound_bytes);
    RC_ASSERT(r.cost.cross_bytes == r.lower_bound_bytes);
  }
}

RC_GTEST_PROP(CheckPlan, EverySingleMutationIsCaught, (const layout_pair& lp)) {
  const auto p = plan(lp.src, lp.dst, *rc::gen::element(replica_policy::least_loaded, replica_policy::round_robin));
  RC_PRE(has_nonempty(p.transfers));
  const auto bad = mutate(lp.src, p.transfers);
  const auto r = check_plan(lp.src, lp.dst, bad);
  RC_ASSERT(!r.ok());
  RC_ASSERT(r.problem_count > 0u && !r.problems.empty());
}

RC_GTEST_PROP(CheckPlan, AgreesWithTheElementByElementCheck, (const layout_pair& lp)) {
  auto xs = plan(lp.src, lp.dst).transfers;
  if (has_nonempty(xs) && *rc::gen::inRange(0, 4) != 0) xs = mutate(lp.src, xs);
  if (has_nonempty(xs) && *rc::gen::inRange(0, 3) == 0) xs = mutate(lp.src, xs);  // sometimes two
  const auto r = check_plan(lp.src, lp.dst, xs);
  const auto [complete, sound] = brute_force(lp.src, lp.dst, xs);
  RC_ASSERT(r.complete == complete);
  RC_ASSERT(r.sound == sound);
}

// check_plan on explicit boxes (rank_box: one box per rank) is the same checker as on layouts:
// the same verdict, problems and figures for reshard's plans and their mutations.
RC_GTEST_PROP(CheckPlan, OnRankBoxesAgreesWithTheLayoutForm, (const layout_pair& lp)) {
  auto xs = plan(lp.src, lp.dst).transfers;
  if (has_nonempty(xs) && *rc::gen::inRange(0, 4) != 0) xs = mutate(lp.src, xs);
  const auto held = [](const layout& l) {
    std::vector<rank_box> out;
    for (index_t r = 0; r < num_ranks(l); ++r) out.push_back({l.first_rank + r, box_of(l, l.first_rank + r)});
    return out;
  };
  const auto hs = held(lp.src), hd = held(lp.dst);
  // ids are indices into the boxes: rank - first_rank
  auto ids = xs;
  for (auto& x : ids) x.src -= lp.src.first_rank, x.dst -= lp.dst.first_rank;
  const auto a = check_plan(lp.src, lp.dst, xs);
  const auto b = check_plan(lp.src.shape, hs, hd, ids);
  RC_ASSERT(a.complete == b.complete);
  RC_ASSERT(a.sound == b.sound);
  RC_ASSERT(a.problem_count == b.problem_count);
  RC_ASSERT(a.problems.size() == b.problems.size());
  for (std::size_t i = 0; i < a.problems.size(); ++i) {
    RC_ASSERT(a.problems[i].kind == b.problems[i].kind);
    RC_ASSERT(a.problems[i].where == b.problems[i].where);
    RC_ASSERT(a.problems[i].transfer == b.problems[i].transfer);
  }
  RC_ASSERT(a.cost == b.cost);
}

TEST(CheckPlan, OnRankBoxesSeveralBoxesOfOneRank) {
  // 4 x 4: saved as two row halves by rank 0 and 1; target rank 5 asks for both column halves
  const index_list shape{4, 4};
  const std::vector<rank_box> src{{0, {{0, 0}, {2, 4}}}, {1, {{2, 0}, {2, 4}}}};
  const std::vector<rank_box> dst{{5, {{0, 0}, {4, 2}}}, {5, {{0, 2}, {4, 2}}}};
  std::vector<transfer> xs{{0, 0, {{0, 0}, {2, 2}}}, {1, 0, {{2, 0}, {2, 2}}}, {0, 1, {{0, 2}, {2, 2}}},
                           {1, 1, {{2, 2}, {2, 2}}}};
  auto r = check_plan(shape, src, dst, xs, {.element_bytes = 4});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.cost.cross_bytes, 64);  // rank 5 holds nothing it reads
  EXPECT_EQ(r.cost.max_received_bytes, 64);
  EXPECT_EQ(r.cost.max_sent_bytes, 32);
  xs[3].src = 0;  // box 0 does not hold rows 2..3
  r = check_plan(shape, src, dst, xs);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::sender_lacks);
  EXPECT_NE(r.problems[0].what.find("target box 1, box [2:4,2:4], transfer 3 (from box 0)"), std::string::npos) << r.problems[0].what;
  xs.pop_back();
  r = check_plan(shape, src, dst, xs);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::uncovered);
  EXPECT_EQ(r.problems[0].where, (box{{2, 2}, {2, 2}}));
  xs.push_back({2, 1, {{2, 2}, {2, 2}}});  // no box 2
  r = check_plan(shape, src, dst, xs);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::bad_transfer);
  EXPECT_NE(r.problems[0].what.find("sender 2 is not a box of the source (0..1)"), std::string::npos) << r.problems[0].what;
  EXPECT_THROW((void)check_plan(shape, std::vector<rank_box>{{0, {{3, 0}, {2, 4}}}}, dst, xs), reshard::error);
}

TEST(CheckPlan, ReportsTheHoleTheOverlapAndTheSender) {
  // 8 x 4 split in rows over 2 ranks, to columns over 2 ranks
  const layout a = mindspore_layout({2}, {0, -1}, {8, 4});
  const layout b = mindspore_layout({2}, {-1, 0}, {8, 4});
  auto xs = plan(a, b).transfers;
  ASSERT_TRUE(check_plan(a, b, xs).ok());
  // target 1 (columns 2..3) loses the rows 4..7 it got from rank 1
  std::vector<transfer> dropped;
  for (const auto& x : xs)
    if (!(x.dst == 1 && x.src == 1)) dropped.push_back(x);
  auto r = check_plan(a, b, dropped);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.sound);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::uncovered);
  EXPECT_EQ(r.problems[0].dst, 1);
  EXPECT_EQ(r.problems[0].where, (box{{4, 2}, {4, 2}}));
  EXPECT_NE(r.problems[0].what.find("uncovered: target rank 1, box"), std::string::npos) << r.problems[0].what;
  // rank 0 sends rows 4..7, which rank 1 holds
  auto wrong = xs;
  for (auto& x : wrong)
    if (x.dst == 1 && x.src == 1) x.src = 0;
  r = check_plan(a, b, wrong);
  EXPECT_TRUE(r.complete);
  EXPECT_FALSE(r.sound);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::sender_lacks);
  // a transfer twice: the overlap, naming both
  auto twice = xs;
  twice.push_back(xs.front());
  r = check_plan(a, b, twice);
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, plan_problem_kind::covered_twice);
  EXPECT_EQ(r.problems[0].where, xs.front().where);
  // a rank outside the layout, a box outside the tensor
  r = check_plan(a, b, std::vector<transfer>{{5, 0, {{0, 0}, {4, 2}}}, {0, 0, {{6, 0}, {4, 2}}}});
  EXPECT_FALSE(r.sound);
  EXPECT_EQ(r.problem_count, 4u);  // two bad transfers, and target 0 and 1 uncovered
  // at most max_problems listed, all counted
  r = check_plan(a, b, std::vector<transfer>{}, {.max_problems = 1});
  EXPECT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problem_count, 2u);
}

TEST(CheckPlan, LayoutsOfDifferentShapesAreAnError) {
  EXPECT_THROW((void)check_plan(mindspore_layout({2}, {0}, {8}), mindspore_layout({2}, {0}, {6}), {}), reshard::error);
}

// ---------------------------------------------------------------------------------------------
// check_rank_list

namespace {

// A rank list for target t: a random subset of the source ranks, half the time grown from
// rank_list's minimal one.
std::vector<index_t> some_rank_list(const layout& src, const layout& dst, index_t t) {
  std::vector<index_t> out;
  if (*rc::gen::inRange(0, 2) == 0) out = rank_list(src, dst, t);
  const index_t m = num_ranks(src);
  const int keep = *rc::gen::inRange(0, 4);  // in quarters: how many of the other ranks to list
  for (index_t r = src.first_rank; r < src.first_rank + m; ++r)
    if (*rc::gen::inRange(0, 4) < keep) out.push_back(r);
  return out;
}

// Every element of box_of(dst, t) lies in the source box of some rank of `ranks`.
bool covers_by_elements(const layout& src, const layout& dst, index_t t, const std::vector<index_t>& ranks) {
  const box tb = box_of(dst, t);
  if (volume(tb) == 0) return true;
  std::vector<box> held;
  for (index_t r : ranks) held.push_back(box_of(src, r));
  const std::size_t nd = tb.offset.size();
  index_list at = tb.offset;
  while (true) {
    bool found = false;
    for (const box& b : held) {
      bool in = true;
      for (std::size_t i = 0; in && i < nd; ++i) in = at[i] >= b.offset[i] && at[i] < b.offset[i] + b.extent[i];
      if (in) {
        found = true;
        break;
      }
    }
    if (!found) return false;
    std::size_t d = nd;
    while (d > 0) {
      --d;
      if (++at[d] < tb.offset[d] + tb.extent[d]) break;
      at[d] = tb.offset[d];
      if (d == 0) return true;
    }
    if (nd == 0) return true;
  }
}

}  // namespace

RC_GTEST_PROP(CheckRankList, ReshardsOwnListIsSufficientAndMinimal, (const layout_pair& lp)) {
  const index_t t = lp.dst.first_rank + *rc::gen::inRange<index_t>(0, num_ranks(lp.dst));
  const auto mine = rank_list(lp.src, lp.dst, t);
  const auto r = check_rank_list(lp.src, lp.dst, t, mine);
  RC_ASSERT(r.sufficient);
  RC_ASSERT(r.uncovered.empty());
  RC_ASSERT(r.superfluous.empty());
  RC_ASSERT(r.is_minimal());
  RC_ASSERT(r.kept == mine);
  RC_ASSERT(r.minimal == mine);
}

RC_GTEST_PROP(CheckRankList, SufficientExactlyWhenAPlanFromTheListedRanksExists, (const layout_pair& lp)) {
  const index_t t = lp.dst.first_rank + *rc::gen::inRange<index_t>(0, num_ranks(lp.dst));
  const auto ranks = some_rank_list(lp.src, lp.dst, t);
  const auto r = check_rank_list(lp.src, lp.dst, t, ranks);
  // reshard's plan, with each transfer to t sent by a listed rank holding its box (the kept one)
  // or dropped when no listed rank holds it
  std::vector<transfer> xs;
  for (transfer x : plan(lp.src, lp.dst).transfers) {
    if (x.dst == t) {
      x.src = -1;
      for (index_t s : r.kept)
        if (volume(intersect(box_of(lp.src, s), x.where)) == volume(x.where)) x.src = s;
      if (x.src < 0) continue;
    }
    xs.push_back(x);
  }
  const auto c = check_plan(lp.src, lp.dst, xs);
  RC_ASSERT(c.ok() == r.sufficient);
  // the holes check_plan finds are the uncovered boxes
  index_t holes = 0, uncovered = 0;
  for (const auto& p : c.problems) holes += volume(p.where);
  for (const box& b : r.uncovered) uncovered += volume(b);
  if (c.problems.size() == c.problem_count) RC_ASSERT(holes == uncovered);
}

RC_GTEST_PROP(CheckRankList, AgreesWithTheElementByElementCheck, (const layout_pair& lp)) {
  const index_t t = lp.dst.first_rank + *rc::gen::inRange<index_t>(0, num_ranks(lp.dst));
  auto ranks = some_rank_list(lp.src, lp.dst, t);
  const auto r = check_rank_list(lp.src, lp.dst, t, ranks);
  RC_ASSERT(r.sufficient == covers_by_elements(lp.src, lp.dst, t, ranks));
  // kept and superfluous split the list; the kept ranks cover as much as the list, and each is needed
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<index_t> both = r.kept;
  both.insert(both.end(), r.superfluous.begin(), r.superfluous.end());
  std::sort(both.begin(), both.end());
  RC_ASSERT(both == ranks);
  if (r.sufficient) {
    RC_ASSERT(covers_by_elements(lp.src, lp.dst, t, r.kept));
    for (std::size_t i = 0; i < r.kept.size(); ++i) {
      auto less = r.kept;
      less.erase(less.begin() + static_cast<std::ptrdiff_t>(i));
      RC_ASSERT(!covers_by_elements(lp.src, lp.dst, t, less));
    }
  }
}

TEST(CheckRankList, ReportsTheMissingBoxAndTheSuperfluousRanks) {
  // 8 x 4 in 2 row blocks, each held by 2 of 4 ranks, to 2 ranks: target 0 needs rows 0..3 only
  const layout a = mindspore_layout({2, 2}, {1, -1}, {8, 4});
  const layout b = mindspore_layout({2}, {0, -1}, {8, 4});
  const std::vector<index_t> all{0, 1, 2, 3};
  auto r = check_rank_list(a, b, 0, all);
  EXPECT_TRUE(r.sufficient);
  EXPECT_EQ(r.minimal, rank_list(a, b, 0));
  EXPECT_EQ(r.kept, r.minimal);
  EXPECT_EQ(r.superfluous.size(), 3u);  // the other owner of rows 0..3, and both of rows 4..7
  EXPECT_FALSE(r.is_minimal());
  // without the owners of rows 0..3: that box is missing
  std::vector<index_t> owners_of_top;
  for (index_t s : all)
    if (box_of(a, s).offset[0] == 0) owners_of_top.push_back(s);
  std::vector<index_t> rest;
  for (index_t s : all)
    if (std::find(owners_of_top.begin(), owners_of_top.end(), s) == owners_of_top.end()) rest.push_back(s);
  r = check_rank_list(a, b, 0, rest);
  EXPECT_FALSE(r.sufficient);
  ASSERT_EQ(r.uncovered.size(), 1u);
  EXPECT_EQ(r.uncovered[0], (box{{0, 0}, {4, 4}}));
  EXPECT_THROW((void)check_rank_list(a, b, 0, std::vector<index_t>{7}), reshard::error);
  EXPECT_THROW((void)check_rank_list(a, b, 2, all), reshard::error);
}
