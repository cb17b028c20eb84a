// reshard/io/cast.hpp: element casts between the floating-point dtypes of a checkpoint
// (Float16, BFloat16, Float32, Float64), as scalar bit conversions and as one bulk kernel.
//
// The rounding rules (IEEE 754 binary16 / binary32 / binary64; bfloat16 is binary32 with the
// low 16 significand bits dropped: 1 sign, 8 exponent, 7 fraction bits, with subnormals):
//
//  * Widening (Float16 -> Float32, BFloat16 -> Float32, and from any of them to Float64) is exact:
//    every finite value, every zero with its sign and both infinities come out unchanged. From
//    Float16 and BFloat16 to Float32 every bit is kept, NaN payloads too (a signaling NaN stays
//    signaling, as numpy's float16 -> float32 cast does). A Float16 subnormal becomes the Float32
//    normal number of the same value.
//  * Narrowing (Float32 -> Float16, Float32 -> BFloat16, Float64 -> any) of a number rounds to
//    nearest, ties to even, once, from the exact source value (Float64 -> Float16 / BFloat16 is
//    not the double rounding Float64 -> Float32 -> Float16: it goes through Float32 rounded to
//    odd, which makes the second rounding the correct one). A magnitude that rounds beyond the
//    largest finite value becomes infinity of the same sign (Float16: |x| >= 65520, BFloat16:
//    |x| >= 0x1.ffp127); infinities stay infinities. Results below the smallest normal are the
//    IEEE subnormals of the target, rounded the same way (Float16: multiples of 2^-24, so
//    |x| <= 2^-25 becomes a zero and 2^-25 < |x| < 2^-24 becomes 2^-24; BFloat16 keeps Float32
//    subnormals as its own subnormals, multiples of 2^-133). The sign of a zero is kept, also
//    when a tiny number rounds to zero (-1e-30f -> Float16 -0).
//  * NaN stays NaN, never infinity. Narrowing makes it quiet: sign kept, exponent all ones,
//    the quiet bit (the top fraction bit) set, and the leading fraction bits of the source
//    payload below it that fit kept. A quiet Float32 NaN therefore narrows exactly as numpy's
//    astype(float16) narrows it, and a Float16 or BFloat16 NaN that is already quiet survives
//    widening and narrowing back unchanged. Casts from or to Float64 use the processor's
//    conversion between double and float, which also makes a NaN quiet.
//  * Float16 <-> BFloat16 goes through the exact Float32 value: one rounding, correctly rounded.
//  * Casting a dtype to itself copies the bytes.
//  * Only these four dtypes convert. A cast from or to an integer dtype, Bool, Int4 or str is
//    refused with reshard::error naming both dtypes (see cast_refusal): integer parameters are
//    never cast, whether a cast was requested for all parameters or named for this one.
//
// Narrowing to Float16 assumes the default floating-point environment (round to nearest even),
// as every hardware float conversion does; flush-to-zero and denormals-are-zero modes change no
// Float16 or BFloat16 conversion from or to Float32 (they do change the processor's conversions
// of subnormals between Float32 and Float64). Elements are little-endian in checkpoint bytes, as on every platform
// reshard supports (x86-64, AArch64).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include <reshard/error.hpp>
#include <reshard/io/dtype.hpp>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// Scalar conversions on bit patterns.
//
// They are branch-free: every case is computed and the right one selected with a mask, so that
// a loop over them vectorizes (a conditional floating-point addition would not: compilers do
// not speculate floating-point operations that may raise flags).

namespace detail {
/// `yes` where `cond`, else `no`, without a branch.
constexpr std::uint32_t select(bool cond, std::uint32_t yes, std::uint32_t no) noexcept {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(cond);
  return (yes & mask) | (no & ~mask);
}

// The narrowing conversions compute in 32 bits and return the 16-bit result in a 32-bit word:
// computing the selects in 16 bits (which a compiler does when it sees the truncation) costs
// SSE2 many shuffles of the masks, so the bulk kernel truncates in a loop of its own.
constexpr std::uint32_t f32_to_f16_wide(std::uint32_t x) noexcept {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7FFFFFFFu;
  const auto sa = static_cast<std::int32_t>(a);  // the same order; signed compares vectorize better
  // Normal results (|x| >= 2^-14): rebias the exponent (127 - 15 = 112) and round the 13
  // dropped bits to nearest even; a carry out of the fraction moves into the exponent.
  // (Wraps harmlessly for smaller |x|, whose result is chosen below.)
  const std::uint32_t normal = (a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u)) >> 13;
  // Subnormal results (|x| < 2^-14): 0.5f + |x| lies in [0.5, 1), where Float32 steps by 2^-24,
  // the Float16 subnormal step; the addition rounds |x| to that grid (nearest even) and the low
  // fraction bits then are the Float16 bits, 0x400 (2^-14, the smallest normal) included. Only
  // Float32 normals below 2^-14 enter the addition (Float32 subnormals round to zero anyway):
  // no NaN operand raising a flag, no subnormal operand slowing the processor down.
  const std::uint32_t small = select(sa >= 0x00800000 && sa < 0x38800000, a, 0u);
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(std::bit_cast<float>(small) + 0.5f) - 0x3F000000u;
  // NaN: quiet, with the leading 9 payload bits below Float32's quiet bit.
  const std::uint32_t nan = 0x7E00u | ((a >> 13) & 0x01FFu);
  std::uint32_t mag = select(sa < 0x38800000, sub, normal);
  mag = select(sa >= 0x477FF000, 0x7C00u, mag);  // 65520 and up (Inf too) round to infinity
  mag = select(sa > 0x7F800000, nan, mag);
  return sign | mag;
}

constexpr std::uint32_t f32_to_bf16_wide(std::uint32_t x) noexcept {
  // Round the low 16 bits to nearest even; a carry moves into the exponent (to infinity above
  // the largest finite value). No overflow of 32 bits: the largest non-NaN input is 0xFF800000.
  const std::uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (x >> 16) | 0x0040u;  // quiet: set the top fraction bit
  return select(static_cast<std::int32_t>(x & 0x7FFFFFFFu) > 0x7F800000, nan, rounded);
}
}  // namespace detail

/// Float32 bits -> Float16 bits, round to nearest even (see the rules above).
inline constexpr std::uint16_t f32_to_f16_bits(std::uint32_t x) noexcept {
  return static_cast<std::uint16_t>(detail::f32_to_f16_wide(x));
}

/// Float32 bits -> BFloat16 bits, round to nearest even (see the rules above).
inline constexpr std::uint16_t f32_to_bf16_bits(std::uint32_t x) noexcept {
  return static_cast<std::uint16_t>(detail::f32_to_bf16_wide(x));
}

namespace detail {
// Float16 bits (in a 32-bit word, as the bulk kernel passes them: see f32_to_f16_wide).
constexpr std::uint32_t f16_to_f32_wide(std::uint32_t h) noexcept {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t a = h & 0x7FFFu;
  const std::uint32_t e = a & 0x7C00u;
  const std::uint32_t normal = (a << 13) + 0x38000000u;  // exponent + 112
  const std::uint32_t infnan = (a << 13) + 0x70000000u;  // exponent 255, fraction kept
  // Subnormal or zero: m * 2^-24 = (0.5 + m * 2^-24) - 0.5, exact (the two are within 2x).
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(std::bit_cast<float>(0x3F000000u | a) - 0.5f);
  return sign | select(e == 0, sub, select(e == 0x7C00u, infnan, normal));
}
}  // namespace detail

/// Float16 bits -> Float32 bits, exact; NaN bits kept (payload shifted into place).
inline constexpr std::uint32_t f16_to_f32_bits(std::uint16_t h) noexcept { return detail::f16_to_f32_wide(h); }

/// BFloat16 bits -> Float32 bits, exact (every bit kept).
inline constexpr std::uint32_t bf16_to_f32_bits(std::uint16_t b) noexcept {
  return std::uint32_t{b} << 16;
}

/// Float64 bits -> Float32 bits: the processor's conversion (round to nearest even; NaN quiet).
inline std::uint32_t f64_to_f32_bits(std::uint64_t x) noexcept {
  return std::bit_cast<std::uint32_t>(static_cast<float>(std::bit_cast<double>(x)));
}

/// Float32 bits -> Float64 bits: the processor's conversion (exact; NaN quiet).
inline std::uint64_t f32_to_f64_bits(std::uint32_t x) noexcept {
  return std::bit_cast<std::uint64_t>(static_cast<double>(std::bit_cast<float>(x)));
}

namespace detail {
/// Float64 -> Float32 rounded to odd: the Float32 neighbour toward zero, with the lowest bit set
/// when the conversion is inexact. Rounding that once more to 2 or more fewer significand bits
/// (Float16: 11, BFloat16: 8 against 24) gives the correctly rounded result of the Float64 value.
inline std::uint32_t f64_to_f32_odd_bits(std::uint64_t x) noexcept {
  const double d = std::bit_cast<double>(x);
  const float f = static_cast<float>(d);
  std::uint32_t b = std::bit_cast<std::uint32_t>(f);
  if (d == d && static_cast<double>(f) != d) {  // inexact number (infinities convert exactly)
    const double back = static_cast<double>(f);
    if ((back < 0 ? -back : back) > (d < 0 ? -d : d)) b -= 1;  // step back toward zero
    b |= 1u;
  }
  return b;
}
}  // namespace detail

/// Float64 bits -> Float16 bits, one rounding to nearest even.
inline std::uint16_t f64_to_f16_bits(std::uint64_t x) noexcept {
  return f32_to_f16_bits(detail::f64_to_f32_odd_bits(x));
}
/// Float64 bits -> BFloat16 bits, one rounding to nearest even.
inline std::uint16_t f64_to_bf16_bits(std::uint64_t x) noexcept {
  return f32_to_bf16_bits(detail::f64_to_f32_odd_bits(x));
}
/// Float16 bits -> Float64 bits, exact.
inline std::uint64_t f16_to_f64_bits(std::uint16_t h) noexcept { return f32_to_f64_bits(f16_to_f32_bits(h)); }
/// BFloat16 bits -> Float64 bits, exact.
inline std::uint64_t bf16_to_f64_bits(std::uint16_t b) noexcept { return f32_to_f64_bits(bf16_to_f32_bits(b)); }
/// Float16 bits -> BFloat16 bits: exact widening, then one rounding to nearest even.
inline std::uint16_t f16_to_bf16_bits(std::uint16_t h) noexcept { return f32_to_bf16_bits(f16_to_f32_bits(h)); }
/// BFloat16 bits -> Float16 bits: exact widening, then one rounding to nearest even.
inline std::uint16_t bf16_to_f16_bits(std::uint16_t b) noexcept { return f32_to_f16_bits(bf16_to_f32_bits(b)); }

/// float -> Float16 / BFloat16 bits and back, for callers holding values.
inline std::uint16_t to_f16_bits(float f) noexcept { return f32_to_f16_bits(std::bit_cast<std::uint32_t>(f)); }
inline std::uint16_t to_bf16_bits(float f) noexcept { return f32_to_bf16_bits(std::bit_cast<std::uint32_t>(f)); }
inline float from_f16_bits(std::uint16_t h) noexcept { return std::bit_cast<float>(f16_to_f32_bits(h)); }
inline float from_bf16_bits(std::uint16_t b) noexcept { return std::bit_cast<float>(bf16_to_f32_bits(b)); }

// ---------------------------------------------------------------------------------------------
// Which casts exist.

/// Float16, BFloat16, Float32 or Float64.
constexpr bool is_floating(dtype t) noexcept {
  return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float32 || t == dtype::float64;
}

/// Whether cast_elements converts `from` to `to`: the same dtype (a copy), or two floating-point
/// dtypes. Nothing else, in particular no integer, Bool, Int4 or str cast.
constexpr bool castable(dtype from, dtype to) noexcept {
  return from == to || (is_floating(from) && is_floating(to));
}

/// Why a cast of `from` to `to` is refused, or nothing when castable(from, to). The message names
/// both dtypes (MindSpore names). `explicit_request`: the cast was named for this parameter (a
/// per-parameter `glob = dtype`), as opposed to a cast requested for every floating-point
/// parameter, which is never applied to other dtypes and so should not reach here; both refuse.
inline std::optional<std::string> cast_refusal(dtype from, dtype to, bool explicit_request) {
  if (castable(from, to)) return std::nullopt;
  std::string m = "cannot cast ";
  m += ms_name(from);
  m += " to ";
  m += ms_name(to);
  m += ": only Float16, BFloat16, Float32 and Float64 convert into each other";
  if (!is_floating(from)) {
    m += explicit_request ? "; reshard never casts a parameter of dtype "
                          : "; a parameter of dtype ";
    m += ms_name(from);
    m += explicit_request ? ", even when named explicitly" : " is never cast implicitly";
  }
  return m;
}

/// Throws reshard::error (with `what` before the reason, e.g. a parameter name) unless
/// castable(from, to).
inline void check_cast(dtype from, dtype to, bool explicit_request, const std::string& what = {}) {
  if (auto r = cast_refusal(from, to, explicit_request)) report_error(what.empty() ? *r : what + ": " + *r);
}

// ---------------------------------------------------------------------------------------------
// The bulk kernel.

namespace detail {
// Elements are staged through fixed-size blocks on the stack: the loop over a block has a
// constant trip count and no aliasing, so compilers vectorize the branch-free conversions above
// (g++ -O2 included), and the spans may have any alignment.
inline constexpr std::size_t cast_block = 512;

constexpr unsigned pair(dtype a, dtype b) noexcept { return static_cast<unsigned>(a) * 256u + static_cast<unsigned>(b); }

// `Convert` is a template argument, not a function pointer argument, so that it is inlined. Its
// argument type `Arg` and result type may be wider than the elements (`In`, `Out`): the 16-bit
// conversions compute in 32-bit words, and a compiler that sees a 16-bit input or output
// otherwise computes the selects in 16 bits, which costs SSE2 many shuffles of the masks. So the
// elements are widened, converted and truncated in three loops over the block.
template <class In, class Arg, class Out, auto Convert>
void cast_blocks(const std::byte* src, std::byte* dst, std::size_t n) {
  using R = decltype(Convert(Arg{}));
  std::array<Arg, cast_block> arg;
  std::array<R, cast_block> result;
  std::array<Out, cast_block> out;
  const auto block = [&](std::size_t first, std::size_t count) {
    const std::byte* from = src + first * sizeof(In);
    for (std::size_t k = 0; k < count; ++k) {
      In x;
      std::memcpy(&x, from + k * sizeof(In), sizeof(In));
      arg[k] = static_cast<Arg>(x);
    }
    for (std::size_t k = 0; k < count; ++k) result[k] = Convert(arg[k]);
    if constexpr (std::is_same_v<R, Out>) {
      std::memcpy(dst + first * sizeof(Out), result.data(), count * sizeof(Out));
    } else {
      for (std::size_t k = 0; k < count; ++k) out[k] = static_cast<Out>(result[k]);
      std::memcpy(dst + first * sizeof(Out), out.data(), count * sizeof(Out));
    }
  };
  std::size_t i = 0;
  for (; i + cast_block <= n; i += cast_block) block(i, cast_block);  // constant trip counts
  if (i != n) block(i, n - i);
}
}  // namespace detail

/// Converts the elements of `src` (dtype `from`, little-endian) into `dst` (dtype `to`) by the
/// rules at the top of this file; the count is src.size() / element_size(from). Any alignment.
/// Throws reshard::error when !castable(from, to), when src.size() is not a multiple of
/// element_size(from), or when dst.size() is not count * element_size(to).
/// @pre src and dst do not overlap (unless they are the same bytes and from == to)
inline void cast_elements(std::span<const std::byte> src, dtype from, std::span<std::byte> dst, dtype to) {
  check_cast(from, to, true, "cast_elements");
  const std::size_t in_size = element_size(from), out_size = element_size(to);
  if (src.size() % in_size != 0)
    report_error("cast_elements: " + std::to_string(src.size()) + " source bytes are not a whole number of " +
                 std::string(ms_name(from)) + " elements");
  const std::size_t n = src.size() / in_size;
  if (dst.size() != n * out_size)
    report_error("cast_elements: " + std::to_string(n) + " " + std::string(ms_name(from)) + " elements need " +
                 std::to_string(n * out_size) + " bytes of " + std::string(ms_name(to)) + ", the target has " +
                 std::to_string(dst.size()));
  if (n == 0) return;
  const std::byte* s = src.data();
  std::byte* d = dst.data();
  RESHARD_EXPECTS((from == to && static_cast<const std::byte*>(d) == s) ||
                      !std::less<const std::byte*>{}(s, d + dst.size()) ||
                      !std::less<const std::byte*>{}(static_cast<const std::byte*>(d), s + src.size()),
                  "cast_elements: source and target overlap");
  if (from == to) {
    if (static_cast<const std::byte*>(d) != s) std::memcpy(d, s, src.size());
    return;
  }
  using u16 = std::uint16_t;
  using u32 = std::uint32_t;
  using u64 = std::uint64_t;
  using detail::cast_blocks;
  using detail::pair;
  switch (pair(from, to)) {
    case pair(dtype::float32, dtype::float16): return cast_blocks<u32, u32, u16, detail::f32_to_f16_wide>(s, d, n);
    case pair(dtype::float32, dtype::bfloat16): return cast_blocks<u32, u32, u16, detail::f32_to_bf16_wide>(s, d, n);
    case pair(dtype::float16, dtype::float32): return cast_blocks<u16, u32, u32, detail::f16_to_f32_wide>(s, d, n);
    case pair(dtype::bfloat16, dtype::float32): return cast_blocks<u16, u16, u32, bf16_to_f32_bits>(s, d, n);
    case pair(dtype::float16, dtype::bfloat16): return cast_blocks<u16, u16, u16, f16_to_bf16_bits>(s, d, n);
    case pair(dtype::bfloat16, dtype::float16): return cast_blocks<u16, u16, u16, bf16_to_f16_bits>(s, d, n);
    case pair(dtype::float64, dtype::float32): return cast_blocks<u64, u64, u32, f64_to_f32_bits>(s, d, n);
    case pair(dtype::float32, dtype::float64): return cast_blocks<u32, u32, u64, f32_to_f64_bits>(s, d, n);
    case pair(dtype::float64, dtype::float16): return cast_blocks<u64, u64, u16, f64_to_f16_bits>(s, d, n);
    case pair(dtype::float64, dtype::bfloat16): return cast_blocks<u64, u64, u16, f64_to_bf16_bits>(s, d, n);
    case pair(dtype::float16, dtype::float64): return cast_blocks<u16, u16, u64, f16_to_f64_bits>(s, d, n);
    case pair(dtype::bfloat16, dtype::float64): return cast_blocks<u16, u16, u64, bf16_to_f64_bits>(s, d, n);
    default: break;
  }
  RESHARD_EXPECTS(false, "cast_elements: a castable pair without a kernel");
}

}  // namespace reshard::io
