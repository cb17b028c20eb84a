// Tests of reshard/io/cast.hpp: every Float16 and BFloat16 bit pattern, ties and random Float32
// and Float64 values bit for bit against independent references (numpy's float16 casts, bit
// arithmetic and exact rational rounding in verify/python/cast_reference.py), the IEEE properties
// (signed zeros, infinities, NaN, monotonicity), the bulk kernel against the scalar conversions,
// and the refusals.
#include <reshard/io/cast.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>  // the MXCSR flush-to-zero and denormals-are-zero bits
#endif

using namespace reshard::io;
using reshard_test::throws_error;

// A few facts at compile time (the Float16 and BFloat16 conversions are constexpr).
static_assert(f32_to_f16_bits(0x3F800000u) == 0x3C00);                // 1.0
static_assert(f32_to_f16_bits(0x477FE000u) == 0x7BFF);                // 65504, the largest
static_assert(f32_to_f16_bits(0x477FF000u) == 0x7C00);                // 65520 ties up to infinity
static_assert(f32_to_f16_bits(0x477FEFFFu) == 0x7BFF);                // just below stays finite
static_assert(f32_to_f16_bits(0x33000000u) == 0x0000);                // 2^-25 ties to even: +0
static_assert(f32_to_f16_bits(0x33000001u) == 0x0001);                // above it: 2^-24
static_assert(f32_to_f16_bits(0x80000001u) == 0x8000);                // -tiny -> -0
static_assert(f32_to_bf16_bits(0x3F808000u) == 0x3F80);               // tie to even, down
static_assert(f32_to_bf16_bits(0x3F818000u) == 0x3F82);               // tie to even, up
static_assert(f32_to_bf16_bits(0x7F7FFFFFu) == 0x7F80);               // FLT_MAX -> infinity
static_assert(f32_to_bf16_bits(0x7F800001u) == 0x7FC0);               // signaling NaN -> quiet
static_assert(f32_to_bf16_bits(0x00000001u) == 0x0000);               // below half of 2^-133
static_assert(f16_to_f32_bits(0x0001) == 0x33800000u);                // 2^-24
static_assert(f16_to_f32_bits(0x8400) == 0xB8800000u);                // -2^-14
static_assert(f16_to_f32_bits(0xFC00) == 0xFF800000u);                // -inf
static_assert(bf16_to_f32_bits(0x8001) == 0x80010000u);
static_assert(castable(dtype::float16, dtype::bfloat16) && castable(dtype::int8, dtype::int8));
static_assert(!castable(dtype::int32, dtype::float32) && !castable(dtype::float32, dtype::boolean));

namespace {

namespace fs = std::filesystem;

template <class T>
std::vector<T> read_array(const fs::path& p) {
  const auto bytes = reshard_test::read_bytes(p);
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// The tables of cast_reference.py, made once per test program.
struct reference {
  std::vector<std::uint32_t> f16_to_f32, f32_in;
  std::vector<std::uint16_t> f32_to_f16, f32_to_bf16, f16_to_bf16, bf16_to_f16, f64_to_f16, f64_to_bf16;
  std::vector<std::uint64_t> f64_in, f64_bf16_in;
  std::string error;
};

const reference& ref() {
  static const reference r = [] {
    reference out;
    reshard_test::temp_dir dir;
    const auto py = reshard_test::run_python("cast_reference.py", {dir.path().string()});
    if (py.status != 0) {
      out.error = "cast_reference.py failed (" + std::to_string(py.status) + "): " + py.output;
      return out;
    }
    out.f16_to_f32 = read_array<std::uint32_t>(dir / "f16_to_f32.u32");
    out.f32_in = read_array<std::uint32_t>(dir / "f32_in.u32");
    out.f32_to_f16 = read_array<std::uint16_t>(dir / "f32_to_f16.u16");
    out.f32_to_bf16 = read_array<std::uint16_t>(dir / "f32_to_bf16.u16");
    out.f16_to_bf16 = read_array<std::uint16_t>(dir / "f16_to_bf16.u16");
    out.bf16_to_f16 = read_array<std::uint16_t>(dir / "bf16_to_f16.u16");
    out.f64_in = read_array<std::uint64_t>(dir / "f64_in.u64");
    out.f64_to_f16 = read_array<std::uint16_t>(dir / "f64_to_f16.u16");
    out.f64_bf16_in = read_array<std::uint64_t>(dir / "f64_bf16_in.u64");
    out.f64_to_bf16 = read_array<std::uint16_t>(dir / "f64_to_bf16.u16");
    return out;
  }();
  return r;
}

#define REQUIRE_REFERENCE()                    \
  do {                                         \
    ASSERT_EQ(ref().error, "") << ref().error; \
  } while (false)

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

constexpr bool f16_nan(std::uint16_t h) { return (h & 0x7FFF) > 0x7C00; }
constexpr bool bf16_nan(std::uint16_t b) { return (b & 0x7FFF) > 0x7F80; }
constexpr bool f32_nan(std::uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; }
constexpr bool f64_nan(std::uint64_t x) { return (x & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }

// Up to `limit` differences, then a count: one failure per test, readable.
struct mismatches {
  std::size_t count = 0;
  std::string text;
  void add(const std::string& what) {
    if (++count <= 10) text += what + "\n";
  }
  ::testing::AssertionResult result(std::size_t checked) const {
    if (count == 0) return ::testing::AssertionSuccess() << checked << " values";
    return ::testing::AssertionFailure() << count << " of " << checked << " differ:\n" << text;
  }
};

}  // namespace

// --- Float16 ---------------------------------------------------------------------------------

TEST(cast_f16, widening_equals_numpy_for_all_65536_patterns) {
  REQUIRE_REFERENCE();
  ASSERT_EQ(ref().f16_to_f32.size(), 65536u);
  mismatches m;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto got = f16_to_f32_bits(static_cast<std::uint16_t>(h));
    // numpy keeps NaN bits too (a signaling NaN stays signaling), so this is exact everywhere
    if (got != ref().f16_to_f32[h]) m.add(hex(h) + ": " + hex(got) + " numpy " + hex(ref().f16_to_f32[h]));
  }
  EXPECT_TRUE(m.result(65536));
}

TEST(cast_f16, round_trip_through_f32_is_identity_and_nans_come_back_quiet) {
  mismatches m;
  std::size_t nans = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const auto back = f32_to_f16_bits(f16_to_f32_bits(h));
    if (f16_nan(h)) {
      ++nans;
      // sign and payload kept, quiet bit set: identity for the quiet NaNs
      if (!f16_nan(back) || back != (h | 0x0200)) m.add(hex(h) + " -> " + hex(back));
    } else if (back != h) {
      m.add(hex(h) + " -> " + hex(back));
    }
  }
  EXPECT_EQ(nans, 2u * 1023u);
  EXPECT_TRUE(m.result(65536));
}

TEST(cast_f16, narrowing_equals_numpy_on_values_ties_and_random_f32) {
  REQUIRE_REFERENCE();
  const auto& in = ref().f32_in;
  const auto& want = ref().f32_to_f16;
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GE(in.size(), 65536u + 6u * 0x7C00u + 3u * 65536u + 1000000u);
  mismatches m;
  std::size_t exact_nans = 0, signaling = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto got = f32_to_f16_bits(in[i]);
    if (!f32_nan(in[i])) {
      if (got != want[i]) m.add(hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
      continue;
    }
    // NaN: NaN of the same sign, quiet, never infinity
    if (!f16_nan(got) || !f16_nan(want[i]) || (got & 0x8000) != (want[i] & 0x8000) || (got & 0x0200) == 0) {
      m.add("NaN " + hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
    } else if (in[i] & 0x00400000u) {
      // a quiet Float32 NaN: numpy keeps the same leading payload bits, so the bits agree
      ++exact_nans;
      if (got != want[i]) m.add("quiet NaN " + hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
    } else {
      // a signaling one: numpy keeps it signaling (payload made non-zero), reshard makes it quiet
      ++signaling;
      const std::uint16_t numpy_payload = want[i] & 0x01FF;
      const std::uint16_t source_payload = static_cast<std::uint16_t>((in[i] >> 13) & 0x01FF);
      if ((got & 0x01FF) != source_payload || (source_payload != 0 && numpy_payload != source_payload))
        m.add("signaling NaN " + hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
    }
  }
  EXPECT_GT(exact_nans, 100u);
  EXPECT_GT(signaling, 100u);
  EXPECT_TRUE(m.result(in.size()));
}

TEST(cast_f16, ties_round_to_even) {
  // every midpoint between adjacent positive Float16 values: the even neighbour, whichever side
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = static_cast<double>(from_f16_bits(static_cast<std::uint16_t>(h)));
    const double hi = h == 0x7BFF ? 65536.0 : static_cast<double>(from_f16_bits(static_cast<std::uint16_t>(h + 1)));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);  // exact in float
    const std::uint32_t even = (h & 1) ? h + 1 : h;
    ASSERT_EQ(to_f16_bits(mid), even) << hex(h);
    ASSERT_EQ(to_f16_bits(-mid), even | 0x8000) << hex(h);
    ASSERT_EQ(to_f16_bits(std::nextafter(mid, 0.0f)), h) << hex(h);
    ASSERT_EQ(to_f16_bits(std::nextafter(mid, 1e30f)), h + 1) << hex(h);
  }
}

TEST(cast_f16, subnormals_follow_ieee) {
  // Float16 subnormals are k * 2^-24, exactly
  for (std::uint16_t k = 1; k < 0x400; ++k) {
    EXPECT_EQ(from_f16_bits(k), std::ldexp(static_cast<float>(k), -24));
    EXPECT_EQ(to_f16_bits(std::ldexp(static_cast<float>(k), -24)), k);
  }
  EXPECT_EQ(to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(to_f16_bits(-std::numeric_limits<float>::min()), 0x8000);
  EXPECT_EQ(to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);                    // tie to even (0)
  EXPECT_EQ(to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);                    // tie to even (2)
  EXPECT_EQ(to_f16_bits(std::ldexp(2047.0f, -25)), 0x0400);                 // rounds up to normal
  EXPECT_EQ(to_f16_bits(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);
}

// --- BFloat16 --------------------------------------------------------------------------------

TEST(cast_bf16, round_trip_through_f32_is_identity_and_nans_come_back_quiet) {
  mismatches m;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const auto wide = bf16_to_f32_bits(b);
    if (wide != i << 16) m.add("widen " + hex(i) + " -> " + hex(wide));
    const auto back = f32_to_bf16_bits(wide);
    if (bf16_nan(b) ? back != (b | 0x0040) : back != b) m.add(hex(i) + " -> " + hex(back));
  }
  EXPECT_TRUE(m.result(65536));
}

TEST(cast_bf16, narrowing_equals_the_bit_reference_on_ties_and_random_f32) {
  REQUIRE_REFERENCE();
  const auto& in = ref().f32_in;
  const auto& want = ref().f32_to_bf16;
  ASSERT_EQ(in.size(), want.size());
  mismatches m;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto got = f32_to_bf16_bits(in[i]);
    if (got != want[i]) m.add(hex(in[i]) + ": " + hex(got) + " reference " + hex(want[i]));
  }
  EXPECT_TRUE(m.result(in.size()));
}

TEST(cast_bf16, subnormals_keep_their_bits) {
  // Float32 subnormals whose low 16 bits are zero are BFloat16 subnormals of the same value
  for (std::uint32_t k = 1; k < 0x80; ++k) {
    EXPECT_EQ(f32_to_bf16_bits(k << 16), k);
    EXPECT_EQ(f32_to_bf16_bits((k << 16) | 0x80000000u), k | 0x8000);
    EXPECT_EQ(from_bf16_bits(static_cast<std::uint16_t>(k)), std::ldexp(static_cast<float>(k), -133));
  }
}

TEST(cast_f16_bf16, both_directions_are_one_correct_rounding) {
  REQUIRE_REFERENCE();
  ASSERT_EQ(ref().f16_to_bf16.size(), 65536u);
  ASSERT_EQ(ref().bf16_to_f16.size(), 65536u);
  mismatches m;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const auto got = f16_to_bf16_bits(h);
    if (got != ref().f16_to_bf16[i]) m.add("f16 " + hex(i) + ": " + hex(got) + " reference " + hex(ref().f16_to_bf16[i]));
    const auto got16 = bf16_to_f16_bits(h);
    const auto want16 = ref().bf16_to_f16[i];
    const bool ok = bf16_nan(h) ? f16_nan(got16) && f16_nan(want16) && (got16 & 0x8000) == (want16 & 0x8000) &&
                                      (got16 & 0x0200) != 0
                                : got16 == want16;
    if (!ok) m.add("bf16 " + hex(i) + ": " + hex(got16) + " numpy " + hex(want16));
  }
  EXPECT_TRUE(m.result(2 * 65536));
}

// --- Float64 ---------------------------------------------------------------------------------

TEST(cast_f64, to_f16_is_one_rounding_like_numpy) {
  REQUIRE_REFERENCE();
  const auto& in = ref().f64_in;
  const auto& want = ref().f64_to_f16;
  ASSERT_EQ(in.size(), want.size());
  mismatches m;
  std::size_t double_rounding_traps = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto got = f64_to_f16_bits(in[i]);
    if (f64_nan(in[i])) {
      if (!f16_nan(got) || (got & 0x8000) != (want[i] & 0x8000) || (got & 0x0200) == 0)
        m.add("NaN " + hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
      continue;
    }
    if (f32_to_f16_bits(f64_to_f32_bits(in[i])) != want[i]) ++double_rounding_traps;
    if (got != want[i]) m.add(hex(in[i]) + ": " + hex(got) + " numpy " + hex(want[i]));
  }
  // the inputs do contain values where rounding twice (through Float32) is wrong
  EXPECT_GT(double_rounding_traps, 1000u);
  EXPECT_TRUE(m.result(in.size()));
}

TEST(cast_f64, to_bf16_is_one_rounding_like_exact_rationals) {
  REQUIRE_REFERENCE();
  const auto& in = ref().f64_bf16_in;
  const auto& want = ref().f64_to_bf16;
  ASSERT_EQ(in.size(), want.size());
  mismatches m;
  std::size_t double_rounding_traps = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto got = f64_to_bf16_bits(in[i]);
    if (f64_nan(in[i])) {
      if (!bf16_nan(got) || (got & 0x8000) != (want[i] & 0x8000) || (got & 0x0040) == 0)
        m.add("NaN " + hex(in[i]) + ": " + hex(got) + " reference " + hex(want[i]));
      continue;
    }
    if (f32_to_bf16_bits(f64_to_f32_bits(in[i])) != want[i]) ++double_rounding_traps;
    if (got != want[i]) m.add(hex(in[i]) + ": " + hex(got) + " reference " + hex(want[i]));
  }
  EXPECT_GT(double_rounding_traps, 1000u);
  EXPECT_TRUE(m.result(in.size()));
}

TEST(cast_f64, f32_and_back_and_widening_are_exact) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    if (f16_nan(h) || bf16_nan(h)) {
      EXPECT_TRUE(!f16_nan(h) || std::isnan(std::bit_cast<double>(f16_to_f64_bits(h))));
      EXPECT_TRUE(!bf16_nan(h) || std::isnan(std::bit_cast<double>(bf16_to_f64_bits(h))));
      continue;
    }
    ASSERT_EQ(f64_to_f16_bits(f16_to_f64_bits(h)), h) << hex(i);
    ASSERT_EQ(f64_to_bf16_bits(bf16_to_f64_bits(h)), h) << hex(i);
    ASSERT_EQ(std::bit_cast<double>(f16_to_f64_bits(h)), static_cast<double>(from_f16_bits(h)));
  }
  EXPECT_EQ(f64_to_f32_bits(std::bit_cast<std::uint64_t>(1e300)), 0x7F800000u);
  EXPECT_EQ(f64_to_f32_bits(std::bit_cast<std::uint64_t>(-1e-300)), 0x80000000u);
  EXPECT_EQ(f64_to_f16_bits(std::bit_cast<std::uint64_t>(1e300)), 0x7C00);
  EXPECT_EQ(f64_to_bf16_bits(std::bit_cast<std::uint64_t>(-1e300)), 0xFF80);
  EXPECT_EQ(f64_to_f16_bits(std::bit_cast<std::uint64_t>(-1e-300)), 0x8000);
  EXPECT_EQ(f64_to_bf16_bits(std::bit_cast<std::uint64_t>(1e-300)), 0x0000);
  EXPECT_EQ(f32_to_f64_bits(0x3F800000u), std::bit_cast<std::uint64_t>(1.0));
}

// --- Properties ------------------------------------------------------------------------------

namespace {

// The scalar conversion of one element of `from` to `to`, on the element's bytes.
std::vector<std::byte> scalar_cast(std::span<const std::byte> e, dtype from, dtype to) {
  std::uint64_t in = 0;
  std::memcpy(&in, e.data(), e.size());
  std::uint64_t out = 0;
  const auto u16 = static_cast<std::uint16_t>(in);
  const auto u32 = static_cast<std::uint32_t>(in);
  if (from == to) out = in;
  else if (from == dtype::float32 && to == dtype::float16) out = f32_to_f16_bits(u32);
  else if (from == dtype::float32 && to == dtype::bfloat16) out = f32_to_bf16_bits(u32);
  else if (from == dtype::float16 && to == dtype::float32) out = f16_to_f32_bits(u16);
  else if (from == dtype::bfloat16 && to == dtype::float32) out = bf16_to_f32_bits(u16);
  else if (from == dtype::float16 && to == dtype::bfloat16) out = f16_to_bf16_bits(u16);
  else if (from == dtype::bfloat16 && to == dtype::float16) out = bf16_to_f16_bits(u16);
  else if (from == dtype::float64 && to == dtype::float32) out = f64_to_f32_bits(in);
  else if (from == dtype::float32 && to == dtype::float64) out = f32_to_f64_bits(u32);
  else if (from == dtype::float64 && to == dtype::float16) out = f64_to_f16_bits(in);
  else if (from == dtype::float64 && to == dtype::bfloat16) out = f64_to_bf16_bits(in);
  else if (from == dtype::float16 && to == dtype::float64) out = f16_to_f64_bits(u16);
  else if (from == dtype::bfloat16 && to == dtype::float64) out = bf16_to_f64_bits(u16);
  else ADD_FAILURE() << "no scalar cast " << from << " -> " << to;
  std::vector<std::byte> r(element_size(to));
  std::memcpy(r.data(), &out, r.size());
  return r;
}

constexpr std::array<dtype, 4> floats{dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};

// A Float32 bit pattern: mostly arbitrary, often a special value or near one.
rc::Gen<std::uint32_t> f32_bits() {
  return rc::gen::oneOf(rc::gen::arbitrary<std::uint32_t>(),
                        rc::gen::element(0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                         0xFF800001u, 0x00000001u, 0x80800000u, 0x477FF000u, 0xC77FEFFFu),
                        rc::gen::inRange<std::uint32_t>(0x33000000u, 0x48000000u));
}

float f32(std::uint32_t x) { return std::bit_cast<float>(x); }

}  // namespace

RC_GTEST_PROP(cast_props, signed_zero_infinity_and_nan_are_kept, ()) {
  const auto x = *f32_bits();
  const float v = f32(x);
  const float h = from_f16_bits(f32_to_f16_bits(x));
  const float b = from_bf16_bits(f32_to_bf16_bits(x));
  if (std::isnan(v)) {
    RC_ASSERT(std::isnan(h));
    RC_ASSERT(std::isnan(b));
  } else {
    RC_ASSERT(!std::isnan(h));
    RC_ASSERT(!std::isnan(b));
  }
  RC_ASSERT(std::signbit(h) == std::signbit(v));
  RC_ASSERT(std::signbit(b) == std::signbit(v));
  if (std::isinf(v)) {
    RC_ASSERT(h == v);
    RC_ASSERT(b == v);
  }
  if (v == 0) {
    RC_ASSERT(h == 0);
    RC_ASSERT(b == 0);
  }
  // a finite value in range lands within half a Float16 step (2^-11 relative, 2^-25 absolute)
  if (std::isfinite(v) && std::fabs(v) <= 65504) {
    const double err = std::fabs(static_cast<double>(h) - static_cast<double>(v));
    RC_ASSERT(err <= std::ldexp(std::fabs(static_cast<double>(v)), -11) + std::ldexp(1.0, -25));
  }
}

RC_GTEST_PROP(cast_props, narrowing_is_monotonic, ()) {
  auto x = *f32_bits(), y = *f32_bits();
  RC_PRE(!std::isnan(f32(x)) && !std::isnan(f32(y)));
  if (f32(y) < f32(x)) std::swap(x, y);
  RC_ASSERT(from_f16_bits(f32_to_f16_bits(x)) <= from_f16_bits(f32_to_f16_bits(y)));
  RC_ASSERT(from_bf16_bits(f32_to_bf16_bits(x)) <= from_bf16_bits(f32_to_bf16_bits(y)));
  const double dx = std::bit_cast<double>(f32_to_f64_bits(x)) * (1 + std::ldexp(1.0, -35));
  const double dy = std::bit_cast<double>(f32_to_f64_bits(y));
  if (dx <= dy) {
    const auto bx = std::bit_cast<std::uint64_t>(dx), by = std::bit_cast<std::uint64_t>(dy);
    RC_ASSERT(from_f16_bits(f64_to_f16_bits(bx)) <= from_f16_bits(f64_to_f16_bits(by)));
    RC_ASSERT(from_bf16_bits(f64_to_bf16_bits(bx)) <= from_bf16_bits(f64_to_bf16_bits(by)));
  }
}

RC_GTEST_PROP(cast_props, bulk_kernel_equals_the_scalar_casts_at_any_alignment, ()) {
  const auto from = *rc::gen::elementOf(floats);
  const auto to = *rc::gen::elementOf(floats);
  const auto n = *rc::gen::inRange<std::size_t>(0, 1200);
  const auto src_off = *rc::gen::inRange<std::size_t>(0, 8);
  const auto dst_off = *rc::gen::inRange<std::size_t>(0, 8);
  const std::size_t in = element_size(from), out = element_size(to);
  std::vector<std::byte> src(src_off + n * in);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t v = from == dtype::float32 ? std::uint64_t{*f32_bits()} : *rc::gen::arbitrary<std::uint64_t>();
    std::memcpy(src.data() + src_off + i * in, &v, in);
  }
  std::vector<std::byte> dst(dst_off + n * out + 8, std::byte{0xA5});
  const auto s = std::span<const std::byte>(src).subspan(src_off, n * in);
  cast_elements(s, from, std::span<std::byte>(dst).subspan(dst_off, n * out), to);
  for (std::size_t i = 0; i < n; ++i) {
    const auto want = scalar_cast(s.subspan(i * in, in), from, to);
    RC_ASSERT(std::memcmp(dst.data() + dst_off + i * out, want.data(), out) == 0);
  }
  for (std::size_t i = 0; i < dst_off; ++i) RC_ASSERT(dst[i] == std::byte{0xA5});
  for (std::size_t i = dst_off + n * out; i < dst.size(); ++i) RC_ASSERT(dst[i] == std::byte{0xA5});
}

TEST(cast_bulk, a_4_mib_chunk_equals_the_scalar_casts) {
  // the engine's largest chunk, every 16-bit pattern many times, odd offsets
  const std::size_t n = (std::size_t{4} << 20) / 4;
  std::vector<std::byte> src(n * 4 + 1), wide(n * 4 + 3), narrow(n * 2 + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t x = static_cast<std::uint32_t>(i * 2654435761u);
    std::memcpy(src.data() + 1 + 4 * i, &x, 4);
  }
  const auto s = std::span<const std::byte>(src).subspan(1);
  for (auto to : {dtype::float16, dtype::bfloat16}) {
    cast_elements(s, dtype::float32, std::span<std::byte>(narrow).subspan(1), to);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t x;
      std::uint16_t got;
      std::memcpy(&x, s.data() + 4 * i, 4);
      std::memcpy(&got, narrow.data() + 1 + 2 * i, 2);
      ASSERT_EQ(got, to == dtype::float16 ? f32_to_f16_bits(x) : f32_to_bf16_bits(x)) << i;
    }
    cast_elements(std::span<const std::byte>(narrow).subspan(1), to, std::span<std::byte>(wide).subspan(3), dtype::float32);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::uint32_t got;
      std::memcpy(&h, narrow.data() + 1 + 2 * i, 2);
      std::memcpy(&got, wide.data() + 3 + 4 * i, 4);
      ASSERT_EQ(got, to == dtype::float16 ? f16_to_f32_bits(h) : bf16_to_f32_bits(h)) << i;
    }
  }
}

#if defined(__x86_64__) || defined(__SSE2__)
TEST(cast_bulk, flush_to_zero_and_denormals_are_zero_change_no_16_bit_cast) {
  // every Float16 and BFloat16 pattern widened, and Float32 patterns around the Float16
  // subnormal range and the Float32 subnormals narrowed, with and without FTZ | DAZ
  std::vector<std::uint32_t> in;
  for (std::uint32_t i = 0; i < 65536; ++i) in.push_back(i);
  for (std::uint32_t x = 0; x < 0x39000000u; x += 0x1001u) {
    in.push_back(x);
    in.push_back(x | 0x80000000u);
  }
  const auto run = [&] {
    std::vector<std::uint32_t> out;
    std::vector<std::byte> a(in.size() * 4), b(in.size() * 4);
    std::memcpy(a.data(), in.data(), a.size());
    for (auto [from, to] : {std::pair{dtype::float32, dtype::float16}, std::pair{dtype::float32, dtype::bfloat16}}) {
      cast_elements(a, from, std::span(b).first(in.size() * 2), to);
      for (std::size_t i = 0; i < in.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out.push_back(h);
      }
    }
    std::vector<std::byte> h(65536 * 2);
    for (std::uint32_t i = 0; i < 65536; ++i) std::memcpy(h.data() + 2 * i, &i, 2);  // little-endian low half
    for (auto from : {dtype::float16, dtype::bfloat16}) {
      cast_elements(h, from, std::span(b).first(65536 * 4), dtype::float32);
      for (std::size_t i = 0; i < 65536; ++i) {
        std::uint32_t w;
        std::memcpy(&w, b.data() + 4 * i, 4);
        out.push_back(w);
      }
    }
    return out;
  };
  const auto plain = run();
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
  const auto flushed = run();
  _mm_setcsr(saved);
  ASSERT_EQ(plain.size(), flushed.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) differ += plain[i] != flushed[i];
  EXPECT_EQ(differ, 0u);
  // and the plain results are the scalar ones (the run did convert)
  EXPECT_EQ(plain[0x0001], f32_to_f16_bits(0x0001u));
  EXPECT_EQ(plain[plain.size() - 65536 + 0x0001], 0x00010000u);   // BFloat16 subnormal widened
  EXPECT_EQ(plain[plain.size() - 2 * 65536 + 0x0001], 0x33800000u);  // Float16 subnormal widened
}
#endif

// --- Refusals and sizes ----------------------------------------------------------------------

TEST(cast_refusals, every_non_float_cast_is_refused_naming_both_dtypes) {
  std::size_t refused = 0;
  for (auto from : all_dtypes) {
    for (auto to : all_dtypes) {
      const bool ok = from == to || (is_floating(from) && is_floating(to));
      EXPECT_EQ(castable(from, to), ok) << from << " -> " << to;
      for (bool explicit_request : {false, true}) {
        const auto why = cast_refusal(from, to, explicit_request);
        EXPECT_EQ(why.has_value(), !ok) << from << " -> " << to;
        if (!why) continue;
        const std::string pair = std::string(ms_name(from)) + " to " + std::string(ms_name(to));
        EXPECT_NE(why->find(pair), std::string::npos) << *why;
        EXPECT_TRUE(throws_error([&] { check_cast(from, to, explicit_request, "parameter 'w'"); },
                                 {"parameter 'w'", pair}));
      }
      if (ok) continue;
      ++refused;
      std::vector<std::byte> src(element_size(from) * 3), dst(element_size(to) * 3);
      EXPECT_TRUE(throws_error([&] { cast_elements(src, from, dst, to); }, {ms_name(from), ms_name(to), "cannot cast"}));
    }
  }
  EXPECT_EQ(refused, 15u * 15u - 15u - 12u);
  // the integer messages say that integers are never cast, implicitly or explicitly
  EXPECT_NE(cast_refusal(dtype::int32, dtype::float16, false)->find("never cast implicitly"), std::string::npos);
  EXPECT_NE(cast_refusal(dtype::int64, dtype::int32, true)->find("even when named explicitly"), std::string::npos);
}

TEST(cast_refusals, sizes_must_match) {
  std::vector<std::byte> src(10), dst(4);
  EXPECT_TRUE(throws_error([&] { cast_elements(std::span(src).first(6), dtype::float32, dst, dtype::float16); },
                           {"6 source bytes", "Float32"}));
  EXPECT_TRUE(throws_error([&] { cast_elements(std::span(src).first(8), dtype::float32, std::span(dst).first(3), dtype::float16); },
                           {"need 4 bytes", "has 3"}));
  EXPECT_TRUE(throws_error([&] { cast_elements(std::span(src).first(4), dtype::float16, dst, dtype::float32); },
                           {"need 8 bytes", "has 4"}));
  EXPECT_NO_THROW(cast_elements(std::span<const std::byte>{}, dtype::float32, std::span<std::byte>{}, dtype::bfloat16));
}

TEST(cast_refusals, same_dtype_copies_the_bytes) {
  for (auto t : all_dtypes) {
    std::vector<std::byte> src(element_size(t) * 5), dst(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 37 + 1);
    cast_elements(src, t, dst, t);
    EXPECT_EQ(src, dst) << t;
  }
}

TEST(cast_refusals, overlapping_spans_are_a_contract_violation) {
  std::vector<std::byte> buf(64);
  EXPECT_THROW(cast_elements(std::span<const std::byte>(buf).first(32), dtype::float32,
                             std::span<std::byte>(buf).subspan(16, 16), dtype::float16),
               reshard::contract_violation);
}
