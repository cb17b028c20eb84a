// reshard/io/sha256.hpp: SHA-256 (FIPS 180-4) of a byte stream, for the manifests of written
// checkpoints (docs/cli.md, "Manifests"). Portable C++, no dependency; checked against the
// standard's test vectors and Python's hashlib (verify/io/sha256.cpp).
//
//   io::sha256 h;  h.update(bytes); ...;  std::string hex = h.hex();   // 64 lowercase hex digits
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define RESHARD_SHA256_X86 1
#endif

namespace reshard::io {

namespace detail {
inline constexpr std::uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#if RESHARD_SHA256_X86
// The x86 SHA extensions (with SSSE3 and SSE4.1), when the processor has them.
inline bool sha256_hardware() noexcept {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19))) return false;  // SSSE3, SSE4.1
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b & (1u << 29)) != 0;  // SHA
  }();
  return has;
}

// `blocks` 64-byte blocks of `p` into `state` with the SHA extensions: four rounds per pair of
// sha256rnds2, the message schedule by sha256msg1/msg2 (FIPS 180-4's W[t] four words at a time).
__attribute__((target("sha,sse4.1,ssse3"))) inline void sha256_blocks_hardware(std::uint32_t* state,
                                                                                const std::uint8_t* p,
                                                                                std::size_t blocks) noexcept {
  const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);  // big-endian words
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));           // A B C D (lanes 0..3)
  __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));        // E F G H
  tmp = _mm_shuffle_epi32(tmp, 0xB1);
  s1 = _mm_shuffle_epi32(s1, 0x1B);
  __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);  // ABEF, as sha256rnds2 wants
  s1 = _mm_blend_epi16(s1, tmp, 0xF0);       // CDGH
  for (; blocks != 0; --blocks, p += 64) {
    const __m128i save0 = s0, save1 = s1;
    __m128i w[16];
    for (int i = 0; i < 16; ++i) {
      if (i < 4) {
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), mask);
      } else {
        const __m128i t = _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]), _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
        w[i] = _mm_sha256msg2_epu32(t, w[i - 1]);
      }
      __m128i m = _mm_add_epi32(w[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(sha256_k + 4 * i)));
      s1 = _mm_sha256rnds2_epu32(s1, s0, m);
      m = _mm_shuffle_epi32(m, 0x0E);
      s0 = _mm_sha256rnds2_epu32(s0, s1, m);
    }
    s0 = _mm_add_epi32(s0, save0);
    s1 = _mm_add_epi32(s1, save1);
  }
  tmp = _mm_shuffle_epi32(s0, 0x1B);
  s1 = _mm_shuffle_epi32(s1, 0xB1);
  s0 = _mm_blend_epi16(tmp, s1, 0xF0);  // A B C D
  s1 = _mm_alignr_epi8(s1, tmp, 8);      // E F G H
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), s0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), s1);
}
#endif
}  // namespace detail

class sha256 {
 public:
  using digest = std::array<std::uint8_t, 32>;

  sha256() = default;
  /// `portable`: never the processor's SHA instructions (the tests compare both ways).
  explicit sha256(bool portable) noexcept : portable_(portable) {}

  /// Feeds `bytes` (any split of a stream gives the same digest).
  void update(std::span<const std::byte> bytes) noexcept {
    const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
    std::size_t n = bytes.size();
    total_ += n;
    if (used_ != 0) {
      const std::size_t take = std::min(n, block_.size() - used_);
      std::memcpy(block_.data() + used_, p, take);
      used_ += take, p += take, n -= take;
      if (used_ < block_.size()) return;
      blocks(block_.data(), 1);
      used_ = 0;
    }
    if (n >= 64) blocks(p, n / 64), p += n / 64 * 64, n %= 64;
    if (n != 0) std::memcpy(block_.data(), p, n), used_ = n;
  }

  /// The digest of everything fed so far (the state is left as it was).
  digest finish() const noexcept {
    sha256 h = *this;
    const std::uint64_t bits = h.total_ * 8;
    const std::uint8_t one = 0x80;
    h.update(std::as_bytes(std::span(&one, 1)));
    static constexpr std::array<std::uint8_t, 64> zeros{};
    const std::size_t pad = (h.used_ <= 56 ? 56 - h.used_ : 120 - h.used_);
    h.update(std::as_bytes(std::span(zeros.data(), pad)));
    std::array<std::uint8_t, 8> len{};
    for (int i = 0; i < 8; ++i) len[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    h.update(std::as_bytes(std::span(len)));
    digest out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t k = 0; k < 4; ++k) out[4 * i + k] = static_cast<std::uint8_t>(h.state_[i] >> (24 - 8 * k));
    return out;
  }

  /// finish() as 64 lowercase hex digits.
  std::string hex() const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    for (std::uint8_t b : finish()) s += digits[b >> 4], s += digits[b & 15];
    return s;
  }

 private:
  static constexpr std::uint32_t rotr(std::uint32_t x, int n) noexcept { return (x >> n) | (x << (32 - n)); }

  // `count` 64-byte blocks: with the x86 SHA extensions when the processor has them (and
  // `portable` is false), else in plain C++.
  void blocks(const std::uint8_t* p, std::size_t count) noexcept {
#if RESHARD_SHA256_X86
    if (!portable_ && detail::sha256_hardware()) return detail::sha256_blocks_hardware(state_.data(), p, count);
#endif
    for (; count != 0; --count, p += 64) compress(p);
  }

  void compress(const std::uint8_t* p) noexcept {
    const auto* k = detail::sha256_k;
    std::array<std::uint32_t, 64> w{};
    for (std::size_t i = 0; i < 16; ++i)
      w[i] = (std::uint32_t{p[4 * i]} << 24) | (std::uint32_t{p[4 * i + 1]} << 16) | (std::uint32_t{p[4 * i + 2]} << 8) |
             std::uint32_t{p[4 * i + 3]};
    for (std::size_t i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (std::size_t i = 0; i < 64; ++i) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d;
    state_[4] += e, state_[5] += f, state_[6] += g, state_[7] += h;
  }

  std::array<std::uint32_t, 8> state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<std::uint8_t, 64> block_{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
  bool portable_ = false;
};

}  // namespace reshard::io
