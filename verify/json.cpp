// verify/json.cpp: reshard/ext/json.hpp: layouts from JSON (every malformed input is a
// reshard::error naming the option, the key and the value), to_json of layouts and plans, the
// rank report, the dtype table.
#include <gtest/gtest.h>

#include "laws/check.hpp"
#include <rapidcheck/gtest.h>

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "reshard.hpp"
#include "reshard/ext/json.hpp"

namespace {

using nlohmann::json;
using namespace reshard;

layout parse(const std::string& text) { return layout_from_json_text(text, "--src"); }

// ---------------------------------------------------------------------------------------------
// Parsing valid layouts

TEST(LayoutFromJson, Basic) {
  EXPECT_EQ(parse(R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]})"),
            mindspore_layout({2, 4}, {1, -1}, {8, 4}));
  EXPECT_EQ(parse(R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],
                      "opt_shard":{"step":0,"size":0},"stage":0})"),
            mindspore_layout({2, 4}, {1, -1}, {8, 4}));
}

TEST(LayoutFromJson, TupleEntries) {
  const layout l = parse(R"({"dev_matrix":[4,2,2],"tensor_map":[[2,1],0],"shape":[8,8]})");
  EXPECT_EQ(l, mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8}));
  EXPECT_EQ(box_of(l, 4), (box{{2, 0}, {1, 4}}));
  // a one-element tuple is the axis itself; [-1] and [] are unsplit
  EXPECT_EQ(parse(R"({"dev_matrix":[2,4],"tensor_map":[[1],[-1]],"shape":[8,4]})"),
            mindspore_layout({2, 4}, {1, -1}, {8, 4}));
  EXPECT_EQ(parse(R"({"dev_matrix":[2,4],"tensor_map":[[1],[]],"shape":[8,4]})"),
            mindspore_layout({2, 4}, {1, -1}, {8, 4}));
}

TEST(LayoutFromJson, OptionalKeys) {
  const layout opt = parse(R"({"dev_matrix":[4,2],"tensor_map":[-1,0],"shape":[8,4],
                               "opt_shard":{"step":2,"size":4}})");
  EXPECT_EQ(opt, mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 4}}));
  for (index_t r = 0; r < 8; ++r)
    EXPECT_EQ(box_of(opt, r), (box{{2 * ((r / 2) % 4), 2 * (r % 2)}, {2, 2}})) << r;

  const layout staged = parse(R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],
                                  "stage":2})");
  EXPECT_EQ(staged.first_rank, 16);
  const layout placed = parse(R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],
                                  "first_rank":5})");
  EXPECT_EQ(placed.first_rank, 5);

  const layout chunk = parse(R"({"dev_matrix":[4],"tensor_map":[0],"shape":[10],
                                 "split":"chunk"})");
  EXPECT_EQ(chunk.mode, split_mode::chunk);
  EXPECT_EQ(box_of(chunk, 3), (box{{9}, {1}}));
  const layout balanced = parse(R"({"dev_matrix":[4],"tensor_map":[0],"shape":[10],
                                    "split":"balanced"})");
  EXPECT_EQ(box_of(balanced, 1), (box{{3}, {3}}));

  const layout sizes = parse(R"({"dev_matrix":[2],"tensor_map":[0,-1],"shape":[8,4],
                                 "split_sizes":[5,3]})");
  EXPECT_EQ(sizes, mindspore_layout({2}, {0, -1}, {8, 4}, {.param_split_shape = {5, 3}}));
  EXPECT_EQ(box_of(sizes, 1), (box{{5, 0}, {3, 4}}));

  // one list per dim: sizes beyond dim 0
  const layout per_dim = parse(R"({"dev_matrix":[2,3],"tensor_map":[1,0],"shape":[4,7],
                                   "split_sizes":[[],[3,3,1]]})");
  EXPECT_EQ(box_of(per_dim, 2), (box{{0, 6}, {2, 1}}));
}

TEST(LayoutFromJson, MindSporeStrategyKeys) {
  // a parallel_layout_item of a MindSpore JSON strategy file
  const layout l = parse(R"({"dev_matrix":[4,2],"tensor_map":[-1,0],"tensor_shape":[8,4],
                             "field":0,"opt_weight_shard_step":2,"opt_weight_shard_size":4})");
  EXPECT_EQ(l, mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 4}}));
  const layout s = parse(R"({"dev_matrix":[2],"tensor_map":[0,-1],"tensor_shape":[8,4],
                             "param_split_shape":[5,3],"indices_offset":[0,5]})");
  EXPECT_EQ(s, mindspore_layout({2}, {0, -1}, {8, 4}, {.param_split_shape = {5, 3}}));
  EXPECT_EQ(parse(R"({"dev_matrix":[2],"tensor_map":[0,-1],"tensor_shape":[8,4],
                      "param_split_shape":[],"indices_offset":[]})"),
            mindspore_layout({2}, {0, -1}, {8, 4}));
}

TEST(LayoutFromJson, EdgeShapes) {
  EXPECT_EQ(parse(R"({"dev_matrix":[],"tensor_map":[],"shape":[]})"), mindspore_layout({}, {}, {}));
  EXPECT_EQ(parse(R"({"dev_matrix":[1],"tensor_map":[-1],"shape":[0]})"),
            mindspore_layout({1}, {-1}, {0}));
  EXPECT_EQ(parse(R"({"dev_matrix":[4],"tensor_map":[-1,-1],"shape":[3,5]})"),
            mindspore_layout({4}, {-1, -1}, {3, 5}));
}

// ---------------------------------------------------------------------------------------------
// Malformed layouts: a reshard::error naming `what`, the key and the reason

struct bad_case {
  const char* text;
  std::vector<const char*> words;  // all must appear in the message
};

TEST(LayoutFromJson, MalformedInputs) {
  const std::vector<bad_case> cases = {
      // not an object / not JSON
      {R"([2,4])", {"must be a JSON object", "got an array"}},
      {R"("x")", {"must be a JSON object", "the string \"x\""}},
      {R"({"dev_matrix":[2,4],)", {"invalid JSON", "line 1, column"}},
      {"", {"invalid JSON"}},
      {"{\"dev_matrix\":[2,4],\n\"tensor_map\":[1,-1]\n\"shape\":[8,4]}",
       {"invalid JSON", "line 3"}},
      // missing keys
      {R"({"tensor_map":[1,-1],"shape":[8,4]})", {"missing key \"dev_matrix\""}},
      {R"({"dev_matrix":[2,4],"shape":[8,4]})", {"missing key \"tensor_map\""}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1]})", {"missing key \"shape\""}},
      // unknown or doubled keys
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"tensormap":[1]})",
       {"unknown key 'tensormap' (did you mean 'tensor_map'?)"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"shape":[4,8]})",
       {"JSON object has the key 'shape' twice (the second at line 1, column 55)"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]} x)", {"invalid JSON", "expected end of input"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"tensor_shape":[8,4]})",
       {"\"shape\"", "\"tensor_shape\"", "give one"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"stage":0,"first_rank":0})",
       {"\"stage\"", "\"first_rank\""}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":0,"size":0},
           "opt_weight_shard_size":0})",
       {"opt_shard", "opt_weight_shard"}},
      // wrong types
      {R"({"dev_matrix":"2,4","tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix must be a list of integers", "the string"}},
      {R"({"dev_matrix":[2,"4"],"tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix[1] must be an integer", "the string \"4\""}},
      {R"({"dev_matrix":[2,4],"tensor_map":{"0":1},"shape":[8,4]})",
       {"tensor_map must be a list", "an object"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,null],"shape":[8,4]})",
       {"tensor_map[1] must be an integer axis or a list of axes", "null"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,true]})",
       {"shape[1] must be an integer", "the boolean true"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":[0,0]})",
       {"opt_shard must be an object", "an array"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":0,"sz":2}})",
       {"unknown key 'sz' in opt_shard (did you mean 'size'?)"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split":1})",
       {"split must be", "the integer 1"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split_sizes":"5,3"})",
       {"split_sizes must be a list of integers"}},
      // non-integers
      {R"({"dev_matrix":[2.5,4],"tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix[0] must be an integer", "the number 2.5"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8.0,4]})",
       {"shape[0] must be an integer", "8.0"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1.5,-1],"shape":[8,4]})",
       {"tensor_map[0]", "1.5"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"stage":0.5})",
       {"stage must be an integer", "0.5"}},
      // out of range, negative
      {R"({"dev_matrix":[2,0],"tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix[1] = 0 is invalid", "at least 1"}},
      {R"({"dev_matrix":[-2,4],"tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix[0] = -2 is invalid"}},
      {R"({"dev_matrix":[65536,65536],"tensor_map":[1,-1],"shape":[8,4]})",
       {"dev_matrix [65536,65536]", "more than 2^31 devices"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[-8,4]})",
       {"shape[0] = -8 is invalid", ">= 0"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,18446744073709551615]})",
       {"shape[1] = 18446744073709551615 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[1099511627776,1099511627776]})",
       {"shape [1099511627776,1099511627776] is too large", "more than 2^56"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[2,-1],"shape":[8,4]})",
       {"tensor_map[0] = 2 is invalid", "0..1 for dev_matrix [2,4]"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-2],"shape":[8,4]})",
       {"tensor_map[1] = -2 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[[1,7],-1],"shape":[8,4]})",
       {"tensor_map[0][1] = 7 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[[1,-1],-1],"shape":[8,4]})",
       {"tensor_map[0][1] = -1", "cannot be part of a tuple"}},
      {R"({"dev_matrix":[],"tensor_map":[0],"shape":[8]})",
       {"tensor_map[0] = 0 is invalid", "no axes"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"stage":-1})",
       {"stage = -1 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"stage":1073741824})",
       {"pipeline stage 1073741824", "out of range"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"first_rank":-3})",
       {"first_rank = -3 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":-1,"size":2}})",
       {"opt_shard.step = -1 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":1,"size":-2}})",
       {"opt_shard.size = -2 is invalid", "-1 = the whole replica group"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_weight_shard_size":-5})",
       {"opt_weight_shard_size = -5 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split_sizes":[5,-1]})",
       {"split_sizes[1] = -1 is invalid"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split":"even"})",
       {"split = \"even\"", "\"divisible\", \"chunk\", \"balanced\""}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"field":1})",
       {"field = 1", "not supported"}},
      // inconsistent
      {R"({"dev_matrix":[2,4],"tensor_map":[1],"shape":[8,4]})",
       {"tensor_map has 1 entry but shape [8,4] has 2 dims"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,1],"shape":[8,4]})",
       {"invalid layout dev[2,4] map[1,1] shape[8,4]", "device axis 1 splits both dim 0 and dim 1"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[7,4]})",
       {"invalid layout", "dim 0 of size 7 does not divide into 2 equal slices", "chunk"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":1,"size":3}})",
       {"invalid layout", "optimizer sharding size 3 does not divide the replica group size 4"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[4,4],"opt_shard":{"step":1,"size":4}})",
       {"invalid layout", "slice 0 has 2 rows"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split_sizes":[5,4]})",
       {"invalid layout", "sum to more than", "size 8"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split_sizes":[2,2,4]})",
       {"invalid layout", "3 explicit slice sizes but 2 slices"}},
      {R"({"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split_sizes":[[4,4]]})",
       {"split_sizes has 1 lists but shape [8,4] has 2 dims"}},
      {R"({"dev_matrix":[2],"tensor_map":[],"shape":[],"split_sizes":[1]})",
       {"split_sizes is given but the shape has no dims"}},
      {R"({"dev_matrix":[2],"tensor_map":[0,-1],"shape":[8,4],"param_split_shape":[5,3],
           "indices_offset":[0,4]})",
       {"indices_offset [0,4]", "[5,3]"}},
  };
  for (const bad_case& c : cases) {
    const std::string m = error_of([&] { parse(c.text); });
    ASSERT_FALSE(m.empty()) << "no error for " << c.text;
    EXPECT_EQ(m.rfind("--src: ", 0), 0u) << m;
    for (const char* w : c.words)
      EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' not in: " << m;
    // library internals never show
    EXPECT_EQ(m.find("mindspore_layout"), std::string::npos) << m;
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  }
}

TEST(LayoutFromJson, WhatIsNamed) {
  const std::string m = error_of([] {
    layout_from_json(json{{"dev_matrix", {2}}, {"tensor_map", {0}}}, "--dst @b.json");
  });
  EXPECT_EQ(m, "--dst @b.json: missing key \"shape\"");
}

// ---------------------------------------------------------------------------------------------
// to_json

TEST(ToJson, Layout) {
  const layout l = mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8}, {.opt = {}, .stage = 1});
  EXPECT_EQ(to_json(l), json::parse(R"({"dev_matrix":[4,2,2],"tensor_map":[[2,1],0],
      "shape":[8,8],"opt_shard":{"step":0,"size":0},"stage":1})"));
  const layout u = mindspore_layout({2}, {0, -1}, {8, 4},
                                    {.mode = split_mode::chunk, .param_split_shape = {5, 3}});
  EXPECT_EQ(to_json(u), json::parse(R"({"dev_matrix":[2],"tensor_map":[0,-1],"shape":[8,4],
      "opt_shard":{"step":0,"size":0},"stage":0,"split":"chunk","split_sizes":[5,3]})"));
}

TEST(ToJson, LayoutRoundTripsSpecialCases) {
  std::vector<layout> ls = {
      mindspore_layout({2, 4}, {1, -1}, {8, 4}),
      mindspore_layout({}, {}, {}),
      mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, -1}, .stage = 3}),
      dtensor_layout({2, 4}, {shard{0}, replicate{}}, {8, 4}, {.first_rank = 5}),
      // nested uneven DTensor split: explicit sizes on dim 1
      dtensor_layout({2, 3}, {shard{1}, shard{1}}, {2, 7}),
  };
  ASSERT_FALSE(ls.back().split_sizes.empty());
  for (const layout& l : ls) EXPECT_EQ(layout_from_json(to_json(l), "x"), l) << to_string(l);
}

// @post layout_from_json(to_json(l), w) == l
RC_GTEST_PROP(ToJson, LayoutRoundTrips, ()) {
  const auto nd = *rc::gen::inRange<std::size_t>(0, 4);
  index_list dev;
  for (std::size_t a = 0; a < nd; ++a) dev.push_back(*rc::gen::inRange<index_t>(1, 5));
  const auto dims = *rc::gen::inRange<std::size_t>(0, 4);
  // each device axis splits one dim or none (-1), in a random order within the dim
  std::vector<std::vector<index_t>> axes(dims);
  for (std::size_t a = 0; a < nd; ++a) {
    const auto d = *rc::gen::inRange<int>(-1, static_cast<int>(dims));
    if (d >= 0) axes[static_cast<std::size_t>(d)].push_back(static_cast<index_t>(a));
  }
  tensor_map map;
  index_list shape;
  for (std::size_t i = 0; i < dims; ++i) {
    auto& ax = axes[i];
    std::vector<index_t> order = ax;
    for (std::size_t k = order.size(); k > 1; --k)  // Fisher-Yates
      std::swap(order[k - 1], order[*rc::gen::inRange<std::size_t>(0, k)]);
    if (order.empty()) order.push_back(-1);
    map.emplace_back(order);
    index_t p = 1;
    for (index_t a : ax) p *= dev[static_cast<std::size_t>(nd - 1 - a)];
    shape.push_back(p * *rc::gen::inRange<index_t>(0, 4) + *rc::gen::inRange<index_t>(0, 3));
  }
  mindspore_options o;
  o.mode = *rc::gen::element(split_mode::chunk, split_mode::balanced);
  o.stage = *rc::gen::inRange<index_t>(0, 3);
  o.opt = {*rc::gen::inRange<index_t>(0, 4), *rc::gen::element<index_t>(0, 1, -1)};
  layout l;
  try {
    l = mindspore_layout(dev, map, shape, o);
  } catch (const reshard::error&) {
    RC_DISCARD("invalid layout");
  }
  RC_ASSERT(layout_from_json(to_json(l), "x") == l);
  RC_ASSERT(layout_from_json_text(to_json(l).dump(), "x") == l);
}

TEST(ToJson, Plan8to4) {
  const layout src = mindspore_layout({2, 4}, {1, -1}, {8, 4});
  const layout dst = mindspore_layout({4}, {0, -1}, {8, 4});
  const json j = to_json(plan(src, dst), 4);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"cross_bytes", "dst", "local_bytes", "lower_bound_bytes",
                                             "max_sent_bytes", "mean_sent_bytes", "messages",
                                             "plan_version", "src", "transfers"}));
  EXPECT_EQ(j["cross_bytes"], 64);
  EXPECT_EQ(j["local_bytes"], 64);
  EXPECT_EQ(j["lower_bound_bytes"], 64);
  EXPECT_EQ(j["messages"], 2);
  EXPECT_EQ(j["max_sent_bytes"], 32);
  EXPECT_DOUBLE_EQ(j["mean_sent_bytes"].get<double>(), 8.0);
  ASSERT_EQ(j["transfers"].size(), 4u);
  EXPECT_EQ(j["transfers"][0], json::parse(R"({"src":0,"dst":0,"offset":[0,0],"shape":[2,4],
                                               "bytes":32})"));
  index_t total = 0;
  for (const auto& t : j["transfers"]) {
    EXPECT_EQ(t.size(), 5u);
    EXPECT_EQ(t["bytes"], t["shape"][0].get<index_t>() * t["shape"][1].get<index_t>() * 4);
    total += t["bytes"].get<index_t>();
  }
  EXPECT_EQ(total, 128);
  EXPECT_NE(error_of([&] { to_json(plan(src, dst), 0); }).find("element size 0"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// layout_report

TEST(LayoutReport, RowsOverTwoGroups) {
  const json r = layout_report(mindspore_layout({2, 4}, {1, -1}, {8, 4}));
  ASSERT_EQ(r["ranks"].size(), 8u);
  for (index_t k = 0; k < 8; ++k) {
    EXPECT_EQ(r["ranks"][k]["rank"], k);
    EXPECT_EQ(r["ranks"][k]["offset"], json(index_list{k < 4 ? 0 : 4, 0}));
    EXPECT_EQ(r["ranks"][k]["shape"], json(index_list{4, 4}));
  }
  EXPECT_EQ(r["replica_groups"], json::parse("[[0,1,2,3],[4,5,6,7]]"));
}

TEST(LayoutReport, OptimizerShardingAndStage) {
  // mindspore.md: dev [4,2], map [-1,0], step 2, size 2: ranks 0,1,4,5 rows 0..4
  const json r = layout_report(mindspore_layout({4, 2}, {-1, 0}, {8, 4}, {.opt = {2, 2}, .stage = 1}));
  EXPECT_EQ(r["ranks"][0]["rank"], 8);
  EXPECT_EQ(r["ranks"][5]["offset"], json(index_list{0, 2}));
  EXPECT_EQ(r["ranks"][6]["offset"], json(index_list{4, 0}));
  EXPECT_EQ(r["replica_groups"], json::parse("[[8,12],[9,13],[10,14],[11,15]]"));
}

TEST(LayoutReport, MiddleAxisRepeats) {
  const json r = layout_report(mindspore_layout({2, 2, 2}, {2, 0}, {4, 6}));
  EXPECT_EQ(r["replica_groups"], json::parse("[[0,2],[1,3],[4,6],[5,7]]"));
  EXPECT_EQ(r["ranks"][7]["offset"], json(index_list{2, 3}));
}

// ---------------------------------------------------------------------------------------------
// dtypes

TEST(Dtype, Sizes) {
  EXPECT_EQ(dtype_bytes("float32"), 4);
  EXPECT_EQ(dtype_bytes("float16"), 2);
  EXPECT_EQ(dtype_bytes("bfloat16"), 2);
  EXPECT_EQ(dtype_bytes("float64"), 8);
  EXPECT_EQ(dtype_bytes("int8"), 1);
  EXPECT_EQ(dtype_bytes("uint8"), 1);
  EXPECT_EQ(dtype_bytes("int16"), 2);
  EXPECT_EQ(dtype_bytes("int32"), 4);
  EXPECT_EQ(dtype_bytes("int64"), 8);
  EXPECT_EQ(dtype_bytes("bool"), 1);
  EXPECT_EQ(dtype_bytes("complex128"), 16);
  // MindSpore, safetensors and short spellings, any case
  EXPECT_EQ(dtype_bytes("Float32"), 4);
  EXPECT_EQ(dtype_bytes("BFloat16"), 2);
  EXPECT_EQ(dtype_bytes("BF16"), 2);
  EXPECT_EQ(dtype_bytes("F64"), 8);
  EXPECT_EQ(dtype_bytes("UInt8"), 1);
  EXPECT_EQ(dtype_bytes("fp16"), 2);
  EXPECT_FALSE(dtype_size("float33"));
  EXPECT_FALSE(dtype_size(""));
}

TEST(Dtype, OneTableWithTheCheckpointFormats) {
  // every name of every checkpoint dtype (MindSpore's, safetensors', numpy's), in upper and lower
  // case, has the element size io/dtype.hpp gives it: the byte counts and the file formats read
  // the same table
  namespace io = reshard::io;
  for (io::dtype t : io::all_dtypes) {
    if (t == io::dtype::int4 || t == io::dtype::str) continue;
    for (std::string_view n : {io::ms_name(t), io::safetensors_name(t).value_or(""), io::numpy_name(t)}) {
      if (n.empty()) continue;
      std::string lower(n), upper(n);
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      for (const auto& name : {std::string(n), lower, upper}) {
        ASSERT_TRUE(dtype_size(name)) << name;
        EXPECT_EQ(*dtype_size(name), static_cast<reshard::index_t>(io::element_size(t))) << name;
      }
    }
    EXPECT_NE(dtype_names().find(io::numpy_name(t)), std::string::npos) << io::numpy_name(t);
  }
}

TEST(Dtype, UnknownListsValidNames) {
  const std::string m = error_of([] { dtype_bytes("float33", "--dtype"); });
  EXPECT_EQ(m.rfind("--dtype: unknown dtype \"float33\"", 0), 0u) << m;
  for (const char* n : {"float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                        "int32", "int64", "bool"})
    EXPECT_NE(m.find(n), std::string::npos) << n;
}

}  // namespace
