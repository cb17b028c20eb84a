// reshard/io/crc32.hpp: CRC-32 with zlib's polynomial (reflected 0xEDB88320, initial and final
// xor 0xFFFFFFFF), the checksum of MindSpore's `crc_num` checkpoint trailer. Same results as
// zlib's crc32(crc, buf, len) and Python's binascii.crc32(data, crc); no zlib needed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define RESHARD_CRC32_CLMUL 1
#endif

namespace reshard::io {

namespace detail {
// Slicing-by-8 tables: crc_tables[0] is the classic byte table, crc_tables[k][b] the CRC of byte
// b followed by k zero bytes.
inline constexpr std::array<std::array<std::uint32_t, 256>, 8> crc_tables = [] {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}();

constexpr std::uint32_t byte_at(const std::byte* p, std::size_t i) noexcept {
  return std::to_integer<std::uint32_t>(p[i]);
}
// Slicing by 8 over n bytes at p, on the working register c (not inverted here).
constexpr std::uint32_t crc_by_tables(std::uint32_t c, const std::byte* p, std::size_t n) noexcept {
  const auto& t = crc_tables;
  while (n >= 8) {
    const std::uint32_t lo = c ^ (byte_at(p, 0) | byte_at(p, 1) << 8 | byte_at(p, 2) << 16 | byte_at(p, 3) << 24);
    const std::uint32_t hi = byte_at(p, 4) | byte_at(p, 5) << 8 | byte_at(p, 6) << 16 | byte_at(p, 7) << 24;
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  for (std::size_t i = 0; i < n; ++i) c = (c >> 8) ^ t[0][(c ^ byte_at(p, i)) & 0xFFu];
  return c;
}

#ifdef RESHARD_CRC32_CLMUL
// Folding by carry-less multiplication (x86 PCLMULQDQ): the 512 bits in hand are folded onto the
// next 64 bytes with x^(512+32) and x^512 mod P (reflected), then onto one 128-bit lane with the
// constants of a 128-bit distance, reduced to 64 and 32 bits, and the rest is a Barrett reduction
// by P = 0x1DB710641 (bit-reflected) with u = floor(x^64 / P). n >= 64 and a multiple of 16.
// The constants are the reflected powers x^k mod P for this CRC's polynomial.
#define RESHARD_CRC32_TARGET __attribute__((target("pclmul,sse4.1")))
RESHARD_CRC32_TARGET inline __m128i crc_load(const std::byte* q) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}
// x's low half times k's low half, xor x's high half times k's high half
RESHARD_CRC32_TARGET inline __m128i crc_fold(__m128i x, __m128i k) noexcept {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}
RESHARD_CRC32_TARGET inline std::uint32_t crc_by_clmul(std::uint32_t c, const std::byte* p, std::size_t n) noexcept {
  const auto load = crc_load;
  const auto fold = crc_fold;
  __m128i x1 = load(p), x2 = load(p + 16), x3 = load(p + 32), x4 = load(p + 48);
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(static_cast<int>(c)));
  p += 64;
  n -= 64;
  const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);  // x^(4*128+32), x^(4*128-32)
  while (n >= 64) {
    x1 = _mm_xor_si128(fold(x1, k1k2), load(p));
    x2 = _mm_xor_si128(fold(x2, k1k2), load(p + 16));
    x3 = _mm_xor_si128(fold(x3, k1k2), load(p + 32));
    x4 = _mm_xor_si128(fold(x4, k1k2), load(p + 48));
    p += 64;
    n -= 64;
  }
  const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);  // x^(128+32), x^(128-32)
  x1 = _mm_xor_si128(fold(x1, k3k4), x2);
  x1 = _mm_xor_si128(fold(x1, k3k4), x3);
  x1 = _mm_xor_si128(fold(x1, k3k4), x4);
  while (n >= 16) {
    x1 = _mm_xor_si128(fold(x1, k3k4), load(p));
    p += 16;
    n -= 16;
  }
  // 128 -> 64 bits
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x10), _mm_srli_si128(x1, 8));
  // 64 -> 32 bits
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
  const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), _mm_srli_si128(x1, 4));
  // Barrett reduction to 32 bits
  const __m128i poly = _mm_set_epi64x(0x1f7011641, 0x1db710641);  // u, P
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, t), 1));
}
#undef RESHARD_CRC32_TARGET

inline bool has_clmul() noexcept {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_PCLMUL) != 0 && (c & bit_SSE4_1) != 0;
  }();
  return yes;
}
#endif

}  // namespace detail

/// CRC-32 of `data`, continuing from the CRC `crc` of the bytes before it (0 to start).
/// @post crc32(a ++ b) == crc32(b, crc32(a))
constexpr std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  std::uint32_t c = ~crc;
  const std::byte* p = data.data();
  std::size_t n = data.size();
#ifdef RESHARD_CRC32_CLMUL
  if (!std::is_constant_evaluated() && n >= 64 && detail::has_clmul()) {  // 1.8 GB/s by tables, memcpy's speed so
    const std::size_t folded = n & ~std::size_t{15};
    c = detail::crc_by_clmul(c, p, folded);
    p += folded;
    n -= folded;
  }
#endif
  return ~detail::crc_by_tables(c, p, n);
}

}  // namespace reshard::io
