// examples/uneven_8to3.cpp: 8 ranks -> 3 ranks, where nothing divides evenly. MindSpore requires
// one device count to divide the other and every dim to split evenly; reshard does not. A
// [10, 7] tensor sharded torch.chunk-style over a 4 x 2 mesh (rows of 3,3,3,1 and columns of
// 4,3) moves to 3 ranks holding balanced row blocks (4,3,3 rows, all columns).
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "reshard.hpp"

namespace {

using reshard::index_t;
using reshard::layout;

std::vector<std::vector<std::int32_t>> split_full(const layout& l,
                                                  const std::vector<std::int32_t>& full) {
  std::vector<std::vector<std::int32_t>> shards;
  std::vector<std::byte*> ptrs;
  for (index_t r = 0; r < reshard::num_ranks(l); ++r)
    shards.emplace_back(static_cast<std::size_t>(reshard::volume(reshard::box_of(l, r))));
  for (auto& s : shards) ptrs.push_back(reinterpret_cast<std::byte*>(s.data()));
  reshard::split(l, reinterpret_cast<const std::byte*>(full.data()), ptrs, sizeof(std::int32_t));
  return shards;
}

void print_boxes(const char* name, const layout& l) {
  std::printf("%s %s\n", name, to_string(l).c_str());
  for (index_t r = 0; r < reshard::num_ranks(l); ++r)
    std::printf("  rank %lld holds %-12s shape %s\n", static_cast<long long>(r),
                reshard::to_string(reshard::box_of(l, r)).c_str(),
                reshard::to_string(reshard::slice_shape(l, r)).c_str());
}

}  // namespace

int main() {
  using reshard::split_mode;
  const reshard::index_list shape{10, 7};
  // MindSpore spelling with a split mode; DTensor (mesh (4,2), [Shard(0), Shard(1)]) is the same.
  const layout src = reshard::mindspore_layout({4, 2}, {1, 0}, shape, {.mode = split_mode::chunk});
  const layout dst = reshard::mindspore_layout({3}, {0, -1}, shape,
                                               {.mode = split_mode::balanced});
  if (src != reshard::dtensor_layout({4, 2}, {reshard::shard{0}, reshard::shard{1}}, shape)) {
    std::printf("MISMATCH: the DTensor spelling differs\n");
    return 1;
  }
  print_boxes("source (8 ranks, chunk):   ", src);
  print_boxes("\ntarget (3 ranks, balanced):", dst);

  std::vector<std::int32_t> full(static_cast<std::size_t>(reshard::volume(shape)));
  for (std::size_t e = 0; e < full.size(); ++e) full[e] = static_cast<std::int32_t>(e);
  const auto in_shards = split_full(src, full);

  const reshard::transfer_plan p = reshard::plan(src, dst);
  std::printf("\nplan: %zu transfers\n", p.transfers.size());
  for (const auto& x : p.transfers)
    std::printf("  rank %lld -> rank %lld  %s%s\n", static_cast<long long>(x.src),
                static_cast<long long>(x.dst), reshard::to_string(x.where).c_str(),
                x.src == x.dst ? "  (local copy)" : "");
  const reshard::plan_cost c = p.cost(sizeof(std::int32_t));
  std::printf("int32: %lld bytes cross ranks in %lld messages (lower bound %lld), %lld copied "
              "locally\n",
              static_cast<long long>(c.cross_bytes), static_cast<long long>(c.messages),
              static_cast<long long>(c.lower_bound_bytes), static_cast<long long>(c.local_bytes));

  std::vector<std::vector<std::int32_t>> out_shards;
  for (index_t r = 0; r < reshard::num_ranks(dst); ++r)
    out_shards.emplace_back(static_cast<std::size_t>(reshard::volume(reshard::box_of(dst, r))), -1);
  std::vector<std::span<const std::int32_t>> in(in_shards.begin(), in_shards.end());
  std::vector<std::span<std::int32_t>> out(out_shards.begin(), out_shards.end());
  reshard::convert(p, in, out);

  const auto expected = split_full(dst, full);
  int bad = c.cross_bytes == c.lower_bound_bytes ? 0 : 1;
  for (std::size_t r = 0; r < out_shards.size(); ++r)
    if (out_shards[r] != expected[r]) {
      std::printf("MISMATCH: target rank %zu\n", r);
      ++bad;
    }
  if (bad) return 1;
  std::printf("converted 8 shards into 3, each checked against the target layout: verified\n");
  return 0;
}
