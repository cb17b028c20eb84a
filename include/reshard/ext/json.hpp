// reshard/ext/json.hpp: layouts, plans, rank lists and rank reports as JSON (opt-in; needs nlohmann_json).
//
// The layout JSON uses MindSpore's convention (tensor-map axes counted from the right end of the
// device matrix, -1 = unsplit, a list = tuple entry with the leftmost axis outermost):
//
//   {"dev_matrix": [2,4], "tensor_map": [1,-1], "shape": [8,4],
//    "opt_shard": {"step": 0, "size": 0}, "stage": 0,
//    "split": "divisible", "split_sizes": [5,3]}
//
// Required: dev_matrix, tensor_map, shape. Optional: opt_shard (default none), stage (pipeline
// stage, default 0) or first_rank (global id of rank 0; not both), split ("divisible" (default,
// MindSpore), "chunk" (torch.chunk) or "balanced"), split_sizes (explicit lengths of dim 0's
// slices = MindSpore param_split_shape; or one list per dim). The keys of a MindSpore strategy
// file's layout item are accepted too: tensor_shape, opt_weight_shard_step,
// opt_weight_shard_size, param_split_shape, field (must be 0), indices_offset.
//
//   @post layout_from_json(to_json(l), w) == l   for every valid layout l
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "reshard/box.hpp"
#include "reshard/check_plan.hpp"
#include "reshard/error.hpp"
#include "reshard/io/dtype.hpp"
#include "reshard/io/json_reader.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

namespace detail {

inline constexpr index_t json_max_devices = index_t{1} << 31;
inline constexpr index_t json_max_elements = index_t{1} << 56;

[[noreturn]] inline void json_error(std::string_view what, const std::string& message) {
  report_error(std::string(what) + ": " + message);
}

// "the string \"abc\"", "an array", ... for messages about a value of the wrong type.
inline std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return std::string("the boolean ") + j.dump();
    case nlohmann::json::value_t::string: {
      std::string s = j.dump();
      if (s.size() > 40) s = s.substr(0, 36) + "...\"";
      return "the string " + s;
    }
    case nlohmann::json::value_t::number_float: return "the number " + j.dump();
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "the integer " + j.dump();
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

// An integer in [lo, hi]; `rule` says what is allowed, for the message.
inline index_t json_int(const nlohmann::json& j, std::string_view what, const std::string& key,
                        index_t lo, index_t hi, const char* rule) {
  if (!j.is_number_integer())
    json_error(what, key + " must be an integer, got " + json_kind(j));
  if (j.is_number_unsigned() &&
      j.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()))
    json_error(what, key + " = " + j.dump() + " is invalid: " + rule);
  const auto v = j.get<index_t>();
  if (v < lo || v > hi) json_error(what, key + " = " + j.dump() + " is invalid: " + rule);
  return v;
}

inline const nlohmann::json& json_array(const nlohmann::json& j, std::string_view what,
                                        const std::string& key) {
  if (!j.is_array()) json_error(what, key + " must be a list of integers, got " + json_kind(j));
  return j;
}

inline index_list json_int_list(const nlohmann::json& j, std::string_view what,
                             const std::string& key, index_t lo, index_t hi, const char* rule) {
  json_array(j, what, key);
  index_list out;
  for (std::size_t i = 0; i < j.size(); ++i)
    out.push_back(json_int(j[i], what, key + "[" + std::to_string(i) + "]", lo, hi, rule));
  return out;
}

// The value of the first present key among `names` (aliases); error if two are present.
inline const nlohmann::json* json_find(const nlohmann::json& obj, std::string_view what,
                                       std::initializer_list<const char*> names) {
  const nlohmann::json* found = nullptr;
  const char* found_name = nullptr;
  for (const char* n : names) {
    const auto it = obj.find(n);
    if (it == obj.end()) continue;
    if (found)
      json_error(what, std::string("both \"") + found_name + "\" and \"" + n +
                           "\" are given; they mean the same, give one");
    found = &*it;
    found_name = n;
  }
  return found;
}

inline const nlohmann::json& json_require(const nlohmann::json& obj, std::string_view what,
                                          std::initializer_list<const char*> names) {
  const nlohmann::json* v = json_find(obj, what, names);
  if (!v) json_error(what, std::string("missing key \"") + *names.begin() + "\"");
  return *v;
}

inline constexpr std::array<std::string_view, 14> layout_json_keys{
    "dev_matrix",    "tensor_map",     "shape",      "opt_shard",
    "stage",         "first_rank",     "split",      "split_sizes",
    "tensor_shape",  "opt_weight_shard_step", "opt_weight_shard_size", "param_split_shape",
    "field",         "indices_offset"};

inline split_mode json_split_mode(const nlohmann::json& j, std::string_view what) {
  if (!j.is_string())
    json_error(what, "split must be \"divisible\", \"chunk\" or \"balanced\", got " +
                         json_kind(j));
  const auto& s = j.get_ref<const std::string&>();
  for (split_mode m : {split_mode::divisible, split_mode::chunk, split_mode::balanced})
    if (s == to_string(m)) return m;
  json_error(what, "split = \"" + s +
                       "\" is not a split mode (valid: \"divisible\", \"chunk\", \"balanced\")");
}

// Library messages from mindspore_layout name the builder; name the user's layout instead.
[[noreturn]] inline void json_layout_error(std::string_view what, const std::string& message) {
  std::string m = message;
  const std::string_view builder = "mindspore_layout";
  if (m.rfind(builder, 0) == 0) {
    m.erase(0, builder.size());
    if (!m.empty() && m[0] == ':') m.erase(0, 1);
    m = "invalid layout" + m;
  }
  json_error(what, m);
}

}  // namespace detail

/// Parses a layout from its JSON object (see the top of this header). Every malformed input
/// throws reshard::error whose message starts with `what` (e.g. "--src") and names the key, the
/// dim or the value at fault.
inline layout layout_from_json(const nlohmann::json& j, std::string_view what) {
  using detail::json_error;
  if (!j.is_object())
    json_error(what, "a layout must be a JSON object such as {\"dev_matrix\":[2,4],"
                     "\"tensor_map\":[1,-1],\"shape\":[8,4]}, got " + detail::json_kind(j));
  io::check_known_keys(j, detail::layout_json_keys, std::string(what) + ": ");

  // dev_matrix: sizes >= 1, at most 2^31 devices in all
  index_list dev = detail::json_int_list(detail::json_require(j, what, {"dev_matrix"}), what,
                                      "dev_matrix", 1, detail::json_max_devices,
                                      "a device axis has at least 1 and at most 2^31 devices");
  index_t devices = 1;
  for (index_t d : dev) {
    devices *= d;
    if (devices > detail::json_max_devices)
      json_error(what, "dev_matrix " + to_string(dev) + " has more than 2^31 devices");
  }
  const auto nd = static_cast<index_t>(dev.size());

  // shape: sizes >= 0
  index_list shape = detail::json_int_list(detail::json_require(j, what, {"shape", "tensor_shape"}),
                                        what, "shape", 0, detail::json_max_elements,
                                        "a dim's size must be >= 0 and at most 2^56");
  index_t elements = 1;  // of the nonzero sizes: the library multiplies them in any order
  for (index_t s : shape) {
    if (s != 0 && elements > detail::json_max_elements / s)
      json_error(what, "shape " + to_string(shape) +
                           " is too large (its sizes multiply to more than 2^56)");
    if (s != 0) elements *= s;
  }

  // tensor_map: one entry per dim, -1 or a right-counted axis, or a list of axes
  const nlohmann::json& jm = detail::json_require(j, what, {"tensor_map"});
  if (!jm.is_array())
    json_error(what, "tensor_map must be a list (one entry per dim of the shape), got " +
                         detail::json_kind(jm));
  if (jm.size() != shape.size())
    json_error(what, "tensor_map has " + std::to_string(jm.size()) +
                         (jm.size() == 1 ? " entry" : " entries") + " but shape " +
                         to_string(shape) + " has " + std::to_string(shape.size()) +
                         (shape.size() == 1 ? " dim" : " dims") + " (one entry per dim)");
  const std::string axis_rule = "must be -1 (unsplit) or a device axis counted from the right, "
                                "0.." + std::to_string(nd - 1) + " for dev_matrix " +
                                to_string(dev);
  const auto axis = [&](const nlohmann::json& v, const std::string& key) {
    const std::string rule = nd == 0 ? "dev_matrix [] has no axes; only -1 is allowed"
                                     : axis_rule;
    return detail::json_int(v, what, key, -1, nd - 1, rule.c_str());
  };
  tensor_map map;
  for (std::size_t i = 0; i < jm.size(); ++i) {
    const std::string key = "tensor_map[" + std::to_string(i) + "]";
    if (jm[i].is_array()) {
      std::vector<index_t> tuple;
      for (std::size_t k = 0; k < jm[i].size(); ++k) {
        const index_t a = axis(jm[i][k], key + "[" + std::to_string(k) + "]");
        if (a == -1 && jm[i].size() > 1)
          json_error(what, key + "[" + std::to_string(k) +
                               "] = -1: -1 (unsplit) cannot be part of a tuple of axes");
        tuple.push_back(a);
      }
      map.emplace_back(std::move(tuple));
    } else if (jm[i].is_number_integer()) {
      map.emplace_back(axis(jm[i], key));
    } else {
      json_error(what, key + " must be an integer axis or a list of axes, got " +
                           detail::json_kind(jm[i]));
    }
  }

  mindspore_options o;
  // optimizer sharding: {"step": s, "size": n} or MindSpore's two keys
  const nlohmann::json* jo = detail::json_find(j, what, {"opt_shard"});
  const nlohmann::json* jstep = detail::json_find(j, what, {"opt_weight_shard_step"});
  const nlohmann::json* jsize = detail::json_find(j, what, {"opt_weight_shard_size"});
  if (jo && (jstep || jsize))
    json_error(what, "both \"opt_shard\" and \"opt_weight_shard_*\" are given; give one");
  std::string step_key = "opt_weight_shard_step", size_key = "opt_weight_shard_size";
  if (jo) {
    if (!jo->is_object())
      json_error(what, "opt_shard must be an object {\"step\": s, \"size\": n}, got " +
                           detail::json_kind(*jo));
    io::check_known_keys(*jo, {"step", "size"}, std::string(what) + ": ", " in opt_shard");
    const auto s = jo->find("step"), n = jo->find("size");
    jstep = s == jo->end() ? nullptr : &*s;
    jsize = n == jo->end() ? nullptr : &*n;
    step_key = "opt_shard.step";
    size_key = "opt_shard.size";
  }
  if (jstep)
    o.opt.step = detail::json_int(*jstep, what, step_key, 0, detail::json_max_devices,
                                  "the step is a rank stride, >= 0 and at most 2^31");
  if (jsize)
    o.opt.size = detail::json_int(*jsize, what, size_key, -1, detail::json_max_devices,
                                  "the size is a number of parts: 0 or 1 = none, -1 = the "
                                  "whole replica group, at most 2^31");

  // placement: pipeline stage or first rank
  const nlohmann::json* jstage = detail::json_find(j, what, {"stage"});
  const nlohmann::json* jfirst = detail::json_find(j, what, {"first_rank"});
  if (jstage && jfirst) json_error(what, "both \"stage\" and \"first_rank\" are given; give one");
  if (jstage)
    o.stage = detail::json_int(*jstage, what, "stage", 0, detail::json_max_devices,
                               "a pipeline stage is >= 0 and at most 2^31");
  const index_t first_rank =
      jfirst ? detail::json_int(*jfirst, what, "first_rank", 0, detail::json_max_devices,
                                "a rank id is >= 0 and at most 2^31")
             : -1;

  if (const nlohmann::json* js = detail::json_find(j, what, {"split"}))
    o.mode = detail::json_split_mode(*js, what);

  if (const nlohmann::json* jf = detail::json_find(j, what, {"field"}))
    if (detail::json_int(*jf, what, "field", std::numeric_limits<index_t>::min(),
                         std::numeric_limits<index_t>::max(), "must be 0") != 0)
      json_error(what, "field = " + jf->dump() +
                           ": MindSpore's embedding field split is not supported (only 0)");

  // explicit slice sizes: a list for dim 0, or one list per dim
  std::vector<index_list> per_dim;
  const char* sizes_rule = "a slice length must be >= 0 and at most 2^56";
  if (const nlohmann::json* jz = detail::json_find(j, what, {"split_sizes", "param_split_shape"})) {
    const std::string key = j.contains("split_sizes") ? "split_sizes" : "param_split_shape";
    detail::json_array(*jz, what, key);
    if (!jz->empty() && (*jz)[0].is_array()) {
      if (jz->size() != shape.size())
        json_error(what, key + " has " + std::to_string(jz->size()) +
                             " lists but shape " + to_string(shape) + " has " +
                             std::to_string(shape.size()) + " dims (give one list per dim, or "
                             "one list of integers for dim 0)");
      for (std::size_t i = 0; i < jz->size(); ++i)
        per_dim.push_back(detail::json_int_list((*jz)[i], what,
                                                key + "[" + std::to_string(i) + "]", 0,
                                                detail::json_max_elements, sizes_rule));
    } else if (!jz->empty()) {
      if (shape.empty())
        json_error(what, key + " is given but the shape has no dims");
      per_dim.assign(shape.size(), {});
      per_dim[0] = detail::json_int_list(*jz, what, key, 0, detail::json_max_elements,
                                         sizes_rule);
    }
  }
  if (const nlohmann::json* ji = detail::json_find(j, what, {"indices_offset"})) {
    // MindSpore writes the start row of each slice beside param_split_shape: check, then drop
    const index_list offs = detail::json_int_list(*ji, what, "indices_offset", 0,
                                               detail::json_max_elements, sizes_rule);
    if (!offs.empty()) {
      index_list want;
      index_t acc = 0;
      if (!per_dim.empty())
        for (index_t v : per_dim[0]) want.push_back(acc), acc += v;
      if (offs != want)
        json_error(what, "indices_offset " + to_string(offs) +
                             " does not list the start rows of the slices of split_sizes " +
                             (per_dim.empty() ? std::string("(none given)")
                                              : to_string(per_dim[0])));
    }
  }
  bool other_dims = false;
  for (std::size_t i = 1; i < per_dim.size(); ++i) other_dims = other_dims || !per_dim[i].empty();

  layout l;
  try {
    if (!other_dims) {
      if (!per_dim.empty()) o.param_split_shape = per_dim[0];
      l = mindspore_layout(dev, map, shape, o);
    } else {
      // MindSpore has no explicit sizes beyond dim 0: build without them, then add them and
      // check the whole layout again (balanced never rejects an uneven dim on its own)
      mindspore_options relaxed = o;
      relaxed.mode = split_mode::balanced;
      l = mindspore_layout(dev, map, shape, relaxed);
      l.mode = o.mode;
      l.split_sizes = per_dim;
    }
    if (first_rank >= 0) l.first_rank = first_rank;
    validate(l, "invalid layout");
  } catch (const error& e) {
    detail::json_layout_error(what, e.what());
  }
  return l;
}

/// Parses JSON text (a layout, a plan), read strictly (io/json_reader.hpp: nothing after the
/// value, no key twice); syntax errors name the line and column.
inline nlohmann::json json_of_text(std::string_view text, std::string_view what) {
  return io::parse_json_strict<nlohmann::json>(text, std::string(what) + ": ");
}

/// Parses a layout from JSON text (json_of_text, then layout_from_json).
inline layout layout_from_json_text(std::string_view text, std::string_view what) {
  return layout_from_json(json_of_text(text, what), what);
}

/// The layout as JSON, in the form layout_from_json reads.
inline nlohmann::json to_json(const layout& l) {
  nlohmann::json j;
  j["dev_matrix"] = l.dev_matrix;
  nlohmann::json map = nlohmann::json::array();
  for (const map_entry& e : mindspore_tensor_map(l)) {
    if (e.count == 1)
      map.push_back(e.axis[0]);
    else
      map.push_back(e.axes());
  }
  j["tensor_map"] = std::move(map);
  j["shape"] = l.shape;
  j["opt_shard"] = {{"step", l.opt.step}, {"size", l.opt.size}};
  const index_t n = num_ranks(l);
  if (n > 0 && l.first_rank % n == 0)
    j["stage"] = l.first_rank / n;
  else
    j["first_rank"] = l.first_rank;
  if (l.mode != split_mode::divisible) j["split"] = to_string(l.mode);
  bool any = false, beyond_dim0 = false;
  for (std::size_t i = 0; i < l.split_sizes.size(); ++i) {
    any = any || !l.split_sizes[i].empty();
    beyond_dim0 = beyond_dim0 || (i > 0 && !l.split_sizes[i].empty());
  }
  if (beyond_dim0)
    j["split_sizes"] = l.split_sizes;
  else if (any)
    j["split_sizes"] = l.split_sizes[0];
  return j;
}

/// The plan as JSON: its transfers (global coordinates, bytes for elements of `element_bytes`)
/// and its cost.
inline nlohmann::json to_json(const transfer_plan& p, index_t element_bytes) {
  if (element_bytes < 1)
    report_error("to_json: element size " + std::to_string(element_bytes) + " (must be >= 1)");
  nlohmann::json transfers = nlohmann::json::array();
  for (const transfer& t : p.transfers)
    transfers.push_back({{"src", t.src},
                         {"dst", t.dst},
                         {"offset", t.where.offset},
                         {"shape", t.where.extent},
                         {"bytes", volume(t.where) * element_bytes}});
  const plan_cost c = p.cost(element_bytes);
  return {{"plan_version", 1},
          {"src", to_json(p.src)},
          {"dst", to_json(p.dst)},
          {"transfers", std::move(transfers)},
          {"cross_bytes", c.cross_bytes},
          {"local_bytes", c.local_bytes},
          {"lower_bound_bytes", c.lower_bound_bytes},
          {"messages", c.messages},
          {"max_sent_bytes", c.max_sent_bytes},
          {"mean_sent_bytes", c.mean_sent_bytes}};
}

/// What each rank of `l` holds: {"ranks": [{"rank", "offset", "shape"}...] in rank order,
/// "replica_groups": [[ranks holding identical data]...] ordered by their first rank}.
inline nlohmann::json layout_report(const layout& l) {
  const std::vector<region> rs = regions(l);
  std::vector<const box*> box_of_rank(static_cast<std::size_t>(num_ranks(l)), nullptr);
  std::vector<const std::vector<index_t>*> groups;
  for (const region& r : rs) {
    if (r.owners.empty()) continue;
    groups.push_back(&r.owners);
    for (index_t o : r.owners) box_of_rank[static_cast<std::size_t>(o - l.first_rank)] = &r.where;
  }
  std::sort(groups.begin(), groups.end(),
            [](const auto* a, const auto* b) { return a->front() < b->front(); });
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < box_of_rank.size(); ++i)
    ranks.push_back({{"rank", l.first_rank + static_cast<index_t>(i)},
                     {"offset", box_of_rank[i]->offset},
                     {"shape", box_of_rank[i]->extent}});
  nlohmann::json rg = nlohmann::json::array();
  for (const auto* g : groups) rg.push_back(*g);
  return {{"ranks", std::move(ranks)}, {"replica_groups", std::move(rg)}};
}

// ---------------------------------------------------------------------------------------------
// Element types by name (for --dtype and file formats).

/// A dtype name and its element size in bytes.
struct dtype_entry {
  std::string_view name;
  index_t bytes;
};

/// The element types that checkpoints do not hold, for byte counts only, canonical spellings
/// first, then the short forms that none of the checkpoint formats' namings has. The types
/// checkpoints hold, and their MindSpore, safetensors and numpy names, are io/dtype.hpp's: that
/// one table serves here, `--dtype` of the checkpoint commands and the file formats.
inline constexpr std::array<dtype_entry, 15> extra_dtypes{{
    {"float8_e4m3fn", 1}, {"float8_e5m2", 1}, {"complex64", 8}, {"complex128", 16},
    // short forms
    {"fp16", 2}, {"half", 2}, {"fp32", 4}, {"float", 4}, {"fp64", 8}, {"double", 8}, {"f8_e4m3", 1},
    {"f8_e5m2", 1}, {"c64", 8}, {"c128", 16}, {"boolean", 1},
}};
inline constexpr std::size_t extra_canonical_count = 4;

namespace detail {
inline bool same_name_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}
// The checkpoint dtypes a byte count can name (not Int4 or str, which are storage conventions).
inline bool countable(io::dtype t) { return t != io::dtype::int4 && t != io::dtype::str; }
}  // namespace detail

/// The element size of dtype `name` (case-insensitive: numpy's `float32`, MindSpore's `Float32`,
/// safetensors' `F32`, or a short form such as `fp16`), or nullopt when unknown.
inline std::optional<index_t> dtype_size(std::string_view name) {
  for (io::dtype t : io::all_dtypes) {
    if (!detail::countable(t)) continue;
    for (std::string_view n : {io::ms_name(t), io::safetensors_name(t).value_or(""), io::numpy_name(t)})
      if (!n.empty() && detail::same_name_ignoring_case(n, name)) return static_cast<index_t>(io::element_size(t));
  }
  for (const dtype_entry& e : extra_dtypes)
    if (detail::same_name_ignoring_case(e.name, name)) return e.bytes;
  return std::nullopt;
}

/// The canonical dtype names (numpy's), comma-separated, for messages and help texts.
inline std::string dtype_names() {
  std::string s;
  for (io::dtype t : io::all_dtypes) {
    if (!detail::countable(t)) continue;
    if (!s.empty()) s += ", ";
    s += io::numpy_name(t);
  }
  for (std::size_t i = 0; i < extra_canonical_count; ++i) s.append(", ").append(extra_dtypes[i].name);
  return s;
}

/// The element size of dtype `name`; an unknown name throws reshard::error naming `what` and
/// listing the valid names.
inline index_t dtype_bytes(std::string_view name, std::string_view what = "dtype") {
  if (const auto b = dtype_size(name)) return *b;
  detail::json_error(what, "unknown dtype \"" + std::string(name) + "\" (valid: " +
                               dtype_names() + "; also MindSpore and safetensors spellings "
                               "such as Float32, BF16)");
}

/// The transfers of a plan in the JSON to_json(transfer_plan) writes (plan_version 1):
/// {"transfers": [{"src", "dst", "offset", "shape"}, ...]}, other keys ignored; or that list
/// itself. `what` names the input in messages.
inline std::vector<transfer> transfers_from_json(const nlohmann::json& j, std::string_view what) {
  using detail::json_error;
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    if (const auto v = j.find("plan_version"); v != j.end() && *v != 1)
      json_error(what, "plan_version " + v->dump() + " is not one this reshard reads (1)");
    list = &detail::json_require(j, what, {"transfers"});
  }
  if (!list->is_array())
    json_error(what, "a plan must be {\"transfers\": [{\"src\", \"dst\", \"offset\", \"shape\"}, ...]}, got " +
                         detail::json_kind(*list));
  std::vector<transfer> out;
  out.reserve(list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& t = (*list)[i];
    const std::string at = "transfers[" + std::to_string(i) + "]";
    if (!t.is_object()) json_error(what, at + " must be an object {\"src\", \"dst\", \"offset\", \"shape\"}, got " + detail::json_kind(t));
    const auto rank = [&](const char* key) {
      return detail::json_int(detail::json_require(t, what, {key}), what, at + "." + key, 0,
                              detail::json_max_devices - 1, "a global rank id, 0 to 2^31 - 1");
    };
    transfer x{rank("src"), rank("dst"), {}};
    x.where.offset = detail::json_int_list(detail::json_require(t, what, {"offset"}), what, at + ".offset", 0,
                                           detail::json_max_elements, "an offset, 0 or more");
    x.where.extent = detail::json_int_list(detail::json_require(t, what, {"shape", "extent"}), what, at + ".shape", 0,
                                           detail::json_max_elements, "an extent, 0 or more");
    if (x.where.offset.size() != x.where.extent.size())
      json_error(what, at + ": offset has " + std::to_string(x.where.offset.size()) + " dims and shape " +
                           std::to_string(x.where.extent.size()));
    out.push_back(std::move(x));
  }
  return out;
}

/// The verdict of check_plan as JSON: {"ok", "complete", "sound", "problem_count", "problems":
/// [{"kind", "src", "dst", "offset", "shape", "transfer", "other", "what"}...], "cost": {...},
/// "minimal": {...}, "lower_bound_bytes"}; absent transfers are -1.
inline nlohmann::json to_json(const plan_check& r) {
  const auto figures = [](const plan_figures& f) {
    return nlohmann::json{{"cross_bytes", f.cross_bytes},       {"local_bytes", f.local_bytes},
                          {"messages", f.messages},             {"max_sent_bytes", f.max_sent_bytes},
                          {"max_received_bytes", f.max_received_bytes}};
  };
  const auto index = [](std::size_t i) { return i == no_transfer ? std::int64_t{-1} : static_cast<std::int64_t>(i); };
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& p : r.problems)
    problems.push_back({{"kind", to_string(p.kind)},
                        {"src", p.src},
                        {"dst", p.dst},
                        {"offset", p.where.offset},
                        {"shape", p.where.extent},
                        {"transfer", index(p.transfer)},
                        {"other", index(p.other)},
                        {"what", p.what}});
  return {{"ok", r.ok()},
          {"complete", r.complete},
          {"sound", r.sound},
          {"problem_count", r.problem_count},
          {"problems", std::move(problems)},
          {"cost", figures(r.cost)},
          {"minimal", figures(r.minimal)},
          {"lower_bound_bytes", r.lower_bound_bytes}};
}

/// A rank list from JSON: an array of global rank ids ([0, 1, 2, ...]), or {"ranks": [...]}.
inline std::vector<index_t> rank_list_from_json(const nlohmann::json& j, std::string_view what) {
  const nlohmann::json& list = j.is_object() ? detail::json_require(j, what, {"ranks"}) : j;
  const index_list l =
      detail::json_int_list(list, what, "ranks", 0, detail::json_max_devices - 1, "a global rank id, 0 to 2^31 - 1");
  return {l.begin(), l.end()};
}

/// A box as JSON: {"offset", "shape"}.
inline nlohmann::json to_json(const box& b) { return {{"offset", b.offset}, {"shape", b.extent}}; }

/// The verdict of check_rank_list as JSON: {"sufficient", "minimal_list" (sufficient with no
/// superfluous rank), "uncovered": [{"offset", "shape"}...], "superfluous", "kept", "minimal"}.
inline nlohmann::json to_json(const rank_list_check& r) {
  nlohmann::json uncovered = nlohmann::json::array();
  for (const box& b : r.uncovered) uncovered.push_back(to_json(b));
  return {{"sufficient", r.sufficient},       {"minimal_list", r.is_minimal()}, {"uncovered", std::move(uncovered)},
          {"superfluous", r.superfluous},     {"kept", r.kept},                 {"minimal", r.minimal}};
}

}  // namespace reshard
