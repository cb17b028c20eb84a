// bench/scaling.cpp: how planning a checkpoint conversion grows with the number of ranks, by
// simulation in one process (no MPI). A plain program, not a Google Benchmark: it prints the tables
// docs/scaling.md quotes.
//
// The model: GPT-like, hidden h = 12288, 96 layers, vocabulary 49152 (GPT-3 175B's shapes). Per
// layer: qkv [h,3h] + bias [3h] and fc1 [h,4h] + bias [4h] split by columns over tp; proj [h,h]
// and fc2 [4h,h] split by rows over tp with biases [h] replicated; two layernorms (gamma, beta
// [h]) replicated. Plus the embedding [vocab,h] split by rows over tp and the final layernorm.
// 1155 tensors, 14 distinct (shape, layout) kinds: every layer has the same plans.
// Layouts: MindSpore's device matrix [dp, tp] (tp innermost), optimizer sharding of dim 0 over
// dp (opt_weight_shard_size = dp), balanced splits where sizes do not divide.
//
// For each conversion src -> dst (e.g. 1024 ranks dp 128 x tp 8 -> 768 ranks dp 96 x tp 8) we
// report, for the whole model:
//   * the whole plan, as plan() derives it on every rank: transfers, memory, time;
//   * one rank's part, as plan_for_rank() derives it: transfers, memory, time (mean and max over
//     sampled ranks);
//   * the peers of a rank (ranks it sends to or receives from, over all tensors): max and mean;
//   * bytes a rank sends and receives (bf16), max over ranks.
// The raw baseline beside plan_for_rank is plan() itself followed by keeping the rank's transfers.
// Then, for the largest conversion, one tensor of each kind: plan(), plan_for_rank and box_of
// (which computes the slice boundaries plan_for_rank starts from), in microseconds.
//
// RESHARD_BENCH_TINY=1 (ctest) runs the smallest conversion on a 2-layer model with few samples.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "reshard.hpp"
#include "reshard/rank_plan.hpp"

namespace {

using namespace reshard;
using clock_type = std::chrono::steady_clock;

struct model {
  index_t hidden = 12288, layers = 96, vocab = 49152;
};

struct mesh {
  index_t dp, tp;
  index_t ranks() const { return dp * tp; }
};

// One kind of tensor: shape, MindSpore tensor map over [dp, tp], how many the model has.
struct tensor_kind {
  const char* name;
  index_list shape;
  tensor_map map;
  index_t count;
};

std::vector<tensor_kind> kinds(const model& m) {
  const index_t h = m.hidden, l = m.layers;
  return {
      {"embedding [v,h]", {m.vocab, h}, {0, -1}, 1},
      {"qkv [h,3h]", {h, 3 * h}, {-1, 0}, l},
      {"qkv bias [3h]", {3 * h}, {0}, l},
      {"proj [h,h]", {h, h}, {0, -1}, l},
      {"proj bias [h]", {h}, {-1}, l},
      {"fc1 [h,4h]", {h, 4 * h}, {-1, 0}, l},
      {"fc1 bias [4h]", {4 * h}, {0}, l},
      {"fc2 [4h,h]", {4 * h, h}, {0, -1}, l},
      {"fc2 bias [h]", {h}, {-1}, l},
      {"ln1 gamma [h]", {h}, {-1}, l},
      {"ln1 beta [h]", {h}, {-1}, l},
      {"ln2 gamma [h]", {h}, {-1}, l},
      {"ln2 beta [h]", {h}, {-1}, l},
      {"final ln [h] x2", {h}, {-1}, 2},
  };
}

layout layout_of(const tensor_kind& k, const mesh& g, index_t first_rank = 0) {
  layout l = mindspore_layout({g.dp, g.tp}, k.map, k.shape,
                              {.opt = {.step = g.tp, .size = g.dp}, .mode = split_mode::balanced});
  l.first_rank = first_rank;
  return l;
}

// Best of `reps` runs of f, in microseconds.
template <class F>
double best_us(int reps, F&& f) {
  double best = 1e300;
  for (int k = 0; k < reps; ++k) {
    const auto t0 = clock_type::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return best;
}

// Number of slices along dim 0 (optimizer-sharding parts included).
index_t regions_along_dim0(const layout& l) {
  index_t slices = 1;
  for (int a : l.dim_axes[0]) slices *= l.dev_matrix[static_cast<std::size_t>(a)];
  const index_t parts = l.opt.size == -1 ? 0 : l.opt.size;  // layouts here use an explicit size
  return slices * std::max<index_t>(parts, 1);
}

std::size_t plan_bytes(const transfer_plan& p) {
  return p.transfers.capacity() * sizeof(transfer);  // boxes of <= 4 dims are inline
}

struct result {
  index_t src_ranks, dst_ranks;
  double whole_transfers = 0, whole_mib = 0, whole_ms = 0;    // whole model, one rank derives all
  double part_mean_transfers = 0, part_max_transfers = 0;     // one rank's part
  double part_mean_kib = 0, part_max_kib = 0, part_mean_ms = 0, part_max_ms = 0;
  double filter_ms = 0;                                        // plan() + keep one rank's part
  index_t max_peers = 0;
  double mean_peers = 0;
  double max_send_mib = 0, max_recv_mib = 0;
};

result simulate(const model& m, const mesh& src, const mesh& dst, int samples, int reps) {
  result r{src.ranks(), dst.ranks()};
  const index_t n = std::max(src.ranks(), dst.ranks());
  std::vector<std::vector<index_t>> peers(static_cast<std::size_t>(n));
  std::vector<double> sent(static_cast<std::size_t>(n), 0), received(sent);
  std::vector<index_t> sample;
  for (int k = 0; k < samples; ++k) sample.push_back(static_cast<index_t>(k) * n / samples);
  std::vector<double> part_us(sample.size(), 0), part_transfers(sample.size(), 0),
      part_bytes(sample.size(), 0);
  const index_t elem = 2;  // bf16
  for (const tensor_kind& k : kinds(m)) {
    const layout a = layout_of(k, src), b = layout_of(k, dst);
    const auto count = static_cast<double>(k.count);
    // The whole plan, as every rank would derive it with plan().
    transfer_plan whole;
    r.whole_ms += count * best_us(reps, [&] { whole = plan(a, b); }) / 1e3;
    r.whole_transfers += count * static_cast<double>(whole.transfers.size());
    r.whole_mib += count * static_cast<double>(plan_bytes(whole)) / 1048576.0;
    // The baseline for one rank's part: plan() then keep the rank's transfers.
    r.filter_ms += count * best_us(reps, [&] {
      const transfer_plan p = plan(a, b);
      std::vector<transfer> mine;
      for (const transfer& x : p.transfers)
        if (x.src == sample.back() || x.dst == sample.back()) mine.push_back(x);
      if (mine.size() > p.transfers.size()) std::abort();
    }) / 1e3;
    // Peers and bytes per rank, from the plan whose parts plan_for_rank derives.
    const transfer_plan by_ranks = plan_by_ranks(a, b);
    for (const transfer& x : by_ranks.transfers) {
      if (x.src == x.dst) continue;
      const double bytes = static_cast<double>(volume(x.where) * elem) * count;
      sent[static_cast<std::size_t>(x.src)] += bytes;
      received[static_cast<std::size_t>(x.dst)] += bytes;
      peers[static_cast<std::size_t>(x.src)].push_back(x.dst);
      peers[static_cast<std::size_t>(x.dst)].push_back(x.src);
    }
    // One rank's part, for the sampled ranks.
    for (std::size_t s = 0; s < sample.size(); ++s) {
      transfer_plan part;
      part_us[s] += count * best_us(reps, [&] { part = plan_for_rank(a, b, sample[s]); });
      part_transfers[s] += count * static_cast<double>(part.transfers.size());
      part_bytes[s] += count * static_cast<double>(plan_bytes(part));
    }
  }
  double peer_sum = 0;
  for (auto& p : peers) {
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    r.max_peers = std::max(r.max_peers, static_cast<index_t>(p.size()));
    peer_sum += static_cast<double>(p.size());
  }
  r.mean_peers = peer_sum / static_cast<double>(n);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    r.max_send_mib = std::max(r.max_send_mib, sent[i] / 1048576.0);
    r.max_recv_mib = std::max(r.max_recv_mib, received[i] / 1048576.0);
  }
  for (std::size_t s = 0; s < sample.size(); ++s) {
    r.part_mean_ms += part_us[s] / 1e3 / static_cast<double>(sample.size());
    r.part_max_ms = std::max(r.part_max_ms, part_us[s] / 1e3);
    r.part_mean_transfers += part_transfers[s] / static_cast<double>(sample.size());
    r.part_max_transfers = std::max(r.part_max_transfers, part_transfers[s]);
    r.part_mean_kib += part_bytes[s] / 1024.0 / static_cast<double>(sample.size());
    r.part_max_kib = std::max(r.part_max_kib, part_bytes[s] / 1024.0);
  }
  return r;
}

void print(const char* what, const mesh& s, const mesh& d, const result& r) {
  std::printf("| %s | %lld (dp %lld x tp %lld) | %lld (dp %lld x tp %lld) | %.0f | %.1f | %.1f | "
              "%.0f / %.0f | %.0f / %.0f | %.2f / %.2f | %.1f | %lld / %.1f | %.0f / %.0f |\n",
              what, static_cast<long long>(s.ranks()), static_cast<long long>(s.dp),
              static_cast<long long>(s.tp), static_cast<long long>(d.ranks()),
              static_cast<long long>(d.dp), static_cast<long long>(d.tp), r.whole_transfers,
              r.whole_mib, r.whole_ms, r.part_mean_transfers, r.part_max_transfers,
              r.part_mean_kib, r.part_max_kib, r.part_mean_ms, r.part_max_ms, r.filter_ms,
              static_cast<long long>(r.max_peers), r.mean_peers, r.max_send_mib, r.max_recv_mib);
  std::fflush(stdout);
}

// Per tensor kind, for one conversion: where one rank's planning time goes. box_of() computes
// the slice boundaries of every dim (what plan_for_rank needs first), so it shows the part of
// plan_for_rank that grows with the number of slices.
void breakdown(const model& m, const mesh& src, const mesh& dst, int reps) {
  std::printf("\nPer tensor, %lld -> %lld ranks (one tensor of each kind; us, best of %d):\n\n",
              static_cast<long long>(src.ranks()), static_cast<long long>(dst.ranks()), reps);
  std::printf("| tensor | slices of dim 0 (src / dst) | plan() | plan_for_rank, rank 0 | "
              "box_of, src + dst | transfers of rank 0 |\n|---|---|---|---|---|---|\n");
  for (const tensor_kind& k : kinds(m)) {
    const layout a = layout_of(k, src), b = layout_of(k, dst);
    std::size_t n = 0;
    transfer_plan part;
    const double whole = best_us(reps, [&] { n += plan(a, b).transfers.size(); });
    const double own = best_us(reps, [&] { part = plan_for_rank(a, b, 0); });
    const double bounds = best_us(reps, [&] {
      n += static_cast<std::size_t>(volume(box_of(a, 0)) + volume(box_of(b, 0)));
    });
    if (n == 0) std::abort();  // keeps the timed work observable
    std::printf("| %s | %lld / %lld | %.0f | %.1f | %.1f | %zu |\n", k.name,
                static_cast<long long>(regions_along_dim0(a)),
                static_cast<long long>(regions_along_dim0(b)), whole, own, bounds,
                part.transfers.size());
  }
}

}  // namespace

int main() {
  const char* tiny_env = std::getenv("RESHARD_BENCH_TINY");
  const bool tiny = tiny_env && *tiny_env && std::string(tiny_env) != "0";
  model m;
  if (tiny) m.layers = 2;
  const int samples = tiny ? 4 : 16, reps = tiny ? 1 : 3;
  std::printf("GPT-like model: h %lld, %lld layers, vocab %lld, %zu tensors in %zu kinds; bf16; "
              "optimizer sharding over dp; %d sampled ranks per conversion, best of %d runs\n\n",
              static_cast<long long>(m.hidden), static_cast<long long>(m.layers),
              static_cast<long long>(m.vocab), [&] {
                std::size_t n = 0;
                for (const auto& k : kinds(m)) n += static_cast<std::size_t>(k.count);
                return n;
              }(), kinds(m).size(), samples, reps);
  std::printf("| conversion | source | target | whole plan: transfers | whole plan: MiB | "
              "whole plan: ms | own part: transfers mean / max | own part: KiB mean / max | "
              "own part: ms mean / max | plan() + filter: ms | peers max / mean | "
              "MiB sent / received, max |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct conversion {
    const char* name;
    mesh src, dst;
  };
  std::vector<conversion> all = {
      {"1024 -> 768, same tp", {128, 8}, {96, 8}},
      {"1024 -> 768, tp 8 -> 4", {128, 8}, {192, 4}},
      {"4096 -> 3072, same tp", {512, 8}, {384, 8}},
      {"4096 -> 3072, tp 8 -> 16", {512, 8}, {192, 16}},
      {"8192 -> 6144, same tp", {1024, 8}, {768, 8}},
      {"16384 -> 12288, same tp", {2048, 8}, {1536, 8}},
  };
  if (tiny) all.resize(1);
  for (const conversion& c : all) print(c.name, c.src, c.dst, simulate(m, c.src, c.dst, samples, reps));
  breakdown(m, all.back().src, all.back().dst, reps);
  return 0;
}
