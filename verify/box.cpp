// verify/box.cpp: boxes (include/reshard/box.hpp): volume, intersect against point membership,
// the printed notation.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gen/layouts.hpp"
#include "reshard.hpp"

using namespace reshard;

namespace {

// Boxes of `n` dims inside [0, 12)^n, index_list 0..6.
rc::Gen<box> boxes_of_rank(std::size_t n) {
  return rc::gen::exec([n] {
    box b;
    for (std::size_t i = 0; i < n; ++i) {
      b.offset.push_back(*rc::gen::inRange<index_t>(0, 7));
      b.extent.push_back(*rc::gen::inRange<index_t>(0, 6));
    }
    return b;
  });
}

bool contains(const box& b, const index_list& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] < b.offset[i] || p[i] >= b.offset[i] + b.extent[i]) return false;
  return true;
}

}  // namespace

// A point lies in intersect(a, b) exactly when it lies in a and in b; intersect is commutative
// and idempotent, and its volume is at most either volume.
RC_GTEST_PROP(Box, IntersectIsPointwiseAnd, ()) {
  const std::size_t n = *rc::gen::inRange<std::size_t>(0, 4);
  const box a = *boxes_of_rank(n), b = *boxes_of_rank(n);
  const box c = intersect(a, b);
  RC_ASSERT(volume(c) <= std::min(volume(a), volume(b)));
  RC_ASSERT(volume(intersect(b, a)) == volume(c));
  if (volume(c) > 0) RC_ASSERT(intersect(b, a) == c);
  RC_ASSERT(intersect(a, a) == a);
  index_t inside = 0;
  index_list p(n, 0);
  for (index_t k = 0; k < index_t{1} << (4 * n); ++k) {  // every point of [0, 16)^n
    index_t rest = k;
    for (std::size_t i = 0; i < n; ++i) p[i] = rest % 16, rest /= 16;
    const bool in_c = contains(c, p);
    RC_ASSERT(in_c == (contains(a, p) && contains(b, p)));
    inside += in_c ? 1 : 0;
  }
  RC_ASSERT(inside == volume(c));
}

// volume is the product of the index_list; a 0-d box holds one element.
RC_GTEST_PROP(Box, VolumeIsProductOfExtents, ()) {
  const std::size_t n = *rc::gen::inRange<std::size_t>(0, 5);
  const box b = *boxes_of_rank(n);
  index_t v = 1;
  for (index_t e : b.extent) v *= e;
  RC_ASSERT(volume(b) == v);
  RC_ASSERT(volume(b.extent) == v);
}

// to_string prints each dim as offset:end, and lists as [a,b].
RC_GTEST_PROP(Box, ToStringListsRanges, ()) {
  const std::size_t n = *rc::gen::inRange<std::size_t>(0, 4);
  const box b = *boxes_of_rank(n);
  std::string want = "[";
  for (std::size_t i = 0; i < n; ++i) {
    // append, not operator+: GCC 12 warns falsely (-Wrestrict) on "x" + std::to_string at -O3
    want.append(i ? "," : "").append(std::to_string(b.offset[i])).append(":");
    want.append(std::to_string(b.offset[i] + b.extent[i]));
  }
  RC_ASSERT(to_string(b) == want + "]");
  const auto v = *rc::gen::arbitrary<std::vector<index_t>>();
  std::string list = "[";
  for (std::size_t i = 0; i < v.size(); ++i) list.append(i ? "," : "").append(std::to_string(v[i]));
  RC_ASSERT(to_string(v) == list + "]");
}

// index_list (a list that keeps up to 4 entries inline) behaves like std::vector<index_t> under any
// sequence of operations, across the inline/heap boundary; copies are independent values.
RC_GTEST_PROP(Extents, BehaveLikeAVector, ()) {
  index_list e;
  std::vector<index_t> model;
  const int steps = *rc::gen::inRange(0, 40);
  for (int s = 0; s < steps; ++s) {
    const index_t v = *rc::gen::inRange<index_t>(-3, 100);
    switch (*rc::gen::inRange(0, 9)) {
      case 0:
      case 1:
        e.push_back(v);
        model.push_back(v);
        break;
      case 2:
        if (!model.empty()) e.pop_back(), model.pop_back();
        break;
      case 3: {
        const auto n = *rc::gen::inRange<std::size_t>(0, 10);
        e.resize(n, v);
        model.resize(n, v);
        break;
      }
      case 4: {
        const auto at = *rc::gen::inRange<std::size_t>(0, model.size() + 1);
        const auto it = e.insert(e.begin() + at, v);
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), v);
        RC_ASSERT(it == e.begin() + at);
        break;
      }
      case 5: {
        const auto n = *rc::gen::inRange<std::size_t>(0, 8);
        e.assign(n, v);
        model.assign(n, v);
        break;
      }
      case 6: {
        const index_list copy = e;  // a copy, then the original changes
        e.push_back(v);
        RC_ASSERT(copy.to_vector() == model);
        model.push_back(v);
        break;
      }
      case 7:
        e.clear();
        model.clear();
        break;
      default: {
        index_list other(model.begin(), model.end());
        RC_ASSERT(other == e);
        const index_list moved = std::move(other);
        RC_ASSERT(moved == e);
        // a moved-from list is still a valid list: consistent size and entries, usable again
        RC_ASSERT(static_cast<std::size_t>(other.end() - other.begin()) == other.size());
        other.push_back(v);
        RC_ASSERT(other.back() == v);
        other = e;
        RC_ASSERT(other == e);
        index_list tmp = e;
        other = std::move(tmp);  // move-assign, then reuse the source
        RC_ASSERT(other == e);
        RC_ASSERT(static_cast<std::size_t>(tmp.end() - tmp.begin()) == tmp.size());
        tmp.push_back(v);
        RC_ASSERT(tmp.back() == v);
      }
    }
    RC_ASSERT(e.size() == model.size());
    RC_ASSERT(e.empty() == model.empty());
    RC_ASSERT(e.to_vector() == model);
    RC_ASSERT(std::equal(e.begin(), e.end(), model.begin(), model.end()));
    if (!model.empty()) {
      RC_ASSERT(e.front() == model.front());
      RC_ASSERT(e.back() == model.back());
    }
    RC_ASSERT(index_list(model) == e);
  }
  // equality is by value, whatever the history of either side
  index_list fresh;
  for (index_t v : model) fresh.push_back(v);
  RC_ASSERT(fresh == e);
  if (!model.empty()) {
    fresh.back() += 1;
    RC_ASSERT(!(fresh == e));
  }
}

TEST(Box, Examples) {
  EXPECT_EQ(to_string(box{{0, 2}, {4, 2}}), "[0:4,2:4]");
  EXPECT_EQ(to_string(box{}), "[]");
  EXPECT_EQ(volume(box{}), 1);
  EXPECT_EQ(to_string(index_list{}), "[]");
  EXPECT_EQ(to_string(index_list{2, 4}), "[2,4]");
  EXPECT_EQ(to_string(index_list{-1, 0, 10}), "[-1,0,10]");
  EXPECT_EQ(
      to_string(index_list{std::numeric_limits<index_t>::min(), std::numeric_limits<index_t>::max()}),
      "[-9223372036854775808,9223372036854775807]");
  // disjoint boxes meet in an empty box, placed at the larger offset
  EXPECT_EQ(intersect(box{{0}, {2}}, box{{5}, {2}}), (box{{5}, {0}}));
  EXPECT_EQ(intersect(box{{0, 0}, {4, 4}}, box{{2, 1}, {4, 1}}), (box{{2, 1}, {2, 1}}));
}

// Compile time: boxes are constexpr values.
static_assert(reshard::volume(reshard::box{{1, 2, 3}, {2, 3, 4}}) == 24);
static_assert(reshard::intersect(reshard::box{{0, 0}, {4, 4}}, reshard::box{{2, 3}, {4, 4}}) ==
              reshard::box{{2, 3}, {2, 1}});
// clang before 16 cannot constant-evaluate libstdc++'s std::string (inactive union member).
#if !defined(__clang__) || __clang_major__ >= 16
static_assert(reshard::to_string(reshard::box{{0, 2}, {4, 2}}) == "[0:4,2:4]");
static_assert(reshard::to_string(reshard::index_list{-3, 7}) == "[-3,7]");
#endif

// The former name of index_list still compiles (deprecated).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<reshard::extents, reshard::index_list>);
#pragma GCC diagnostic pop
