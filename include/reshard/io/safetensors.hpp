// reshard/io/safetensors.hpp: safetensors files as MindSpore writes them (see
// docs/formats.md#4-safetensors-files).
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// `{"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//   "__metadata__": {"format": "ms"}}`, then the data; offsets are relative to the data start
// and contiguous from 0.
//
// Reading (safetensors_file, index_safetensors) maps the file and validates the header: the
// header length against the file size (and safetensors' 100 MB limit), the JSON (no duplicate
// keys), every dtype (BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64), shape (non-negative
// integers) and data_offsets (begin <= end, end - begin == the shape's byte size), offsets
// contiguous from 0 without gaps or overlap and covering the data section exactly, and
// `__metadata__` (an object of strings). Data are zero-copy spans into the mapping.
//
// Int4: MindSpore stores a qint4x2 tensor as dtype "I8" and marks it with
// `__metadata__[name] == "Int4"`; the reader reports such a tensor as dtype::int4 and the
// writer does the same in reverse. MindSpore's optional `crc_num` metadata is kept as metadata
// but not verified.
//
// Writing (safetensors_writer, write_safetensors): tensors are declared first (the header holds
// every offset), names sorted, the header padded with spaces to a multiple of 8 bytes, metadata
// `{"format": "ms"}` by default; the data are then streamed in name order through an
// atomic_file_writer.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/json_reader.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/mapped_file.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace reshard::io {

/// safetensors' own bound on the header length.
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;
/// The reserved header key of the metadata object.
inline constexpr std::string_view safetensors_metadata_key = "__metadata__";

/// One tensor of a safetensors file; `data` points into the reader's mapping.
struct safetensors_entry {
  std::string name;
  io::dtype type = io::dtype::uint8;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  ///< data_offsets, relative to the data section
  std::span<const std::byte> data;
};

/// The validated header of a safetensors file.
struct safetensors_index {
  std::vector<safetensors_entry> entries;  ///< sorted by name
  std::map<std::string, std::string> metadata;
  std::uint64_t header_size = 0;  ///< N, the JSON length
};

namespace detail {
inline std::vector<std::int64_t> st_shape(const nlohmann::json& j, const std::string& who) {
  if (!j.is_array()) report_error(who + "shape " + json_excerpt(j) + " is not an array");
  std::vector<std::int64_t> shape;
  for (const auto& d : j) {
    auto v = json_int(d, 0);
    if (!v) report_error(who + "shape " + json_excerpt(j) + " holds " + json_excerpt(d) + ", not a non-negative integer");
    shape.push_back(*v);
  }
  return shape;
}
}  // namespace detail

/// Validates and indexes the safetensors file content `bytes`; `source` names it in messages.
inline safetensors_index index_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  using namespace detail;
  const std::string prefix = "safetensors: " + std::string(source) + ": ";
  if (bytes.size() < 8)
    report_error(prefix + "file has " + std::to_string(bytes.size()) + " bytes, fewer than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | std::to_integer<std::uint64_t>(bytes[static_cast<std::size_t>(i)]);
  if (n > safetensors_max_header)
    report_error(prefix + "header length " + std::to_string(n) + " exceeds the limit of " +
                 std::to_string(safetensors_max_header) + " bytes");
  if (n > bytes.size() - 8)
    report_error(prefix + "header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
                 " bytes after it (truncated or not a safetensors file)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<std::size_t>(n));
  if (text.empty() || text.front() != '{') report_error(prefix + "header does not start with '{'");
  const auto header = parse_json_strict<nlohmann::json>(text, prefix);
  if (!header.is_object()) report_error(prefix + "header is not a JSON object");

  safetensors_index index;
  index.header_size = n;
  if (auto it = header.find(safetensors_metadata_key); it != header.end()) {
    if (!it->is_object()) report_error(prefix + "__metadata__ is not an object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string())
        report_error(prefix + "__metadata__ value of " + quote_name(k) + " is " + json_excerpt(v) + ", not a string");
      index.metadata.emplace(k, v.get<std::string>());
    }
  }

  const auto data = bytes.subspan(static_cast<std::size_t>(8 + n));
  for (const auto& [name, info] : header.items()) {
    if (name == safetensors_metadata_key) continue;
    const std::string who = prefix + "tensor " + quote_name(name) + ": ";
    if (!info.is_object()) report_error(who + "entry " + json_excerpt(info) + " is not an object");
    safetensors_entry e;
    e.name = name;
    const auto dt = info.find("dtype");
    if (dt == info.end() || !dt->is_string()) report_error(who + "missing string field dtype");
    const auto& dname = dt->get_ref<const std::string&>();
    auto t = dtype_from_safetensors_name(dname);
    if (!t) report_error(who + "unknown or unsupported dtype " + quote_name(dname));
    e.type = *t;
    if (auto m = index.metadata.find(name); m != index.metadata.end() && m->second == "Int4" && e.type == dtype::int8)
      e.type = dtype::int4;
    const auto sh = info.find("shape");
    if (sh == info.end()) report_error(who + "missing field shape");
    e.shape = st_shape(*sh, who);
    const auto off = info.find("data_offsets");
    if (off == info.end()) report_error(who + "missing field data_offsets");
    std::optional<std::uint64_t> b, f;
    if (off->is_array() && off->size() == 2) {
      b = json_uint((*off)[0]);
      f = json_uint((*off)[1]);
    }
    if (!b || !f || *b > *f)
      report_error(who + "data_offsets " + json_excerpt(*off) + " is not a pair [begin, end] with 0 <= begin <= end");
    e.begin = *b;
    e.end = *f;
    auto need = byte_size(e.type, e.shape);
    if (!need) report_error(who + "shape " + format_dims(e.shape) + " overflows 2^63 bytes");
    if (e.end - e.begin != *need)
      report_error(who + "data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) + "] hold " +
                   std::to_string(e.end - e.begin) + " bytes, shape " + format_dims(e.shape) + " " + dname + " needs " +
                   std::to_string(*need));
    if (e.end > data.size())
      report_error(who + "data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) +
                   "] lie beyond the " + std::to_string(data.size()) + "-byte data section");
    e.data = data.subspan(static_cast<std::size_t>(e.begin), static_cast<std::size_t>(e.end - e.begin));
    index.entries.push_back(std::move(e));
  }

  std::vector<const safetensors_entry*> by_offset;
  for (const auto& e : index.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t at = 0;
  for (const auto* e : by_offset) {
    if (e->begin != at)
      report_error(prefix + "tensor " + quote_name(e->name) + ": data_offsets [" + std::to_string(e->begin) + "," +
                   std::to_string(e->end) + "] should start at " + std::to_string(at) +
                   (e->begin < at ? " (overlaps the tensor before it)" : " (gap after the tensor before it)"));
    at = e->end;
  }
  if (at != data.size())
    report_error(prefix + "tensors cover " + std::to_string(at) + " bytes but the data section has " +
                 std::to_string(data.size()));
  std::sort(index.entries.begin(), index.entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return index;
}

/// A safetensors file, memory-mapped and validated. Move-only; entries (and their spans) stay
/// valid while the safetensors_file lives, across moves.
class safetensors_file {
 public:
  explicit safetensors_file(std::filesystem::path path)
      : file_(std::move(path), "safetensors"), index_(index_safetensors(file_.bytes(), file_.path().string())) {
    for (std::size_t i = 0; i < index_.entries.size(); ++i) by_name_.emplace(index_.entries[i].name, i);
  }

  const std::filesystem::path& path() const noexcept { return file_.path(); }
  std::span<const safetensors_entry> entries() const noexcept { return index_.entries; }
  const std::map<std::string, std::string>& metadata() const noexcept { return index_.metadata; }
  std::uint64_t header_size() const noexcept { return index_.header_size; }
  /// The whole file's mapping (the entries' data point into it).
  std::span<const std::byte> file_bytes() const noexcept { return file_.bytes(); }

  /// The tensor `name`, or nullptr.
  const safetensors_entry* find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &index_.entries[it->second];
  }
  /// The tensor `name`; reshard::error if absent.
  const safetensors_entry& at(std::string_view name) const {
    if (auto* e = find(name)) return *e;
    report_error("safetensors: " + path().string() + ": no tensor " + detail::quote_name(name));
  }

 private:
  mapped_file file_;
  safetensors_index index_;
  std::unordered_map<std::string, std::size_t> by_name_;
};

/// A tensor to be written: name, dtype and shape (its data come later).
struct safetensors_tensor_info {
  std::string name;
  io::dtype type = io::dtype::uint8;
  std::vector<std::int64_t> shape;
};

/// How a safetensors writer orders the tensors' data.
enum class safetensors_order : std::uint8_t {
  name,   ///< by name (MindSpore's files)
  dtype,  ///< by dtype, the widest first, then by name (the safetensors library's: every tensor starts
          ///< at a multiple of its element size)
};

/// Whether tensor (type a, name an) comes before (type b, name bn) in `order`. The dtype order
/// is the safetensors library's: U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 I8 U8 BOOL (Int4 as I8).
inline bool safetensors_before(safetensors_order order, dtype a, std::string_view an, dtype b, std::string_view bn) {
  if (order == safetensors_order::dtype) {
    const auto rank = [](dtype t) {
      switch (t) {
        case dtype::boolean: return 0;
        case dtype::uint8: return 1;
        case dtype::int8: case dtype::int4: return 2;
        case dtype::int16: return 5;
        case dtype::uint16: return 6;
        case dtype::float16: return 7;
        case dtype::bfloat16: return 8;
        case dtype::int32: return 9;
        case dtype::uint32: return 10;
        case dtype::float32: return 11;
        case dtype::float64: return 12;
        case dtype::int64: return 13;
        case dtype::uint64: return 14;
        default: return -1;
      }
    };
    if (rank(a) != rank(b)) return rank(a) > rank(b);
  }
  return an < bn;
}

struct safetensors_write_options {
  std::map<std::string, std::string> metadata{{"format", "ms"}};  ///< empty: no __metadata__ (unless Int4)
  safetensors_order order = safetensors_order::name;  ///< the data order (and order())
  bool overwrite = false;  ///< replace an existing destination
  io::durability durability = io::durability::sync;  ///< when the bytes reach the disk (mapped_file.hpp)
  io::write_mode writes = io::write_mode::buffered;   ///< through the page cache, or direct (mapped_file.hpp)
  std::function<void(std::span<const std::byte>)> on_write{};  ///< sees every byte written, in order
};

/// Streams a safetensors file: the header is written at construction, then the data of every
/// tensor in order() (safetensors_write_options::order: by name unless asked), through append()
/// or write(); commit() publishes the file.
class safetensors_writer {
 public:
  safetensors_writer(std::filesystem::path path, std::vector<safetensors_tensor_info> tensors,
                     safetensors_write_options opts = {})
      : out_(std::move(path), opts.overwrite, "safetensors", opts.durability, opts.writes), tensors_(std::move(tensors)) {
    if (opts.on_write) out_.observe(opts.on_write);
    const std::string prefix = "safetensors: " + out_.destination().string() + ": ";
    std::sort(tensors_.begin(), tensors_.end(), [&](const auto& a, const auto& b) {
      return safetensors_before(opts.order, a.type, a.name, b.type, b.name);
    });
    nlohmann::json header = nlohmann::json::object();
    auto metadata = opts.metadata;
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      const std::string who = prefix + "tensor " + detail::quote_name(t.name) + ": ";
      if (i > 0 && tensors_[i - 1].name == t.name) report_error(who + "declared twice");
      if (t.name == safetensors_metadata_key) report_error(who + "the name is reserved for the metadata");
      auto st = safetensors_name(t.type);
      if (t.type == dtype::int4) {
        st = "I8";
        auto [it, fresh] = metadata.emplace(t.name, "Int4");
        if (!fresh && it->second != "Int4")
          report_error(who + "metadata key " + detail::quote_name(t.name) + " is taken by " +
                       detail::quote_name(it->second) + ", needed for the Int4 marker");
      } else if (t.type == dtype::int8) {
        if (auto it = metadata.find(t.name); it != metadata.end() && it->second == "Int4")
          report_error(who + "metadata " + detail::quote_name(t.name) +
                       " = 'Int4' would make this Int8 tensor read back as Int4");
      }
      if (!st) report_error(who + "dtype " + std::string(ms_name(t.type)) + " has no safetensors equivalent");
      auto bytes = byte_size(t.type, t.shape);
      if (!bytes || *bytes > (std::uint64_t{1} << 62) - at)
        report_error(who + "shape " + detail::format_dims(t.shape) + " is negative or overflows the file size");
      offsets_.push_back(at);
      sizes_.push_back(*bytes);
      header[t.name] = {{"dtype", *st}, {"shape", t.shape}, {"data_offsets", {at, at + *bytes}}};
      at += *bytes;
    }
    total_ = at;
    if (!metadata.empty()) header[std::string(safetensors_metadata_key)] = metadata;
    std::string text;
    try {
      text = header.dump();
    } catch (const nlohmann::json::exception& e) {
      report_error(prefix + "a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (std::size_t i = 0; i < 8; ++i) len[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFFu);
    out_.write(len);
    out_.write(text);
  }

  const std::filesystem::path& path() const noexcept { return out_.destination(); }
  /// The bytes written so far (after commit(): the file's size).
  std::uint64_t size() const noexcept { return out_.size(); }
  /// The file being written (whether its writes are direct, or were refused: write_mode::direct).
  const atomic_file_writer& file() const noexcept { return out_; }
  /// The declared tensors in data order.
  std::span<const safetensors_tensor_info> order() const noexcept { return tensors_; }

  /// Appends the next data bytes (they may span several tensors, in order()).
  void append(std::span<const std::byte> bytes) {
    if (bytes.size() > total_ - written_)
      report_error("safetensors: " + path().string() + ": " + std::to_string(bytes.size()) +
                   " more data bytes than the " + std::to_string(total_ - written_) + " still expected");
    out_.write(bytes);
    written_ += bytes.size();
  }

  /// Writes the whole data of the next tensor in order(), which must be `name`.
  void write(std::string_view name, std::span<const std::byte> data) {
    const std::string who = "safetensors: " + path().string() + ": tensor " + detail::quote_name(name) + ": ";
    const std::size_t i = next_;
    if (i >= tensors_.size() || tensors_[i].name != name || written_ != offsets_[i])
      report_error(who + "written out of order (the next expected is " +
                   (i < tensors_.size() ? detail::quote_name(tensors_[i].name) : std::string("none")) + ")");
    if (data.size() != sizes_[i])
      report_error(who + std::to_string(data.size()) + " data bytes, its shape needs " + std::to_string(sizes_[i]));
    append(data);
    next_ = i + 1;
  }

  /// Checks that every tensor's data were written and publishes the file.
  void commit() {
    if (written_ != total_) {
      std::size_t i = 0;
      while (offsets_[i] + sizes_[i] <= written_) ++i;
      report_error("safetensors: " + path().string() + ": only " + std::to_string(written_) + " of " +
                   std::to_string(total_) + " data bytes written (tensor " + detail::quote_name(tensors_[i].name) +
                   " is incomplete)");
    }
    out_.commit();
  }

 private:
  atomic_file_writer out_;
  std::vector<safetensors_tensor_info> tensors_;
  std::vector<std::uint64_t> offsets_, sizes_;
  std::uint64_t total_ = 0, written_ = 0;
  std::size_t next_ = 0;  // the tensor write() expects
};

/// A tensor with its data, for write_safetensors.
struct safetensors_tensor_view {
  std::string_view name;
  io::dtype type = io::dtype::uint8;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> data;
};

/// Writes `tensors` to `path` as one safetensors file (atomically).
inline void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_tensor_view> tensors,
                              safetensors_write_options opts = {}) {
  std::vector<safetensors_tensor_info> infos;
  for (const auto& t : tensors) infos.push_back({std::string(t.name), t.type, {t.shape.begin(), t.shape.end()}});
  safetensors_writer w(path, std::move(infos), std::move(opts));
  std::vector<const safetensors_tensor_view*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const auto* t : sorted) w.write(t->name, t->data);
  w.commit();
}

}  // namespace reshard::io
