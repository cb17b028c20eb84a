// verify/error.cpp: the error tiers (include/reshard/error.hpp). Every invalid layout throws
// reshard::error whose message names the offending dim or value and contains the layout in
// reshard's notation; so do plans of different tensors, foreign ranks and bad buffers.
// Library preconditions (RESHARD_EXPECTS) go through the replaceable violation handler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "gen/layouts.hpp"
#include "laws/check.hpp"
#include "reshard.hpp"

using namespace reshard;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

std::string axis_name(const layout& l, int left) {  // MindSpore's right-counted name of an axis
  return std::to_string(static_cast<int>(l.dev_matrix.size()) - 1 - left);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Every way to break a valid layout is reported with the layout's notation and the culprit.
RC_GTEST_PROP(Errors, InvalidLayoutsNameTheCulpritAndTheLayout, (const layout& valid)) {
  layout l = valid;
  const std::size_t nd = l.shape.size();
  const auto naxes = static_cast<int>(l.dev_matrix.size());
  std::vector<std::string> want;  // substrings of the message
  std::vector<int> used;          // axes splitting some dim
  for (const auto& ax : l.dim_axes) used.insert(used.end(), ax.begin(), ax.end());
  switch (*rc::gen::inRange(0, 10)) {
    case 0: {  // a device axis out of range
      RC_PRE(nd > 0);
      const std::size_t d = *rc::gen::inRange<std::size_t>(0, nd);
      const int a = *rc::gen::element(naxes, naxes + 3, -1, -5);
      l.dim_axes[d].push_back(a);
      want = {"dim " + std::to_string(d) + " names device axis " + axis_name(l, a),
              "device matrix has " + std::to_string(naxes) + " axes"};
      break;
    }
    case 1: {  // an axis used twice
      RC_PRE(!used.empty());
      const int a = *rc::gen::elementOf(used);
      std::size_t first = 0;
      while (std::find(l.dim_axes[first].begin(), l.dim_axes[first].end(), a) ==
             l.dim_axes[first].end())
        ++first;
      const std::size_t d = *rc::gen::inRange<std::size_t>(0, nd);
      l.dim_axes[d].push_back(a);
      // reported at the later of the two dims (or the same dim twice)
      want = {"device axis " + axis_name(l, a) + " splits both dim " +
              std::to_string(std::min(first, d)) + " and dim " +
              std::to_string(std::max(first, d))};
      break;
    }
    case 2: {  // map and shape of different lengths
      if (nd > 0 && *rc::gen::arbitrary<bool>()) {
        l.dim_axes.pop_back();
      } else {
        l.dim_axes.emplace_back();
      }
      want = {"tensor map has " + std::to_string(l.dim_axes.size()) +
              " entries but the shape has " + std::to_string(nd) + " dims"};
      break;
    }
    case 3: {  // uneven in divisible mode
      l.mode = split_mode::divisible;
      l.split_sizes.clear();
      l.opt = {};
      std::size_t bad = nd;
      for (std::size_t d = 0; d < nd && bad == nd; ++d) {
        index_t p = 1;
        for (int a : l.dim_axes[d]) p *= l.dev_matrix[static_cast<std::size_t>(a)];
        if (l.shape[d] % p != 0) bad = d;
      }
      if (bad == nd) {  // all even: make one split dim uneven
        for (std::size_t d = 0; d < nd && bad == nd; ++d) {
          index_t p = 1;
          for (int a : l.dim_axes[d]) p *= l.dev_matrix[static_cast<std::size_t>(a)];
          if (p > 1) bad = d, l.shape[d] += 1;
        }
      }
      RC_PRE(bad < nd);
      index_t p = 1;
      for (int a : l.dim_axes[bad]) p *= l.dev_matrix[static_cast<std::size_t>(a)];
      want = {"dim " + std::to_string(bad) + " of size " + std::to_string(l.shape[bad]) +
              " does not divide into " + std::to_string(p) + " equal slices"};
      break;
    }
    case 4: {  // bad explicit split sizes: count, a negative size, or the sum
      RC_PRE(nd > 0);
      const std::size_t d = *rc::gen::inRange<std::size_t>(0, nd);
      index_t p = 1;
      for (int a : l.dim_axes[d]) p *= l.dev_matrix[static_cast<std::size_t>(a)];
      l.split_sizes.resize(nd);
      index_list s(static_cast<std::size_t>(p), 0);
      s.back() = l.shape[d];
      switch (*rc::gen::inRange(0, 3)) {
        case 0:
          s.push_back(0);
          want = {"dim " + std::to_string(d) + " has " + std::to_string(p + 1) +
                  " explicit slice sizes but " + std::to_string(p) + " slices"};
          break;
        case 1:  // a negative size (the sum still right when there are several)
          s.front() = -1;
          if (p > 1) s.back() += 1;
          want = {"dim " + std::to_string(d) + " has a negative slice size"};
          break;
        default:  // too much, or too little
          if (l.shape[d] > 0 && *rc::gen::arbitrary<bool>()) {
            s.back() -= 1;
            want = {"dim " + std::to_string(d) + ": explicit slice sizes sum to " +
                    std::to_string(l.shape[d] - 1) + ", not to the dim's size " +
                    std::to_string(l.shape[d])};
          } else {
            s.back() += 7;
            want = {"dim " + std::to_string(d) + ": explicit slice sizes sum to",
                    "size " + std::to_string(l.shape[d])};
          }
      }
      l.split_sizes[d] = s;
      break;
    }
    case 5: {  // a bad optimizer-sharding size
      std::vector<bool> u(static_cast<std::size_t>(naxes), false);
      for (int a : used) u[static_cast<std::size_t>(a)] = true;
      index_t group = 1;
      for (int a = 0; a < naxes; ++a)
        if (!u[static_cast<std::size_t>(a)]) group *= l.dev_matrix[static_cast<std::size_t>(a)];
      if (*rc::gen::arbitrary<bool>()) {
        l.opt = {1, -2 - *rc::gen::inRange<index_t>(0, 5)};
        want = {"size " + std::to_string(l.opt.size)};
      } else if (*rc::gen::arbitrary<bool>()) {
        l.opt.step = -1 - *rc::gen::inRange<index_t>(0, 5);
        want = {"step " + std::to_string(l.opt.step)};
      } else {
        l.opt = {1, group + 1};
        want = {nd == 0 ? "optimizer sharding needs a tensor with at least one dim"
                        : "optimizer sharding size " + std::to_string(group + 1) +
                              " does not divide the replica group size " + std::to_string(group)};
      }
      break;
    }
    case 6: {  // a device axis of size < 1
      const auto a = *rc::gen::inRange<std::size_t>(0, l.dev_matrix.size());
      l.dev_matrix[a] = -*rc::gen::inRange<index_t>(0, 3);
      want = {"device matrix axis " + std::to_string(a) + " has size " +
              std::to_string(l.dev_matrix[a])};
      break;
    }
    case 7: {  // a negative dim
      RC_PRE(nd > 0);
      const std::size_t d = *rc::gen::inRange<std::size_t>(0, nd);
      l.shape[d] = -1 - *rc::gen::inRange<index_t>(0, 3);
      l.split_sizes.clear();
      want = {"dim " + std::to_string(d) + " has negative size " + std::to_string(l.shape[d])};
      break;
    }
    case 9: {  // divisible mode: an optimizer-sharding size that does not divide a dim-0 slice
      RC_PRE(l.mode == split_mode::divisible && nd > 0);
      std::vector<bool> u(static_cast<std::size_t>(naxes), false);
      for (int a : used) u[static_cast<std::size_t>(a)] = true;
      index_t group = 1;
      for (int a = 0; a < naxes; ++a)
        if (!u[static_cast<std::size_t>(a)]) group *= l.dev_matrix[static_cast<std::size_t>(a)];
      index_list rows;  // dim-0 slice lengths
      if (!l.split_sizes.empty() && !l.split_sizes[0].empty()) {
        rows = l.split_sizes[0];
      } else {
        index_t p0 = 1;
        for (int a : l.dim_axes[0]) p0 *= l.dev_matrix[static_cast<std::size_t>(a)];
        rows = index_list(static_cast<std::size_t>(p0), l.shape[0] / p0);
      }
      std::vector<index_t> bad_sizes;
      for (index_t s = 2; s <= group; ++s) {
        bool divides_all = true;
        for (index_t r : rows) divides_all = divides_all && r % s == 0;
        if (group % s == 0 && !divides_all) bad_sizes.push_back(s);
      }
      RC_PRE(!bad_sizes.empty());
      l.opt = {1, *rc::gen::elementOf(bad_sizes)};
      std::size_t k = 0;
      while (rows[k] % l.opt.size == 0) ++k;
      want = {"optimizer sharding splits dim 0 slices into " + std::to_string(l.opt.size) +
              " parts, but slice " + std::to_string(k) + " has " + std::to_string(rows[k]) + " rows"};
      break;
    }
    default: {  // a negative first rank
      l.first_rank = -1 - *rc::gen::inRange<index_t>(0, 100);
      want = {"first rank " + std::to_string(l.first_rank) + " is out of range"};
    }
  }
  const std::string msg = error_of([&] { validate(l, "checked layout"); });
  RC_ASSERT(!msg.empty());
  RC_ASSERT(msg.rfind("checked layout " + to_string(l) + ": ", 0) == 0);
  for (const std::string& w : want)
    if (msg.find(w) == std::string::npos) RC_FAIL("message \"" + msg + "\" lacks \"" + w + "\"");
  // every query validates first
  RC_ASSERT(error_of([&] { (void)regions(l); }).find(to_string(l)) != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The builders name the argument at fault and the layout.

TEST(Errors, MindSporeMapOutOfRange) {
  const std::string msg = error_of([] { mindspore_layout({2, 4}, {2, -1}, {8, 4}); });
  EXPECT_THAT(msg, AllOf(StartsWith("mindspore_layout"), HasSubstr("2"), HasSubstr("dev[2,4]"),
                         HasSubstr("map[2,-1]"), HasSubstr("shape[8,4]")));
  const std::string tuple = error_of([] { mindspore_layout({4, 2, 2}, {{2, 3}, 0}, {8, 8}); });
  EXPECT_THAT(tuple, AllOf(StartsWith("mindspore_layout"), HasSubstr("3"),
                           HasSubstr("dev[4,2,2] map[[2,3],0] shape[8,8]")));
  // -1 inside a tuple is not "unsplit"
  EXPECT_THAT(error_of([] {
                mindspore_layout({2, 2}, {{1, -1}}, {4});
              }),
              AllOf(HasSubstr("-1"), HasSubstr("dev[2,2]")));
}

TEST(Errors, MindSporeLayoutProblems) {
  // axis used twice
  EXPECT_EQ(
      error_of([] {
        mindspore_layout({2, 4}, {1, 1}, {8, 4});
      }),
      "mindspore_layout dev[2,4] map[1,1] shape[8,4]: device axis 1 splits both dim 0 and dim 1");
  // map and shape lengths
  EXPECT_EQ(error_of([] {
              mindspore_layout({2, 4}, {1}, {8, 4});
            }),
            "mindspore_layout dev[2,4] map[1] shape[8,4]: tensor map has 1 entries but the shape "
            "has 2 dims");
  // uneven in divisible mode
  EXPECT_THAT(error_of([] {
                mindspore_layout({2, 4}, {0, 1}, {6, 4});
              }),
              AllOf(HasSubstr("dev[2,4] map[0,1] shape[6,4]"),
                    HasSubstr("dim 0 of size 6 does not divide into 4 equal slices")));
  // bad param_split_shape
  EXPECT_THAT(error_of([] {
                mindspore_layout({4}, {0, -1}, {10, 2}, {.param_split_shape = {1, 2, 3}});
              }),
              AllOf(HasSubstr("dev[4] map[0,-1] shape[10,2] sizes0=[1,2,3]"),
                    HasSubstr("dim 0 has 3 explicit slice sizes but 4 slices")));
  EXPECT_THAT(
      error_of([] {
        mindspore_layout({4}, {0, -1}, {10, 2}, {.param_split_shape = {1, 2, 3, 5}});
      }),
      AllOf(HasSubstr("dim 0: explicit slice sizes sum to more than"), HasSubstr("size 10")));
  EXPECT_THAT(error_of([] {
                mindspore_layout({4}, {0, -1}, {10, 2}, {.param_split_shape = {1, 2, 3, 3}});
              }),
              HasSubstr("dim 0: explicit slice sizes sum to 9, not to the dim's size 10"));
  // optimizer sharding: size not dividing the group, or slices not dividing into parts
  EXPECT_THAT(
      error_of([] {
        mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 3}});
      }),
      AllOf(HasSubstr("dev[4,2] map[-1,0] shape[8,4] opt[step=2,size=3]"),
            HasSubstr("optimizer sharding size 3 does not divide the replica group size 4")));
  EXPECT_THAT(error_of([] {
                mindspore_layout({4, 2}, {-1, 0}, {6, 4}, {.opt = {2, 4}});
              }),
              AllOf(HasSubstr("shape[6,4] opt[step=2,size=4]"),
                    HasSubstr("splits dim 0 slices into 4 parts, but slice 0 has 6 rows")));
  EXPECT_THAT(error_of([] {
                mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, -7}});
              }),
              AllOf(HasSubstr("dev[4,2] map[-1,0] shape[8,4]"), HasSubstr("-7")));
  EXPECT_THAT(error_of([] {
                mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {-2, 0}});
              }),
              AllOf(HasSubstr("dev[4,2] map[-1,0] shape[8,4]"), HasSubstr("-2")));
  EXPECT_THAT(error_of([] {
                mindspore_layout({4}, {}, {}, {.opt = {1, 4}});
              }),
              HasSubstr("optimizer sharding needs a tensor with at least one dim"));
  EXPECT_THAT(error_of([] {
                mindspore_layout({2, 0}, {1, -1}, {8, 4});
              }),
              AllOf(HasSubstr("dev[2,0]"), HasSubstr("device matrix axis 1 has size 0")));
  EXPECT_THAT(error_of([] { mindspore_layout({2}, {0}, {4}, {.stage = -1}); }), HasSubstr("stage"));
  EXPECT_THAT(error_of([] {
                mindspore_layout({65536, 65536}, {-1}, {4}, {.stage = 1});
              }),
              HasSubstr("more than 2^31 devices"));
}

TEST(Errors, DtensorAndJaxArguments) {
  EXPECT_THAT(error_of([] {
                dtensor_layout({2, 2}, {shard{0}}, {4});
              }),
              AllOf(StartsWith("dtensor_layout"), HasSubstr("1 placements"), HasSubstr("[2,2]")));
  EXPECT_THAT(error_of([] {
                dtensor_layout({2, 2}, {shard{0}, shard{3}}, {4, 4});
              }),
              AllOf(StartsWith("dtensor_layout"), HasSubstr("placement 1 is Shard(3)"),
                    HasSubstr("2 dims")));
  EXPECT_THAT(error_of([] {
                dtensor_layout({2, 2}, {shard{0}, shard{0}}, {4}, {.shard_order = {{0}}});
              }),
              AllOf(StartsWith("dtensor_layout"), HasSubstr("shard_order for dim 0")));
  EXPECT_THAT(
      error_of([] {
        dtensor_layout({2, 3}, {shard{0}, replicate{}}, {5}, {.mode = split_mode::divisible});
      }),
      AllOf(StartsWith("dtensor_layout dev[2,3] map[1] shape[5]"),
            HasSubstr("dim 0 of size 5 does not divide into 2")));
  const named_mesh mesh{{"data", "model"}, {2, 4}};
  EXPECT_THAT(error_of([&] { jax_layout(mesh, {{"expert"}}, {8}); }),
              AllOf(StartsWith("jax_layout"), HasSubstr("dim 0"), HasSubstr("'expert'")));
  EXPECT_THAT(error_of([&] {
                jax_layout(mesh, {{"data"}, {"data"}}, {8, 8});
              }),
              AllOf(StartsWith("jax_layout dev[2,4] map[1,1] shape[8,8]"),
                    HasSubstr("device axis 1 splits both dim 0 and dim 1")));
  EXPECT_THAT(error_of([&] {
                jax_layout(mesh, {{}, {}, {}}, {8, 8});
              }),
              AllOf(StartsWith("jax_layout"), HasSubstr("3 entries"), HasSubstr("2 dims")));
  EXPECT_THAT(error_of([] {
                jax_layout({{"a"}, {2, 2}}, {}, {});
              }),
              AllOf(StartsWith("jax_layout"), HasSubstr("1 names but 2 sizes")));
}

// ---------------------------------------------------------------------------------------------
// Plans, ranks and buffers.

TEST(Errors, PlanOfDifferentTensors) {
  const layout a = mindspore_layout({2, 4}, {1, -1}, {8, 4});
  const layout b = mindspore_layout({4}, {0, -1}, {8, 8});
  EXPECT_EQ(
      error_of([&] { plan(a, b); }),
      "plan: the layouts describe different tensors: source dev[2,4] map[1,-1] shape[8,4] has "
      "shape [8,4], target dev[4] map[0,-1] shape[8,8] has shape [8,8]");
  EXPECT_THAT(error_of([&] { rank_list(a, b, 0); }),
              AllOf(StartsWith("rank_list"), HasSubstr(to_string(a)), HasSubstr(to_string(b))));
  layout bad = b;
  bad.dim_axes[1] = {7};
  EXPECT_THAT(error_of([&] { plan(a, bad); }),
              AllOf(StartsWith("plan: target layout " + to_string(bad)), HasSubstr("dim 1")));
  EXPECT_THAT(error_of([&] { plan(bad, a); }), StartsWith("plan: source layout " + to_string(bad)));
}

TEST(Errors, ForeignRanks) {
  const layout l = mindspore_layout({2, 4}, {1, -1}, {8, 4}, {.stage = 1});  // ranks 8..15
  for (index_t r : {index_t{-1}, index_t{7}, index_t{16}}) {
    EXPECT_EQ(error_of([&] { box_of(l, r); }),
              "box_of: rank " + std::to_string(r) + " is not a rank of " + to_string(l));
    EXPECT_THAT(
        error_of([&] { replica_group(l, r); }),
        AllOf(StartsWith("replica_group"), HasSubstr(std::to_string(r)), HasSubstr(to_string(l))));
    EXPECT_THAT(
        error_of([&] { rank_list(l, l, r); }),
        AllOf(StartsWith("rank_list"), HasSubstr(std::to_string(r)), HasSubstr(to_string(l))));
  }
}

TEST(Errors, ConvertBuffers) {
  const layout a = mindspore_layout({2}, {0}, {4});
  const layout b = mindspore_layout({4}, {0}, {4});
  const transfer_plan p = plan(a, b);
  std::vector<std::byte> buf(64);
  std::vector<const std::byte*> src2{buf.data(), buf.data()}, src1{buf.data()};
  std::vector<std::byte*> dst4(4, buf.data()), dst3(3, buf.data());
  using cs = std::span<const std::byte* const>;
  using ds = std::span<std::byte* const>;
  EXPECT_THAT(
      error_of([&] { convert(p, cs(src1), ds(dst4), 4); }),
      AllOf(StartsWith("convert: 1 source shards"), HasSubstr(to_string(a)), HasSubstr("2 ranks")));
  EXPECT_THAT(
      error_of([&] { convert(p, cs(src2), ds(dst3), 4); }),
      AllOf(StartsWith("convert: 3 target shards"), HasSubstr(to_string(b)), HasSubstr("4 ranks")));
  EXPECT_THAT(error_of([&] { convert(p, cs(src2), ds(dst4), 0); }), HasSubstr("element size is 0"));
  std::vector<const std::byte*> null_src{buf.data(), nullptr};
  EXPECT_THAT(error_of([&] { convert(p, cs(null_src), ds(dst4), 4); }),
              AllOf(StartsWith("convert"), HasSubstr("source rank 1"), HasSubstr("null")));
  std::vector<std::byte*> null_dst{buf.data(), buf.data(), nullptr, buf.data()};
  EXPECT_THAT(error_of([&] { convert(p, cs(src2), ds(null_dst), 4); }),
              AllOf(StartsWith("convert"), HasSubstr("target rank 2"), HasSubstr("null")));
  // typed: sizes checked against the boxes
  std::vector<float> s0(2), s1(3), d(1);
  std::vector<std::span<const float>> in{s0, s1};
  std::vector<std::span<float>> out{d, d, d, d};
  EXPECT_THAT(error_of([&] { convert<float>(p, in, out); }),
              AllOf(HasSubstr("source shard of rank 1 has 3 elements"), HasSubstr(to_string(a)),
                    HasSubstr("has 2")));
  // merge: counts and missing regions
  std::vector<std::byte> full(16);
  EXPECT_THAT(error_of([&] { merge(a, cs(src1), full.data(), 4); }),
              AllOf(StartsWith("merge: 1 shards"), HasSubstr(to_string(a))));
  const layout r = mindspore_layout({2, 2}, {1}, {4});  // axis 1 repeats: regions {0,1}, {2,3}
  std::vector<const std::byte*> holes{nullptr, buf.data(), nullptr, buf.data()};
  EXPECT_NO_THROW(merge(r, cs(holes), full.data(), 4));
  std::vector<const std::byte*> gap{buf.data(), buf.data(), nullptr, nullptr};
  EXPECT_THAT(error_of([&] { merge(r, cs(gap), full.data(), 4); }),
              AllOf(StartsWith("merge: no shard given for region [2:4]"), HasSubstr(to_string(r)),
                    HasSubstr("ranks 2")));
}

// ---------------------------------------------------------------------------------------------
// Tier 2: preconditions inside the library go to the replaceable violation handler.

namespace {
struct custom_violation {
  std::string what;
};
[[noreturn]] void throwing_handler(const char*, const char* what, const char*, int) {
  throw custom_violation{what};
}
}  // namespace

TEST(Errors, PreconditionViolationsThrowContractViolation) {
  const box a{{0}, {2}}, b{{0, 0}, {2, 2}};
  try {
    (void)intersect(a, b);
    FAIL() << "no violation";
  } catch (const reshard::contract_violation& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("intersect: boxes of different rank"));
  }
}

TEST(Errors, ViolationHandlerIsReplaceable) {
  const violation_handler old = set_violation_handler(&throwing_handler);
  const box a{{0}, {2}}, b{{0, 0}, {2, 2}};
  try {
    (void)intersect(a, b);
    ADD_FAILURE() << "no violation";
  } catch (const custom_violation& v) {
    EXPECT_THAT(v.what, HasSubstr("intersect"));
  }
  EXPECT_EQ(set_violation_handler(old), &throwing_handler);
  EXPECT_THROW((void)intersect(a, b), reshard::contract_violation);
  // null restores the default
  set_violation_handler(nullptr);
  EXPECT_THROW((void)intersect(a, b), reshard::contract_violation);
}

TEST(Errors, ErrorIsARuntimeError) {
  EXPECT_THROW(report_error("x"), std::runtime_error);
  EXPECT_THROW(report_error("x"), reshard::error);
  EXPECT_EQ(error_of([] { report_error("exact text"); }), "exact text");
}
