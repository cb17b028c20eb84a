// reshard/io/crc32.hpp: CRC-32 with zlib's polynomial (reflected 0xEDB88320, initial and final
// xor 0xFFFFFFFF), the checksum of MindSpore's `crc_num` checkpoint trailer. Same results as
// zlib's crc32(crc, buf, len) and Python's binascii.crc32(data, crc); no zlib needed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

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
}  // namespace detail

/// CRC-32 of `data`, continuing from the CRC `crc` of the bytes before it (0 to start).
/// @post crc32(a ++ b) == crc32(b, crc32(a))
constexpr std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  const auto& t = detail::crc_tables;
  std::uint32_t c = ~crc;
  const std::byte* p = data.data();
  std::size_t n = data.size();
  while (n >= 8) {
    using detail::byte_at;
    const std::uint32_t lo =
        c ^ (byte_at(p, 0) | byte_at(p, 1) << 8 | byte_at(p, 2) << 16 | byte_at(p, 3) << 24);
    const std::uint32_t hi = byte_at(p, 4) | byte_at(p, 5) << 8 | byte_at(p, 6) << 16 | byte_at(p, 7) << 24;
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  for (std::size_t i = 0; i < n; ++i) c = (c >> 8) ^ t[0][(c ^ detail::byte_at(p, i)) & 0xFFu];
  return ~c;
}

}  // namespace reshard::io
