// verify/laws/data.hpp: tensors with distinct element values, per-rank shard buffers, a naive
// slicer independent of convert(), and comparisons that name the first differing element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "layout.hpp"
#include "reshard.hpp"

namespace reshard::laws {

using bytes = std::vector<std::byte>;

/// A full row-major tensor of `elem`-byte elements whose values are distinct (for elem >= 2 and
/// fewer than 2^16 elements): element i holds (i * odd + salt) mod 2^(8 elem), little-endian.
inline bytes distinct_tensor(const index_list& shape, std::size_t elem, std::uint64_t salt = 0) {
  const auto n = static_cast<std::size_t>(volume(shape));
  bytes out(n * elem);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t v = i * 0x9E3779B97F4A7C15ull + salt;
    for (std::size_t b = 0; b < elem; ++b, v >>= 8)
      out[i * elem + b] = static_cast<std::byte>(v & 0xFF);
  }
  return out;
}

/// One buffer per local rank of a layout, sized to its box.
struct shard_set {
  std::vector<bytes> buf;

  std::vector<const std::byte*> cptrs() const {
    std::vector<const std::byte*> v;
    for (const auto& b : buf) v.push_back(b.data());
    return v;
  }
  std::vector<std::byte*> ptrs() {
    std::vector<std::byte*> v;
    for (auto& b : buf) v.push_back(b.data());
    return v;
  }
  friend bool operator==(const shard_set&, const shard_set&) = default;
};

/// Buffers for every rank of `l`, filled with `poison` so unwritten bytes show.
inline shard_set blank_shards(const layout& l, std::size_t elem,
                              std::byte poison = std::byte{0xCD}) {
  shard_set s;
  for (const box& b : boxes(l))
    s.buf.emplace_back(static_cast<std::size_t>(volume(b)) * elem, poison);
  return s;
}

/// The shards of `full` under `l`, cut element by element from box_of (no convert()).
inline shard_set naive_split(const layout& l, const bytes& full, std::size_t elem) {
  shard_set s;
  for (const box& b : boxes(l)) {
    bytes out(static_cast<std::size_t>(volume(b)) * elem);
    const std::size_t n = b.offset.size();
    index_list k(n, 0);
    for (index_t e = 0; e < volume(b); ++e) {
      index_t flat = 0;
      for (std::size_t i = 0; i < n; ++i) flat = flat * l.shape[i] + b.offset[i] + k[i];
      std::memcpy(out.data() + static_cast<std::size_t>(e) * elem,
                  full.data() + static_cast<std::size_t>(flat) * elem, elem);
      for (std::size_t i = n; i-- > 0;) {
        if (++k[i] < b.extent[i]) break;
        k[i] = 0;
      }
    }
    s.buf.push_back(std::move(out));
  }
  return s;
}

/// split(l, full) into fresh buffers.
inline shard_set split_shards(const layout& l, const bytes& full, std::size_t elem,
                              unsigned threads = 1) {
  shard_set s = blank_shards(l, elem);
  auto p = s.ptrs();
  split(l, full.data(), std::span<std::byte* const>(p), elem, {threads});
  return s;
}

/// convert(plan, in, options) into fresh buffers of the plan's target layout.
inline shard_set convert_shards(const transfer_plan& p, const shard_set& in, std::size_t elem,
                                const convert_options& options) {
  shard_set out = blank_shards(p.dst, elem);
  auto sp = in.cptrs();
  auto dp = out.ptrs();
  convert(p, std::span<const std::byte* const>(sp), std::span<std::byte* const>(dp), elem, options);
  return out;
}

/// convert(plan, in) with `threads` threads into fresh buffers of the plan's target layout.
inline shard_set convert_shards(const transfer_plan& p, const shard_set& in, std::size_t elem,
                                unsigned threads = 1) {
  return convert_shards(p, in, elem, convert_options{.threads = threads});
}

/// merge(l, shards) into a fresh full tensor.
inline bytes merge_shards(const layout& l, const std::vector<const std::byte*>& shards,
                          std::size_t elem, unsigned threads = 1) {
  bytes full(static_cast<std::size_t>(volume(l.shape)) * elem, std::byte{0xCD});
  merge(l, std::span<const std::byte* const>(shards), full.data(), elem, {threads});
  return full;
}

/// Empty when `got` equals `want` shard by shard; otherwise the first differing element.
inline std::string same_shards(const layout& l, const shard_set& got, const shard_set& want,
                               std::size_t elem, const std::string& context) {
  if (got.buf.size() != want.buf.size()) return "shard counts differ " + context;
  for (std::size_t r = 0; r < got.buf.size(); ++r) {
    if (got.buf[r] == want.buf[r]) continue;
    if (got.buf[r].size() != want.buf[r].size())
      return "rank " + std::to_string(l.first_rank + static_cast<index_t>(r)) +
             ": shard sizes differ " + context;
    std::size_t i = 0;
    while (got.buf[r][i] == want.buf[r][i]) ++i;
    return "rank " + std::to_string(l.first_rank + static_cast<index_t>(r)) + " (box " +
           to_string(box_of(l, l.first_rank + static_cast<index_t>(r))) + "): element " +
           std::to_string(i / elem) + " differs " + context;
  }
  return {};
}

/// Empty when two full tensors are equal; otherwise the first differing element.
inline std::string same_tensor(const bytes& got, const bytes& want, std::size_t elem,
                               const std::string& context) {
  if (got == want) return {};
  if (got.size() != want.size()) return "tensor sizes differ " + context;
  std::size_t i = 0;
  while (got[i] == want[i]) ++i;
  return "element " + std::to_string(i / elem) + " differs " + context;
}

}  // namespace reshard::laws
