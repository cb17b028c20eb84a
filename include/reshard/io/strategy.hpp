// reshard/io/strategy.hpp: MindSpore parallel strategy files (see docs/formats.md#2-strategy-files
// and, for the layouts they hold, docs/formats.md#1-layouts).
//
// Two encodings, chosen by the file name: a `.json` suffix is JSON, anything else is protobuf
// (`mindspore.straspb.ParallelStrategyMap`, proto2). strategy_file mirrors the file: node
// strategies and parameter layouts in file order.
//
// Protobuf is read and written with libprotobuf's CodedInputStream / CodedOutputStream (no
// generated code). The writer emits every required field, repeated scalars unpacked, negative
// int32 values as 10-byte varints, one DevMatrix, one ParamSplitShape and one IndicesOffset per
// layout (as MindSpore does), and the tensor map either as one TensorMap (ordinary layouts) or
// one TensorMap per tensor dim (tuple layouts, padded with empty TensorMaps to at least two so
// that a reader can tell the forms apart). The reader accepts packed and unpacked repeated
// scalars, skips unknown fields, and refuses truncated data, missing required fields, singular
// fields given twice, out-of-range values, duplicate parameter names and files with no
// parameter layouts (MindSpore refuses those too).
//
// Values are checked for representability only (uint32 / int32 ranges); whether a layout makes
// sense (tensor_map within dev_matrix, shapes divisible) is the core's business.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/detail/wire.hpp>
#include <reshard/io/json_reader.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/mapped_file.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// The layout of one parameter as a strategy file stores it.
struct param_layout {
  std::vector<std::int64_t> dev_matrix;
  /// One entry per tensor dim: the device axes (counted from the right of dev_matrix) splitting
  /// it, leftmost outermost; an ordinary entry is a 1-element list; unsplit is {-1}.
  std::vector<std::vector<std::int64_t>> tensor_map;
  bool tuple_form = false;  ///< written as one TensorMap per dim (tuple layout) vs a single TensorMap
  std::vector<std::int64_t> tensor_shape;  ///< JSON only (empty from protobuf)
  std::vector<std::int64_t> param_split_shape, indices_offset;
  std::int32_t field = 0, opt_weight_shard_step = 0, opt_weight_shard_size = 0;

  friend bool operator==(const param_layout&, const param_layout&) = default;
};

/// The strategy of one operator node.
struct node_strategy {
  std::uint32_t stage = 0;
  std::vector<std::vector<std::uint32_t>> strategy;

  friend bool operator==(const node_strategy&, const node_strategy&) = default;
};

/// A whole strategy file, in file order.
struct strategy_file {
  std::uint32_t current_stage = 1;
  std::vector<std::pair<std::string, node_strategy>> nodes;
  std::vector<std::pair<std::string, param_layout>> layouts;

  friend bool operator==(const strategy_file&, const strategy_file&) = default;
};

/// Prints `dev[2,4] map[1,-1] shape[8,4]`, tuple maps as `map[[2,1],[0]]`, and the optional
/// parts when set: `split[..] offset[..] field 1 opt(step 2, size 4)`.
inline std::ostream& operator<<(std::ostream& os, const param_layout& l) {
  os << "dev" << detail::format_dims(l.dev_matrix) << " map[";
  for (std::size_t i = 0; i < l.tensor_map.size(); ++i) {
    if (i) os << ',';
    if (l.tuple_form || l.tensor_map[i].size() != 1)
      os << detail::format_dims(l.tensor_map[i]);
    else
      os << l.tensor_map[i][0];
  }
  os << "] shape" << detail::format_dims(l.tensor_shape);
  if (!l.param_split_shape.empty()) os << " split" << detail::format_dims(l.param_split_shape);
  if (!l.indices_offset.empty()) os << " offset" << detail::format_dims(l.indices_offset);
  if (l.field != 0) os << " field " << l.field;
  if (l.opt_weight_shard_step != 0 || l.opt_weight_shard_size != 0)
    os << " opt(step " << l.opt_weight_shard_step << ", size " << l.opt_weight_shard_size << ")";
  return os;
}

inline std::ostream& operator<<(std::ostream& os, const node_strategy& n) {
  os << "stage " << n.stage << " strategy[";
  for (std::size_t i = 0; i < n.strategy.size(); ++i) {
    if (i) os << ',';
    os << '[';
    for (std::size_t k = 0; k < n.strategy[i].size(); ++k) os << (k ? "," : "") << n.strategy[i][k];
    os << ']';
  }
  return os << ']';
}

/// A parameter name of a merged pipeline strategy split into its stage and original name.
struct pipeline_name {
  std::uint32_t stage = 0;
  std::string_view name;
  friend bool operator==(const pipeline_name&, const pipeline_name&) = default;
};

/// Splits `"<stage>-<name>"` on the first "-" when the part before it is a decimal number that
/// fits in uint32; none otherwise. Names may themselves contain "-": "0-layer-1.w" is stage 0,
/// name "layer-1.w"; "layer-1.w" is not a merged name.
constexpr std::optional<pipeline_name> split_pipeline_name(std::string_view merged) noexcept {
  const auto dash = merged.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  std::uint64_t stage = 0;
  for (std::size_t i = 0; i < dash; ++i) {
    const char c = merged[i];
    if (c < '0' || c > '9') return std::nullopt;
    stage = stage * 10 + static_cast<std::uint64_t>(c - '0');
    if (stage > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  }
  return pipeline_name{static_cast<std::uint32_t>(stage), merged.substr(dash + 1)};
}

/// The merged name of parameter `name` of pipeline stage `stage`: `"<stage>-<name>"`.
inline std::string pipeline_param_name(std::uint32_t stage, std::string_view name) {
  return std::to_string(stage) + "-" + std::string(name);
}

// ---------------------------------------------------------------------------------------------
// protobuf

namespace detail {

inline std::uint32_t to_uint32(std::int64_t v, const std::string& who, std::string_view what) {
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max())
    report_error(who + std::string(what) + " value " + std::to_string(v) + " is outside uint32");
  return static_cast<std::uint32_t>(v);
}
inline std::int32_t to_int32(std::int64_t v, const std::string& who, std::string_view what) {
  if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
    report_error(who + std::string(what) + " value " + std::to_string(v) + " is outside int32");
  return static_cast<std::int32_t>(v);
}
// An int32 field read from the wire: the canonical sign-extended 10-byte form, or the 5-byte
// form of a negative value (low 32 bits), which protobuf's parsers also accept.
inline std::int32_t wire_int32(std::int64_t v, const std::string& who, std::string_view what) {
  if (v > std::numeric_limits<std::int32_t>::max() && v <= std::numeric_limits<std::uint32_t>::max())
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
  return to_int32(v, who, what);
}

// A message { repeated <scalar> dim = 1; } (DevMatrix, TensorMap, ParallelStrategy, ...).
inline std::string encode_dims_message(std::span<const std::int64_t> dims) {
  wire_writer w;
  for (auto d : dims) w.signed_field(1, d);
  return w.take();
}

/// The ParallelLayouts message of `l`; `who` prefixes errors.
inline std::string encode_parallel_layouts(const param_layout& l, const std::string& who) {
  wire_writer w;
  for (auto d : l.dev_matrix) to_uint32(d, who, "dev_matrix");
  w.bytes_field(1, encode_dims_message(l.dev_matrix));
  for (const auto& axes : l.tensor_map) {
    if (axes.empty()) report_error(who + "tensor_map has an empty entry (unsplit is {-1})");
    for (auto a : axes) to_int32(a, who, "tensor_map");
  }
  if (l.tuple_form) {  // a 0-d tuple layout too: two empty TensorMaps, or it would read back ordinary
    for (const auto& axes : l.tensor_map) w.bytes_field(2, encode_dims_message(axes));
    for (std::size_t i = l.tensor_map.size(); i < 2; ++i) w.bytes_field(2, "");
  } else {
    std::vector<std::int64_t> flat;
    for (const auto& axes : l.tensor_map) {
      if (axes.size() != 1)
        report_error(who + "tensor_map entry " + format_dims(axes) + " needs tuple_form (several axes split one dim)");
      flat.push_back(axes[0]);
    }
    w.bytes_field(2, encode_dims_message(flat));
  }
  w.bytes_field(3, encode_dims_message(l.param_split_shape));
  w.bytes_field(4, encode_dims_message(l.indices_offset));
  w.signed_field(5, l.field);
  w.signed_field(6, l.opt_weight_shard_step);
  w.signed_field(7, l.opt_weight_shard_size);
  return w.take();
}

inline std::string who_param(const std::string& prefix, std::string_view name) {
  return prefix + "parameter " + quote_name(name) + ": ";
}
inline std::string who_node(const std::string& prefix, std::string_view name) {
  return prefix + "node " + quote_name(name) + ": ";
}

// Reads the repeated scalar `dim = 1` of a sub-message.
inline std::vector<std::int64_t> decode_dims_message(std::span<const std::byte> bytes, const wire_message::fail_fn& fail,
                                                     std::string_view what) {
  wire_message m(bytes.data(), bytes.size(), fail);
  std::vector<std::int64_t> dims;
  while (std::uint32_t tag = m.next_tag()) {
    if (tag_field(tag) == 1)
      m.repeated_varint(tag, what, [&](std::uint64_t v) { dims.push_back(static_cast<std::int64_t>(v)); });
    else
      m.skip(tag);
  }
  return dims;
}

inline param_layout decode_parallel_layouts(std::span<const std::byte> bytes, const std::string& who) {
  wire_message::fail_fn fail = [&](const std::string& why) { report_error(who + why); };
  wire_message m(bytes.data(), bytes.size(), fail);
  param_layout l;
  bool dev_seen = false, has_field = false, has_step = false, has_size = false;
  std::vector<std::vector<std::int64_t>> maps;
  auto int32_field = [&](std::uint32_t tag, bool& seen, std::string_view what) {
    m.expect_wire(tag, wt_varint, what);
    if (seen) m.fail(std::string(what) + " appears twice");
    seen = true;
    return wire_int32(static_cast<std::int64_t>(m.varint(what)), who, what);
  };
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1: {
        m.expect_wire(tag, wt_len, "dev_matrix");
        auto dims = decode_dims_message(m.bytes("dev_matrix"), fail, "dev_matrix");
        for (auto& d : dims) d = to_uint32(d, who, "dev_matrix");
        if (!dev_seen) l.dev_matrix = std::move(dims);  // only DevMatrix [0] is used
        dev_seen = true;
        break;
      }
      case 2: {
        m.expect_wire(tag, wt_len, "tensor_map");
        auto dims = decode_dims_message(m.bytes("tensor_map"), fail, "tensor_map");
        for (auto& d : dims) d = wire_int32(d, who, "tensor_map");
        maps.push_back(std::move(dims));
        break;
      }
      case 3: {
        m.expect_wire(tag, wt_len, "param_split_shape");
        auto dims = decode_dims_message(m.bytes("param_split_shape"), fail, "param_split_shape");
        l.param_split_shape.insert(l.param_split_shape.end(), dims.begin(), dims.end());
        break;
      }
      case 4: {
        m.expect_wire(tag, wt_len, "indices_offset");
        auto dims = decode_dims_message(m.bytes("indices_offset"), fail, "indices_offset");
        l.indices_offset.insert(l.indices_offset.end(), dims.begin(), dims.end());
        break;
      }
      case 5: l.field = int32_field(tag, has_field, "field"); break;
      case 6: l.opt_weight_shard_step = int32_field(tag, has_step, "opt_weight_shard_step"); break;
      case 7: l.opt_weight_shard_size = int32_field(tag, has_size, "opt_weight_shard_size"); break;
      default: m.skip(tag);
    }
  }
  if (!has_field) m.fail("missing required field field");
  if (!has_step) m.fail("missing required field opt_weight_shard_step");
  if (!has_size) m.fail("missing required field opt_weight_shard_size");
  if (maps.size() == 1) {
    for (auto a : maps[0]) l.tensor_map.push_back({a});
  } else if (maps.size() > 1) {
    l.tuple_form = true;
    for (auto& axes : maps)
      if (!axes.empty()) l.tensor_map.push_back(std::move(axes));
  }
  return l;
}

inline std::pair<std::string, param_layout> decode_layout_item(std::span<const std::byte> bytes, const std::string& prefix,
                                                               std::size_t index) {
  std::optional<std::string> name;
  wire_message::fail_fn fail = [&](const std::string& why) {
    report_error((name ? who_param(prefix, *name) : prefix + "layout item " + std::to_string(index) + ": ") + why);
  };
  wire_message m(bytes.data(), bytes.size(), fail);
  std::optional<std::span<const std::byte>> layouts;
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1:
        m.expect_wire(tag, wt_len, "param_name");
        if (name) m.fail("param_name appears twice");
        name = m.string("param_name");
        break;
      case 2:
        m.expect_wire(tag, wt_len, "parallel_layouts");
        if (layouts) m.fail("parallel_layouts appears twice");
        layouts = m.bytes("parallel_layouts");
        break;
      default: m.skip(tag);
    }
  }
  if (!name) m.fail("missing required field param_name");
  if (!layouts) m.fail("missing required field parallel_layouts");
  return {*name, decode_parallel_layouts(*layouts, who_param(prefix, *name))};
}

inline std::pair<std::string, node_strategy> decode_strategy_item(std::span<const std::byte> bytes,
                                                                  const std::string& prefix, std::size_t index) {
  std::optional<std::string> name;
  auto who = [&] { return name ? who_node(prefix, *name) : prefix + "strategy item " + std::to_string(index) + ": "; };
  wire_message::fail_fn fail = [&](const std::string& why) { report_error(who() + why); };
  wire_message m(bytes.data(), bytes.size(), fail);
  std::optional<node_strategy> node;
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1:
        m.expect_wire(tag, wt_len, "node_name");
        if (name) m.fail("node_name appears twice");
        name = m.string("node_name");
        break;
      case 2: {
        m.expect_wire(tag, wt_len, "parallel_strategys");
        if (node) m.fail("parallel_strategys appears twice");
        auto body = m.bytes("parallel_strategys");
        wire_message s(body.data(), body.size(), fail);
        node_strategy n;
        bool has_stage = false;
        while (std::uint32_t t = s.next_tag()) {
          if (tag_field(t) == 1) {
            s.expect_wire(t, wt_varint, "stage");
            if (has_stage) s.fail("stage appears twice");
            n.stage = to_uint32(static_cast<std::int64_t>(s.varint("stage")), who(), "stage");
            has_stage = true;
          } else if (tag_field(t) == 2) {
            s.expect_wire(t, wt_len, "parallel_strategy");
            auto dims = decode_dims_message(s.bytes("parallel_strategy"), fail, "parallel_strategy dim");
            std::vector<std::uint32_t> dim;
            for (auto d : dims) dim.push_back(to_uint32(d, who(), "parallel_strategy dim"));
            n.strategy.push_back(std::move(dim));
          } else {
            s.skip(t);
          }
        }
        if (!has_stage) s.fail("missing required field stage");
        node = std::move(n);
        break;
      }
      default: m.skip(tag);
    }
  }
  if (!name) m.fail("missing required field node_name");
  if (!node) m.fail("missing required field parallel_strategys");
  return {*name, std::move(*node)};
}

inline void check_unique_layouts(const strategy_file& s, const std::string& prefix) {
  std::set<std::string_view> names;
  for (const auto& [name, l] : s.layouts)
    if (!names.insert(name).second) report_error(who_param(prefix, name) + "has two layouts");
}

}  // namespace detail

/// The protobuf encoding (ParallelStrategyMap) of `s`; `source` names the file in messages.
inline std::string encode_strategy_protobuf(const strategy_file& s, std::string_view source = "<memory>") {
  using namespace detail;
  const std::string prefix = "strategy: " + std::string(source) + ": ";
  check_unique_layouts(s, prefix);
  wire_writer w;
  w.varint_field(1, s.current_stage);
  for (const auto& [name, node] : s.nodes) {
    wire_writer strategys;
    strategys.varint_field(1, node.stage);
    for (const auto& dims : node.strategy) {
      wire_writer d;
      for (auto v : dims) d.varint_field(1, v);
      strategys.bytes_field(2, d.take());
    }
    wire_writer item;
    item.bytes_field(1, name);
    item.bytes_field(2, strategys.take());
    w.bytes_field(2, item.take());
  }
  for (const auto& [name, layout] : s.layouts) {
    wire_writer item;
    item.bytes_field(1, name);
    item.bytes_field(2, encode_parallel_layouts(layout, who_param(prefix, name)));
    w.bytes_field(3, item.take());
  }
  return w.take();
}

/// Decodes a protobuf strategy file; `source` names it in messages.
inline strategy_file decode_strategy_protobuf(std::span<const std::byte> bytes, std::string_view source) {
  using namespace detail;
  const std::string prefix = "strategy: " + std::string(source) + ": ";
  if (bytes.size() > max_window)
    report_error(prefix + "file of " + std::to_string(bytes.size()) + " bytes exceeds protobuf's 2 GiB limit");
  wire_message m(bytes.data(), bytes.size(), [&](const std::string& why) { report_error(prefix + why); });
  strategy_file s;
  bool has_stage = false;
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1:
        m.expect_wire(tag, wt_varint, "current_stage");
        if (has_stage) m.fail("current_stage appears twice");
        s.current_stage = to_uint32(static_cast<std::int64_t>(m.varint("current_stage")), prefix, "current_stage");
        has_stage = true;
        break;
      case 2: {
        m.expect_wire(tag, wt_len, "parallel_strategy_item");
        auto item = m.bytes_or_named_truncation("parallel_strategy_item", [&](const auto& name) {
          return name ? who_node(prefix, *name) : prefix;
        });
        s.nodes.push_back(decode_strategy_item(item, prefix, s.nodes.size()));
        break;
      }
      case 3: {
        m.expect_wire(tag, wt_len, "parallel_layout_item");
        auto item = m.bytes_or_named_truncation("parallel_layout_item", [&](const auto& name) {
          return name ? who_param(prefix, *name) : prefix;
        });
        s.layouts.push_back(decode_layout_item(item, prefix, s.layouts.size()));
        break;
      }
      default: m.skip(tag);
    }
  }
  if (!has_stage) m.fail("missing required field current_stage (empty or not a strategy file?)");
  if (s.layouts.empty()) m.fail("holds no parameter layouts");
  check_unique_layouts(s, prefix);
  return s;
}

// ---------------------------------------------------------------------------------------------
// JSON

namespace detail {
using ojson = nlohmann::ordered_json;

inline std::vector<std::int64_t> json_int_list(const ojson& j, const std::string& who, std::string_view what,
                                               std::int64_t lo, std::int64_t hi) {
  if (!j.is_array()) report_error(who + std::string(what) + " " + json_excerpt(j) + " is not a list");
  std::vector<std::int64_t> out;
  for (const auto& v : j) {
    auto i = json_int(v, lo, hi);
    if (!i)
      report_error(who + std::string(what) + " holds " + json_excerpt(v) + ", not an integer in [" + std::to_string(lo) +
                   ", " + std::to_string(hi) + "]");
    out.push_back(*i);
  }
  return out;
}

constexpr std::int64_t i32_min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t i32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t u32_max = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

inline param_layout json_layout(const ojson& j, const std::string& who) {
  if (!j.is_object()) report_error(who + "layout " + json_excerpt(j) + " is not an object");
  check_known_keys(j, {"dev_matrix", "tensor_map", "tensor_shape", "field", "opt_weight_shard_step",
                       "opt_weight_shard_size", "param_split_shape", "indices_offset"}, who);
  param_layout l;
  auto dev = j.find("dev_matrix");
  if (dev == j.end()) report_error(who + "missing dev_matrix");
  l.dev_matrix = json_int_list(*dev, who, "dev_matrix", 0, u32_max);
  auto map = j.find("tensor_map");
  if (map == j.end()) report_error(who + "missing tensor_map");
  if (!map->is_array()) report_error(who + "tensor_map " + json_excerpt(*map) + " is not a list");
  for (const auto& e : *map) {
    if (e.is_array()) {
      l.tuple_form = true;
      auto axes = json_int_list(e, who, "tensor_map entry", i32_min, i32_max);
      if (axes.empty()) report_error(who + "tensor_map has an empty entry (unsplit is -1)");
      l.tensor_map.push_back(std::move(axes));
    } else {
      auto a = json_int(e, i32_min, i32_max);
      if (!a) report_error(who + "tensor_map entry " + json_excerpt(e) + " is not an int32 or a list of them");
      l.tensor_map.push_back({*a});
    }
  }
  auto list = [&](const char* key, std::vector<std::int64_t>& out) {
    if (auto it = j.find(key); it != j.end() && !it->is_null()) out = json_int_list(*it, who, key, i64_min, i64_max);
  };
  list("tensor_shape", l.tensor_shape);
  list("param_split_shape", l.param_split_shape);
  list("indices_offset", l.indices_offset);
  auto int32 = [&](const char* key, std::int32_t& out) {
    if (auto it = j.find(key); it != j.end()) {
      auto v = json_int(*it, i32_min, i32_max);
      if (!v) report_error(who + key + " " + json_excerpt(*it) + " is not an int32");
      out = static_cast<std::int32_t>(*v);
    }
  };
  int32("field", l.field);
  int32("opt_weight_shard_step", l.opt_weight_shard_step);
  int32("opt_weight_shard_size", l.opt_weight_shard_size);
  return l;
}

inline ojson to_json_ints(std::span<const std::int64_t> v) {
  ojson a = ojson::array();
  for (auto x : v) a.push_back(x);
  return a;
}
}  // namespace detail

/// Decodes a JSON strategy file; `source` names it in messages. The file is read strictly
/// (parse_json_strict), and a key the format does not know is refused, naming the nearest known
/// one. MindSpore's parallel_out_strategy_item and parallel_*layout_value_item keys (the layouts
/// of operators, not of parameters) are accepted and ignored.
inline strategy_file decode_strategy_json(std::string_view text, std::string_view source) {
  using namespace detail;
  const std::string prefix = "strategy: " + std::string(source) + ": ";
  const auto root = parse_json_strict<ojson>(text, prefix);
  if (!root.is_object()) report_error(prefix + "top level is not a JSON object");
  check_known_keys(root, {"current_stage", "parallel_strategy_item", "parallel_layout_item", "parallel_out_strategy_item",
                          "parallel_layout_value_item", "parallel_out_layout_value_item",
                          "parallel_newshape_layout_value_item", "parallel_out_newshape_layout_value_item"},
                   prefix);
  strategy_file s;
  auto cs = root.find("current_stage");
  if (cs == root.end()) report_error(prefix + "missing current_stage");
  auto stage = json_int(*cs, 0, u32_max);
  if (!stage) report_error(prefix + "current_stage " + json_excerpt(*cs) + " is not a uint32");
  s.current_stage = static_cast<std::uint32_t>(*stage);
  if (auto items = root.find("parallel_strategy_item"); items != root.end() && !items->is_null()) {
    if (!items->is_object()) report_error(prefix + "parallel_strategy_item is not an object");
    for (const auto& [name, j] : items->items()) {
      const std::string who = who_node(prefix, name);
      if (!j.is_object()) report_error(who + json_excerpt(j) + " is not an object");
      check_known_keys(j, {"stage", "parallel_strategy"}, who);
      node_strategy n;
      auto st = j.find("stage");
      if (st == j.end()) report_error(who + "missing stage");
      auto v = json_int(*st, 0, u32_max);
      if (!v) report_error(who + "stage " + json_excerpt(*st) + " is not a uint32");
      n.stage = static_cast<std::uint32_t>(*v);
      if (auto ps = j.find("parallel_strategy"); ps != j.end() && !ps->is_null()) {
        if (!ps->is_array()) report_error(who + "parallel_strategy " + json_excerpt(*ps) + " is not a list");
        for (const auto& dims : *ps) {
          std::vector<std::uint32_t> dim;
          for (auto d : json_int_list(dims, who, "parallel_strategy entry", 0, u32_max))
            dim.push_back(static_cast<std::uint32_t>(d));
          n.strategy.push_back(std::move(dim));
        }
      }
      s.nodes.emplace_back(name, std::move(n));
    }
  }
  auto layouts = root.find("parallel_layout_item");
  if (layouts == root.end() || layouts->is_null()) report_error(prefix + "missing parallel_layout_item");
  if (!layouts->is_object()) report_error(prefix + "parallel_layout_item is not an object");
  for (const auto& [name, j] : layouts->items()) s.layouts.emplace_back(name, json_layout(j, who_param(prefix, name)));
  if (s.layouts.empty()) report_error(prefix + "holds no parameter layouts");
  return s;
}

/// The JSON encoding of `s` (4-space indented); `source` names the file in messages.
inline std::string encode_strategy_json(const strategy_file& s, std::string_view source = "<memory>") {
  using namespace detail;
  const std::string prefix = "strategy: " + std::string(source) + ": ";
  check_unique_layouts(s, prefix);
  ojson root = ojson::object();
  root["current_stage"] = s.current_stage;
  ojson nodes = ojson::object();
  for (const auto& [name, n] : s.nodes) {
    if (nodes.contains(name)) report_error(who_node(prefix, name) + "appears twice, which JSON cannot hold");
    ojson strategy = ojson::array();
    for (const auto& dims : n.strategy) strategy.push_back(dims);
    nodes[name] = ojson{{"stage", n.stage}, {"parallel_strategy", std::move(strategy)}};
  }
  root["parallel_strategy_item"] = std::move(nodes);
  ojson layouts = ojson::object();
  for (const auto& [name, l] : s.layouts) {
    const std::string who = who_param(prefix, name);
    ojson map = ojson::array();
    for (const auto& axes : l.tensor_map) {
      if (axes.empty()) report_error(who + "tensor_map has an empty entry (unsplit is {-1})");
      if (l.tuple_form) {
        map.push_back(to_json_ints(axes));
      } else {
        if (axes.size() != 1)
          report_error(who + "tensor_map entry " + format_dims(axes) + " needs tuple_form (several axes split one dim)");
        map.push_back(axes[0]);
      }
    }
    ojson j = ojson::object();
    j["dev_matrix"] = to_json_ints(l.dev_matrix);
    j["tensor_map"] = std::move(map);
    j["tensor_shape"] = to_json_ints(l.tensor_shape);
    j["field"] = l.field;
    j["opt_weight_shard_step"] = l.opt_weight_shard_step;
    j["opt_weight_shard_size"] = l.opt_weight_shard_size;
    if (!l.param_split_shape.empty()) j["param_split_shape"] = to_json_ints(l.param_split_shape);
    if (!l.indices_offset.empty()) j["indices_offset"] = to_json_ints(l.indices_offset);
    layouts[name] = std::move(j);
  }
  root["parallel_layout_item"] = std::move(layouts);
  try {
    return root.dump(4) + "\n";
  } catch (const ojson::exception& e) {
    report_error(prefix + "a node or parameter name is not valid UTF-8 (" + e.what() + ")");
  }
}

// ---------------------------------------------------------------------------------------------
// files

/// True if `path` names a JSON strategy file (suffix ".json"); otherwise it is protobuf.
inline bool is_json_strategy(const std::filesystem::path& path) { return path.extension() == ".json"; }

/// Reads the strategy file `path` (JSON if its suffix is ".json", protobuf otherwise).
inline strategy_file read_strategy(const std::filesystem::path& path) {
  mapped_file f(path, "strategy");
  if (is_json_strategy(path)) {
    auto b = f.bytes();
    return decode_strategy_json(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), path.string());
  }
  return decode_strategy_protobuf(f.bytes(), path.string());
}

/// Writes `s` to `path` atomically (JSON if its suffix is ".json", protobuf otherwise).
inline void write_strategy(const std::filesystem::path& path, const strategy_file& s, bool overwrite = false) {
  const std::string bytes = is_json_strategy(path) ? encode_strategy_json(s, path.string())
                                                   : encode_strategy_protobuf(s, path.string());
  atomic_file_writer out(path, overwrite, "strategy");
  out.write(bytes);
  out.commit();
}

/// Merges the per-stage strategy files of `src_dir` into `dst_file` as MindSpore's
/// merge_pipeline_strategys does: the files (every regular, non-hidden file of `src_dir`, in name
/// order; all JSON or all protobuf) are read in turn; the stage of a file is the stage of its
/// first node strategy; a file whose stage was already merged is skipped; node strategies are
/// kept, every layout is renamed "<stage>-<name>"; current_stage is 1. The output format follows
/// the suffix of `dst_file`. (For JSON output, a node name already present is not repeated.)
/// @post every layout name of the result splits with split_pipeline_name
inline void merge_pipeline_strategies(const std::filesystem::path& src_dir, const std::filesystem::path& dst_file,
                                      bool overwrite = false) {
  namespace fs = std::filesystem;
  const std::string prefix = "merge_pipeline_strategies: " + src_dir.string() + ": ";
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(src_dir, ec);
  if (ec) report_error(prefix + "cannot list the directory: " + ec.message());
  for (const auto& e : it) {
    const auto name = e.path().filename().string();
    std::error_code kind;
    if (!name.empty() && name[0] != '.' && e.is_regular_file(kind)) files.push_back(e.path());
  }
  if (files.empty()) report_error(prefix + "holds no strategy files");
  std::sort(files.begin(), files.end());
  const auto json = std::find_if(files.begin(), files.end(), is_json_strategy);
  const auto proto = std::find_if_not(files.begin(), files.end(), is_json_strategy);
  if (json != files.end() && proto != files.end())
    report_error(prefix + "mixes JSON (" + json->filename().string() + ") and protobuf (" + proto->filename().string() +
                 ") strategy files; they must be all one format");

  const bool json_out = is_json_strategy(dst_file);
  strategy_file merged;
  std::set<std::uint32_t> stages;
  std::set<std::string> node_names;
  for (const auto& f : files) {
    strategy_file s = read_strategy(f);
    if (s.nodes.empty())
      report_error("strategy: " + f.string() + ": holds no node strategies, so its pipeline stage is unknown");
    const std::uint32_t stage = s.nodes.front().second.stage;
    if (!stages.insert(stage).second) continue;
    for (auto& [name, node] : s.nodes)
      if (!json_out || node_names.insert(name).second) merged.nodes.emplace_back(std::move(name), std::move(node));
    for (auto& [name, layout] : s.layouts)
      merged.layouts.emplace_back(pipeline_param_name(stage, name), std::move(layout));
  }
  merged.current_stage = 1;
  write_strategy(dst_file, merged, overwrite);
}

}  // namespace reshard::io
