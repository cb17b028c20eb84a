// Tests of reshard/io/name_rules.hpp without files: glob selection, the rename order (exact map,
// then the first regex found, then the name itself), every error of select_names, the RE2 regexes
// on inputs that made std::regex recurse per character or backtrack exponentially, the
// ECMAScript replacement format against std::regex_replace, and the laws of a selection.
#include <reshard/io/name_rules.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace reshard::io;
using reshard_test::throws_error;

namespace {

using names = std::set<std::string, std::less<>>;

const names model{"layer0.weight",         "layer0.bias",   "layer1.weight", "layer1.bias",
                  "moments.layer0.weight", "learning_rate", "global_step"};

std::map<std::string, std::string> decided(const name_rules& r, const names& all = model) {
  const auto s = select_names(r, all, "merge");
  return {s.renamed.begin(), s.renamed.end()};
}

std::string rename_one(const std::string& re, const std::string& with, const std::string& name) {
  return rename_regex(re, with, "op").replace_all(name);
}

}  // namespace

TEST(name_rules, globs_select_whole_names) {
  name_rules r;
  r.include = {"layer?.*", "global_step"};
  r.exclude = {"*.bias"};
  const auto s = select_names(r, model, "merge");
  EXPECT_EQ(decided(r), (std::map<std::string, std::string>{{"global_step", "global_step"},
                                                            {"layer0.weight", "layer0.weight"},
                                                            {"layer1.weight", "layer1.weight"}}));
  EXPECT_EQ(s.excluded,
            (names{"layer0.bias", "layer1.bias", "moments.layer0.weight", "learning_rate"}));
  EXPECT_TRUE(s.selected("layer0.weight"));
  EXPECT_FALSE(s.selected("layer0.bias"));
  EXPECT_EQ(s.output_name("layer0.weight"), "layer0.weight");

  name_rules brackets;
  brackets.include = {"layer[1-9].*"};  // fnmatch's classes; `*` crosses dots
  EXPECT_EQ(decided(brackets).size(), 2u);
  name_rules partial;
  partial.include = {"layer0"};  // a glob matches the whole name, never a part
  EXPECT_TRUE(throws_error(
      [&] { select_names(partial, model, "merge"); },
      {"merge: include pattern 'layer0' matches no parameter of the sources (7 parameters; "
       "`reshard inspect` lists them)"}));
}

TEST(name_rules, exact_map_then_first_regex_then_own_name) {
  name_rules r;
  r.rename = {{"^moments\\.", "adam_m."}, {"layer(\\d+)", "block$1"}};
  r.rename_exact = {{"layer1.bias", "b1"}};
  EXPECT_EQ(decided(r), (std::map<std::string, std::string>{
                            {"global_step", "global_step"},
                            {"layer0.bias", "block0.bias"},
                            {"layer0.weight", "block0.weight"},
                            {"layer1.bias", "b1"},
                            {"layer1.weight", "block1.weight"},
                            {"learning_rate", "learning_rate"},
                            {"moments.layer0.weight", "adam_m.layer0.weight"}}));
  const renamer rn(r, "op");
  EXPECT_EQ(rn("layer1.bias").name, "b1");
  EXPECT_EQ(rn("layer1.bias").rule, renamer::npos);
  EXPECT_EQ(rn("moments.layer0.weight").rule,
            0u);  // the first rule found wins, even if others match too
  EXPECT_EQ(rn("layer0.weight").rule, 1u);
  EXPECT_EQ(rn("global_step").rule, renamer::npos);
}

TEST(name_rules, every_match_is_replaced_in_ecmascript_format) {
  EXPECT_EQ(rename_one("a", "x", "banana"), "bxnxnx");
  EXPECT_EQ(rename_one("(an)", "[$1]", "banana"), "b[an][an]a");
  EXPECT_EQ(rename_one("n", "<$&>", "banana"), "ba<n>a<n>a");
  EXPECT_EQ(rename_one("n", "$$", "an"), "a$");
  EXPECT_EQ(rename_one("n", "$", "an"), "a$");
  EXPECT_EQ(rename_one("n", "$x", "an"), "a$x");
  EXPECT_EQ(rename_one("n", "$`|$'", "anb"), "aa|bb");
  EXPECT_EQ(rename_one("(a)|(b)", "$2", "ab"), "b");  // a group that did not take part: nothing
  EXPECT_EQ(rename_one("(a)", "$9", "a"), "");        // a group the regex does not have: nothing
  EXPECT_EQ(rename_one("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)", "$10$1", "abcdefghij"), "ja");
  EXPECT_EQ(rename_one("x*", "-", "abc"), "-a-b-c-");  // empty matches, one byte apart
  EXPECT_EQ(rename_one("x*", "-", "xxa"), "--a-");
  EXPECT_EQ(rename_one("(?:|a)", "-", "ab"), "-a-b-");  // std::regex_replace: "---b-" (docs/cli.md)
  EXPECT_EQ(rename_one("^", "p.", "w"), "p.w");
  EXPECT_EQ(rename_one("\\bw", "W", "w.w"), "W.W");
  EXPECT_EQ(rename_one("\xC3\xA9", "e", "caf\xC3\xA9"), "cafe");  // bytes: UTF-8 passes through
  EXPECT_EQ(rename_one(".", "-", "\xFF"), "-");                   // one byte, not a UTF-8 character
}

// The replacement as std::regex_replace gives it, on cases both engines accept (the engine's
// regexes were std::regex's ECMAScript before RE2: outputs must not change).
TEST(name_rules, replacements_equal_std_regex_replace) {
  const std::vector<std::pair<std::string, std::string>> rules{
      {"a", "x"},       {"(an)", "[$1]"}, {"n", "<$&>"},           {"n", "$$"},
      {"n", "$`|$'"},   {"x*", "-"},      {"(a)|(b)", "$2"},       {"^\\w+\\.", "p."},
      {"\\d+$", "#$&"}, {"[.]", "/"},     {"(\\w)(\\w*)", "$2$1"}, {"b*", "[$&]"},
      {"a?", "<$`>"},   {"", "_"},        {"(a)*", "$1."},
  };
  for (const std::string name :
       {"banana", "an", "anb", "ab", "", "layer12.weight", "xxa", "bba", "a.b.c"})
    for (const auto& [re, with] : rules)
      EXPECT_EQ(rename_one(re, with, name), std::regex_replace(name, std::regex(re), with))
          << "regex " << re << ", replacement " << with << ", name " << name;
}

// Over generated regexes (literals, `.`, classes, groups, alternation, greedy quantifiers and
// anchors: no lazy quantifier or empty first alternative, whose empty matches differ, see
// rename_regex::replace_all) and names: found and replaced as std::regex found and replaced.
RC_GTEST_PROP(name_rules_props, replacements_equal_std_regex_replace, ()) {
  const auto unit = rc::gen::element<std::string>("a", "b", ".", "[ab]", "[^a]", "\\.", "(a)",
                                                  "(b+)", "(.)", "(a|b)", "(?:ab|ba)", "(a|bb|.)");
  const auto atom =
      rc::gen::apply([](std::string u, std::string q) { return u + q; }, unit,
                     rc::gen::element<std::string>("", "", "+", "*", "?", "{2}", "{1,2}"));
  std::string re = *rc::gen::element<std::string>("", "^");
  for (const auto& a :
       *rc::gen::resize(3, rc::gen::nonEmpty(rc::gen::container<std::vector<std::string>>(atom))))
    re += a;
  re += *rc::gen::element<std::string>("", "", "$");
  const auto token =
      rc::gen::element<std::string>("x", "$1", "$2", "$&", "$$", "$`", "$'", "$", "-");
  std::string with;
  for (const auto& t : *rc::gen::resize(3, rc::gen::container<std::vector<std::string>>(token)))
    with += t;
  const std::string name =
      *rc::gen::resize(8, rc::gen::container<std::string>(rc::gen::element('a', 'b', '.', 'c')));
  const rename_regex r(re, with, "op");
  const std::regex e(re);
  RC_ASSERT(r.found_in(name) == std::regex_search(name, e));
  RC_ASSERT(r.replace_all(name) == std::regex_replace(name, e, with));
}

// Inputs that std::regex could not take: a recursion per character of the name (a 50,000-
// character name crashed with `x+`), and an exponential backtracking of `(a+)+$` over "a"*30 + "!".
TEST(name_rules, long_names_and_nested_quantifiers_finish) {
  const std::string xs(50'000, 'x');
  name_rules r;
  r.rename = {{"x+", "L"}};
  EXPECT_EQ(decided(r, {xs}), (std::map<std::string, std::string>{{xs, "L"}}));
  EXPECT_EQ(rename_one("(x)+", "$1", xs), "x");
  EXPECT_EQ(rename_one("x", "y", xs), std::string(50'000, 'y'));

  const std::string as = std::string(30, 'a') + "!";
  name_rules nested;
  nested.rename = {{"(a+)+$", "b"}};
  EXPECT_EQ(renamer(nested, "op")(as).name, as);  // not found: the name is its own
  EXPECT_TRUE(throws_error(
      [&] { select_names(nested, {as}, "merge"); },
      {"merge: rename rule '(a+)+$' matches no parameter of the sources (1 parameters"}));
  EXPECT_EQ(renamer(nested, "op")(std::string(30, 'a')).name, "b");
}

TEST(name_rules, errors_name_the_rule) {
  name_rules collide;
  collide.rename = {{".+", "x"}};
  EXPECT_TRUE(throws_error(
      [&] { select_names(collide, model, "merge"); },
      {"merge: parameters 'global_step' and 'layer0.bias' would both be written as 'x' (check "
       "the rename rules)"}));
  name_rules exact_collide;  // an exact name onto another parameter's own name
  exact_collide.rename_exact = {{"layer0.bias", "layer1.bias"}};
  EXPECT_TRUE(throws_error(
      [&] { select_names(exact_collide, model, "merge"); },
      {"parameters 'layer0.bias' and 'layer1.bias' would both be written as 'layer1.bias'"}));
  name_rules collide_excluded = collide;  // excluded parameters take no name
  collide_excluded.include = {"global_step"};
  EXPECT_EQ(decided(collide_excluded), (std::map<std::string, std::string>{{"global_step", "x"}}));

  name_rules empty;
  empty.rename = {{"^global_step$", ""}};
  EXPECT_TRUE(throws_error([&] { select_names(empty, model, "merge"); },
                           {"merge: rename gives parameter 'global_step' an empty name"}));
  name_rules nothing;
  nothing.exclude = {"*"};
  EXPECT_TRUE(throws_error([&] { select_names(nothing, model, "merge"); },
                           {"merge: the include and exclude patterns select no parameter"}));
  name_rules exclude_none;
  exclude_none.exclude = {"nope*"};
  EXPECT_TRUE(throws_error(
      [&] { select_names(exclude_none, model, "merge"); },
      {"merge: exclude pattern 'nope*' matches no parameter of the sources (7 parameters"}));
  name_rules rule_none;
  rule_none.rename = {{"nope", "x"}};
  EXPECT_TRUE(throws_error([&] { select_names(rule_none, model, "merge"); },
                           {"merge: rename rule 'nope' matches no parameter of the sources"}));
  name_rules shadowed;  // found only in names an exact entry renames: it matches none
  shadowed.rename_exact = {{"learning_rate", "lr"}};
  shadowed.rename = {{"learning", "x"}};
  EXPECT_TRUE(throws_error([&] { select_names(shadowed, model, "merge"); },
                           {"rename rule 'learning' matches no"}));
  name_rules absent;
  absent.rename_exact = {{"absent", "x"}};
  EXPECT_TRUE(
      throws_error([&] { select_names(absent, model, "merge"); },
                   {"merge: renamed parameter 'absent' matches no parameter of the sources"}));
}

// What RE2 refuses (it never backtracks) is an error naming the rule and RE2's reason.
TEST(name_rules, regexes_re2_refuses) {
  for (const auto& [re, reason] :
       std::vector<std::pair<std::string, std::string>>{{"(", "missing )"},
                                                        {"(a)\\1", "invalid escape sequence"},
                                                        {"a(?=b)", "invalid perl operator"},
                                                        {"(?<=a)b", "invalid"}}) {
    name_rules r;
    r.rename = {{re, "x"}};
    EXPECT_TRUE(
        throws_error([&] { select_names(r, model, "merge"); },
                     {"merge: rename " + reshard::io::detail::quote_name(re) +
                          ": not a regular expression RE2 accepts (no backreferences, lookahead or "
                          "lookbehind): ",
                      reason}));
  }
}

// A selection is a bijection from the selected names onto distinct non-empty output names, each
// the renamer's, and the selected and excluded names partition the sources; or it is an error.
RC_GTEST_PROP(name_rules_props, selection_is_injective_or_an_error, ()) {
  const auto name = rc::gen::container<std::string>(rc::gen::element('a', 'b', '.', '1'));
  const auto all = *rc::gen::container<names>(name);
  name_rules r;
  const auto glob = rc::gen::element<std::string>("a*", "*b", "*.*", "?", "*1*", "[ab]*", "*");
  r.include = *rc::gen::resize(2, rc::gen::container<std::vector<std::string>>(glob));
  r.exclude = *rc::gen::resize(2, rc::gen::container<std::vector<std::string>>(glob));
  const auto re = rc::gen::element<std::string>("a", "^b", "\\.", "(a)(b)?", "1$", "[ab]+", "b*");
  const auto with = rc::gen::element<std::string>("", "x", "$1", "$&$&", "$2.", "a");
  r.rename =
      *rc::gen::resize(3, rc::gen::container<std::vector<std::pair<std::string, std::string>>>(
                              rc::gen::pair(re, with)));
  if (!all.empty() && *rc::gen::arbitrary<bool>()) r.rename_exact = {{*all.begin(), *name}};
  name_selection s;
  try {
    s = select_names(r, all, "op");
  } catch (const reshard::error&) {
    RC_SUCCEED("an error");
  }
  const renamer rn(r, "op");
  std::set<std::string> outputs;
  for (const auto& [from, to] : s.renamed) {
    RC_ASSERT(all.count(from) == 1u);
    RC_ASSERT(s.excluded.count(from) == 0u);
    RC_ASSERT(!to.empty());
    RC_ASSERT(to == rn(from).name);
    RC_ASSERT(outputs.insert(to).second);
  }
  RC_ASSERT(s.renamed.size() + s.excluded.size() == all.size());
}
