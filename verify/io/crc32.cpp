// Tests of reshard/io/crc32.hpp (the tables, and the carry-less-multiply folding on x86-64)
// against known values and a bitwise reference.
#include <reshard/io/crc32.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

using namespace reshard::io;
using reshard_test::as_bytes;
using reshard_test::from_hex;

namespace {
// The textbook bit-at-a-time CRC-32, independent of the tables under test.
std::uint32_t reference_crc32(std::span<const std::byte> data, std::uint32_t crc = 0) {
  crc = ~crc;
  for (auto b : data) {
    crc ^= std::to_integer<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}
}  // namespace

static_assert(crc32(std::span<const std::byte>{}) == 0);

TEST(crc32, check_value) { EXPECT_EQ(crc32(as_bytes("123456789")), 0xCBF43926u); }

TEST(crc32, spec_golden_checkpoint_trailer) {
  // docs/formats.md#3-checkpoint-files: the two golden Values followed by this trailer value.
  const auto body = from_hex(
      "0a240a0177121f080208021207466c6f617433321a100000803f000000400000404000008040"
      "0a200a0b676c6f62616c5f7374657012111205496e7436341a080500000000000000");
  EXPECT_EQ(crc32(body), 0xa9f61be4u);
}

TEST(crc32, continues_like_zlib) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32(as_bytes(text)), 0x414FA339u);
  const auto a = as_bytes(text).first(10), b = as_bytes(text).subspan(10);
  EXPECT_EQ(crc32(b, crc32(a)), 0x414FA339u);
}

RC_GTEST_PROP(crc32, equals_the_bitwise_reference, (const std::vector<std::uint8_t>& data, std::uint32_t seed)) {
  const auto bytes = std::as_bytes(std::span(data));
  RC_ASSERT(crc32(bytes, seed) == reference_crc32(bytes, seed));
}

RC_GTEST_PROP(crc32, chains_over_any_split, (const std::vector<std::uint8_t>& data)) {
  const auto bytes = std::as_bytes(std::span(data));
  const auto cut = *rc::gen::inRange<std::size_t>(0, data.size() + 1);
  RC_ASSERT(crc32(bytes.subspan(cut), crc32(bytes.first(cut))) == crc32(bytes));
}

// Long buffers at any alignment: on x86-64 with PCLMULQDQ these go through the folding path (64
// bytes at once, then 16, the tail by the tables), which the short vectors above barely reach.
RC_GTEST_PROP(crc32, long_buffers_at_any_offset_equal_the_reference, (std::uint32_t seed)) {
  const auto n = *rc::gen::inRange<std::size_t>(0, 5000);
  const auto offset = *rc::gen::inRange<std::size_t>(0, 16);
  const auto data = *rc::gen::container<std::vector<std::uint8_t>>(n + offset, rc::gen::arbitrary<std::uint8_t>());
  const auto bytes = std::as_bytes(std::span(data)).subspan(offset);
  RC_ASSERT(crc32(bytes, seed) == reference_crc32(bytes, seed));
}

TEST(crc32, every_length_around_the_folding_steps) {
  std::vector<std::uint8_t> data(300);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 131 + 7);
  for (std::size_t n = 0; n <= data.size(); ++n) {
    const auto bytes = std::as_bytes(std::span(data)).first(n);
    EXPECT_EQ(crc32(bytes, 0x12345678u), reference_crc32(bytes, 0x12345678u)) << n << " bytes";
  }
}
