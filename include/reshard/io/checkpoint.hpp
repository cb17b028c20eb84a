// reshard/io/checkpoint.hpp: a checkpoint file of any format as tensors. checkpoint_reader
// memory-maps a `.ckpt` (MindSpore protobuf) or `.safetensors` file, a Hugging Face directory, or
// one `.distcp` data file of a PyTorch DCP checkpoint (its chunks, as its directory's `.metadata`
// places them: dcp.hpp), indexes it, and gives each
// parameter's dtype, dims and content pieces as spans into the mapping; it checks CRC trailers
// streaming, and releases the pages a reader touched. Also the format names and the file layout
// of a distributed checkpoint (`dir/rank_<r>/<prefix><r>.ckpt`). See docs/formats.md.
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/io/ckpt.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/dcp.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/strategy.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// formats

/// The two checkpoint formats MindSpore writes, Hugging Face's directory of safetensors shards
/// (hf.hpp): one checkpoint of full tensors, and (read only: a source) one `.distcp` data file of
/// a PyTorch DCP checkpoint (dcp.hpp), which holds chunks of tensors.
enum class checkpoint_format : std::uint8_t { ckpt, safetensors, hf, dcp };

constexpr std::string_view to_string(checkpoint_format f) noexcept {
  return f == checkpoint_format::ckpt ? "ckpt" : f == checkpoint_format::safetensors ? "safetensors" : f == checkpoint_format::hf ? "hf" : "dcp";
}
/// ".ckpt" or ".safetensors" (hf: none, a directory).
constexpr std::string_view extension_of(checkpoint_format f) noexcept {
  return f == checkpoint_format::ckpt ? ".ckpt" : f == checkpoint_format::safetensors ? ".safetensors" : "";
}
/// hf if `path` is a directory (a Hugging Face checkpoint: hf.hpp), safetensors if it ends in
/// ".safetensors", dcp if it ends in ".distcp", ckpt otherwise.
inline checkpoint_format format_of(const std::filesystem::path& path) {
  if (path.extension() == ".safetensors") return checkpoint_format::safetensors;
  if (path.extension() == ".distcp") return checkpoint_format::dcp;
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) ? checkpoint_format::hf : checkpoint_format::ckpt;
}

/// A directory holding a `.metadata` file: a PyTorch DCP checkpoint (dcp.hpp), whose chunks are
/// its layout.
inline bool is_dcp_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) && std::filesystem::exists(dcp_metadata_path(dir), ec);
}

/// The checkpoint file of rank `rank` in a distributed checkpoint directory, as the workflows
/// write it: `dir/rank_<rank>/<prefix><rank>.ckpt` (or .safetensors).
/// @throws reshard::error when `prefix` is not the start of a file name (it holds a '/' or a NUL
///         byte: `../../x_` would write outside `dir`)
inline std::filesystem::path rank_checkpoint_path(const std::filesystem::path& dir, std::string_view prefix,
                                                  std::int64_t rank, checkpoint_format format) {
  if (prefix.find_first_of(std::string_view("/\0", 2)) != std::string_view::npos)
    report_error("checkpoint prefix " + detail::quote_name(prefix) +
                 " holds a '/' or a NUL byte: it starts the output files' names (" +
                 (dir / "rank_<t>" / "<prefix><t>").string() + ") and may not name another directory");
  const std::string r = std::to_string(rank);
  std::string sub("rank_"), name(prefix);
  sub.append(r);
  name.append(r).append(extension_of(format));
  return dir / sub / name;
}

/// What a file holds, told from its name and first byte: a `.json` file is a JSON strategy, a
/// `.safetensors` file safetensors; otherwise a protobuf checkpoint starts with byte 0x0a
/// (Checkpoint.value) and a protobuf strategy with 0x08 (ParallelStrategyMap.current_stage).
enum class file_kind : std::uint8_t { checkpoint, safetensors, strategy };

inline file_kind detect_file_kind(const std::filesystem::path& path) {
  if (is_json_strategy(path)) return file_kind::strategy;
  if (format_of(path) != checkpoint_format::ckpt) return file_kind::safetensors;
  mapped_file f(path, "inspect");
  const auto b = f.bytes();
  if (!b.empty() && b[0] == std::byte{0x08}) return file_kind::strategy;
  return file_kind::checkpoint;
}

// ---------------------------------------------------------------------------------------------
// reading checkpoints of either format

namespace detail {

inline std::size_t page_size() noexcept {
  static const std::size_t p = [] {
    const long v = ::sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<std::size_t>(v) : std::size_t{4096};
  }();
  return p;
}

/// Linux maps cached file pages around a faulting address ("fault-around", 64 KiB windows by
/// default) without their being touched; releasing the touched bytes alone would leave those
/// behind, and they add up over a file. Releases cover whole windows of this size.
inline constexpr std::uintptr_t fault_around_window = std::uintptr_t{64} << 10;

/// Drops the pages of a read-only file mapping that cover `bytes` from this process (they are
/// read again from the page cache if touched later). Never changes the data. With `within` (the
/// mapped file, or a range of it), whole fault-around windows are dropped, clamped to it.
inline void release_pages(std::span<const std::byte> bytes, std::span<const std::byte> within = {}) noexcept {
  if (bytes.empty()) return;
  const std::uintptr_t page = page_size();
  const auto down = [](std::uintptr_t v, std::uintptr_t a) { return v & ~(a - 1); };
  const auto up = [](std::uintptr_t v, std::uintptr_t a) { return (v + a - 1) & ~(a - 1); };
  std::uintptr_t b = reinterpret_cast<std::uintptr_t>(bytes.data());
  std::uintptr_t e = b + bytes.size();
  if (within.empty()) {
    b = down(b, page);
    e = up(e, page);  // the mapping extends to the end of its last page
  } else {
    const std::uintptr_t wb = reinterpret_cast<std::uintptr_t>(within.data());
    b = std::max(down(b, fault_around_window), down(wb, page));
    e = std::min(up(e, fault_around_window), up(wb + within.size(), page));
  }
  ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace detail

/// A tensor's name as checkpoint_reader gives it: a view of the name its file's index holds
/// (alive as long as the reader), converted to a std::string where one is needed.
struct name_view : std::string_view {
  using std::string_view::string_view;
  name_view(std::string_view s) noexcept : std::string_view(s) {}  // NOLINT: implicit, as string_view's
  name_view(const std::string& s) noexcept : std::string_view(s) {}  // NOLINT: implicit, as string_view's
  operator std::string() const { return std::string(data(), size()); }  // NOLINT: implicit
};

/// Dims (or a DCP chunk's offsets) as checkpoint_reader gives them: a view of its file's index,
/// compared with and converted to a std::vector<std::int64_t> where one is needed.
struct dims_view : std::span<const std::int64_t> {
  using const_iterator = iterator;
  dims_view() noexcept = default;
  dims_view(std::span<const std::int64_t> s) noexcept : std::span<const std::int64_t>(s) {}  // NOLINT: implicit
  dims_view(const std::vector<std::int64_t>& v) noexcept : std::span<const std::int64_t>(v) {}  // NOLINT: implicit
  std::vector<std::int64_t> to_vector() const { return {begin(), end()}; }
  operator std::vector<std::int64_t>() const { return to_vector(); }  // NOLINT: implicit
  friend bool operator==(dims_view a, dims_view b) noexcept { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(dims_view a, const std::vector<std::int64_t>& b) noexcept { return a == dims_view(b); }
};

/// One tensor (or map tensor) of a checkpoint read by checkpoint_reader, in any format: views of
/// the reader's index (nothing is copied per tensor; valid while the reader lives).
/// `pieces` are the content's byte ranges in the file mapping, in order (several for a ckpt
/// tensor stored as several Values). Of a DCP file, one entry per chunk stored: `dims` are the
/// chunk's sizes and `offsets` where it lies in the full tensor (a name may then come several
/// times); other formats leave `offsets` empty.
struct tensor_ref {
  name_view name;
  bool map_tensor = false;
  io::dtype type = io::dtype::uint8;
  dims_view dims;
  std::span<const std::span<const std::byte>> pieces;
  const ckpt_entry* ckpt = nullptr;  ///< the ckpt entry (serialized Values), null for safetensors
  dims_view offsets;                 ///< DCP: the chunk's offsets in the full tensor

  std::uint64_t content_size() const noexcept { return detail::content_size(pieces); }
  /// dims [] or MindSpore's scalar dims [0] with one element.
  bool is_scalar() const noexcept { return detail::is_scalar(map_tensor, dims, pieces); }
};

/// A checkpoint file (.ckpt, or .safetensors by its name, or a Hugging Face directory of
/// safetensors shards, read as one file: hf_checkpoint, or a DCP `.distcp` file, read with its
/// directory's `.metadata`), memory-mapped and indexed. The CRC
/// trailer of a ckpt file is checked by verify_crc(), which streams the file and releases its
/// pages as it goes (the constructor only reads the Values' headers).
class checkpoint_reader {
 public:
  explicit checkpoint_reader(std::filesystem::path path) : checkpoint_reader(std::move(path), nullptr) {}

  /// A `.distcp` file of a DCP checkpoint whose `.metadata` the caller read already (`metadata`;
  /// null: read from the file's directory). Other formats ignore `metadata`. Opening it decodes the
  /// archive of each chunk the file stores (dcp_metadata::chunks_by_file; its zip directory and
  /// data.pkl, not its data).
  checkpoint_reader(std::filesystem::path path, std::shared_ptr<const dcp_metadata> metadata) : format_(format_of(path)) {
    if (format_ == checkpoint_format::dcp) {
      const auto dir = path.parent_path();
      if (!metadata) metadata = std::make_shared<const dcp_metadata>(read_dcp_metadata(dir));
      const std::string relative = path.filename().string();
      dcp_.emplace(dcp_part{std::move(metadata), mapped_file(path, "dcp", nullptr, 0, &reads_)});
      const auto& by_file = dcp_->metadata->chunks_by_file;
      if (const auto mine = by_file.find(relative); mine != by_file.end()) {
        // the chunks' shapes and data spans kept here (reserved: the views below stay valid)
        dcp_shapes_.reserve(mine->second.size());
        one_piece_.reserve(mine->second.size());
        for (const auto& [i, k] : mine->second) {  // by tensor, so that a name's chunks are adjacent
          const dcp_tensor& t = dcp_->metadata->tensors[i];
          torch_tensor c = dcp_chunk_tensor(dcp_->file, dir, t, k);
          one_piece_.push_back(c.data);
          dcp_shapes_.push_back(std::move(c.shape));
          entries_.push_back({t.fqn, false, t.type, dcp_shapes_.back(), {&one_piece_.back(), 1}, nullptr, t.chunks[k].offsets});
        }
      }
    } else if (format_ == checkpoint_format::ckpt) {
      ckpt_.emplace(std::move(path), ckpt_read_options{.verify_crc = false, .descriptor = &reads_});
      entries_.reserve(ckpt_->entries().size());
      for (const auto& e : ckpt_->entries())
        entries_.push_back({e.name, e.map_tensor, e.type, e.dims, e.pieces, &e, {}});
    } else if (format_ == checkpoint_format::hf) {
      hf_ = std::make_unique<hf_checkpoint>(std::move(path));
      one_piece_.reserve(hf_->entries().size());
      for (const auto& e : hf_->entries()) {
        one_piece_.push_back(e.tensor.data);
        entries_.push_back({e.tensor.name, false, e.tensor.type, e.tensor.shape, {&one_piece_.back(), 1}, nullptr, {}});
      }
    } else {
      st_.emplace(std::move(path));
      one_piece_.reserve(st_->entries().size());
      for (const auto& e : st_->entries()) {
        one_piece_.push_back(e.data);
        entries_.push_back({e.name, false, e.type, e.shape, {&one_piece_.back(), 1}, nullptr, {}});
      }
      st_bytes_ = data_section_st();
    }
    if (!ckpt_) {  // a ckpt file's entries are found through ckpt_file's table (the same order)
      by_name_.reserve(entries_.size());
      for (std::size_t i = 0; i < entries_.size(); ++i) by_name_.emplace(entries_[i].name, i);
    }
    // the size, the modification time and the file's identity: of a ckpt file what fstat said
    // when it was opened to be mapped, of the others one stat
    struct ::stat st {};
    if (ckpt_) {
      const file_status& f = ckpt_->status();
      file_size_ = ckpt_->bytes().size();
      id_ = {f.dev, f.ino};
      mtime_ns_ = f.mtime_ns;
    } else if (::stat(path_ref().c_str(), &st) == 0) {
      file_size_ = static_cast<std::uint64_t>(st.st_size);
      id_ = {st.st_dev, st.st_ino};
      mtime_ns_ = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    }
    if (hf_) file_size_ = hf_->file_size();
    if (!ckpt_ || !ckpt_->untouched()) release_all();  // indexing touched the headers only; start from nothing resident
  }

  const std::filesystem::path& path() const noexcept { return path_ref(); }
  checkpoint_format format() const noexcept { return format_; }
  /// The file's size in bytes (hf: the shards' total).
  std::uint64_t file_size() const noexcept { return file_size_; }
  /// The modification time of the file (hf: of its directory) in nanoseconds when it was opened
  /// (0 if it could not be read).
  std::int64_t mtime_ns() const noexcept { return mtime_ns_; }
  /// The file's (hf: its directory's) device and inode when it was opened ({0, 0} if unknown):
  /// what outputs are compared with, so that no run writes over its input.
  std::pair<dev_t, ino_t> file_id() const noexcept { return id_; }
  std::span<const tensor_ref> entries() const noexcept { return entries_; }
  /// The mapped bytes: the whole file (ckpt), the data section (safetensors), the range of all
  /// the shards (hf).
  std::span<const std::byte> bytes() const noexcept {
    return ckpt_ ? ckpt_->bytes() : hf_ ? hf_->bytes() : dcp_ ? dcp_->file.bytes() : st_bytes_;
  }
  bool has_crc() const noexcept { return ckpt_ && ckpt_->has_crc(); }

  /// The (first) entry named `name`, or null.
  const tensor_ref* find(std::string_view name) const {
    if (ckpt_) {
      const ckpt_entry* e = ckpt_->find(name);
      return e ? &entries_[static_cast<std::size_t>(e - ckpt_->entries().data())] : nullptr;
    }
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &entries_[it->second];
  }
  /// The entry named `name` that holds the box `held` of the full tensor: of a DCP file, the
  /// chunk at held's offset (null if the file stores none there); of the other formats, the
  /// entry named `name` (the caller checks its dims).
  const tensor_ref* find(std::string_view name, const box& held) const {
    if (!dcp_) return find(name);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return nullptr;
    for (std::size_t i = it->second; i < entries_.size() && entries_[i].name == name; ++i)
      if (index_list(entries_[i].offsets.begin(), entries_[i].offsets.end()) == held.offset) return &entries_[i];
    return nullptr;
  }

  /// Checks the crc_num trailer, if any: reshard::error on a mismatch. Reads the file once, in
  /// windows of `window` bytes whose pages are released after use.
  void verify_crc(std::size_t window = std::size_t{8} << 20) const {
    if (!has_crc()) return;
    const auto all = ckpt_->bytes();
    const auto body = all.first(all.size() - detail::crc_trailer_size);
    window = std::max<std::size_t>(window, 4096);
    std::uint32_t c = 0;
    for (std::size_t at = 0; at < body.size(); at += window) {
      const auto part = body.subspan(at, std::min(window, body.size() - at));
      c = crc32(part, c);
      detail::release_pages(part);
    }
    detail::check_crc_trailer(all, c, "ckpt: " + path().string() + ": ");
  }

  /// Releases every resident page of the mapping (the data stay readable).
  void release_all() const noexcept { detail::release_pages(bytes()); }

  /// The file offset of a byte of the mapping (of an entry's pieces; hf: the logical offset in
  /// the range of the shards).
  std::uint64_t offset_of(const std::byte* p) const noexcept {
    if (hf_) return hf_->offset_of(p);
    return static_cast<std::uint64_t>(p - (ckpt_ ? ckpt_->bytes() : dcp_ ? dcp_->file.bytes() : st_->file_bytes()).data());
  }

  /// Reads `out.size()` bytes at file offset `offset` with pread(2) (the page tables unchanged:
  /// on network filesystems and on machines where page faults are dear, faster than reading the
  /// mapping). The descriptor is kept until close_for_reads() within the process's
  /// descriptor_budget: of a ckpt file the one it was opened with to be indexed, of the others
  /// opened on first use (read_descriptor).
  void pread_into(std::span<std::byte> out, std::uint64_t offset) const {
    if (hf_) return hf_->pread_into(out, offset);
    reads_.pread(out, offset, path(), "checkpoint");
  }
  /// Closes the descriptor pread_into() reads (reopened if read again).
  void close_for_reads() const noexcept {
    if (hf_) hf_->close_for_reads();
    reads_.close();
  }
  ~checkpoint_reader() { close_for_reads(); }
  checkpoint_reader(checkpoint_reader&&) = delete;
  checkpoint_reader& operator=(checkpoint_reader&&) = delete;

 private:
  const std::filesystem::path& path_ref() const noexcept {
    return ckpt_ ? ckpt_->path() : hf_ ? hf_->path() : dcp_ ? dcp_->file.path() : st_->path();
  }
  std::span<const std::byte> data_section_st() const noexcept {
    // the data of a safetensors file: from its first tensor's data to its last's (computed once:
    // bytes() is called per tensor written)
    if (st_->entries().empty()) return {};
    const std::byte* lo = nullptr;
    const std::byte* hi = nullptr;
    for (const auto& e : st_->entries()) {
      if (e.data.empty()) continue;
      if (!lo || e.data.data() < lo) lo = e.data.data();
      if (!hi || e.data.data() + e.data.size() > hi) hi = e.data.data() + e.data.size();
    }
    return lo ? std::span<const std::byte>(lo, static_cast<std::size_t>(hi - lo)) : std::span<const std::byte>{};
  }

  read_descriptor reads_;  // for pread_into (before ckpt_: a ckpt file's is the one it was indexed from)
  checkpoint_format format_;
  std::optional<ckpt_file> ckpt_;
  std::optional<safetensors_file> st_;
  std::unique_ptr<hf_checkpoint> hf_;
  struct dcp_part {
    std::shared_ptr<const dcp_metadata> metadata;
    mapped_file file;
  };
  std::optional<dcp_part> dcp_;  // a DCP data file: its checkpoint's metadata, the file mapped
  std::vector<tensor_ref> entries_;  // views of the index of ckpt_, st_, hf_ or dcp_, or of:
  std::vector<std::span<const std::byte>> one_piece_;  // not ckpt: each entry's data, its one piece
  std::vector<std::vector<std::int64_t>> dcp_shapes_;  // dcp: each chunk's shape
  // keyed by entries_' own names (entries_ is not changed after the constructor); not of a ckpt
  // file, whose entries_ are its ckpt_file's in order, found by that file's table
  std::unordered_map<std::string_view, std::size_t> by_name_;
  std::uint64_t file_size_ = 0;
  std::int64_t mtime_ns_ = 0;
  std::pair<dev_t, ino_t> id_{0, 0};
  std::span<const std::byte> st_bytes_;  // safetensors: data_section_st()
};

}  // namespace reshard::io
