// fuzz/decode.hpp: how the fuzz targets turn input bytes into parameters.
//
// Every target reads its parameters from a fixed prefix of the input with `input` (a byte
// cursor that yields zeros once the bytes run out, so every input decodes to something), then
// hands the rest to the library or decodes structured values from it:
//   decode_layout_pair  two layouts of one small tensor (plan_convert), valid or not
//   decode_ckpt_tensors, decode_safetensors, decode_strategy  content for the write-read targets
// fuzz/make_corpus.py mirrors the layout encoding (encode_layout_pair) to seed the spec's
// examples; keep the two in step.
#pragma once

#include <reshard/layout.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace reshard_fuzz {

/// A cursor over the fuzzer's bytes. Past the end every read returns 0 (or empty).
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  bool flag() { return byte() & 1u; }
  /// A value in [0, max]: one byte when max < 256, two when max < 65536, else eight.
  std::uint64_t uint(std::uint64_t max) {
    std::uint64_t v = 0;
    const int n = max < 256 ? 1 : max < 65536 ? 2 : 8;
    for (int i = 0; i < n; ++i) v = v << 8 | byte();
    return max == std::numeric_limits<std::uint64_t>::max() ? v : v % (max + 1);
  }
  std::int64_t i64() { return static_cast<std::int64_t>(uint(std::numeric_limits<std::uint64_t>::max())); }
  /// A string of up to `max_len` bytes (a length byte, then the bytes).
  std::string string(std::size_t max_len) {
    const auto n = std::min<std::size_t>(uint(max_len), size_ - std::min(at_, size_));
    std::string s(reinterpret_cast<const char*>(data_) + std::min(at_, size_), n);
    at_ += n;
    return s;
  }
  /// The next `n` bytes, zero-padded when the input runs out.
  std::vector<std::byte> bytes(std::size_t n) {
    std::vector<std::byte> out(n);
    for (auto& b : out) b = std::byte{byte()};
    return out;
  }
  /// Everything not read yet.
  std::span<const std::byte> rest() const {
    const std::size_t at = std::min(at_, size_);
    return {reinterpret_cast<const std::byte*>(data_) + at, size_ - at};
  }
  std::string_view rest_text() const {
    auto r = rest();
    return {reinterpret_cast<const char*>(r.data()), r.size()};
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Layouts. Encoding (one byte each unless said otherwise):
//   shape:  rank = b % 5; per dim b: b < 250 -> b % 13 (the volume is kept <= max_volume by
//           turning dims that would exceed it into 1), else wild_dims[b - 250]
//   each of the two layouts:
//     device axes n = b % 5; per axis b: b < 250 -> 1 + b % 8 (kept to <= max_ranks ranks by
//           turning axes that would exceed it into 1), else wild_devs[b - 250] (all invalid)
//     per tensor dim: axis count c = b % 3; per axis b: b < 240 -> an axis no dim uses yet
//           (unused[b % unused.size()], none left: skipped), else b % 6 == 0 -> an axis already
//           used (invalid), else wild_axes[b % 6 - 1] (0 stands for axis n: out of range)
//     mode = b % 3 (divisible, chunk, balanced)
//     opt: b < 160 -> none; else size = opt_sizes[b % 7], step = opt_steps[next b % 6]
//     first rank: b < 200 -> 0; b < 250 -> b % 17; else wild_firsts[b - 250]
//     split sizes: b < 224 -> none; else for each dim a flag byte (odd: explicit) and, when
//           explicit, slices - 1 cut bytes (cut = b % (size + 1), sorted), then a byte whose
//           value 255 adds 1 to the last slice (sum off by one: invalid)
inline constexpr std::size_t max_rank = 4;
inline constexpr reshard::index_t max_volume = 4096;
inline constexpr reshard::index_t max_ranks = 64;
inline constexpr std::array<reshard::index_t, 6> wild_dims{
    -1, reshard::index_t{1} << 40, std::numeric_limits<reshard::index_t>::max(),
    std::numeric_limits<reshard::index_t>::min(), reshard::index_t{1} << 31, 4097};
inline constexpr std::array<reshard::index_t, 6> wild_devs{
    0, -1, reshard::index_t{1} << 40, std::numeric_limits<reshard::index_t>::max(),
    std::numeric_limits<reshard::index_t>::min(), -(reshard::index_t{1} << 40)};
inline constexpr std::array<int, 5> wild_axes{0, -1, 64, std::numeric_limits<int>::max(),
                                              std::numeric_limits<int>::min()};
inline constexpr std::array<reshard::index_t, 7> opt_sizes{-1, 2, 3, 4, 1, 0, -2};
inline constexpr std::array<reshard::index_t, 6> opt_steps{0, 1, 2, 4, -1, 1 << 20};
inline constexpr std::array<reshard::index_t, 6> wild_firsts{
    -1, (reshard::index_t{1} << 31) - 1, reshard::index_t{1} << 31,
    std::numeric_limits<reshard::index_t>::max(), std::numeric_limits<reshard::index_t>::min(),
    (reshard::index_t{1} << 31) - 8};

inline reshard::index_list decode_shape(input& in) {
  reshard::index_list shape;
  const std::size_t rank = in.byte() % (max_rank + 1);
  reshard::index_t volume = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::uint8_t b = in.byte();
    if (b >= 250) {
      shape.push_back(wild_dims[b - 250]);
      continue;
    }
    reshard::index_t d = b % 13;
    if (d > 0 && volume * d > max_volume) d = 1;
    if (d > 0) volume *= d;
    shape.push_back(d);
  }
  return shape;
}

inline reshard::layout decode_layout(input& in, const reshard::index_list& shape) {
  reshard::layout l;
  l.shape = shape;
  const std::size_t nd = in.byte() % 5;
  reshard::index_t ranks = 1;
  for (std::size_t a = 0; a < nd; ++a) {
    const std::uint8_t b = in.byte();
    if (b >= 250) {
      l.dev_matrix.push_back(wild_devs[b - 250]);
      continue;
    }
    reshard::index_t d = 1 + b % 8;
    if (ranks * d > max_ranks) d = 1;
    ranks *= d;
    l.dev_matrix.push_back(d);
  }
  std::vector<int> unused;
  for (std::size_t a = 0; a < nd; ++a) unused.push_back(static_cast<int>(a));
  std::vector<int> used;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::vector<int> axes;
    const int count = in.byte() % 3;
    for (int k = 0; k < count; ++k) {
      const std::uint8_t b = in.byte();
      if (b < 240) {
        if (unused.empty()) continue;
        const std::size_t j = b % unused.size();
        axes.push_back(unused[j]);
        used.push_back(unused[j]);
        unused.erase(unused.begin() + static_cast<std::ptrdiff_t>(j));
      } else if (b % 6 == 0) {
        if (!used.empty()) axes.push_back(used[b % used.size()]);
      } else {
        axes.push_back(wild_axes[b % 6 - 1] == 0 ? static_cast<int>(nd) : wild_axes[b % 6 - 1]);
      }
    }
    l.dim_axes.push_back(std::move(axes));
  }
  l.mode = static_cast<reshard::split_mode>(in.byte() % 3);
  if (const std::uint8_t b = in.byte(); b >= 160) {
    l.opt.size = opt_sizes[b % opt_sizes.size()];
    l.opt.step = opt_steps[in.byte() % opt_steps.size()];
  }
  if (const std::uint8_t b = in.byte(); b >= 250)
    l.first_rank = wild_firsts[b - 250];
  else if (b >= 200)
    l.first_rank = b % 17;
  if (in.byte() >= 224) {
    l.split_sizes.resize(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (!in.flag()) continue;
      // slices of dim i: the product of its (in-range) axes; sizes from sorted cut points
      reshard::index_t slices = 1;
      for (int a : l.dim_axes[i])
        if (a >= 0 && static_cast<std::size_t>(a) < nd && l.dev_matrix[a] > 0 && l.dev_matrix[a] <= max_ranks)
          slices *= l.dev_matrix[a];
      const reshard::index_t n = std::clamp<reshard::index_t>(shape[i], 0, max_volume);
      std::vector<reshard::index_t> cuts{0};
      for (reshard::index_t k = 1; k < slices && k <= max_ranks; ++k)
        cuts.push_back(static_cast<reshard::index_t>(in.byte()) % (n + 1));
      std::sort(cuts.begin(), cuts.end());
      cuts.push_back(n);
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k) l.split_sizes[i].push_back(cuts[k + 1] - cuts[k]);
      if (in.byte() == 255) l.split_sizes[i].back() += 1;
    }
  }
  return l;
}

struct layout_pair {
  reshard::layout a, b;
  std::size_t element_bytes = 1;
};

/// Element size (1, 2, 3, 4 or 8 bytes), the shape, then the two layouts.
inline layout_pair decode_layout_pair(input& in) {
  constexpr std::array<std::size_t, 5> sizes{1, 2, 3, 4, 8};
  layout_pair p;
  p.element_bytes = sizes[in.byte() % sizes.size()];
  const reshard::index_list shape = decode_shape(in);
  p.a = decode_layout(in, shape);
  p.b = decode_layout(in, shape);
  return p;
}

}  // namespace reshard_fuzz
