// examples/plan_8to4.cpp: the MindSpore tutorial's scenario ("distributed resilience training"):
// a weight trained on 8 ranks is fine-tuned on 4 ranks with another strategy and optimizer
// sharding. We build both layouts, split a full tensor into the 8 training shards, plan the
// redistribution, convert the shards to the 4 fine-tuning shards and check every value. In
// memory, with the core only; examples/transform_8to4.cpp does the same job on checkpoint files.
//
// The network: layer1 = Dense(784, 512), computed as x @ w with x [batch, 784] and the weight
// w [in, out] = [784, 512]. Its MatMul (i,j) x (j,k) gets a strategy ((a,b),(b,c)): x is split
// a ways along i (batch) and b ways along j; w is split b ways along j and c ways along k.
//
// How a strategy becomes the weight's layout (MindSpore's MatMulInfo):
//   * the operator's device matrix is [a, b, c] = [i, j, k];
//   * if the strategy uses fewer devices than the stage has, the ratio ("repeated calculation")
//     becomes one more device axis. Current MindSpore appends it on the RIGHT by default
//     (OperatorInfo::SetRepeatedCalcDevMatrix, repeated_num_in_dev_matrix_right_ = true) and
//     adds 1 to every tensor-map entry (older MindSpore versions prepended it on the left);
//   * tensor maps count device axes from the right: in [i, j, k], k is axis 0, j axis 1, i axis 2.
//     w = [j, k] has the map [1, 0]; x = [i, j] would have [2, 1].
//
// Training, 8 ranks, strategy ((2,1),(1,2)): [i,j,k] = [2,1,2] uses 4 devices, so 8/4 = 2 is a
//   repeat axis: dev [2,1,2,2] and w's map [1,0] becomes [2,1]. No optimizer sharding.
//   (With the repeat axis on the left instead: dev [2,2,1,2], map [1,0]; same shards, other ranks.)
// Fine-tuning, 4 ranks, strategy ((2,2),(2,1)) + enable_parallel_optimizer: dev [2,2,1] uses all
//   4 devices, w's map is [1,0]: dim 0 is split 2 ways (by j), dim 1 not at all (k = 1). The
//   device axis i splits nothing of w, so ranks {0,2} and {1,3} hold the same rows: these replica
//   groups have 2 ranks, 2 apart. The parallel optimizer splits each rank's rows again among its
//   replica group: opt_weight_shard_size = 2 (the whole group; -1 means the same), step = 2 (the
//   rank stride inside the group).
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "reshard.hpp"

namespace {

using reshard::index_t;
using reshard::layout;

// The shards of `full` under layout `l`, one vector per rank (reshard::split does the copying).
std::vector<std::vector<float>> split_full(const layout& l, const std::vector<float>& full) {
  std::vector<std::vector<float>> shards;
  std::vector<std::byte*> ptrs;
  for (index_t r = 0; r < reshard::num_ranks(l); ++r)
    shards.emplace_back(static_cast<std::size_t>(reshard::volume(reshard::box_of(l, r))));
  for (auto& s : shards) ptrs.push_back(reinterpret_cast<std::byte*>(s.data()));
  reshard::split(l, reinterpret_cast<const std::byte*>(full.data()), ptrs, sizeof(float));
  return shards;
}

std::string kib(index_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld bytes (%.0f KiB)", static_cast<long long>(bytes),
                static_cast<double>(bytes) / 1024);
  return buf;
}

}  // namespace

int main() {
  const reshard::index_list shape{784, 512};
  const layout train = reshard::mindspore_layout({2, 1, 2, 2}, {2, 1}, shape);
  const layout tune = reshard::mindspore_layout({2, 2, 1}, {1, 0}, shape,
                                                {.opt = {.step = 2, .size = 2}});

  std::printf("MindSpore tutorial: layer1's weight w, float32 [784, 512], 8 ranks -> 4 ranks\n\n");
  std::printf("training     8 ranks, MatMul strategy ((2,1),(1,2))\n");
  std::printf("             layout %s\n", to_string(train).c_str());
  std::printf("             each rank holds %s: all rows, half the columns (4 ranks per half)\n",
              reshard::to_string(reshard::slice_shape(train, 0)).c_str());
  std::printf("fine-tuning  4 ranks, strategy ((2,2),(2,1)) + optimizer sharding\n");
  std::printf("             layout %s\n", to_string(tune).c_str());
  std::printf("             ranks 0,2 share rows 0:392 and ranks 1,3 rows 392:784; the optimizer\n"
              "             gives each rank half of those: %s, all columns\n\n",
              reshard::to_string(reshard::slice_shape(tune, 0)).c_str());

  // The full weight with known values: w[r][c] = r * 512 + c (exact in float32).
  std::vector<float> full(static_cast<std::size_t>(reshard::volume(shape)));
  for (std::size_t e = 0; e < full.size(); ++e) full[e] = static_cast<float>(e);
  const auto src = split_full(train, full);  // what the 8 training checkpoints hold

  // The plan: for each target rank, which source rank sends which box.
  const reshard::transfer_plan p = reshard::plan(train, tune);
  std::printf("plan (%zu transfers; a box is [rows, columns] of the full weight):\n",
              p.transfers.size());
  for (index_t t = 0; t < reshard::num_ranks(tune); ++t) {
    std::printf("  target rank %lld needs %s:\n", static_cast<long long>(t),
                reshard::to_string(reshard::box_of(tune, t)).c_str());
    for (const auto& x : p.transfers)
      if (x.dst == t)
        std::printf("    %-18s from rank %lld%s\n", reshard::to_string(x.where).c_str(),
                    static_cast<long long>(x.src),
                    x.src == t ? " (its own training shard: a local copy)" : "");
  }
  const reshard::plan_cost c = p.cost(sizeof(float));
  std::printf("\ncost:\n");
  std::printf("  moved between ranks  %s in %lld messages\n", kib(c.cross_bytes).c_str(),
              static_cast<long long>(c.messages));
  std::printf("  lower bound          %s (what the targets lack; the plan moves %s)\n",
              kib(c.lower_bound_bytes).c_str(),
              c.cross_bytes == c.lower_bound_bytes ? "exactly that" : "MORE");
  std::printf("  copied locally       %s (each target rank already holds half of what it needs)\n",
              kib(c.local_bytes).c_str());
  std::printf("  busiest sender       %s\n\n", kib(c.max_sent_bytes).c_str());

  // Convert the 8 shards into 4 and compare with splitting the full weight by the target layout.
  std::vector<std::vector<float>> dst(static_cast<std::size_t>(reshard::num_ranks(tune)));
  for (index_t r = 0; r < reshard::num_ranks(tune); ++r)
    dst[static_cast<std::size_t>(r)].assign(
        static_cast<std::size_t>(reshard::volume(reshard::box_of(tune, r))), -1.0f);
  std::vector<std::span<const float>> in(src.begin(), src.end());
  std::vector<std::span<float>> out(dst.begin(), dst.end());
  reshard::convert(p, in, out);

  const auto expected = split_full(tune, full);
  int bad = 0;
  for (std::size_t r = 0; r < dst.size(); ++r) {
    if (dst[r] == expected[r]) continue;
    std::printf("MISMATCH: target rank %zu differs from the target layout's shard\n", r);
    ++bad;
  }
  if (c.cross_bytes != c.lower_bound_bytes) {
    std::printf("MISMATCH: the plan moves more than the lower bound\n");
    ++bad;
  }
  if (bad) return 1;
  std::printf("converted 8 shards into 4; each equals the full weight split by the fine-tuning "
              "layout: verified\n");
  return 0;
}
