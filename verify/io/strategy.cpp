// Tests of reshard/io/strategy.hpp: the spec's golden encodings both ways, protobuf and JSON
// round trips as properties, packed/unpacked reading, malformed input, merging pipeline
// stages, the stage-name splitter, and cross-checks with protobuf's Python library.
#include <reshard/io/strategy.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;
using namespace std::string_literals;

namespace {

// docs/formats.md#2-strategy-files
constexpr std::string_view golden_map =
    "0801121a0a084d61744d756c5f77120e08001204080208011204080108041a240a0177121f0a0408020804120d080108ffffffffffffffffff01"
    "1a002200280030003800";
constexpr std::string_view golden_tuple_layouts = "0a06080208020802120408020801120208001a002200280030003800";

strategy_file golden_strategy() {
  strategy_file s;
  s.current_stage = 1;
  s.nodes.push_back({"MatMul_w", {0, {{2, 1}, {1, 4}}}});
  param_layout w;
  w.dev_matrix = {2, 4};
  w.tensor_map = {{1}, {-1}};
  s.layouts.push_back({"w", w});
  return s;
}

param_layout golden_tuple() {
  param_layout t;
  t.dev_matrix = {2, 2, 2};
  t.tensor_map = {{2, 1}, {0}};
  t.tuple_form = true;
  return t;
}

std::string str(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
std::string hex(std::string_view s) { return to_hex(as_bytes(s)); }
std::span<const std::byte> bytes_of(const std::string& s) { return as_bytes(s); }

std::string varint(std::uint64_t v) {
  std::string s;
  do {
    std::uint8_t b = v & 0x7F;
    v >>= 7;
    if (v) b |= 0x80;
    s.push_back(static_cast<char>(b));
  } while (v);
  return s;
}
std::string len_field(int field, std::string_view payload) {
  return std::string(1, static_cast<char>(field << 3 | 2)) + varint(payload.size()) + std::string(payload);
}
std::string varint_field(int field, std::uint64_t v) { return std::string(1, static_cast<char>(field << 3)) + varint(v); }

// A ParallelStrategyMap holding one layout "p" whose ParallelLayouts message is `layouts`.
std::string map_with_layouts(std::string_view layouts) {
  return varint_field(1, 1) + len_field(3, len_field(1, "p") + len_field(2, layouts));
}
std::string decode_error(const std::string& bytes) {
  return error_of([&] { (void)decode_strategy_protobuf(bytes_of(bytes), "s.ckpt"); });
}
std::string json_error(const std::string& text) { return error_of([&] { (void)decode_strategy_json(text, "s.json"); }); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// golden encodings

TEST(strategy_golden, map_is_written_byte_exact) { EXPECT_EQ(hex(encode_strategy_protobuf(golden_strategy())), golden_map); }

TEST(strategy_golden, map_reads_back) {
  const auto bytes = from_hex(golden_map);
  EXPECT_EQ(decode_strategy_protobuf(bytes, "g"), golden_strategy());
}

TEST(strategy_golden, tuple_layouts_are_written_byte_exact) {
  EXPECT_EQ(hex(reshard::io::detail::encode_parallel_layouts(golden_tuple(), "t: ")), golden_tuple_layouts);
  strategy_file s;
  s.layouts.push_back({"p", golden_tuple()});
  EXPECT_EQ(hex(encode_strategy_protobuf(s)), hex(map_with_layouts(str(from_hex(golden_tuple_layouts)))));
}

TEST(strategy_golden, tuple_layouts_read_back) {
  const auto s = decode_strategy_protobuf(bytes_of(map_with_layouts(str(from_hex(golden_tuple_layouts)))), "t");
  ASSERT_EQ(s.layouts.size(), 1u);
  EXPECT_EQ(s.layouts[0].second, golden_tuple());
}

TEST(strategy_golden, files_by_suffix) {
  temp_dir dir;
  write_strategy(dir / "s.ckpt", golden_strategy());
  EXPECT_EQ(hex(str(read_bytes(dir / "s.ckpt"))), golden_map);
  EXPECT_EQ(read_strategy(dir / "s.ckpt"), golden_strategy());
  auto shaped = golden_strategy();
  shaped.layouts[0].second.tensor_shape = {64, 32};
  write_strategy(dir / "s.json", shaped);
  const auto j = nlohmann::json::parse(str(read_bytes(dir / "s.json")));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"current_stage": 1, "parallel_strategy_item": {"MatMul_w": {"stage": 0,
      "parallel_strategy": [[2,1],[1,4]]}}, "parallel_layout_item": {"w": {"dev_matrix": [2,4], "tensor_map": [1,-1],
      "tensor_shape": [64,32], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}})"));
  EXPECT_EQ(read_strategy(dir / "s.json"), shaped);
  EXPECT_TRUE(throws_error([&] { write_strategy(dir / "s.json", shaped); }, {"strategy: ", "s.json", "destination exists"}));
  write_strategy(dir / "s.json", golden_strategy(), true);
  EXPECT_EQ(read_strategy(dir / "s.json"), golden_strategy());
}

TEST(strategy_golden, one_dim_tuple_gets_an_extra_empty_tensor_map) {
  param_layout t;
  t.dev_matrix = {2, 2};
  t.tensor_map = {{1, 0}};
  t.tuple_form = true;
  const auto bytes = reshard::io::detail::encode_parallel_layouts(t, "");
  EXPECT_EQ(hex(bytes), "0a0408020802" "1204" "08010800" "1200" "1a002200280030003800");
  strategy_file s;
  s.layouts.push_back({"p", t});
  EXPECT_EQ(decode_strategy_protobuf(bytes_of(encode_strategy_protobuf(s)), "t").layouts[0].second, t);
}

TEST(strategy_golden, prints_the_layout_notation) {
  std::ostringstream os;
  auto l = golden_strategy().layouts[0].second;
  l.tensor_shape = {8, 4};
  os << l << " | " << golden_tuple();
  l.opt_weight_shard_step = 2;
  l.opt_weight_shard_size = 4;
  l.param_split_shape = {3, 5};
  os << " | " << l;
  EXPECT_EQ(os.str(), "dev[2,4] map[1,-1] shape[8,4] | dev[2,2,2] map[[2,1],[0]] shape[] | "
                      "dev[2,4] map[1,-1] shape[8,4] split[3,5] opt(step 2, size 4)");
}

// ---------------------------------------------------------------------------------------------
// reading variants

TEST(strategy_read, packed_and_unpacked_repeated_fields) {
  // the golden map with every repeated scalar packed
  const std::string layouts = len_field(1, len_field(1, varint(2) + varint(4))) +
                              len_field(2, len_field(1, varint(1) + varint(~std::uint64_t{0}))) + len_field(3, "") +
                              len_field(4, "") + varint_field(5, 0) + varint_field(6, 0) + varint_field(7, 0);
  const std::string item = len_field(1, "MatMul_w") +
                           len_field(2, varint_field(1, 0) + len_field(2, len_field(1, varint(2) + varint(1))) +
                                            len_field(2, len_field(1, varint(1) + varint(4))));
  const std::string packed = varint_field(1, 1) + len_field(2, item) + len_field(3, len_field(1, "w") + len_field(2, layouts));
  EXPECT_EQ(decode_strategy_protobuf(bytes_of(packed), "p"), golden_strategy());
}

TEST(strategy_read, negative_int32_in_five_bytes_is_accepted) {
  const std::string layouts = len_field(1, varint_field(1, 8)) + len_field(2, varint_field(1, 0xFFFFFFFFu)) +
                              varint_field(5, 0) + varint_field(6, 0xFFFFFFFFu) + varint_field(7, 0);
  const auto s = decode_strategy_protobuf(bytes_of(map_with_layouts(layouts)), "p");
  EXPECT_EQ(s.layouts[0].second.tensor_map, (std::vector<std::vector<std::int64_t>>{{-1}}));
  EXPECT_EQ(s.layouts[0].second.opt_weight_shard_step, -1);
}

TEST(strategy_read, several_split_shape_messages_concatenate_and_unknown_fields_are_skipped) {
  const std::string layouts = len_field(1, varint_field(1, 2)) + len_field(1, varint_field(1, 9)) +  // DevMatrix[1] ignored
                              len_field(2, varint_field(1, 0)) + len_field(3, varint_field(1, 3)) +
                              len_field(3, varint_field(1, 5)) + len_field(4, varint_field(1, 0)) + varint_field(5, 0) +
                              varint_field(6, 0) + varint_field(7, 0) + varint_field(12, 77) + len_field(13, "x");
  const auto s = decode_strategy_protobuf(bytes_of(map_with_layouts(layouts) + varint_field(9, 1)), "p");
  const auto& l = s.layouts[0].second;
  EXPECT_EQ(l.dev_matrix, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(l.param_split_shape, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(l.indices_offset, (std::vector<std::int64_t>{0}));
}

TEST(strategy_read, json_tuple_entries_and_extra_keys) {
  const auto s = decode_strategy_json(R"({"current_stage": 3, "parallel_layout_item": {
      "t": {"dev_matrix": [4,2,2], "tensor_map": [[2,1],0], "tensor_shape": [8,8], "param_split_shape": [4,4]}},
      "parallel_layout_value_item": {"t": 1}})",
                                      "x.json");
  EXPECT_EQ(s.current_stage, 3u);
  EXPECT_TRUE(s.nodes.empty());
  const auto& t = s.layouts[0].second;
  EXPECT_TRUE(t.tuple_form);
  EXPECT_EQ(t.tensor_map, (std::vector<std::vector<std::int64_t>>{{2, 1}, {0}}));
  EXPECT_EQ(t.param_split_shape, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(t.field, 0);
}

TEST(strategy_read, json_keeps_file_order) {
  const auto s = decode_strategy_json(R"({"current_stage": 1, "parallel_layout_item": {
      "zeta": {"dev_matrix": [1], "tensor_map": [-1]}, "alpha": {"dev_matrix": [1], "tensor_map": [-1]}}})",
                                      "x.json");
  ASSERT_EQ(s.layouts.size(), 2u);
  EXPECT_EQ(s.layouts[0].first, "zeta");
  EXPECT_EQ(s.layouts[1].first, "alpha");
}

// ---------------------------------------------------------------------------------------------
// round trips

namespace {
strategy_file random_strategy(bool json) {
  strategy_file s;
  s.current_stage = *rc::gen::arbitrary<std::uint32_t>();
  auto name = [] { return *rc::gen::container<std::string>(rc::gen::inRange<char>(' ', '~')); };
  std::set<std::string> node_names, layout_names;
  for (auto n = *rc::gen::inRange(0, 4); n > 0; --n) {
    auto nm = name();
    if (json && !node_names.insert(nm).second) continue;
    node_strategy node{*rc::gen::arbitrary<std::uint32_t>(), {}};
    for (auto k = *rc::gen::inRange(0, 3); k > 0; --k)
      node.strategy.push_back(*rc::gen::container<std::vector<std::uint32_t>>(rc::gen::arbitrary<std::uint32_t>()));
    s.nodes.emplace_back(nm, node);
  }
  for (auto n = *rc::gen::inRange(1, 5); n > 0; --n) {
    auto nm = name();
    if (!layout_names.insert(nm).second) continue;
    param_layout l;
    for (auto r = *rc::gen::inRange(0, 4); r > 0; --r)
      l.dev_matrix.push_back(*rc::gen::inRange<std::int64_t>(0, std::int64_t{1} << 32));
    const auto rank = *rc::gen::inRange(0, 4);
    l.tuple_form = rank > 0 && *rc::gen::arbitrary<bool>();
    for (int d = 0; d < rank; ++d) {
      const auto axes = l.tuple_form ? *rc::gen::inRange(1, 4) : 1;
      std::vector<std::int64_t> entry;
      for (int a = 0; a < axes; ++a) entry.push_back(*rc::gen::inRange<std::int64_t>(-1, 8));
      l.tensor_map.push_back(entry);
    }
    if (json) l.tensor_shape = *rc::gen::container<std::vector<std::int64_t>>(rc::gen::arbitrary<std::int64_t>());
    l.param_split_shape = *rc::gen::container<std::vector<std::int64_t>>(rc::gen::arbitrary<std::int64_t>());
    l.indices_offset = *rc::gen::container<std::vector<std::int64_t>>(rc::gen::arbitrary<std::int64_t>());
    l.field = *rc::gen::arbitrary<std::int32_t>();
    l.opt_weight_shard_step = *rc::gen::arbitrary<std::int32_t>();
    l.opt_weight_shard_size = *rc::gen::arbitrary<std::int32_t>();
    s.layouts.emplace_back(nm, l);
  }
  return s;
}
}  // namespace

RC_GTEST_PROP(strategy_roundtrip, protobuf_decode_of_encode_is_identity, ()) {
  const auto s = random_strategy(false);
  const auto bytes = encode_strategy_protobuf(s);
  RC_ASSERT(decode_strategy_protobuf(bytes_of(bytes), "r") == s);
}

RC_GTEST_PROP(strategy_roundtrip, json_decode_of_encode_is_identity, ()) {
  const auto s = random_strategy(true);
  RC_ASSERT(decode_strategy_json(encode_strategy_json(s), "r.json") == s);
}

RC_GTEST_PROP(strategy_roundtrip, protobuf_drops_only_the_tensor_shape, ()) {
  auto s = random_strategy(true);
  const auto back = decode_strategy_protobuf(bytes_of(encode_strategy_protobuf(s)), "r");
  for (auto& [name, l] : s.layouts) l.tensor_shape.clear();
  RC_ASSERT(back == s);
}

// ---------------------------------------------------------------------------------------------
// malformed input and invalid values

TEST(strategy_malformed, every_truncation_of_the_golden_is_an_error) {
  const auto full = from_hex(golden_map);
  for (std::size_t n = 0; n < full.size(); ++n) {
    const auto msg = error_of([&] { (void)decode_strategy_protobuf(std::span(full).first(n), "/d/s.ckpt"); });
    EXPECT_EQ(msg.rfind("strategy: /d/s.ckpt: ", 0), 0u) << "prefix " << n << ": " << msg;
  }
}

TEST(strategy_malformed, truncated_file_names_file_and_parameter) {
  temp_dir dir;
  const auto full = str(from_hex(golden_map));
  write_text(dir / "s.ckpt", full.substr(0, full.size() - 3));
  EXPECT_TRUE(throws_error([&] { (void)read_strategy(dir / "s.ckpt"); },
                           {"strategy: " + (dir / "s.ckpt").string() + ": parameter 'w': ", "truncated"}));
}

TEST(strategy_malformed, protobuf_errors) {
  const std::string ok_tail = varint_field(5, 0) + varint_field(6, 0) + varint_field(7, 0);
  auto has = [](const std::string& msg, std::string_view part) {
    return msg.find(part) != std::string::npos && msg.rfind("strategy: s.ckpt: ", 0) == 0
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << part << "\"";
  };
  EXPECT_TRUE(has(decode_error(""), "missing required field current_stage"));
  EXPECT_TRUE(has(decode_error(varint_field(1, 1)), "holds no parameter layouts"));
  EXPECT_TRUE(has(decode_error(varint_field(1, 1) + varint_field(1, 1) + map_with_layouts(ok_tail)), "current_stage appears twice"));
  EXPECT_TRUE(has(decode_error(varint_field(1, std::uint64_t{1} << 33) + map_with_layouts(ok_tail)), "current_stage value 8589934592 is outside uint32"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(varint_field(5, 0) + varint_field(6, 0))),
                  "parameter 'p': missing required field opt_weight_shard_size"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(varint_field(6, 0) + varint_field(7, 0))), "parameter 'p': missing required field field"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(ok_tail + varint_field(5, 1))), "parameter 'p': field appears twice"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(len_field(1, varint_field(1, std::uint64_t{1} << 32)) + ok_tail)),
                  "parameter 'p': dev_matrix value 4294967296 is outside uint32"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(len_field(2, varint_field(1, std::uint64_t{1} << 40)) + ok_tail)),
                  "parameter 'p': tensor_map value 1099511627776 is outside int32"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(len_field(2, "\x0a"s + varint(1'000'000'000) + "\x01") + ok_tail)),
                  "parameter 'p': packed tensor_map claims 1000000000 bytes"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(varint_field(2, 3) + ok_tail)), "parameter 'p': tensor_map has wire type 0"));
  EXPECT_TRUE(has(decode_error(varint_field(1, 1) + len_field(3, len_field(2, ok_tail))), "layout item 0: missing required field param_name"));
  EXPECT_TRUE(has(decode_error(varint_field(1, 1) + len_field(3, len_field(1, "q"))), "parameter 'q': missing required field parallel_layouts"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(ok_tail) + len_field(3, len_field(1, "p") + len_field(2, ok_tail))),
                  "parameter 'p': has two layouts"));
  const std::string node_no_stage = len_field(2, len_field(1, "n") + len_field(2, len_field(2, varint_field(1, 2))));
  EXPECT_TRUE(has(decode_error(node_no_stage + map_with_layouts(ok_tail)), "node 'n': missing required field stage"));
  EXPECT_TRUE(has(decode_error(len_field(2, len_field(1, "n")) + map_with_layouts(ok_tail)),
                  "node 'n': missing required field parallel_strategys"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(ok_tail) + "\x23"s), "unknown field 4 with unsupported wire type 3"));
  EXPECT_TRUE(has(decode_error(map_with_layouts(ok_tail) + "\x1b"s), "parallel_layout_item has wire type 3, expected 2"));
}

TEST(strategy_malformed, json_errors) {
  auto has = [](const std::string& msg, std::string_view part) {
    return msg.find(part) != std::string::npos && msg.rfind("strategy: s.json: ", 0) == 0
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << part << "\"";
  };
  const std::string layout = R"("parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [0]}})";
  EXPECT_EQ(json_error(R"({"current_stage": 1, )" + layout + "}"), "");
  EXPECT_TRUE(has(json_error(""), "invalid JSON"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, )" + layout), "invalid JSON"));
  EXPECT_TRUE(has(json_error("[1]"), "top level is not a JSON object"));
  EXPECT_TRUE(has(json_error("{" + layout + "}"), "missing current_stage"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": -1, )" + layout + "}"), "current_stage -1 is not a uint32"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1})"), "missing parallel_layout_item"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {}})"), "holds no parameter layouts"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "current_stage": 2, )" + layout + "}"), "key 'current_stage' twice"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {"w": {"tensor_map": [0]}}})"),
                  "parameter 'w': missing dev_matrix"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [0.5]}}})"),
                  "parameter 'w': tensor_map entry 0.5 is not an int32"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [[]]}}})"),
                  "parameter 'w': tensor_map has an empty entry"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {"w": {"dev_matrix": [-2], "tensor_map": [0]}}})"),
                  "parameter 'w': dev_matrix holds -2"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [0], "field": "x"}}})"),
                  "parameter 'w': field \"x\" is not an int32"));
  EXPECT_TRUE(has(json_error(R"({"current_stage": 1, "parallel_strategy_item": {"n": {"parallel_strategy": []}}, )" + layout + "}"),
                  "node 'n': missing stage"));
}

TEST(strategy_write, invalid_values_are_refused) {
  auto s = golden_strategy();
  auto& l = s.layouts[0].second;
  l.tensor_map = {{2, 1}, {0}};  // several axes without tuple_form
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_protobuf(s, "o.ckpt"); },
                           {"strategy: o.ckpt: parameter 'w': tensor_map entry [2,1] needs tuple_form"}));
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_json(s, "o.json"); }, {"o.json", "'w'", "needs tuple_form"}));
  l.tensor_map = {{}, {0}};
  l.tuple_form = true;
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_protobuf(s, "o.ckpt"); }, {"'w'", "empty entry"}));
  l = golden_tuple();
  l.dev_matrix = {-1};
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_protobuf(s, "o.ckpt"); }, {"'w'", "dev_matrix value -1 is outside uint32"}));
  l.dev_matrix = {2};
  l.tensor_map = {{std::int64_t{1} << 31}};
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_protobuf(s, "o.ckpt"); }, {"'w'", "outside int32"}));
  auto dup = golden_strategy();
  dup.layouts.push_back(dup.layouts[0]);
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_protobuf(dup, "o.ckpt"); }, {"'w'", "two layouts"}));
  auto dup_nodes = golden_strategy();
  dup_nodes.nodes.push_back(dup_nodes.nodes[0]);
  EXPECT_NO_THROW((void)encode_strategy_protobuf(dup_nodes));  // protobuf can hold it
  EXPECT_TRUE(throws_error([&] { (void)encode_strategy_json(dup_nodes, "o.json"); }, {"node 'MatMul_w'", "JSON cannot hold"}));
}

// ---------------------------------------------------------------------------------------------
// pipeline stages

static_assert(split_pipeline_name("3-layer-1.w") == pipeline_name{3, "layer-1.w"});
static_assert(!split_pipeline_name("layer-1.w"));

TEST(strategy_pipeline, split_pipeline_name) {
  EXPECT_EQ(split_pipeline_name("0-w"), (pipeline_name{0, "w"}));
  EXPECT_EQ(split_pipeline_name("12-model.layers-3.attn"), (pipeline_name{12, "model.layers-3.attn"}));
  EXPECT_EQ(split_pipeline_name("7-"), (pipeline_name{7, ""}));
  EXPECT_FALSE(split_pipeline_name("w"));
  EXPECT_FALSE(split_pipeline_name("-3-w"));
  EXPECT_FALSE(split_pipeline_name("3a-w"));
  EXPECT_FALSE(split_pipeline_name("layer-1"));
  EXPECT_FALSE(split_pipeline_name("4294967296-w"));  // over uint32
  EXPECT_EQ(split_pipeline_name("4294967295-w"), (pipeline_name{4294967295u, "w"}));
}

RC_GTEST_PROP(strategy_pipeline, split_inverts_pipeline_param_name, (std::uint32_t stage, const std::string& name)) {
  const auto merged = pipeline_param_name(stage, name);
  const auto split = split_pipeline_name(merged);
  RC_ASSERT(split.has_value());
  RC_ASSERT(split->stage == stage);
  RC_ASSERT(split->name == name);
}

namespace {
strategy_file stage_file(std::uint32_t stage, std::vector<std::string> params, std::string node) {
  strategy_file s;
  s.current_stage = stage;
  s.nodes.push_back({std::move(node), {stage, {{2, 1}}}});
  for (auto& p : params) {
    param_layout l;
    l.dev_matrix = {2};
    l.tensor_map = {{0}, {-1}};
    l.tensor_shape = {4, 4};
    l.opt_weight_shard_step = static_cast<std::int32_t>(stage);
    s.layouts.push_back({std::move(p), l});
  }
  return s;
}
}  // namespace

TEST(strategy_pipeline, merge_renames_skips_duplicate_stages_and_keeps_file_order) {
  for (std::string ext : {".ckpt", ".json"}) {
    temp_dir dir;
    fs::create_directories(dir / "src");
    write_strategy(dir / "src" / ("b" + ext), stage_file(0, {"embedding", "layer-0.w"}, "MatMul-op0"));
    write_strategy(dir / "src" / ("a" + ext), stage_file(1, {"embedding", "layer-1.w"}, "MatMul-op1"));
    write_strategy(dir / "src" / ("c" + ext), stage_file(1, {"other"}, "MatMul-op2"));  // stage 1 again: skipped
    write_text(dir / "src" / ".hidden", "ignored");
    merge_pipeline_strategies(dir / "src", dir / ("merged" + ext));
    const auto m = read_strategy(dir / ("merged" + ext));
    EXPECT_EQ(m.current_stage, 1u);
    std::vector<std::string> names;
    for (const auto& [n, l] : m.layouts) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"1-embedding", "1-layer-1.w", "0-embedding", "0-layer-0.w"})) << ext;
    ASSERT_EQ(m.nodes.size(), 2u);
    EXPECT_EQ(m.nodes[0].first, "MatMul-op1");
    EXPECT_EQ(m.layouts[3].second.opt_weight_shard_step, 0);
    EXPECT_EQ(m.layouts[0].second.opt_weight_shard_step, 1);
    for (const auto& [n, l] : m.layouts) {
      auto split = split_pipeline_name(n);
      ASSERT_TRUE(split) << n;
      EXPECT_EQ(static_cast<std::int32_t>(split->stage), l.opt_weight_shard_step) << n;
    }
    EXPECT_TRUE(throws_error([&] { merge_pipeline_strategies(dir / "src", dir / ("merged" + ext)); }, {"destination exists"}));
  }
}

TEST(strategy_pipeline, merge_errors) {
  temp_dir dir;
  fs::create_directories(dir / "empty");
  EXPECT_TRUE(throws_error([&] { merge_pipeline_strategies(dir / "empty", dir / "m.ckpt"); },
                           {"merge_pipeline_strategies: ", "empty", "holds no strategy files"}));
  EXPECT_TRUE(throws_error([&] { merge_pipeline_strategies(dir / "missing", dir / "m.ckpt"); }, {"missing", "cannot list"}));
  fs::create_directories(dir / "mixed");
  write_strategy(dir / "mixed" / "a.ckpt", stage_file(0, {"w"}, "n0"));
  write_strategy(dir / "mixed" / "b.json", stage_file(1, {"w"}, "n1"));
  EXPECT_TRUE(throws_error([&] { merge_pipeline_strategies(dir / "mixed", dir / "m.ckpt"); }, {"mixes JSON (b.json) and protobuf (a.ckpt)"}));
  fs::create_directories(dir / "nonodes");
  auto s = stage_file(0, {"w"}, "n0");
  s.nodes.clear();
  write_strategy(dir / "nonodes" / "a.ckpt", s);
  EXPECT_TRUE(throws_error([&] { merge_pipeline_strategies(dir / "nonodes", dir / "m.ckpt"); },
                           {"a.ckpt", "no node strategies", "stage is unknown"}));
  EXPECT_FALSE(fs::exists(dir / "m.ckpt"));
}

// ---------------------------------------------------------------------------------------------
// cross-checks with protobuf's Python library (verify/python/ms_files.py)

namespace {
param_layout layout_from_neutral(const nlohmann::json& j) {
  param_layout l;
  l.dev_matrix = j["dev_matrix"].get<std::vector<std::int64_t>>();
  l.tensor_map = j["tensor_map"].get<std::vector<std::vector<std::int64_t>>>();
  l.tuple_form = j["tuple_form"].get<bool>();
  l.tensor_shape = j["tensor_shape"].get<std::vector<std::int64_t>>();
  l.param_split_shape = j["param_split_shape"].get<std::vector<std::int64_t>>();
  l.indices_offset = j["indices_offset"].get<std::vector<std::int64_t>>();
  l.field = j["field"].get<std::int32_t>();
  l.opt_weight_shard_step = j["opt_weight_shard_step"].get<std::int32_t>();
  l.opt_weight_shard_size = j["opt_weight_shard_size"].get<std::int32_t>();
  return l;
}

strategy_file from_neutral(const fs::path& path) {
  const auto j = nlohmann::json::parse(str(read_bytes(path)));
  strategy_file s;
  s.current_stage = j["current_stage"].get<std::uint32_t>();
  for (const auto& n : j["nodes"])
    s.nodes.push_back({n[0].get<std::string>(), {n[1].get<std::uint32_t>(), n[2].get<std::vector<std::vector<std::uint32_t>>>()}});
  for (const auto& l : j["layouts"]) s.layouts.push_back({l[0].get<std::string>(), layout_from_neutral(l[1])});
  return s;
}

const std::vector<std::string> protobuf_cases{"plain", "tuple", "optshard", "split", "packed", "unpacked"};
}  // namespace

class strategy_python : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new temp_dir;
    const auto gen = run_python("ms_files.py", {"gen-strategy", dir_->path().string()});
    generated_ = gen.status == 0;
    if (!generated_) ADD_FAILURE() << "gen-strategy failed:\n" << gen.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(generated_) << "the Python generator did not run"; }
  static fs::path file(const std::string& name) { return dir_->path() / name; }

  static inline temp_dir* dir_ = nullptr;
  static inline bool generated_ = false;
};

TEST_F(strategy_python, reads_files_made_by_protobuf) {
  for (const auto& c : protobuf_cases)
    EXPECT_EQ(read_strategy(file(c + ".ckpt")), from_neutral(file(c + ".expect.json"))) << c;
  EXPECT_EQ(read_strategy(file("shaped.json")), from_neutral(file("shaped.expect.json")));
  const auto t = read_strategy(file("tuple.ckpt"));
  EXPECT_TRUE(t.layouts[1].second.tuple_form);  // the 1-D tuple layout, told apart by its extra empty TensorMap
  EXPECT_EQ(t.layouts[1].second.tensor_map.size(), 1u);
}

TEST_F(strategy_python, protobuf_rewrites_are_byte_identical) {
  for (const auto& c : protobuf_cases) {
    if (c == "packed") continue;
    EXPECT_EQ(hex(encode_strategy_protobuf(read_strategy(file(c + ".ckpt")))), hex(str(read_bytes(file(c + ".ckpt"))))) << c;
  }
  // a packed file is rewritten in MindSpore's unpacked form
  EXPECT_EQ(hex(encode_strategy_protobuf(read_strategy(file("packed.ckpt")))), hex(str(read_bytes(file("unpacked.ckpt")))));
}

TEST_F(strategy_python, rewrites_are_parsed_by_protobuf) {
  temp_dir out;
  std::vector<std::string> args{"check-strategy"};
  for (const auto& c : protobuf_cases) {
    write_strategy(out / (c + ".ckpt"), read_strategy(file(c + ".ckpt")));
    write_strategy(out / (c + ".json"), read_strategy(file(c + ".ckpt")));
    for (std::string ext : {".ckpt", ".json"}) {
      args.push_back((out / (c + ext)).string());
      args.push_back(file(c + ".expect.json").string());
    }
  }
  write_strategy(out / "shaped.json", read_strategy(file("shaped.json")));
  args.push_back((out / "shaped.json").string());
  args.push_back(file("shaped.expect.json").string());
  args.push_back("--exact");
  const auto check = run_python("ms_files.py", args);
  EXPECT_EQ(check.status, 0) << check.output;
  // the checker fails on a wrong expectation
  const auto wrong = run_python("ms_files.py", {"check-strategy", (out / "plain.ckpt").string(),
                                                file("tuple.expect.json").string()});
  EXPECT_EQ(wrong.status, 1) << wrong.output;
}

TEST_F(strategy_python, merge_matches_mindspores_algorithm) {
  temp_dir out;
  const auto py_pb = run_python("ms_files.py", {"merge-strategy", file("stages_pb").string(), (out / "py_pb").string()});
  ASSERT_EQ(py_pb.status, 0) << py_pb.output;
  merge_pipeline_strategies(file("stages_pb"), out / "merged.ckpt");
  EXPECT_EQ(hex(str(read_bytes(out / "merged.ckpt"))), hex(str(read_bytes(out / "py_pb.pb"))));

  const auto py_json = run_python("ms_files.py", {"merge-strategy", file("stages_json").string(), (out / "py_json").string()});
  ASSERT_EQ(py_json.status, 0) << py_json.output;
  merge_pipeline_strategies(file("stages_json"), out / "merged.json");
  EXPECT_EQ(read_strategy(out / "merged.json"), from_neutral(out / "py_json.expect.json"));
  const auto check = run_python("ms_files.py", {"check-strategy", (out / "merged.json").string(),
                                                (out / "py_json.expect.json").string(), (out / "merged.ckpt").string(),
                                                (out / "py_pb.expect.json").string(), "--exact"});
  EXPECT_EQ(check.status, 0) << check.output;
}
