// reshard/io/json_reader.hpp: the one strict JSON reader behind every JSON file reshard reads
// (JSON strategy files, safetensors headers, Hugging Face indexes, rename maps). nlohmann::json
// alone keeps the last of two equal keys and, read from a stream, stops after the first value;
// here a file is one JSON value and nothing after it but white space, no object has a key
// twice, nesting is bounded, and every error is a reshard::error naming the file, the line and
// column, and the key. check_known_keys refuses the keys of an object a format does not know,
// naming the nearest known one (a misspelt key is an error, not a silently dropped setting).
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace reshard::io {

/// Deepest nesting of JSON arrays and objects the readers accept (MindSpore's strategy files and
/// safetensors headers nest at most 5 deep). Deeper input is refused while it is parsed: the
/// parser itself is iterative, but printing (json_excerpt) and copying a value recurse once per
/// level, and a 100000-deep value overflowed the stack.
inline constexpr int json_max_depth = 64;

namespace detail {

// The text handed to nlohmann's SAX parser through an iterator that records how far the parser
// has read: when a key is reported, the parser has just read its closing quote, so the position
// of a duplicate key is known without a second scan.
struct json_reading_iterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* p = nullptr;
  const char** read = nullptr;  // the furthest character read so far

  reference operator*() const { return *p; }
  json_reading_iterator& operator++() {
    *read = ++p;
    return *this;
  }
  json_reading_iterator operator++(int) {
    auto old = *this;
    ++*this;
    return old;
  }
  friend bool operator==(const json_reading_iterator& a, const json_reading_iterator& b) { return a.p == b.p; }
  friend bool operator!=(const json_reading_iterator& a, const json_reading_iterator& b) { return a.p != b.p; }
};

/// "line 3, column 9": the place of the byte at `offset` of `text` (both 1-based, columns in
/// bytes, as nlohmann's parse errors count them).
inline std::string json_place(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  const auto head = text.substr(0, offset);
  const auto line = 1 + std::count(head.begin(), head.end(), '\n');
  const auto nl = head.rfind('\n');
  const auto column = (nl == std::string_view::npos ? offset : offset - nl - 1) + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

/// nlohmann's message without its "[json.exception.parse_error.101] " tag.
inline std::string json_library_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0)
    if (const auto at = m.find("] "); at != std::string::npos) m.erase(0, at + 2);
  return m;
}

// A SAX pass that refuses duplicate object keys and nesting deeper than json_max_depth, and
// turns a syntax error (trailing text included) into reshard::error. It builds nothing:
// nlohmann's parser callback (the other way to see keys) rescans the enclosing object each time
// an object ends, which made a safetensors header of n tensors cost O(n^2) (20000 tensors:
// seconds).
template <class J>
struct strict_json_checker {
  const std::string& prefix;
  std::string_view text;
  const char* const* read;                    // how far the parser has read
  std::vector<std::set<std::string>> keys{};  // keys seen in each open object
  std::vector<std::string> path{};            // the key of each open array and object ("" if none)
  std::string last_key{};                     // the key whose value comes next, "" in an array

  bool open() {
    if (path.size() >= static_cast<std::size_t>(json_max_depth))
      report_error(prefix + "JSON nests arrays and objects deeper than " + std::to_string(json_max_depth) +
                   " levels");
    path.push_back(std::move(last_key));
    last_key.clear();
    return true;
  }
  void close() {
    path.pop_back();
    last_key.clear();
  }
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(typename J::number_integer_t) { return true; }
  bool number_unsigned(typename J::number_unsigned_t) { return true; }
  bool number_float(typename J::number_float_t, const typename J::string_t&) { return true; }
  bool string(typename J::string_t&) { return true; }
  bool binary(typename J::binary_t&) { return true; }
  bool start_object(std::size_t) {
    open();
    keys.emplace_back();
    return true;
  }
  // The offset of the opening quote of the key just read (the parser stands after its closing
  // quote): the nearest quote before that one that no backslash escapes.
  std::size_t key_start() const {
    std::size_t i = static_cast<std::size_t>(*read - text.data()) - 1;
    while (i-- > 0) {
      if (text[i] != '"') continue;
      std::size_t backslashes = 0;
      while (backslashes < i && text[i - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return i;
    }
    return 0;
  }
  bool key(typename J::string_t& k) {
    if (!keys.back().insert(k).second) {
      std::string where;
      for (const auto& p : path)
        if (!p.empty()) where += (where.empty() ? "" : ".") + quote_name(p);
      report_error(prefix + "JSON object " + (where.empty() ? "" : where + " ") + "has the key " + quote_name(k) +
                   " twice (the second at " + json_place(text, key_start()) + ")");
    }
    last_key = k;
    return true;
  }
  bool end_object() {
    keys.pop_back();
    close();
    return true;
  }
  bool start_array(std::size_t) { return open(); }
  bool end_array() {
    close();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const std::exception& e) {
    report_error(prefix + "invalid JSON: " + json_library_message(e));
  }
};

/// The edit distance (insertions, deletions, substitutions) between `a` and `b`.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace detail

/// Parses `text` as one JSON value of type J (nlohmann::json or nlohmann::ordered_json),
/// strictly: nothing but white space after the value, no object with a key twice, nesting at
/// most json_max_depth. `prefix` starts every error message ("safetensors: /a/b.safetensors: ");
/// the messages name the line and column, and the key.
template <class J>
J parse_json_strict(std::string_view text, const std::string& prefix) {
  const char* read = text.data();
  detail::strict_json_checker<J> check{prefix, text, &read};
  J::sax_parse(detail::json_reading_iterator{text.data(), &read},
               detail::json_reading_iterator{text.data() + text.size(), &read}, &check);
  try {
    return J::parse(text.begin(), text.end());
  } catch (const typename J::exception& e) {  // out_of_range for 1e999
    report_error(prefix + "invalid JSON: " + detail::json_library_message(e));
  }
}

/// The known key nearest to `key` by edit distance (the first of equals), or "" when `known` is
/// empty.
inline std::string_view nearest_key(std::string_view key, std::span<const std::string_view> known) {
  std::string_view best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto k : known)
    if (const auto d = detail::edit_distance(key, k); d < best_distance) best = k, best_distance = d;
  return best;
}
inline std::string_view nearest_key(std::string_view key, std::initializer_list<std::string_view> known) {
  return nearest_key(key, std::span<const std::string_view>(known.begin(), known.size()));
}

/// Refuses a key of the JSON object `j` that is not in `known`: the error reads `who` (a prefix
/// such as "strategy: s.json: parameter 'w': "), then "unknown key 'k'", `where` (such as
/// " in opt_shard", may be empty) and the nearest known key ("did you mean ...?"). Does nothing
/// when `j` is not an object.
template <class J>
void check_known_keys(const J& j, std::span<const std::string_view> known, const std::string& who,
                      std::string_view where = {}) {
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::string m = who + "unknown key " + detail::quote_name(k) + std::string(where);
    if (const auto near = nearest_key(k, known); !near.empty())
      m += " (did you mean " + detail::quote_name(near) + "?)";
    report_error(m);
  }
}
template <class J>
void check_known_keys(const J& j, std::initializer_list<std::string_view> known, const std::string& who,
                      std::string_view where = {}) {
  check_known_keys(j, std::span<const std::string_view>(known.begin(), known.size()), who, where);
}

namespace detail {

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

/// Reading the fields of one JSON value, every error naming the file (`who`), the place and the
/// key: "plan.json: sources[2].rank: not an integer".
struct json_fields {
  std::string who;  // "execute: plan.json: "

  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    report_error(who + where + ": " + why);
  }
  const nlohmann::json& at(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    if (!j.is_object()) fail(where, "not an object");
    auto it = j.find(key);
    if (it == j.end()) fail(where, "no key '" + std::string(key) + "'");
    return *it;
  }
  std::uint64_t u64(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const auto v = json_uint(at(j, key, where));
    if (!v) fail(where + "." + std::string(key), "not a non-negative integer");
    return *v;
  }
  std::int64_t i64(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const auto v = json_int(at(j, key, where));
    if (!v) fail(where + "." + std::string(key), "not an integer");
    return *v;
  }
  std::string str(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const auto& v = at(j, key, where);
    if (!v.is_string()) fail(where + "." + std::string(key), "not a string");
    return v.get<std::string>();
  }
  bool flag(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const auto& v = at(j, key, where);
    if (!v.is_boolean()) fail(where + "." + std::string(key), "not true or false");
    return v.get<bool>();
  }
  const nlohmann::json& array(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const auto& v = at(j, key, where);
    if (!v.is_array()) fail(where + "." + std::string(key), "not an array");
    return v;
  }
  std::vector<std::int64_t> ints(const nlohmann::json& j, const std::string& where) const {
    if (!j.is_array()) fail(where, "not an array");
    std::vector<std::int64_t> v;
    for (const auto& e : j) {
      const auto x = json_int(e);
      if (!x) fail(where, "not an array of integers");
      v.push_back(*x);
    }
    return v;
  }
};

}  // namespace detail
}  // namespace reshard::io
