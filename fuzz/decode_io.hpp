// fuzz/decode_io.hpp: file contents decoded from fuzz input for the write-then-read targets
// (ckpt_roundtrip, safetensors_roundtrip, strategy_roundtrip), and what reading them back must
// give. Each decoder also predicts whether the writer must accept the content (`valid`): a
// writer that refuses valid content, or accepts invalid content, is a finding like a mismatch.
#pragma once

#include "check.hpp"
#include "decode.hpp"

#include <reshard/io/ckpt.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/strategy.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace reshard_fuzz {

// Names from a small set, so that duplicates, the reserved safetensors key, non-ASCII and
// invalid UTF-8 all come up often.
inline constexpr std::array<std::string_view, 8> names{
    "w", "b", "layer-1.w\xc3\xa9ight", "", "__metadata__", "\xff\xfe", "a.b", "w"};

inline std::string decode_name(input& in) {
  const std::uint8_t b = in.byte();
  if (b < 224) return std::string(names[b % names.size()]);
  return in.string(12);  // anything
}

inline bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = cp << 6 | (d & 0x3Fu);
    }
    static constexpr std::uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// ---------------------------------------------------------------------------------------------
// ckpt: flag crc; chunk byte (< 200: 1 + b % 64 bytes a piece, else MindSpore's default);
// tensor count b % 5; per tensor: name, dtype b % 15, dims (b % 4 dims of b % 6 each; b >= 250:
// MindSpore's scalar [0]), content, a byte (255: element size + 1 bytes too many, refused), and a
// streaming byte (odd: begin/append in pieces of 1 + b % 16 bytes, else write()).

struct ckpt_tensor {
  std::string name;
  reshard::io::dtype type{};
  std::vector<std::int64_t> dims;
  std::vector<std::byte> content;
  bool stream = false;
  std::vector<std::size_t> parts;
};

struct ckpt_content {
  reshard::io::ckpt_write_options opts;
  std::vector<ckpt_tensor> tensors;
  bool valid = true;
};

inline ckpt_content decode_ckpt(input& in) {
  using namespace reshard::io;
  ckpt_content c;
  c.opts.crc = in.flag();
  c.opts.overwrite = true;
  if (const std::uint8_t b = in.byte(); b < 200) c.opts.chunk_bytes = 1 + b % 64;
  std::set<std::string> seen;
  for (int n = in.byte() % 5; n > 0; --n) {
    ckpt_tensor t;
    t.name = decode_name(in);
    t.type = static_cast<dtype>(in.byte() % all_dtypes.size());
    std::size_t bytes = 0;
    if (const std::uint8_t r = in.byte(); r >= 250) {
      t.dims = {0};
      bytes = in.flag() ? element_size(t.type) : 0;
    } else {
      for (int k = r % 4; k > 0; --k) t.dims.push_back(in.byte() % 6);
      bytes = static_cast<std::size_t>(*byte_size(t.type, t.dims));
    }
    if (t.type == dtype::str) bytes = 4 * (in.byte() % 8);
    if (in.byte() == 255) {  // a size no dims can have (dims [0] takes 0 or one element)
      bytes += element_size(t.type) + 1;
      c.valid = false;
    }
    t.content = in.bytes(bytes);
    if ((t.stream = in.flag()))
      for (std::size_t at = 0; at < bytes;) at += t.parts.emplace_back(std::min<std::size_t>(1 + in.byte() % 16, bytes - at));
    if (!seen.insert(t.name).second) c.valid = false;
    c.tensors.push_back(std::move(t));
  }
  if (c.tensors.empty()) c.valid = false;  // an empty checkpoint cannot be loaded
  return c;
}

inline void write_ckpt(const ckpt_content& c, const std::filesystem::path& path) {
  reshard::io::ckpt_writer w(path, c.opts);
  for (const auto& t : c.tensors) {
    if (!t.stream) {
      w.write(t.name, t.type, t.dims, t.content);
      continue;
    }
    w.begin(t.name, t.type, t.dims, t.content.size());
    std::size_t at = 0;
    for (std::size_t n : t.parts) w.append(std::span(t.content).subspan(at, n)), at += n;
    w.end();
  }
  w.commit();
}

/// The file read back holds exactly the tensors written, in pieces of chunk_bytes; a raw copy
/// of every entry is byte-identical.
inline void check_ckpt(const ckpt_content& c, const std::filesystem::path& path, const std::filesystem::path& copy) {
  using namespace reshard::io;
  const ckpt_file f(path);
  FUZZ_CHECK(f.has_crc() == c.opts.crc);
  FUZZ_CHECK(f.entries().size() == c.tensors.size());
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    const auto& e = f.entries()[i];
    const auto& t = c.tensors[i];
    FUZZ_CHECK(e.name == t.name && e.type == t.type && e.dims == t.dims && !e.map_tensor);
    FUZZ_CHECK(gather(e) == t.content);
    const std::size_t pieces = t.content.empty() ? 1 : (t.content.size() + c.opts.chunk_bytes - 1) / c.opts.chunk_bytes;
    FUZZ_CHECK(e.pieces.size() == pieces);
  }
  {
    ckpt_writer w(copy, {.crc = c.opts.crc, .overwrite = true});
    for (const auto& e : f.entries()) w.write_raw(e);
    w.commit();
  }
  const mapped_file a(path), b(copy);
  FUZZ_CHECK(std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(), b.bytes().end()));
}

// ---------------------------------------------------------------------------------------------
// safetensors: tensor count b % 5, per tensor: name, dtype b % 15 (str has no safetensors
// dtype: refused), shape (b % 4 dims of b % 5 each), data; then metadata count b % 3, each
// key and value (a name; the value "Int4" when the byte is odd, which marks an I8 tensor of that
// name as Int4). A flag: default metadata {"format": "ms"} instead.

struct safetensors_content {
  std::vector<reshard::io::safetensors_tensor_info> infos;
  std::vector<std::vector<std::byte>> data;
  reshard::io::safetensors_write_options opts;
  std::map<std::string, std::string> metadata;  // what the reader must report
  bool valid = true;
};

inline safetensors_content decode_safetensors(input& in) {
  using namespace reshard::io;
  safetensors_content c;
  c.opts.overwrite = true;
  std::set<std::string> seen;
  for (int n = in.byte() % 5; n > 0; --n) {
    safetensors_tensor_info t;
    t.name = decode_name(in);
    t.type = static_cast<dtype>(in.byte() % all_dtypes.size());
    for (int k = in.byte() % 4; k > 0; --k) t.shape.push_back(in.byte() % 5);
    const auto bytes = byte_size(t.type, t.shape);
    c.data.push_back(in.bytes(static_cast<std::size_t>(*bytes)));
    if (t.type == dtype::str || t.name == safetensors_metadata_key || !valid_utf8(t.name) ||
        !seen.insert(t.name).second)
      c.valid = false;
    c.infos.push_back(std::move(t));
  }
  if (!in.flag()) {
    c.opts.metadata.clear();
    for (int n = in.byte() % 3; n > 0; --n) {
      std::string key = decode_name(in);
      std::string value = in.flag() ? "Int4" : decode_name(in);
      c.opts.metadata[key] = value;  // a later value of the same key replaces the earlier one
    }
  }
  for (const auto& [key, value] : c.opts.metadata)
    if (!valid_utf8(key) || !valid_utf8(value)) c.valid = false;
  c.metadata = c.opts.metadata;
  for (const auto& t : c.infos) {
    if (t.type == dtype::int8 && c.metadata.contains(t.name) && c.metadata[t.name] == "Int4") c.valid = false;
    if (t.type != dtype::int4) continue;
    if (auto [it, fresh] = c.metadata.emplace(t.name, "Int4"); !fresh && it->second != "Int4") c.valid = false;
  }
  return c;
}

inline void write_safetensors(const safetensors_content& c, const std::filesystem::path& path) {
  std::vector<reshard::io::safetensors_tensor_view> views;
  for (std::size_t i = 0; i < c.infos.size(); ++i)
    views.push_back({c.infos[i].name, c.infos[i].type, c.infos[i].shape, c.data[i]});
  reshard::io::write_safetensors(path, views, c.opts);
}

/// The file read back holds the tensors (sorted by name, data contiguous in name order) and the
/// metadata, Int4 markers included.
inline void check_safetensors(const safetensors_content& c, const std::filesystem::path& path) {
  const reshard::io::safetensors_file f(path);
  std::vector<std::size_t> order(c.infos.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto x, auto y) { return c.infos[x].name < c.infos[y].name; });
  FUZZ_CHECK(f.entries().size() == order.size());
  std::uint64_t at = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto& e = f.entries()[k];
    const auto& t = c.infos[order[k]];
    FUZZ_CHECK(e.name == t.name && e.type == t.type && e.shape == t.shape && e.begin == at);
    FUZZ_CHECK(std::equal(e.data.begin(), e.data.end(), c.data[order[k]].begin(), c.data[order[k]].end()));
    at = e.end;
  }
  FUZZ_CHECK(f.metadata() == c.metadata);
  FUZZ_CHECK(f.header_size() % 8 == 0);
}

// ---------------------------------------------------------------------------------------------
// strategy: current_stage (4 bytes); node count b % 3, each: name, stage (b, 255: uint32 max),
// b % 3 strategies of b % 3 dims (b; 255: uint32 max); layout count b % 4, each: name,
// dev_matrix (b % 4 values: b < 250 -> b % 9, else u32max, 2^32 (refused) or -1 (refused)),
// tuple flag, tensor map (b % 4 dims, each 1 + b % 3 axes in tuple form (a byte 255: an empty
// entry, refused), one otherwise; axis b % 5 - 1, b >= 250: int32 min / max or 2^31 (refused)),
// tensor_shape, param_split_shape, indices_offset (b % 3 int64 each), field, step, size (int32).

struct strategy_content {
  reshard::io::strategy_file file;
  bool valid_protobuf = true;  // encode_strategy_protobuf must accept it
  bool valid_json = true;      // encode_strategy_json must accept it
  bool has_layouts = false;    // the decoders refuse a file without layouts
};

inline std::int64_t decode_axis(input& in, bool& valid) {
  const std::uint8_t b = in.byte();
  if (b < 250) return b % 5 - 1;
  static constexpr std::array<std::int64_t, 6> wild{std::numeric_limits<std::int32_t>::min(),
                                                    std::numeric_limits<std::int32_t>::max(),
                                                    std::int64_t{1} << 31,
                                                    -(std::int64_t{1} << 31) - 1,
                                                    -1,
                                                    std::numeric_limits<std::int64_t>::min()};
  const std::int64_t v = wild[b - 250];
  if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) valid = false;
  return v;
}

inline strategy_content decode_strategy(input& in) {
  using namespace reshard::io;
  strategy_content c;
  c.file.current_stage = static_cast<std::uint32_t>(in.uint(std::numeric_limits<std::uint32_t>::max()));
  std::set<std::string> node_names, layout_names;
  for (int n = in.byte() % 3; n > 0; --n) {
    std::string name = decode_name(in);
    if (!node_names.insert(name).second) c.valid_json = false;  // JSON objects are keyed by name
    if (!valid_utf8(name)) c.valid_json = false;
    node_strategy s;
    s.stage = in.byte() == 255 ? std::numeric_limits<std::uint32_t>::max() : in.byte();
    for (int k = in.byte() % 3; k > 0; --k) {
      std::vector<std::uint32_t> dims;
      for (int d = in.byte() % 3; d > 0; --d) {
        const std::uint8_t b = in.byte();
        dims.push_back(b == 255 ? std::numeric_limits<std::uint32_t>::max() : b);
      }
      s.strategy.push_back(std::move(dims));
    }
    c.file.nodes.emplace_back(std::move(name), std::move(s));
  }
  for (int n = in.byte() % 4; n > 0; --n) {
    std::string name = decode_name(in);
    bool valid = layout_names.insert(name).second;
    if (!valid_utf8(name)) c.valid_json = false;
    param_layout l;
    for (int k = in.byte() % 4; k > 0; --k) {
      const std::uint8_t b = in.byte();
      static constexpr std::array<std::int64_t, 6> wild{4294967295, std::int64_t{1} << 32, -1, 0, 1, 4294967295};
      const std::int64_t v = b < 250 ? b % 9 : wild[b - 250];
      if (v < 0 || v > 4294967295) valid = false;
      l.dev_matrix.push_back(v);
    }
    l.tuple_form = in.flag();
    for (int d = in.byte() % 4; d > 0; --d) {
      std::vector<std::int64_t> axes;
      const int count = l.tuple_form ? (in.byte() == 255 ? 0 : 1 + in.byte() % 3) : 1;
      for (int a = 0; a < count; ++a) axes.push_back(decode_axis(in, valid));
      if (axes.empty()) valid = false;
      l.tensor_map.push_back(std::move(axes));
    }
    auto list = [&](std::vector<std::int64_t>& out) {
      for (int k = in.byte() % 3; k > 0; --k) out.push_back(in.byte() < 128 ? in.byte() : in.i64());
    };
    list(l.tensor_shape);
    list(l.param_split_shape);
    list(l.indices_offset);
    l.field = static_cast<std::int32_t>(in.uint(std::numeric_limits<std::uint32_t>::max()));
    l.opt_weight_shard_step = static_cast<std::int8_t>(in.byte());
    l.opt_weight_shard_size = static_cast<std::int8_t>(in.byte());
    if (!valid) c.valid_protobuf = c.valid_json = false;
    c.file.layouts.emplace_back(std::move(name), std::move(l));
    c.has_layouts = true;
  }
  return c;
}

/// What a format keeps of `s`: protobuf has no tensor_shape; JSON marks a tuple layout by its
/// list entries, so a tuple layout of a 0-d tensor reads back as an ordinary one.
inline reshard::io::strategy_file kept_by(reshard::io::strategy_file s, bool json) {
  for (auto& [name, l] : s.layouts) {
    if (!json) l.tensor_shape.clear();
    if (json && l.tensor_map.empty()) l.tuple_form = false;
  }
  return s;
}

}  // namespace reshard_fuzz
