// Tests of reshard/io/dtype_rules.hpp without files: which dtype each parameter is written in
// (the first named glob, else `all` for floating point, else its own), the refusals, the check
// that every named glob matches a parameter of the sources, and the warning for kept dtypes.
#include <reshard/io/dtype_rules.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace reshard::io;
using reshard_test::throws_error;

namespace {

dtype_rules rules() {
  dtype_rules r;
  r.all = dtype::bfloat16;
  r.named = {
      {"*.norm*", dtype::float32}, {"*norm.bias", dtype::float16}, {"head.*", dtype::float16}};
  return r;
}

cast_decision decide(const dtype_rules& r, const char* name, dtype from, bool map = false) {
  return decide_cast(r, name, from, map, "merge: rank_0/a.ckpt");
}

}  // namespace

TEST(dtype_rules, first_named_glob_then_all_then_own) {
  const dtype_rules r = rules();
  auto d = decide(r, "layer.weight", dtype::float32);  // floating point: `all`
  EXPECT_EQ(d.to, dtype::bfloat16);
  EXPECT_EQ(d.rule, cast_decision::npos);
  EXPECT_FALSE(d.kept);
  d = decide(r, "layer.norm.bias", dtype::float16);  // the first glob wins over the second
  EXPECT_EQ(d.to, dtype::float32);
  EXPECT_EQ(d.rule, 0u);
  d = decide(r, "head.w", dtype::float16);  // named with its own dtype: matched, not cast
  EXPECT_EQ(d.to, std::nullopt);
  EXPECT_EQ(d.rule, 2u);
  EXPECT_FALSE(d.kept);
  d = decide(r, "layer.bias", dtype::bfloat16);  // already `all`'s dtype
  EXPECT_EQ(d.to, std::nullopt);
  EXPECT_FALSE(d.kept);
  d = decide(r, "global_step", dtype::int32);  // not floating point: kept, with a warning
  EXPECT_EQ(d.to, std::nullopt);
  EXPECT_TRUE(d.kept);
  d = decide(r, "table", dtype::float32, true);  // a map tensor keeps its dtype under `all`
  EXPECT_EQ(d.to, std::nullopt);
  EXPECT_TRUE(d.kept);

  dtype_rules named_only = rules();
  named_only.all.reset();
  d = decide(named_only, "global_step", dtype::int32);
  EXPECT_EQ(d.to, std::nullopt);
  EXPECT_FALSE(d.kept);  // no `all`: nothing to warn about
  EXPECT_EQ(decide(named_only, "layer.weight", dtype::float32).to, std::nullopt);
}

TEST(dtype_rules, refusals_name_the_file_parameter_and_rule) {
  dtype_rules r;
  r.named = {{"step*", dtype::float32}, {"map*", dtype::float16}};
  EXPECT_TRUE(throws_error(
      [&] { decide(r, "step", dtype::int32); },
      {"merge: rank_0/a.ckpt: parameter 'step' (dtype rule 'step*'): cannot cast Int32 to "
       "Float32",
       "even when named explicitly"}));
  EXPECT_TRUE(throws_error(
      [&] { decide(r, "map.table", dtype::float32, true); },
      {"merge: rank_0/a.ckpt: parameter 'map.table' (dtype rule 'map*'): a map tensor is never "
       "cast"}));
  EXPECT_EQ(decide(r, "map.table", dtype::float16, true).to, std::nullopt);  // its own dtype: fine
}

TEST(dtype_rules, every_named_glob_matches_a_source_parameter) {
  const dtype_rules r = rules();
  int asked = 0;
  const auto names = [&] {
    ++asked;
    return std::set<std::string>{"head.w", "layer.norm.bias", "other_stage.norm"};
  };
  check_cast_rules(r, {1, 1, 1}, names, "merge");
  EXPECT_EQ(asked, 0);  // every glob matched a parameter written: the sources are not asked
  check_cast_rules(r, {0, 1}, names,
                   "merge");  // '*.norm*' matches a parameter not written; hits may be short
  EXPECT_EQ(asked, 1);
  dtype_rules nope = r;
  nope.named.push_back({"nope*", dtype::float32});
  EXPECT_TRUE(throws_error(
      [&] {
        check_cast_rules(nope, {1, 1, 1, 0}, names, "merge");
      },
      {"merge: dtype rule 'nope*'=Float32 matches no parameter of the sources (3 parameters; "
       "`reshard inspect` lists them)"}));
}

TEST(dtype_rules, kept_dtype_warning) {
  EXPECT_EQ(kept_dtype_warning(1, "step", dtype::bfloat16),
            "1 parameter that is not floating point (such as 'step') keeps its dtype: the cast to "
            "BFloat16 applies "
            "to floating-point parameters only (name one with GLOB=DTYPE to cast it)");
  EXPECT_EQ(kept_dtype_warning(3, "step", dtype::float16),
            "3 parameters that are not floating point (such as 'step') keep their dtype: the cast "
            "to Float16 "
            "applies to floating-point parameters only (name one with GLOB=DTYPE to cast it)");
}
