// reshard/io/detail/json.hpp: strict JSON parsing with nlohmann::json for the file readers:
// duplicate object keys are refused (nlohmann would silently keep one), parse errors become
// reshard::error. Internal: not part of reshard's API.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace reshard::io::detail {

/// Deepest nesting of JSON arrays and objects the readers accept (MindSpore's strategy files and
/// safetensors headers nest at most 5 deep). Deeper input is refused while it is parsed: the
/// parser itself is iterative, but printing (json_excerpt) and copying a value recurse once per
/// level, and a 100000-deep value overflowed the stack.
inline constexpr int json_max_depth = 64;

// A SAX pass that refuses duplicate object keys and nesting deeper than json_max_depth, and
// turns a syntax error into reshard::error. It builds nothing: nlohmann's parser callback (the
// other way to see keys) rescans the enclosing object each time an object ends, which made a
// safetensors header of n tensors cost O(n^2) (20000 tensors: seconds).
template <class J>
struct strict_json_checker {
  const std::string& prefix;
  std::vector<std::set<std::string>> keys{};  // keys seen in each open object
  int depth = 0;                              // open arrays and objects

  bool open() {
    if (depth >= json_max_depth)
      report_error(prefix + "JSON nests arrays and objects deeper than " + std::to_string(json_max_depth) +
                   " levels");
    ++depth;
    return true;
  }
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(typename J::number_integer_t) { return true; }
  bool number_unsigned(typename J::number_unsigned_t) { return true; }
  bool number_float(typename J::number_float_t, const typename J::string_t&) { return true; }
  bool string(typename J::string_t&) { return true; }
  bool binary(typename J::binary_t&) { return true; }
  bool start_object(std::size_t) {
    keys.emplace_back();
    return open();
  }
  bool key(typename J::string_t& k) {
    if (!keys.back().insert(k).second) report_error(prefix + "JSON object has the key " + quote_name(k) + " twice");
    return true;
  }
  bool end_object() {
    keys.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) { return open(); }
  bool end_array() {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const std::exception& e) {
    report_error(prefix + "invalid JSON: " + e.what());
  }
};

/// Parses `text` as JSON of type J (nlohmann::json or nlohmann::ordered_json); `prefix` starts
/// every error message ("safetensors: /a/b.safetensors: "). Checks the text first
/// (strict_json_checker), then builds the value.
template <class J>
J parse_json_strict(std::string_view text, const std::string& prefix) {
  strict_json_checker<J> check{prefix};
  J::sax_parse(text.begin(), text.end(), &check);
  try {
    return J::parse(text.begin(), text.end());
  } catch (const typename J::exception& e) {
    report_error(prefix + "invalid JSON: " + e.what());
  }
}

/// The value of a JSON integer within [lo, hi], or none (not an integer, or out of range).
template <class J>
std::optional<std::int64_t> json_int(const J& j, std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                     std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  std::int64_t v = 0;
  if (j.is_number_unsigned()) {
    const auto u = j.template get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    v = static_cast<std::int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.template get<std::int64_t>();
  } else {
    return std::nullopt;
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

/// The value of a non-negative JSON integer (full uint64 range), or none.
template <class J>
std::optional<std::uint64_t> json_uint(const J& j) {
  if (j.is_number_unsigned()) return j.template get<std::uint64_t>();
  if (j.is_number_integer() && j.template get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(j.template get<std::int64_t>());
  return std::nullopt;
}

/// Compact text of a JSON value for messages (cut at 80 characters).
template <class J>
std::string json_excerpt(const J& j) {
  std::string s = j.dump(-1, ' ', false, J::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace reshard::io::detail
