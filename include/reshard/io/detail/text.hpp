// reshard/io/detail/text.hpp: the notation of names and shapes in reshard's io error messages.
// Internal: not part of reshard's API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace reshard::io::detail {

/// "[2,2]": a shape as reshard's messages print it.
inline std::string format_dims(std::span<const std::int64_t> dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + ']';
}

/// `text` with control bytes, DEL, quotes and backslashes escaped as \xNN, so that names read
/// from hostile files print safely; bytes >= 0x80 (UTF-8) are kept. Long text is cut at `limit`.
inline std::string printable(std::string_view text, std::size_t limit = 200) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == limit) return s + "...(" + std::to_string(text.size()) + " bytes)";
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      s += "\\x";
      s += hex[c >> 4];
      s += hex[c & 15];
    } else {
      s += static_cast<char>(c);
    }
  }
  return s;
}

/// "'name'" for messages.
inline std::string quote_name(std::string_view name) { return "'" + printable(name) + "'"; }

}  // namespace reshard::io::detail
