// examples/cli/common.hpp: what every subcommand of the reshard program shares: the shape of a
// subcommand, reading layout arguments (inline JSON or @file) and printing helpers.
#pragma once

#include <cctype>
#include <charconv>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "reshard.hpp"
#include "reshard/ext/json.hpp"
#include "reshard/ext/svg.hpp"
#include "reshard/io/input_file.hpp"
#include "reshard/io/atomic_file.hpp"

namespace reshard::cli {

/// One subcommand: its CLI11 app (options registered on it) and what to do when it was given.
/// To add a subcommand, write `command add_<name>_command(CLI::App&)` in <name>_command.hpp and
/// list it in reshard.cpp. `run` throws reshard::error on bad input.
struct command {
  CLI::App* app = nullptr;
  std::function<void()> run;
};

/// The text of an argument that is inline text or `@path` (`@-` = standard input).
inline std::string read_argument(const std::string& value, const std::string& option) {
  if (value.empty() || value[0] != '@') return value;
  const std::string path = value.substr(1);
  if (path != "-")
    return io::read_input_file(path, option);  // a FIFO, a directory, ...: an error naming it
  std::string text;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin) != 0)
    report_error(option + ": cannot read standard input: " + std::strerror(errno));
  return text;
}

/// The most ranks a layout option may have. layout and plan keep a record per rank (plan about
/// 250 bytes, layout's report about 800): 2^20 ranks take up to 1 GB, and a layout of 2^31 ranks
/// would exhaust the memory of any machine.
inline constexpr index_t max_layout_ranks = index_t{1} << 20;

/// A layout option's value (inline JSON or @file.json) parsed; errors name the option (and file).
inline layout read_layout(const std::string& value, const std::string& option) {
  const std::string what = value.rfind('@', 0) == 0 ? option + " " + value : option;
  layout l = layout_from_json_text(read_argument(value, option), what);
  if (num_ranks(l) > max_layout_ranks)
    report_error(what + ": " + std::to_string(num_ranks(l)) + " ranks, more than the " +
                 std::to_string(max_layout_ranks) + " (2^20) this program lists one by one");
  return l;
}

/// The check of a --rank option: a whole number, 0 or more (CLI11's NonNegativeNumber printed
/// its range as a 300-digit double).
inline std::string check_rank(const std::string& v) {
  return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
             ? std::string()
             : "not a rank: " + v + " (a whole number, 0 or more)";
}

/// `--dtype NAME` of the layout-level subcommands (plan, check-plan): the element type of the
/// byte counts, any name dtype_size knows.
inline CLI::Option* add_element_dtype_option(CLI::App* sub, std::string& dtype) {
  return sub->add_option("--dtype", dtype, "element type, for byte counts (default float32): " + dtype_names())
      ->check([](const std::string& name) {
        return dtype_size(name) ? std::string() : "unknown dtype \"" + name + "\" (valid: " + dtype_names() + ")";
      });
}

/// JSON for people and programs alike: the top-level object one key a line, the elements of
/// its arrays of objects or arrays one a line, everything else compact.
inline void print_json(std::ostream& out, const nlohmann::json& j) {
  if (!j.is_object()) {
    out << j.dump() << '\n';
    return;
  }
  out << "{\n";
  std::size_t k = 0;
  for (const auto& item : j.items()) {
    out << "  " << nlohmann::json(item.key()).dump() << ": ";
    const auto& v = item.value();
    const bool nested = v.is_array() && !v.empty() && (v[0].is_object() || v[0].is_array());
    if (nested) {
      out << "[\n";
      for (std::size_t i = 0; i < v.size(); ++i)
        out << "    " << v[i].dump() << (i + 1 < v.size() ? ",\n" : "\n");
      out << "  ]";
    } else {
      out << v.dump();
    }
    out << (++k < j.size() ? ",\n" : "\n");
  }
  out << "}\n";
}

/// `802816 B (784 KiB)`: exact bytes, and a rounded binary unit when that helps.
inline std::string format_bytes(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes == static_cast<double>(static_cast<long long>(bytes))
                                     ? "%.0f B" : "%.1f B", bytes);
  std::string s = buf;
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = bytes;
  int u = -1;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  if (u >= 0) {
    std::snprintf(buf, sizeof buf, " (%.1f %s)", v, units[u]);
    std::string r = buf;
    const auto dot = r.find(".0 ");
    if (dot != std::string::npos) r.erase(dot, 2);
    s += r;
  }
  return s;
}

/// A size in bytes: a whole number with an optional unit, as dd reads them: B; KB, MB, GB, TB
/// (powers of 1000); K, M, G, T and KiB, MiB, GiB, TiB (powers of 1024); units in any case.
/// Empty on anything else or on overflow.
inline std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::size_t i = 0;
  std::uint64_t n = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const auto d = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return std::nullopt;
    n = n * 10 + d, ++i;
  }
  if (i == 0) return std::nullopt;
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  static const std::pair<const char*, std::uint64_t> units[] = {
      {"", 1},           {"b", 1},
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      if (n > UINT64_MAX / scale) return std::nullopt;
      return n * scale;
    }
  return std::nullopt;
}

/// Ranks as ranges: `0-3,8,10-11`.
inline std::string format_ranks(const std::vector<index_t>& ranks) { return detail::svg::ranks_text(ranks); }

/// Left-pads `s` to `width` columns.
inline std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
/// Right-pads `s` to `width` columns.
inline std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

inline constexpr const char* layout_help =
    "as JSON, inline or @file.json (@- = stdin): "
    "{\"dev_matrix\":[2,4],\"tensor_map\":[1,-1],\"shape\":[8,4]} plus optional "
    "\"opt_shard\":{\"step\":s,\"size\":n}, \"stage\":k, \"split\":\"divisible|chunk|balanced\", "
    "\"split_sizes\":[..]";

/// The --svg FILE and --svg-dims I,J options of a subcommand that draws a picture (ext/svg.hpp).
struct svg_output {
  std::string file, dims;

  void add_to(CLI::App* sub, const std::string& what) {
    sub->add_option("--svg", file, "also write a picture of " + what + " to FILE, as SVG (replaced atomically)");
    sub->add_option("--svg-dims", dims,
                    "the tensor dims the picture draws as rows and columns, I,J (default: the first two dims "
                    "with extent > 1, or the last two); the other dims become one panel per slice");
  }
  /// The picture's options for a tensor of `shape`; a bad --svg-dims is an error naming it.
  svg_options options(const index_list& shape, index_t element_bytes = 1) const {
    svg_options o;
    o.element_bytes = element_bytes;
    if (dims.empty()) return o;
    const auto bad = [&](const std::string& why) { report_error("--svg-dims " + dims + ": " + why); };
    const auto comma = dims.find(',');
    if (comma == std::string::npos) bad("expected two dims I,J");
    int d[2] = {-1, -1};
    const std::string part[2] = {dims.substr(0, comma), dims.substr(comma + 1)};
    for (int k = 0; k < 2; ++k) {
      const char* b = part[k].data();
      const auto [end, ec] = std::from_chars(b, b + part[k].size(), d[k]);
      if (ec != std::errc{} || end != b + part[k].size() || part[k].empty()) bad("\"" + part[k] + "\" is not a dim");
      if (d[k] < 0 || static_cast<std::size_t>(d[k]) >= shape.size())
        bad("dim " + part[k] + " is not a dim of the tensor (it has " + std::to_string(shape.size()) + ")");
    }
    if (d[0] == d[1]) bad("the two dims must differ");
    o.row_dim = d[0], o.col_dim = d[1];
    return o;
  }
  /// Writes `svg` to the --svg file, if one was given.
  void write(const std::string& svg) const {
    if (file.empty()) return;
    io::atomic_file_writer out(file, true, "--svg");
    out.write(svg);
    out.commit();
  }
};

}  // namespace reshard::cli
