// io/json_reader.hpp, the strict JSON reader behind every JSON file reshard reads: trailing text,
// duplicate keys (with the line, column and path of the second), nesting, unknown keys with the
// nearest known one; and its use by the strategy, rename-map and Hugging Face index readers. Each
// case here was accepted before (nlohmann alone keeps the last of two equal keys, and reading a
// stream stops after the first value).
#include <reshard/io/hf.hpp>
#include <reshard/io/json_reader.hpp>
#include <reshard/io/rename_map.hpp>
#include <reshard/io/strategy.hpp>

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "io_test_util.hpp"

using namespace reshard::io;
using reshard_test::throws_error;

namespace {

nlohmann::json parse(const std::string& text) { return parse_json_strict<nlohmann::json>(text, "f.json: "); }

const std::string layout_w = R"({"dev_matrix": [2], "tensor_map": [0], "tensor_shape": [4], "field": 0,
  "opt_weight_shard_step": 0, "opt_weight_shard_size": 0})";

std::string strategy_with(const std::string& w) {
  return R"({"current_stage": 1, "parallel_layout_item": {"w": )" + w + "}}";
}

}  // namespace

TEST(json_reader, accepts_one_value_with_white_space_around) {
  EXPECT_EQ(parse(" \n{\"a\": [1, {\"b\": 2}], \"c\": null}\n\t "), nlohmann::json::parse(R"({"a":[1,{"b":2}],"c":null})"));
  EXPECT_EQ(parse("[{\"a\": 1}, {\"a\": 2}]").size(), 2u);  // equal keys in different objects
}

TEST(json_reader, refuses_trailing_text) {
  EXPECT_TRUE(throws_error([] { parse(R"({"w0":"q"} garbage)"); }, {"f.json: invalid JSON", "line 1, column 12", "expected end of input"}));
  EXPECT_TRUE(throws_error([] { parse("{}\n{}"); }, {"f.json: invalid JSON", "line 2"}));
  EXPECT_TRUE(throws_error([] { parse("1 2"); }, {"f.json: invalid JSON"}));
  EXPECT_TRUE(throws_error([] { parse(""); }, {"f.json: invalid JSON"}));
  // the library's tag ("[json.exception.parse_error.101]") is left out of the message
  try {
    parse("{} x");
    FAIL() << "accepted";
  } catch (const reshard::error& e) {
    EXPECT_EQ(std::string(e.what()).find("[json.exception"), std::string::npos) << e.what();
  }
}

TEST(json_reader, refuses_duplicate_keys_naming_key_place_and_path) {
  EXPECT_TRUE(throws_error([] { parse(R"({"a": 1, "a": 2})"); },
                           {"f.json: JSON object has the key 'a' twice (the second at line 1, column 10)"}));
  EXPECT_TRUE(throws_error([] { parse("{\"x\": {\"y\": [{\"k\": 1,\n  \"k\": 1}]}}"); },
                           {"JSON object 'x'.'y' has the key 'k' twice (the second at line 2, column 3)"}));
  EXPECT_TRUE(throws_error([] { parse(R"({"a": {"b": 1}, "c": {"d": 1, "d": 2}})"); }, {"JSON object 'c' has the key 'd' twice"}));
  EXPECT_TRUE(throws_error([] { parse(R"([{"a": {"q": 1}}, {"b": 1, "b": 1}])"); },
                           {"f.json: JSON object has the key 'b' twice"}));  // no stale 'a' in the path
  EXPECT_TRUE(throws_error([] { parse(R"({"\u0001": 1, "\u0001": 1})"); }, {"the key '\\x01' twice (the second at line 1, column 15)"}));
  EXPECT_TRUE(throws_error([] { parse(R"({"a\"": 1, "a\"": 2})"); }, {"the key 'a\"' twice (the second at line 1, column 12)"}));
  EXPECT_TRUE(throws_error([] { parse(R"({"a\\": 1, "a\\": 2})"); }, {"the key 'a\\x5c' twice (the second at line 1, column 12)"}));
}

TEST(json_reader, refuses_deep_nesting_and_huge_numbers) {
  EXPECT_NO_THROW(parse(std::string(json_max_depth, '[') + std::string(json_max_depth, ']')));
  EXPECT_TRUE(throws_error([] { parse(std::string(json_max_depth + 1, '[') + std::string(json_max_depth + 1, ']')); },
                           {"f.json: JSON nests arrays and objects deeper than 64 levels"}));
  EXPECT_TRUE(throws_error([] { parse("[1e999]"); }, {"f.json: invalid JSON"}));
}

TEST(json_reader, unknown_keys_name_the_nearest_known_one) {
  EXPECT_EQ(nearest_key("opt_weight_shard_sise", {"opt_weight_shard_step", "opt_weight_shard_size", "field"}),
            "opt_weight_shard_size");
  EXPECT_EQ(nearest_key("dev_matrx", {"tensor_map", "dev_matrix"}), "dev_matrix");
  EXPECT_EQ(nearest_key("x", {}), "");
  const auto j = nlohmann::json::parse(R"({"a": 1, "bb": 2})");
  EXPECT_NO_THROW(check_known_keys(j, {"a", "bb", "c"}, "w: "));
  EXPECT_NO_THROW(check_known_keys(nlohmann::json::parse("[1]"), {"a"}, "w: "));
  EXPECT_TRUE(throws_error([&] { check_known_keys(j, {"a", "b"}, "w: ", " in the thing"); },
                           {"w: unknown key 'bb' in the thing (did you mean 'b'?)"}));
}

TEST(json_reader, strategy_refuses_unknown_keys) {
  EXPECT_NO_THROW(decode_strategy_json(strategy_with(layout_w), "s.json"));
  std::string misspelt = layout_w;
  misspelt.replace(misspelt.find("opt_weight_shard_size"), 21, "opt_weight_shard_sise");
  EXPECT_TRUE(throws_error([&] { decode_strategy_json(strategy_with(misspelt), "s.json"); },
                           {"strategy: s.json: parameter 'w': unknown key 'opt_weight_shard_sise' (did you mean "
                            "'opt_weight_shard_size'?)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        decode_strategy_json(R"({"current_stage": 1, "parallel_strategy_items": {}, "parallel_layout_item": {"w": )" +
                                 layout_w + "}}",
                             "s.json");
      },
      {"strategy: s.json: unknown key 'parallel_strategy_items' (did you mean 'parallel_strategy_item'?)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        decode_strategy_json(R"({"current_stage": 1, "parallel_strategy_item": {"n": {"stage": 0, "stages": 1}},
                                 "parallel_layout_item": {"w": )" + layout_w + "}}",
                             "s.json");
      },
      {"strategy: s.json: node 'n': unknown key 'stages' (did you mean 'stage'?)"}));
  // the keys MindSpore writes beside the parameter layouts are accepted
  const auto s = decode_strategy_json(
      R"({"current_stage": 0, "parallel_strategy_item": {"n": {"stage": 0, "parallel_strategy": [[2]]}},
          "parallel_out_strategy_item": {"n": {"stage": 0, "parallel_strategy": [[2]]}},
          "parallel_layout_item": {"w": )" + layout_w + R"(},
          "parallel_layout_value_item": {"n": {"0": {"dev_matrix": [2], "tensor_map": [[0]], "interleaved_parallel": false, "alias_name": ["a"]}}},
          "parallel_out_layout_value_item": {}, "parallel_newshape_layout_value_item": {},
          "parallel_out_newshape_layout_value_item": {}})",
      "s.json");
  EXPECT_EQ(s.layouts.size(), 1u);
  std::string split = layout_w;
  split.insert(split.size() - 1, R"(, "param_split_shape": [1, 3], "indices_offset": [0, 1])");
  EXPECT_EQ(decode_strategy_json(strategy_with(split), "s.json").layouts[0].second.param_split_shape.size(), 2u);
}

TEST(json_reader, strategy_refuses_trailing_text_and_duplicate_parameters) {
  EXPECT_TRUE(throws_error([&] { decode_strategy_json(strategy_with(layout_w) + " x", "s.json"); }, {"strategy: s.json: invalid JSON"}));
  EXPECT_TRUE(throws_error(
      [&] {
        decode_strategy_json(R"({"current_stage": 1, "parallel_layout_item": {"w": )" + layout_w + ", \"w\": " + layout_w + "}}",
                             "s.json");
      },
      {"strategy: s.json: JSON object 'parallel_layout_item' has the key 'w' twice"}));
}

TEST(json_reader, rename_map) {
  EXPECT_EQ(decode_rename_map(R"({"a": "b", "c": "d"})", "m.json"), (std::map<std::string, std::string>{{"a", "b"}, {"c", "d"}}));
  EXPECT_TRUE(decode_rename_map("{}", "m.json").empty());
  EXPECT_TRUE(throws_error([] { decode_rename_map(R"({"w0":"q"} garbage)", "m.json"); }, {"m.json: invalid JSON"}));
  EXPECT_TRUE(throws_error([] { decode_rename_map(R"({"w0": "q", "w0": "r"})", "m.json"); },
                           {"m.json: JSON object has the key 'w0' twice"}));
  EXPECT_TRUE(throws_error([] { decode_rename_map("[1]", "m.json"); }, {"m.json: not a JSON object"}));
  EXPECT_TRUE(throws_error([] { decode_rename_map(R"({"a": 1})", "m.json"); }, {"m.json: the new name of 'a' is 1, not a string"}));
}

TEST(json_reader, hf_index) {
  namespace fs = std::filesystem;
  const fs::path dir = reshard_test::temp_root() / "json_reader_hf";
  fs::remove_all(dir);
  fs::create_directories(dir);
  reshard_test::write_text(dir / hf_index_name, R"({"weight_map": {"w": "a.safetensors"}} junk)");
  EXPECT_TRUE(throws_error([&] { hf_checkpoint c(dir); }, {"hf: ", hf_index_name, "invalid JSON"}));
  reshard_test::write_text(dir / hf_index_name, R"({"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}})");
  EXPECT_TRUE(throws_error([&] { hf_checkpoint c(dir); }, {"JSON object 'weight_map' has the key 'w' twice"}));
  fs::remove_all(dir);
}
