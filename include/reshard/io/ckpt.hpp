// reshard/io/ckpt.hpp: MindSpore `.ckpt` checkpoint files (see docs/formats.md#3-checkpoint-files).
//
// Format: a concatenation of serialized `Checkpoint { repeated Value value = 1; }` messages,
// `Value { required string tag = 1; oneof { TensorProto tensor = 2; MapTensorProto maptensor = 3; } }`,
// `TensorProto { repeated int64 dims = 1; required string tensor_type = 2; required bytes tensor_content = 3; }`,
// optionally followed by the 17-byte trailer "crc_num" + big-endian 10-byte crc32 of all bytes
// before it.
//
// Reading (ckpt_file, index_ckpt) streams over a memory mapping with libprotobuf's
// CodedInputStream, one Value at a time, and builds an index; tensor contents are spans into the
// mapping (zero-copy). Consecutive Values with the same tag are one parameter whose content is the
// byte concatenation of their pieces. Every structural problem is a reshard::error naming the
// file, the parameter (or the byte offset of the Value) and the reason:
//   encrypted files (magic 0x7F3A5ED8/9/A), CRC mismatch, truncated or malformed wire data,
//   missing required fields, unknown tensor_type, negative dims, more than ckpt_max_rank dims,
//   content size disagreeing with dims, a parameter whose pieces disagree on dims or dtype,
//   a parameter repeated non-consecutively, an empty file. No length read from the file is
//   trusted before it is checked against the bytes that remain.
// Content size rule: prod(dims) * element_size(dtype) bytes, except `dims == [0]` (MindSpore's
// scalar convention) which holds one element (or none), and `str` whose content is any multiple
// of 4 bytes (UCS-4). `dims == []` is a scalar of one element. Int4 is one byte per element (see
// dtype.hpp). Unknown fields are skipped as protobuf does; a singular field given twice is an
// error (MindSpore never writes one). The trailer is recognised as MindSpore does: the last 17
// bytes start with "crc_num".
//
// Writing (ckpt_writer) streams through an atomic_file_writer, one `Checkpoint{Value}` message
// per piece exactly as MindSpore does: contents over `chunk_bytes` (default 536,870,912) are
// split into consecutive same-tag Values of byte chunks; dims are written unpacked; an optional
// CRC trailer; map tensors and any other entry can be copied byte-exact with write_raw.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/detail/wire.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/mapped_file.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace reshard::io {

/// MindSpore's piece size: tensors with more content bytes are written as several Values.
inline constexpr std::uint64_t ckpt_chunk_bytes = 536870912;
/// Most dims a checkpoint tensor may have (numpy allows 64).
inline constexpr std::size_t ckpt_max_rank = 64;

namespace detail {
// The bytes of a content stored as `pieces`.
inline std::uint64_t content_size(std::span<const std::span<const std::byte>> pieces) noexcept {
  std::uint64_t n = 0;
  for (auto p : pieces) n += p.size();
  return n;
}
// A tensor (not a map tensor) of dims [], or MindSpore's scalar dims [0] with content.
inline bool is_scalar(bool map_tensor, std::span<const std::int64_t> dims,
                      std::span<const std::span<const std::byte>> pieces) noexcept {
  return !map_tensor && (dims.empty() || (dims.size() == 1 && dims[0] == 0 && content_size(pieces) != 0));
}
}  // namespace detail

/// One parameter of a checkpoint: one Value, or several consecutive Values with the same tag.
/// The spans point into the reader's memory mapping and live as long as the ckpt_file.
struct ckpt_entry {
  std::string name;
  bool map_tensor = false;             ///< a MapTensorProto value: passed through as raw bytes only
  io::dtype type = io::dtype::uint8;   ///< tensors only
  std::vector<std::int64_t> dims;      ///< tensors only; as stored on every piece
  std::vector<std::span<const std::byte>> pieces;  ///< tensor_content of each Value, in order
  std::vector<std::span<const std::byte>> values;  ///< each serialized Value, byte-exact

  /// Total content bytes (sum of the pieces).
  std::uint64_t content_size() const noexcept { return detail::content_size(pieces); }
  /// dims [] or MindSpore's scalar dims [0] with one element.
  bool is_scalar() const noexcept { return detail::is_scalar(map_tensor, dims, pieces); }
};

/// Copies the content of `entry` (its pieces, concatenated) into `out`.
/// @pre out.size() == entry.content_size()
inline void gather_into(const ckpt_entry& entry, std::span<std::byte> out) {
  RESHARD_EXPECTS(out.size() == entry.content_size(), "gather_into: output size differs from the content size");
  std::size_t at = 0;
  for (auto p : entry.pieces) {
    if (!p.empty()) std::memcpy(out.data() + at, p.data(), p.size());
    at += p.size();
  }
}

/// The content of `entry` (its pieces, concatenated).
inline std::vector<std::byte> gather(const ckpt_entry& entry) {
  std::vector<std::byte> out(entry.content_size());
  gather_into(entry, out);
  return out;
}

struct ckpt_read_options {
  bool verify_crc = true;  ///< check the crc_num trailer when present (reads every byte)
  /// ckpt_file: keeps the descriptor the file is mapped from here, for its reads (mapped_file)
  read_descriptor* descriptor = nullptr;
};

/// The index of a checkpoint: its parameters in file order.
struct ckpt_index {
  std::vector<ckpt_entry> entries;
  bool crc = false;  ///< the file ends with a crc_num trailer
};

namespace detail {

// Why `bytes` of content cannot be a tensor of `dims` and `t`; none if they agree.
inline std::optional<std::string> ckpt_content_mismatch(dtype t, std::span<const std::int64_t> dims,
                                                        std::uint64_t bytes) {
  for (auto d : dims)
    if (d < 0) return "negative dimension in dims " + format_dims(dims);
  if (t == dtype::str) {
    if (bytes % 4 != 0)
      return "str tensor_content has " + std::to_string(bytes) + " bytes, not a multiple of 4 (UCS-4 text)";
    return std::nullopt;
  }
  const std::uint64_t es = element_size(t);
  if (dims.size() == 1 && dims[0] == 0) {  // MindSpore's scalar
    if (bytes == es || bytes == 0) return std::nullopt;
    return "tensor_content has " + std::to_string(bytes) + " bytes, dims [0] (scalar) " + std::string(ms_name(t)) +
           " needs " + std::to_string(es);
  }
  auto need = byte_size(t, dims);
  if (!need) return "dims " + format_dims(dims) + " " + std::string(ms_name(t)) + " overflow 2^63 bytes";
  if (*need != bytes)
    return "tensor_content has " + std::to_string(bytes) + " bytes, dims " + format_dims(dims) + " " +
           std::string(ms_name(t)) + " needs " + std::to_string(*need);
  return std::nullopt;
}

inline constexpr std::uint32_t ckpt_magic_aes_gcm = 0x7F3A5ED8u;
inline constexpr std::uint32_t ckpt_magic_aes_cbc = 0x7F3A5ED9u;
inline constexpr std::uint32_t ckpt_magic_sm4_cbc = 0x7F3A5EDAu;
inline constexpr std::string_view crc_marker = "crc_num";
inline constexpr std::size_t crc_trailer_size = 17;

// Checks that the crc_num trailer ending `file` (a whole ckpt file) holds `actual`, the crc32 of
// the bytes before the trailer; reshard::error prefixed `prefix` if not.
inline void check_crc_trailer(std::span<const std::byte> file, std::uint32_t actual, const std::string& prefix) {
  const auto stored = file.last(10);
  bool fits = true;
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 10; ++i) {
    if (i < 6 && stored[i] != std::byte{0}) fits = false;
    value = value << 8 | std::to_integer<std::uint64_t>(stored[i]);
  }
  if (!fits || value != actual)
    report_error(prefix + "CRC mismatch: the crc_num trailer holds " + (fits ? std::to_string(value) : "a value over 2^32") +
                 ", the " + std::to_string(file.size() - crc_trailer_size) + " bytes before it give " +
                 std::to_string(actual));
}

// One Value as parsed. Its dims are kept in place (at most ckpt_max_rank): an entry's dims are
// allocated once, at their final size, not grown element by element for every Value read.
struct ckpt_piece {
  std::string name;
  bool map_tensor = false;
  dtype type = dtype::uint8;
  std::array<std::int64_t, ckpt_max_rank> dim_store{};
  std::size_t rank = 0;
  std::span<const std::byte> content;
  std::span<const std::byte> value;
  std::span<const std::int64_t> dims() const noexcept { return {dim_store.data(), rank}; }
};

inline void parse_ckpt_tensor(std::span<const std::byte> bytes, const wire_message::fail_fn& fail, ckpt_piece& p) {
  wire_message m(bytes.data(), bytes.size(), fail);
  bool has_type = false, has_content = false;
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1:
        m.repeated_varint(tag, "dims", [&](std::uint64_t v) {
          const auto d = static_cast<std::int64_t>(v);
          if (d < 0) m.fail("negative dimension " + std::to_string(d) + " in dims");
          if (p.rank == ckpt_max_rank)
            m.fail("more than " + std::to_string(ckpt_max_rank) + " dims");
          p.dim_store[p.rank++] = d;
        });
        break;
      case 2: {
        m.expect_wire(tag, wt_len, "tensor_type");
        if (has_type) m.fail("tensor_type appears twice");
        const std::string s = m.string("tensor_type");
        auto t = dtype_from_ms_name(s);
        if (!t) m.fail("unknown tensor_type " + quote_name(s));
        p.type = *t;
        has_type = true;
        break;
      }
      case 3:
        m.expect_wire(tag, wt_len, "tensor_content");
        if (has_content) m.fail("tensor_content appears twice");
        p.content = m.bytes("tensor_content");
        has_content = true;
        break;
      default: m.skip(tag);
    }
  }
  if (!has_type) m.fail("TensorProto is missing required field tensor_type");
  if (!has_content) m.fail("TensorProto is missing required field tensor_content");
}

inline ckpt_piece parse_ckpt_value(std::span<const std::byte> value, std::size_t offset, const std::string& prefix) {
  ckpt_piece p;
  p.value = value;
  bool has_name = false, has_tensor = false, has_map = false;
  // What a failure names, behind one pointer: a std::function keeps a one-pointer lambda in place
  // (no allocation for each Value read, and none for each copy into a wire_message).
  const struct {
    const std::string& prefix;
    const bool& has_name;
    const ckpt_piece& p;
    std::size_t offset;
  } who{prefix, has_name, p, offset};
  wire_message::fail_fn fail = [w = &who](const std::string& why) {
    report_error(w->prefix + (w->has_name ? "parameter " + quote_name(w->p.name) : "Value at byte " + std::to_string(w->offset)) +
                 ": " + why);
  };
  wire_message m(value.data(), value.size(), fail);
  while (std::uint32_t tag = m.next_tag()) {
    switch (tag_field(tag)) {
      case 1:
        m.expect_wire(tag, wt_len, "tag");
        if (has_name) m.fail("tag appears twice");
        p.name = m.string("tag");
        has_name = true;
        break;
      case 2: {
        m.expect_wire(tag, wt_len, "tensor");
        if (has_tensor || has_map) m.fail("more than one tensor/maptensor in one Value");
        auto t = m.bytes("tensor");
        parse_ckpt_tensor(t, fail, p);
        has_tensor = true;
        break;
      }
      case 3:
        m.expect_wire(tag, wt_len, "maptensor");
        if (has_tensor || has_map) m.fail("more than one tensor/maptensor in one Value");
        m.bytes("maptensor");
        has_map = true;
        p.map_tensor = true;
        break;
      default: m.skip(tag);
    }
  }
  if (!has_name) m.fail("missing required field tag");
  if (!has_tensor && !has_map) m.fail("holds neither a tensor nor a maptensor");
  return p;
}

}  // namespace detail

/// Indexes the checkpoint `bytes` (a whole file's content); `source` names it in messages.
/// The entries' spans point into `bytes`.
inline ckpt_index index_ckpt(std::span<const std::byte> bytes, std::string_view source, ckpt_read_options opts = {}) {
  using namespace detail;
  const std::string prefix = "ckpt: " + std::string(source) + ": ";
  if (bytes.size() >= 4) {
    std::uint32_t magic = 0;
    for (int i = 3; i >= 0; --i) magic = magic << 8 | std::to_integer<std::uint32_t>(bytes[static_cast<std::size_t>(i)]);
    const char* cipher = magic == ckpt_magic_aes_gcm   ? "AES-GCM"
                         : magic == ckpt_magic_aes_cbc ? "AES-CBC"
                         : magic == ckpt_magic_sm4_cbc ? "SM4-CBC"
                                                       : nullptr;
    if (cipher)
      report_error(prefix + "file is encrypted (" + cipher +
                   "); reshard reads plain checkpoints only: decrypt it with MindSpore first");
  }
  if (bytes.empty()) report_error(prefix + "file is empty (no parameters)");

  ckpt_index index;
  std::span<const std::byte> body = bytes;
  if (bytes.size() >= crc_trailer_size &&
      std::memcmp(bytes.data() + bytes.size() - crc_trailer_size, crc_marker.data(), crc_marker.size()) == 0) {
    index.crc = true;
    body = bytes.first(bytes.size() - crc_trailer_size);
    if (opts.verify_crc) check_crc_trailer(bytes, crc32(body), prefix);
  }

  std::size_t off = 0;
  while (off < body.size()) {
    const std::size_t at = off;
    wire_message top(body.data() + off, std::min(body.size() - off, max_window), [&](const std::string& why) {
      report_error(prefix + "at byte " + std::to_string(at) + ": " + why);
    });
    const std::uint32_t tag = top.next_tag();
    if (tag_field(tag) != 1) {
      top.skip(tag);
      off += top.position();
      continue;
    }
    top.expect_wire(tag, wt_len, "Checkpoint.value");
    const auto value = top.bytes_or_named_truncation([&] { return "Value at byte " + std::to_string(at); },
                                                     [&](const auto& name) {
                                                       return prefix + (name ? "parameter " + quote_name(*name) + ": " : std::string());
                                                     });
    const std::size_t value_off = off + static_cast<std::size_t>(value.data() - (body.data() + off));
    ckpt_piece p = parse_ckpt_value(value, value_off, prefix);
    off = value_off + value.size();

    const auto who = [&] { return prefix + "parameter " + quote_name(p.name) + ": "; };
    if (!index.entries.empty() && index.entries.back().name == p.name) {
      ckpt_entry& e = index.entries.back();
      if (e.map_tensor != p.map_tensor)
        report_error(who() + "consecutive Values mix tensor and maptensor");
      if (!e.map_tensor && (e.type != p.type || !std::equal(e.dims.begin(), e.dims.end(), p.dims().begin(), p.dims().end())))
        report_error(who() + "piece " + std::to_string(e.values.size() + 1) + " has dims " + format_dims(p.dims()) + " " +
                     std::string(ms_name(p.type)) + ", the first piece has " + format_dims(e.dims) + " " +
                     std::string(ms_name(e.type)));
      if (!e.map_tensor) e.pieces.push_back(p.content);
      e.values.push_back(p.value);
      continue;
    }
    ckpt_entry e;
    e.name = std::move(p.name);
    e.map_tensor = p.map_tensor;
    e.type = p.type;
    e.dims.assign(p.dims().begin(), p.dims().end());
    if (!e.map_tensor) e.pieces.push_back(p.content);
    e.values.push_back(p.value);
    index.entries.push_back(std::move(e));
  }
  if (index.entries.empty()) report_error(prefix + "holds no parameters");
  // A name whose Values are not consecutive: the first entry (in file order) whose name an
  // earlier entry has, found by sorting the entries by name (no table of names while reading).
  std::vector<std::size_t> by_name(index.entries.size());
  for (std::size_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
  std::sort(by_name.begin(), by_name.end(), [&](std::size_t a, std::size_t b) {
    const int c = index.entries[a].name.compare(index.entries[b].name);
    return c != 0 ? c < 0 : a < b;
  });
  std::size_t again = by_name.size();
  for (std::size_t k = 1; k < by_name.size(); ++k)
    if (index.entries[by_name[k]].name == index.entries[by_name[k - 1]].name) again = std::min(again, by_name[k]);
  if (again != by_name.size()) {
    const ckpt_entry& e = index.entries[again];
    report_error(prefix + "parameter " + quote_name(e.name) + ": appears again at byte " +
                 std::to_string(e.values.front().data() - bytes.data()) +
                 " after other parameters (only consecutive Values of one parameter form one tensor)");
  }
  for (const auto& e : index.entries) {
    if (e.map_tensor) continue;
    if (auto why = ckpt_content_mismatch(e.type, e.dims, e.content_size()))
      report_error(prefix + "parameter " + quote_name(e.name) + ": " + *why);
  }
  return index;
}

namespace detail {
// The copy a small ckpt file is indexed from (ckpt_file), one per thread, reused file after file.
inline std::vector<std::byte>& index_scratch() {
  thread_local std::vector<std::byte> copy;
  return copy;
}
}  // namespace detail

/// A checkpoint file, memory-mapped and indexed. Move-only; entries (and their spans) stay
/// valid while the ckpt_file lives, across moves. A file of at most index_copy_bytes (thousands of
/// ranks save files of a few tensors) is indexed from a copy read with one pread(2), its spans
/// then pointing into the mapping as the others' do: the mapping is not touched by indexing
/// (no page faults, no pages to release: untouched()).
class ckpt_file {
 public:
  /// The largest file indexed from a copy (larger files: from the mapping, whose headers alone
  /// are touched).
  static constexpr std::uint64_t index_copy_bytes = std::uint64_t{128} << 10;

  explicit ckpt_file(std::filesystem::path path, ckpt_read_options opts = {})
      : file_(std::move(path), "ckpt", &detail::index_scratch(), index_copy_bytes, opts.descriptor), index_(index_of(opts)) {
    by_name_.reserve(index_.entries.size());
    for (std::size_t i = 0; i < index_.entries.size(); ++i) by_name_.push_back({hash(index_.entries[i].name), i});
    std::sort(by_name_.begin(), by_name_.end());
  }

  /// No page of the mapping has been touched yet (indexed from a copy).
  bool untouched() const noexcept { return file_.copied(); }

  const std::filesystem::path& path() const noexcept { return file_.path(); }
  std::span<const ckpt_entry> entries() const noexcept { return index_.entries; }
  bool has_crc() const noexcept { return index_.crc; }
  /// The whole file.
  std::span<const std::byte> bytes() const noexcept { return file_.bytes(); }
  /// The file's identity and modification time when it was opened.
  const file_status& status() const noexcept { return file_.status(); }

  /// The parameter `name`, or nullptr.
  const ckpt_entry* find(std::string_view name) const {
    const std::size_t h = hash(name);
    for (auto it = std::lower_bound(by_name_.begin(), by_name_.end(), std::pair<std::size_t, std::size_t>{h, 0});
         it != by_name_.end() && it->first == h; ++it)
      if (index_.entries[it->second].name == name) return &index_.entries[it->second];
    return nullptr;
  }
  /// The parameter `name`; reshard::error if absent.
  const ckpt_entry& at(std::string_view name) const {
    if (auto* e = find(name)) return *e;
    report_error("ckpt: " + path().string() + ": no parameter " + detail::quote_name(name));
  }

 private:
  // The index of the mapped file: of its copy (mapped_file::copied), with the spans moved onto
  // the mapping, or of the mapping.
  ckpt_index index_of(const ckpt_read_options& opts) const {
    if (!file_.copied()) return index_ckpt(file_.bytes(), file_.path().string(), opts);
    const std::byte* copy = detail::index_scratch().data();
    ckpt_index x = index_ckpt(std::span<const std::byte>(copy, file_.bytes().size()), file_.path().string(), opts);
    const std::byte* base = file_.bytes().data();
    const auto moved = [&](std::span<const std::byte>& b) {
      if (b.data()) b = {base + (b.data() - copy), b.size()};
    };
    for (auto& e : x.entries) {
      for (auto& b : e.pieces) moved(b);
      for (auto& b : e.values) moved(b);
    }
    return x;
  }

  static std::size_t hash(std::string_view name) noexcept { return std::hash<std::string_view>{}(name); }

  mapped_file file_;
  ckpt_index index_;
  // (hash of the name, entry), sorted: one array per file, searched by binary search on the
  // hash, the names compared only on a hash match (a node per entry, as a hash table keeps,
  // costs an allocation each and a cache miss on every lookup: thousands of files are indexed)
  std::vector<std::pair<std::size_t, std::size_t>> by_name_;
};

struct ckpt_write_options {
  bool crc = false;                          ///< append the crc_num trailer
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;  ///< contents over this are split into pieces
  bool overwrite = false;                    ///< replace an existing destination
  io::durability durability = io::durability::sync;  ///< when the bytes reach the disk (mapped_file.hpp)
  io::write_mode writes = io::write_mode::buffered;   ///< through the page cache, or direct (mapped_file.hpp)
  std::function<void(std::span<const std::byte>)> on_write{};  ///< sees every byte written, in order
};

/// Writes a checkpoint atomically: nothing appears at `path` until commit() succeeds.
///
///   ckpt_writer w(path);
///   w.write("w", dtype::float32, dims, content);        // whole content at once, or
///   w.begin("b", dtype::float32, dims, bytes); w.append(part); ...; w.end();  // streamed
///   w.write_raw(entry_from_another_file);                // byte-exact copy
///   w.commit();
class ckpt_writer {
 public:
  explicit ckpt_writer(std::filesystem::path path, ckpt_write_options opts = {})
      : out_(std::move(path), opts.overwrite, "ckpt", opts.durability, opts.writes), opts_(opts) {
    if (opts_.chunk_bytes == 0) report_error("ckpt: " + out_.destination().string() + ": chunk_bytes must be positive");
    if (opts_.on_write) out_.observe(opts_.on_write);
  }

  const std::filesystem::path& path() const noexcept { return out_.destination(); }
  /// The bytes written so far (after commit(): the file's size).
  std::uint64_t size() const noexcept { return out_.size(); }
  /// The file being written (whether its writes are direct, or were refused: write_mode::direct).
  const atomic_file_writer& file() const noexcept { return out_; }

  /// Writes tensor `name` whose content is `content`.
  void write(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::span<const std::byte> content) {
    begin(name, type, dims, content.size());
    append(content);
    end();
  }

  /// Starts tensor `name` of `content_bytes` bytes, to be given by append() calls and closed by
  /// end(). `content_bytes` must agree with `dims` and `type` (the reader's rule).
  void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t content_bytes) {
    RESHARD_EXPECTS(!open_, "ckpt_writer::begin: the previous tensor is not ended");
    claim_name(name);
    if (dims.size() > ckpt_max_rank)
      fail(name, "more than " + std::to_string(ckpt_max_rank) + " dims");
    if (auto why = detail::ckpt_content_mismatch(type, dims, content_bytes)) fail(name, *why);
    name_.assign(name);
    type_ = type;
    dims_.assign(dims.begin(), dims.end());
    total_ = content_bytes;
    written_ = 0;
    piece_left_ = 0;
    pieces_ = 0;
    open_ = true;
  }

  /// Appends content bytes of the tensor begun last.
  void append(std::span<const std::byte> bytes) {
    RESHARD_EXPECTS(open_, "ckpt_writer::append: no tensor begun");
    if (bytes.size() > total_ - written_)
      fail(name_, "content exceeds the " + std::to_string(total_) + " bytes that dims " + detail::format_dims(dims_) +
                      " " + std::string(ms_name(type_)) + " declare");
    while (!bytes.empty()) {
      if (piece_left_ == 0) start_piece(std::min(opts_.chunk_bytes, total_ - written_));
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece_left_, bytes.size()));
      emit(bytes.first(n));
      bytes = bytes.subspan(n);
      piece_left_ -= n;
      written_ += n;
    }
  }

  /// Ends the tensor begun last; all its content must have been appended.
  void end() {
    RESHARD_EXPECTS(open_, "ckpt_writer::end: no tensor begun");
    open_ = false;
    if (written_ != total_)
      fail(name_, "got " + std::to_string(written_) + " content bytes of the " + std::to_string(total_) + " declared");
    if (pieces_ == 0) start_piece(0);
  }

  /// Copies `entry` byte-exact (its serialized Values), e.g. a map tensor, a str or a parameter
  /// absent from the strategy.
  void write_raw(const ckpt_entry& entry) {
    RESHARD_EXPECTS(!open_, "ckpt_writer::write_raw: a tensor is not ended");
    RESHARD_EXPECTS(!entry.values.empty(), "ckpt_writer::write_raw: the entry has no serialized Values");
    claim_name(entry.name);
    for (auto v : entry.values) {
      detail::wire_writer w;
      w.tag(1, detail::wt_len);
      w.length(v.size());
      emit(w.take());
      emit(v);
    }
  }

  /// Copies `entry` as write_raw(entry) does, under the name `name`: in each serialized Value the
  /// tag (field 1) is `name`, every other field is copied byte-exact (a renamed map tensor, whose
  /// content only ever passes through as bytes).
  void write_raw(const ckpt_entry& entry, std::string_view name) {
    RESHARD_EXPECTS(!open_, "ckpt_writer::write_raw: a tensor is not ended");
    RESHARD_EXPECTS(!entry.values.empty(), "ckpt_writer::write_raw: the entry has no serialized Values");
    claim_name(name);
    for (auto v : entry.values) {
      detail::wire_writer value;
      value.bytes_field(1, name);
      detail::wire_message m(v.data(), v.size(), [&](const std::string& why) { fail(entry.name, why); });
      std::size_t at = m.position();
      while (const std::uint32_t tag = m.next_tag()) {
        m.skip(tag);
        if (detail::tag_field(tag) != 1)
          value.raw(std::string_view(reinterpret_cast<const char*>(v.data()) + at, m.position() - at));
        at = m.position();
      }
      const std::string bytes = value.take();
      detail::wire_writer w;
      w.tag(1, detail::wt_len);
      w.length(bytes.size());
      emit(w.take());
      emit(bytes);
    }
  }

  /// Finishes the file (CRC trailer if asked) and moves it to its destination.
  void commit() {
    RESHARD_EXPECTS(!open_, "ckpt_writer::commit: a tensor is not ended");
    if (names_.empty())
      report_error("ckpt: " + path().string() + ": no parameters written (an empty checkpoint cannot be loaded)");
    if (opts_.crc) {
      std::string trailer(detail::crc_marker);
      trailer.append(6, '\0');
      for (int shift = 24; shift >= 0; shift -= 8) trailer.push_back(static_cast<char>((crc_ >> shift) & 0xFFu));
      out_.write(trailer);
    }
    out_.commit();
  }

 private:
  [[noreturn]] void fail(std::string_view name, const std::string& why) const {
    report_error("ckpt: " + path().string() + ": parameter " + detail::quote_name(name) + ": " + why);
  }

  void claim_name(std::string_view name) {
    if (!names_.emplace(name).second) fail(name, "written twice");
  }

  void start_piece(std::uint64_t content) {
    using detail::varint_size;
    const std::string_view type = ms_name(type_);
    std::uint64_t tensor = 1 + varint_size(type.size()) + type.size() + 1 + varint_size(content) + content;
    for (auto d : dims_) tensor += 1 + varint_size(static_cast<std::uint64_t>(d));
    const std::uint64_t value = 1 + varint_size(name_.size()) + name_.size() + 1 + varint_size(tensor) + tensor;
    if (1 + varint_size(value) + value >= detail::max_window)
      fail(name_, "a piece of " + std::to_string(content) + " content bytes exceeds protobuf's 2 GiB message limit; use a smaller chunk_bytes");
    detail::wire_writer w;
    w.tag(1, detail::wt_len);  // Checkpoint.value
    w.length(value);
    w.bytes_field(1, name_);   // Value.tag
    w.tag(2, detail::wt_len);  // Value.tensor
    w.length(tensor);
    for (auto d : dims_) w.signed_field(1, d);  // TensorProto.dims, unpacked
    w.bytes_field(2, type);                     // TensorProto.tensor_type
    w.tag(3, detail::wt_len);                   // TensorProto.tensor_content
    w.length(content);
    emit(w.take());
    piece_left_ = content;
    ++pieces_;
  }

  void emit(std::span<const std::byte> bytes) {
    if (opts_.crc) crc_ = crc32(bytes, crc_);
    out_.write(bytes);
  }
  void emit(const std::string& bytes) { emit(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))); }

  atomic_file_writer out_;
  ckpt_write_options opts_;
  std::unordered_set<std::string> names_;
  std::uint32_t crc_ = 0;
  // the tensor being written
  bool open_ = false;
  std::string name_;
  dtype type_ = dtype::uint8;
  std::vector<std::int64_t> dims_;
  std::uint64_t total_ = 0, written_ = 0, piece_left_ = 0, pieces_ = 0;
};

}  // namespace reshard::io
