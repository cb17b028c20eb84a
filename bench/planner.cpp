// bench/planner.cpp: reshard::plan beside the naive all-pairs planner (bench/naive_planner.hpp).
//
// Two families of layout pairs that scale from 8 to 4096 source ranks, and a whole GPT-like model:
//   megatron  weight [12288, 49152], dev [dp, tp] map [-1, 0] (tensor parallel on dim 1,
//             replicated over data parallel): 8 -> 4 ranks up to dp2048 x tp8 -> dp1024 x tp12
//             (16384 -> 12288; the naive baseline up to 4096 -> 3072)
//   grid2d    embedding [50257, 12288] split on both dims, balanced (uneven) slices, both grids
//             changing: dev[4,2] -> dev[3,1] (8 -> 3) up to dev[64,64] -> dev[96,32]
//   model     496 parameters of a GPT-3-like model (h = 12288, 41 layers), Megatron layouts,
//             dp128 x tp8 (1024 ranks) -> dp64 x tp12 (768 ranks)
// check/...: check_plan of reshard's plan (made before the timing), beside plan/... in the same run.
// Counters: transfers (plan size) and per_transfer (wall time / transfers; the console shows it
// in seconds with an SI prefix, e.g. 35.2n = 35.2 ns).
// The naive plan is checked once per pair against reshard's: same transfer count, same total
// and cross-rank volume, and both are exact covers of every target box.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common.hpp"
#include "naive_planner.hpp"
#include "reshard/check_plan.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace {

using reshard::index_list;
using reshard::index_t;
using reshard::layout;
using reshard::mindspore_layout;
using reshard::split_mode;
using reshard::tensor_map;
using namespace reshard_bench;

struct layout_pair {
  layout src, dst;
};

struct bench_case {
  std::string name;  // e.g. "megatron/4096->3072"
  std::vector<layout_pair> pairs;
  bool naive = true;  // the all-pairs baseline runs too (not at 16384 ranks: 2 * 10^8 pairs)
};

layout ms(index_list dev, const tensor_map& map, index_list shape) {
  reshard::mindspore_options o;
  o.mode = split_mode::balanced;
  return mindspore_layout(std::move(dev), map, std::move(shape), o);
}

std::string arrow(const layout& a, const layout& b) {
  return std::to_string(reshard::num_ranks(a)) + "->" + std::to_string(reshard::num_ranks(b));
}

std::vector<bench_case> pair_cases() {
  struct grid {
    index_list src, dst;
  };
  // megatron: [dp, tp] -> [dp', tp']
  std::vector<grid> megatron = {{{1, 8}, {1, 4}},
                                {{8, 8}, {4, 12}},
                                {{64, 8}, {32, 12}},
                                {{128, 8}, {64, 12}},
                                {{512, 8}, {256, 12}},
                                {{2048, 8}, {1024, 12}}};
  // grid2d: both dims split, both grid sizes change, uneven slices
  std::vector<grid> grid2d = {{{4, 2}, {3, 1}},
                              {{8, 8}, {12, 4}},
                              {{16, 32}, {24, 16}},
                              {{32, 32}, {48, 16}},
                              {{64, 64}, {96, 32}}};
  const std::size_t n = tiny() ? 2 : megatron.size();
  const std::size_t n2 = tiny() ? 2 : grid2d.size();
  std::vector<bench_case> out;
  for (std::size_t k = 0; k < n; ++k) {
    const index_list shape{12288, 49152};
    layout_pair p{ms(megatron[k].src, {-1, 0}, shape), ms(megatron[k].dst, {-1, 0}, shape)};
    out.push_back({"megatron/" + arrow(p.src, p.dst), {p}, reshard::num_ranks(p.src) <= 4096});
  }
  for (std::size_t k = 0; k < n2; ++k) {
    const index_list shape{50257, 12288};
    layout_pair p{ms(grid2d[k].src, {1, 0}, shape), ms(grid2d[k].dst, {1, 0}, shape)};
    out.push_back({"grid2d/" + arrow(p.src, p.dst), {p}});
  }
  return out;
}

// A GPT-3-like model under Megatron layouts: column-parallel weights split dim 0 over tp,
// row-parallel weights split dim 1, vocab-parallel embedding, replicated norms and biases.
bench_case model_case() {
  const bool t = tiny();
  const index_t h = 12288, vocab = 50257, positions = 2048;
  const int layers = t ? 2 : 41;
  const index_list src_dev = t ? index_list{8, 8} : index_list{128, 8};
  const index_list dst_dev = t ? index_list{4, 12} : index_list{64, 12};
  std::vector<std::pair<tensor_map, index_list>> params;
  params.push_back({{0, -1}, {vocab, h}});   // word embedding
  params.push_back({{-1, -1}, {positions, h}});  // position embedding
  for (int l = 0; l < layers; ++l) {
    params.push_back({{-1}, {h}});            // ln1 weight
    params.push_back({{-1}, {h}});            // ln1 bias
    params.push_back({{0, -1}, {3 * h, h}});  // qkv weight
    params.push_back({{0}, {3 * h}});         // qkv bias
    params.push_back({{-1, 0}, {h, h}});      // attention out weight
    params.push_back({{-1}, {h}});            // attention out bias
    params.push_back({{-1}, {h}});            // ln2 weight
    params.push_back({{-1}, {h}});            // ln2 bias
    params.push_back({{0, -1}, {4 * h, h}});  // fc1 weight
    params.push_back({{0}, {4 * h}});         // fc1 bias
    params.push_back({{-1, 0}, {h, 4 * h}});  // fc2 weight
    params.push_back({{-1}, {h}});            // fc2 bias
  }
  params.push_back({{-1}, {h}});  // final ln weight
  params.push_back({{-1}, {h}});  // final ln bias
  bench_case c;
  for (const auto& [map, shape] : params)
    c.pairs.push_back({ms(src_dev, map, shape), ms(dst_dev, map, shape)});
  c.name = "model" + std::to_string(params.size()) + "/" + arrow(c.pairs[0].src, c.pairs[0].dst);
  return c;
}

// Checks the naive plan against reshard's once per case (per process).
bool check_once(const bench_case& c, const std::vector<rank_boxes>& src,
                const std::vector<rank_boxes>& dst, std::string& why) {
  static std::map<std::string, bool> done;
  if (auto it = done.find(c.name); it != done.end()) return it->second;
  bool ok = true;
  for (std::size_t k = 0; k < c.pairs.size() && ok; ++k) {
    const auto fast = reshard::plan(c.pairs[k].src, c.pairs[k].dst).transfers;
    const auto slow = naive_plan(src[k], dst[k]);
    if (!is_cover(fast, src[k], dst[k])) {
      why = "reshard::plan is not an exact cover";
      ok = false;
    } else if (!is_cover(slow, src[k], dst[k])) {
      why = "the naive plan is not an exact cover";
      ok = false;
    } else if (!(totals(fast) == totals(slow))) {
      why = "naive and reshard plans differ in transfers or volume";
      ok = false;
    }
    if (!ok) why += " for " + reshard::to_string(c.pairs[k].src) + " -> " +
                    reshard::to_string(c.pairs[k].dst);
  }
  done[c.name] = ok;
  return ok;
}

void set_counters(benchmark::State& state, std::size_t transfers) {
  state.counters["transfers"] = static_cast<double>(transfers);
  state.counters["per_transfer"] = benchmark::Counter(
      static_cast<double>(transfers), benchmark::Counter::kIsIterationInvariantRate |
                                          benchmark::Counter::kInvert);
}

void bm_reshard(benchmark::State& state, const bench_case& c) {
  std::size_t transfers = 0;
  for (auto _ : state) {
    transfers = 0;
    for (const auto& p : c.pairs) {
      auto plan = reshard::plan(p.src, p.dst);
      transfers += plan.transfers.size();
      benchmark::DoNotOptimize(plan);
    }
  }
  set_counters(state, transfers);
}

void bm_naive(benchmark::State& state, const bench_case& c) {
  // the boxes of all ranks: the baseline's input (DCP's metadata), not timed
  std::vector<rank_boxes> src, dst;
  for (const auto& p : c.pairs) {
    src.push_back(boxes_of(p.src));
    dst.push_back(boxes_of(p.dst));
  }
  std::string why;
  if (!check_once(c, src, dst, why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  std::size_t transfers = 0;
  for (auto _ : state) {
    transfers = 0;
    for (std::size_t k = 0; k < src.size(); ++k) {
      auto plan = naive_plan(src[k], dst[k]);
      transfers += plan.size();
      benchmark::DoNotOptimize(plan);
    }
  }
  set_counters(state, transfers);
}

// check_plan of reshard's own plan (made before the timing): the checker beside the planner
void bm_check(benchmark::State& state, const bench_case& c) {
  std::vector<reshard::transfer_plan> plans;
  for (const auto& p : c.pairs) plans.push_back(reshard::plan(p.src, p.dst));
  std::size_t transfers = 0;
  for (auto _ : state) {
    transfers = 0;
    for (const auto& p : plans) {
      auto r = reshard::check_plan(p.src, p.dst, p.transfers);
      if (!r.ok()) {
        state.SkipWithError("check_plan refused reshard's plan");
        return;
      }
      transfers += p.transfers.size();
      benchmark::DoNotOptimize(r);
    }
  }
  set_counters(state, transfers);
}

}  // namespace

int main(int argc, char** argv) {
  static std::vector<bench_case> cases = pair_cases();
  cases.push_back(model_case());
  for (const auto& c : cases) {
    configure(benchmark::RegisterBenchmark(("plan/" + c.name + "/reshard").c_str(), bm_reshard, c),
              benchmark::kMicrosecond);
    if (c.naive)
      configure(benchmark::RegisterBenchmark(("plan/" + c.name + "/naive").c_str(), bm_naive, c),
                benchmark::kMicrosecond);
    configure(benchmark::RegisterBenchmark(("check/" + c.name + "/reshard").c_str(), bm_check, c),
              benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
