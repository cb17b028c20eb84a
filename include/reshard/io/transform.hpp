// reshard/io/transform.hpp: MindSpore's checkpoint-transformation workflows, on any M source
// ranks and any N target ranks (see shared/spec/mindspore.md §1, §3 and §5).
//
//   transform_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy)   a whole directory
//   transform_checkpoint_by_rank(rank, {src_rank: file}, out_file, src, dst)      one target rank
//   rank_list_for_transform(rank, src_strategy, dst_strategy)                     its source ranks
//   merge_checkpoints(src_dir, out_file, src_strategy)                            all ranks -> one file
//   split_checkpoint(file, dst_dir, dst_strategy)                                 one file -> ranks
//   convert_checkpoint(in_file, out_file)                                         ckpt <-> safetensors
//   transform_checkpoints_for_ranks(src_dir, dst_dir, ..., ranks)                 some target ranks
//   transform_target_bytes / balance_targets    split a transform among workers (mpi/transform.hpp)
//
// A strategy path that is empty means "no strategy": every parameter unsplit on one rank
// (MindSpore's None). Strategy files are read with read_strategy (JSON or protobuf); a strategy
// whose every parameter name is "<stage>-<name>" (merge_pipeline_strategies) is a pipeline
// strategy: stage s lives on global ranks s*n .. s*n+n-1, n the devices of one stage.
//
// Which parameters a target rank t gets, and from where (M source ranks):
//   * listed in the source strategy: sliced by the target strategy's layout for t's stage (a
//     parameter that the target strategy lists only for other stages is not written to t); the
//     data come from the source strategy's lowest stage that lists it. A parameter the target
//     strategy does not list at all (or no target strategy) is written whole (unsplit);
//   * not listed in the source strategy (learning_rate, global_step, ...): taken from source
//     rank t % M, byte-exact (ckpt -> ckpt copies its serialized Values); if the target strategy
//     lists it, t gets the slice of it that its layout says.
//
// Memory: source files are memory-mapped, never read whole. A target tensor is assembled in
// pieces of at most `buffer_bytes` (contiguous row ranges of the target slice), each filled
// from the mapped source pieces the plan names and streamed to the output; the source pages a
// piece touched are then released (madvise MADV_DONTNEED), so the peak resident memory is
// about jobs * (buffer_bytes + the source rows of one piece), whatever the checkpoint sizes.
// A piece that is one contiguous run of one source tensor is written straight from the mapping.
//
// Errors: everything that can be checked before writing is (strategies, shapes, dtypes, every
// source file and parameter that will be read, CRC trailers); a reshard::error names the file,
// the parameter and the reason. Outputs are staged as `<file>.reshard-<pid>.part` and renamed
// into place only when every target file is complete; after a failure the staged files (and the
// directories the run created) are removed. A run first removes the temporaries that killed runs
// left for its outputs (detail::remove_stale_temporaries, io/mapped_file.hpp). An existing
// output is never replaced unless `force`. Inputs are only ever mapped read-only.
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/ckpt.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
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

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// formats

/// The two checkpoint formats MindSpore writes.
enum class checkpoint_format : std::uint8_t { ckpt, safetensors };

constexpr std::string_view to_string(checkpoint_format f) noexcept {
  return f == checkpoint_format::ckpt ? "ckpt" : "safetensors";
}
/// ".ckpt" or ".safetensors".
constexpr std::string_view extension_of(checkpoint_format f) noexcept {
  return f == checkpoint_format::ckpt ? ".ckpt" : ".safetensors";
}
/// safetensors if `path` ends in ".safetensors", ckpt otherwise.
inline checkpoint_format format_of(const std::filesystem::path& path) {
  return path.extension() == ".safetensors" ? checkpoint_format::safetensors : checkpoint_format::ckpt;
}

/// What a file holds, told from its name and first byte: a `.json` file is a JSON strategy, a
/// `.safetensors` file safetensors; otherwise a protobuf checkpoint starts with byte 0x0a
/// (Checkpoint.value) and a protobuf strategy with 0x08 (ParallelStrategyMap.current_stage).
enum class file_kind : std::uint8_t { checkpoint, safetensors, strategy };

inline file_kind detect_file_kind(const std::filesystem::path& path) {
  if (is_json_strategy(path)) return file_kind::strategy;
  if (format_of(path) == checkpoint_format::safetensors) return file_kind::safetensors;
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

/// One tensor (or map tensor) of a checkpoint read by checkpoint_reader, in either format.
/// `pieces` are the content's byte ranges in the file mapping, in order (several for a ckpt
/// tensor stored as several Values).
struct tensor_ref {
  std::string name;
  bool map_tensor = false;
  io::dtype type = io::dtype::uint8;
  std::vector<std::int64_t> dims;
  std::vector<std::span<const std::byte>> pieces;
  const ckpt_entry* ckpt = nullptr;  ///< the ckpt entry (serialized Values), null for safetensors

  std::uint64_t content_size() const noexcept {
    std::uint64_t n = 0;
    for (auto p : pieces) n += p.size();
    return n;
  }
  /// dims [] or MindSpore's scalar dims [0] with one element.
  bool is_scalar() const noexcept {
    return !map_tensor && (dims.empty() || (dims.size() == 1 && dims[0] == 0 && content_size() != 0));
  }
};

/// A checkpoint file (.ckpt, or .safetensors by its name), memory-mapped and indexed. The CRC
/// trailer of a ckpt file is checked by verify_crc(), which streams the file and releases its
/// pages as it goes (the constructor only reads the Values' headers).
class checkpoint_reader {
 public:
  explicit checkpoint_reader(std::filesystem::path path) : format_(format_of(path)) {
    if (format_ == checkpoint_format::ckpt) {
      ckpt_.emplace(std::move(path), ckpt_read_options{.verify_crc = false});
      for (const auto& e : ckpt_->entries())
        entries_.push_back({e.name, e.map_tensor, e.type, e.dims, e.pieces, &e});
    } else {
      st_.emplace(std::move(path));
      for (const auto& e : st_->entries()) entries_.push_back({e.name, false, e.type, e.shape, {e.data}, nullptr});
    }
    for (std::size_t i = 0; i < entries_.size(); ++i) by_name_.emplace(entries_[i].name, i);
    std::error_code ec;
    file_size_ = std::filesystem::file_size(path_ref(), ec);
    release_all();  // indexing touched the headers only; start from nothing resident
  }

  const std::filesystem::path& path() const noexcept { return path_ref(); }
  checkpoint_format format() const noexcept { return format_; }
  /// The file's size in bytes.
  std::uint64_t file_size() const noexcept { return file_size_; }
  std::span<const tensor_ref> entries() const noexcept { return entries_; }
  /// The mapped bytes: the whole file (ckpt), the data section (safetensors).
  std::span<const std::byte> bytes() const noexcept { return ckpt_ ? ckpt_->bytes() : file_bytes_st(); }
  bool has_crc() const noexcept { return ckpt_ && ckpt_->has_crc(); }

  const tensor_ref* find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &entries_[it->second];
  }

  /// Checks the crc_num trailer, if any: reshard::error on a mismatch. Reads the file once, in
  /// windows whose pages are released after use.
  void verify_crc() const {
    if (!has_crc()) return;
    const auto all = ckpt_->bytes();
    const auto body = all.first(all.size() - 17);
    constexpr std::size_t window = std::size_t{8} << 20;
    std::uint32_t c = 0;
    for (std::size_t at = 0; at < body.size(); at += window) {
      const auto part = body.subspan(at, std::min(window, body.size() - at));
      c = crc32(part, c);
      detail::release_pages(part);
    }
    const auto stored = all.last(10);
    bool fits = true;
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < 10; ++i) {
      if (i < 6 && stored[i] != std::byte{0}) fits = false;
      value = value << 8 | std::to_integer<std::uint64_t>(stored[i]);
    }
    if (!fits || value != c)
      report_error("ckpt: " + path().string() + ": CRC mismatch: the crc_num trailer holds " +
                   (fits ? std::to_string(value) : std::string("a value over 2^32")) + ", the " +
                   std::to_string(body.size()) + " bytes before it give " + std::to_string(c));
  }

  /// Releases every resident page of the mapping (the data stay readable).
  void release_all() const noexcept { detail::release_pages(bytes()); }

 private:
  const std::filesystem::path& path_ref() const noexcept { return ckpt_ ? ckpt_->path() : st_->path(); }
  std::span<const std::byte> file_bytes_st() const noexcept {
    // the data of a safetensors file: from its first tensor's data to its last's
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

  checkpoint_format format_;
  std::optional<ckpt_file> ckpt_;
  std::optional<safetensors_file> st_;
  std::vector<tensor_ref> entries_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::uint64_t file_size_ = 0;
};

// ---------------------------------------------------------------------------------------------
// strategies as layouts

/// One layout of a parameter in a strategy, with the pipeline stage it belongs to.
struct staged_layout {
  std::uint32_t stage = 0;
  param_layout stored;
  friend bool operator==(const staged_layout&, const staged_layout&) = default;
};

/// A strategy file resolved by parameter: for each original parameter name its layouts, one per
/// pipeline stage that holds it (ascending). Default-constructed = no strategy: every parameter
/// unsplit on one rank.
class strategy_layouts {
 public:
  strategy_layouts() = default;

  /// Reads `file`; an empty path is no strategy.
  explicit strategy_layouts(const std::filesystem::path& file) {
    if (file.empty()) return;
    *this = strategy_layouts(read_strategy(file), file.string());
  }

  /// Resolves `s`; `source` names it in messages.
  strategy_layouts(const strategy_file& s, std::string source) : source_(std::move(source)), present_(true) {
    const std::string prefix = "strategy: " + source_ + ": ";
    pipeline_ = !s.layouts.empty() && std::all_of(s.layouts.begin(), s.layouts.end(), [](const auto& l) {
      return split_pipeline_name(l.first).has_value();
    });
    std::string first;
    for (const auto& [merged, l] : s.layouts) {
      std::uint32_t stage = 0;
      std::string name = merged;
      if (pipeline_) {
        const auto p = *split_pipeline_name(merged);
        stage = p.stage;
        name = std::string(p.name);
      }
      index_t n = 1;
      for (auto d : l.dev_matrix) {
        if (d < 1) report_error(prefix + "parameter " + detail::quote_name(merged) + ": device matrix " +
                                detail::format_dims(l.dev_matrix) + " has an axis of size " + std::to_string(d));
        if (n > (index_t{1} << 31) / d)
          report_error(prefix + "parameter " + detail::quote_name(merged) + ": device matrix " +
                       detail::format_dims(l.dev_matrix) + " has more than 2^31 devices");
        n *= d;
      }
      if (l.dev_matrix.empty())
        report_error(prefix + "parameter " + detail::quote_name(merged) + ": empty device matrix");
      if (first.empty()) {
        first = merged;
        stage_ranks_ = n;
      } else if (n != stage_ranks_) {
        report_error(prefix + "parameter " + detail::quote_name(merged) + " has a device matrix of " +
                     std::to_string(n) + " devices " + detail::format_dims(l.dev_matrix) + ", but parameter " +
                     detail::quote_name(first) + " has " + std::to_string(stage_ranks_) +
                     " (the layouts of one pipeline stage cover the same devices)");
      }
      stages_ = std::max<index_t>(stages_, index_t{stage} + 1);
      auto [it, fresh] = by_name_.try_emplace(name);
      if (fresh) names_.push_back(name);
      for (const auto& e : it->second)
        if (e.stage == stage)
          report_error(prefix + "parameter " + detail::quote_name(name) + " has two layouts for stage " +
                       std::to_string(stage));
      it->second.push_back({stage, l});
      std::sort(it->second.begin(), it->second.end(), [](const auto& a, const auto& b) { return a.stage < b.stage; });
    }
    if ((index_t{1} << 31) / stage_ranks_ < stages_)
      report_error(prefix + std::to_string(stages_) + " pipeline stages of " + std::to_string(stage_ranks_) +
                   " devices exceed 2^31 ranks");
  }

  /// False for "no strategy".
  bool present() const noexcept { return present_; }
  /// The file it was read from ("" for none).
  const std::string& source() const noexcept { return source_; }
  /// Parameter names were "<stage>-<name>" (a merged pipeline strategy).
  bool pipeline() const noexcept { return pipeline_; }
  /// Devices of one pipeline stage (1 for none).
  index_t stage_ranks() const noexcept { return stage_ranks_; }
  /// Number of stages: the highest stage + 1 (1 for none).
  index_t stages() const noexcept { return stages_; }
  /// All ranks: stages() * stage_ranks() (1 for none).
  index_t ranks() const noexcept { return stages_ * stage_ranks_; }
  /// The stage global rank `rank` belongs to.
  std::uint32_t stage_of(index_t rank) const noexcept { return static_cast<std::uint32_t>(rank / stage_ranks_); }
  /// Original parameter names, in file order of their first layout.
  const std::vector<std::string>& names() const noexcept { return names_; }
  /// The layouts of parameter `name` (ascending stage), or null if the strategy does not list it.
  const std::vector<staged_layout>* find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &it->second;
  }

 private:
  std::string source_;
  bool present_ = false;
  bool pipeline_ = false;
  index_t stage_ranks_ = 1;
  index_t stages_ = 1;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::vector<staged_layout>> by_name_;
};

namespace detail {

// Slices of each dim (product of the splitting device axes), and the optimizer-sharding parts
// of dim 0, of a stored layout; `who` prefixes errors.
struct stored_counts {
  std::vector<index_t> slices;
  index_t opt_parts = 1;
};

inline stored_counts counts_of(const param_layout& pl, const std::string& who) {
  const auto nd = static_cast<index_t>(pl.dev_matrix.size());
  stored_counts c;
  std::vector<char> used(pl.dev_matrix.size(), 0);
  for (std::size_t i = 0; i < pl.tensor_map.size(); ++i) {
    index_t s = 1;
    for (auto a : pl.tensor_map[i]) {
      if (a == -1 && pl.tensor_map[i].size() == 1) break;
      if (a < 0 || a >= nd)
        report_error(who + "tensor_map[" + std::to_string(i) + "] names device axis " + std::to_string(a) +
                     ", out of range for device matrix " + format_dims(pl.dev_matrix) + " (valid: -1 or 0.." +
                     std::to_string(nd - 1) + ")");
      const auto axis = static_cast<std::size_t>(nd - 1 - a);
      used[axis] = 1;
      s *= pl.dev_matrix[axis];
    }
    c.slices.push_back(s);
  }
  const index_t size = pl.opt_weight_shard_size;
  if (size < -1) report_error(who + "opt_weight_shard_size " + std::to_string(size) + " is negative");
  if (size == -1) {
    for (std::size_t a = 0; a < used.size(); ++a)
      if (!used[a]) c.opt_parts *= pl.dev_matrix[a];
  } else if (size > 1) {
    c.opt_parts = size;
  }
  return c;
}

inline void check_supported(const param_layout& pl, const std::string& who) {
  if (pl.field != 0)
    report_error(who + "field " + std::to_string(pl.field) +
                 " (MindSpore's embedding field split) is not supported");
  if (!pl.indices_offset.empty()) {
    // MindSpore records the start row of each manual slice beside param_split_shape; offsets that
    // say exactly that are redundant, any other offsets are not supported.
    std::vector<std::int64_t> starts;
    std::int64_t at = 0;
    for (auto v : pl.param_split_shape) starts.push_back(at), at += v;
    if (starts != pl.indices_offset)
      report_error(who + "indices_offset " + format_dims(pl.indices_offset) +
                   " is not supported (only the start rows of param_split_shape " +
                   format_dims(pl.param_split_shape) + " are)");
  }
}

}  // namespace detail

/// The layout of a parameter stored as `pl` with full shape `shape`, on pipeline stage `stage`.
/// `who` ("strategy: f.ckpt: parameter 'w'") prefixes errors. Refuses what reshard does not
/// support: field != 0 (embedding field split) and indices_offset other than the start rows of
/// param_split_shape.
inline layout to_layout(const param_layout& pl, const extents& shape, index_t stage, const std::string& who) {
  const std::string w = who + ": ";
  detail::check_supported(pl, w);
  if (pl.tensor_map.size() != shape.size())
    report_error(w + "tensor_map has " + std::to_string(pl.tensor_map.size()) + " entries but the tensor has " +
                 std::to_string(shape.size()) + " dims (shape " + to_string(shape) + ")");
  tensor_map map;
  for (const auto& axes : pl.tensor_map) {
    if (axes.size() == 1)
      map.emplace_back(static_cast<index_t>(axes[0]));
    else
      map.emplace_back(std::vector<index_t>(axes.begin(), axes.end()));
  }
  mindspore_options o;
  o.opt = {pl.opt_weight_shard_step, pl.opt_weight_shard_size};
  o.stage = stage;
  o.param_split_shape = extents(pl.param_split_shape.begin(), pl.param_split_shape.end());
  o.name = who;
  return mindspore_layout(extents(pl.dev_matrix.begin(), pl.dev_matrix.end()), map, shape, o);
}

/// The full shape of a parameter stored as `pl` whose slice on some rank has dims `slice_dims`:
/// each dim times its slice count, dim 0 also times the optimizer-sharding parts, or dim 0 the
/// sum of param_split_shape when given. `who` prefixes errors.
inline extents full_shape_from_slice(const param_layout& pl, std::span<const std::int64_t> slice_dims,
                                     const std::string& who) {
  const std::string w = who + ": ";
  detail::check_supported(pl, w);
  if (pl.tensor_map.size() != slice_dims.size())
    report_error(w + "tensor_map has " + std::to_string(pl.tensor_map.size()) +
                 " entries but the checkpoint's slice has " + std::to_string(slice_dims.size()) + " dims " +
                 detail::format_dims(slice_dims));
  const auto c = detail::counts_of(pl, w);
  extents full;
  for (std::size_t i = 0; i < slice_dims.size(); ++i) {
    index_t f = slice_dims[i] * c.slices[i];
    if (i == 0) f = pl.param_split_shape.empty()
                        ? f * c.opt_parts
                        : std::accumulate(pl.param_split_shape.begin(), pl.param_split_shape.end(), index_t{0});
    full.push_back(f);
  }
  return full;
}

// ---------------------------------------------------------------------------------------------
// options, progress, summary

/// Where a transform stands; passed to transform_options::progress (calls are serialized).
struct transform_progress {
  index_t rank = 0;                 ///< the target rank being written
  std::string_view parameter;       ///< the parameter just written (or being written)
  std::uint64_t bytes_done = 0;     ///< tensor bytes written so far, all targets
  std::uint64_t bytes_total = 0;    ///< tensor bytes to write, all targets
  std::size_t files_done = 0;       ///< target files complete
  std::size_t files_total = 0;
};

struct transform_options {
  /// Format of the files transform_checkpoints / split_checkpoint write (the by-file functions
  /// follow the output file's name: ".safetensors" or not).
  checkpoint_format format = checkpoint_format::ckpt;
  unsigned jobs = 1;          ///< target files written in parallel (0 = hardware concurrency)
  bool force = false;         ///< replace existing output files
  bool crc = false;           ///< append MindSpore's crc_num trailer to ckpt outputs
  bool verify_crc = true;     ///< check the crc_num trailer of every source file read
  std::uint64_t buffer_bytes = std::uint64_t{4} << 20;  ///< most bytes a worker assembles at once
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;           ///< piece size of written ckpt tensors
  std::function<void(const transform_progress&)> progress{};  ///< called as parameters are written
  /// Called once every check has passed, before anything is written; if it throws, nothing is
  /// written and the exception propagates (a barrier between cooperating processes).
  std::function<void()> checked{};
  /// Called once every target file is written (staged), before any is renamed into place; if it
  /// throws, the staged files are removed and the exception propagates.
  std::function<void()> staged{};
};

/// What a transform did.
struct transform_summary {
  std::size_t files = 0;              ///< target files written
  std::size_t sliced = 0;             ///< tensors assembled from source slices (all targets)
  std::size_t copied = 0;             ///< parameters copied unchanged (all targets)
  std::size_t source_files = 0;       ///< source files read
  std::uint64_t source_bytes = 0;     ///< their total size
  std::uint64_t bytes_read = 0;       ///< tensor bytes read from the source mappings
  std::uint64_t bytes_written = 0;    ///< bytes of the files written
  double seconds = 0;                 ///< wall time
  std::uint64_t peak_rss_bytes = 0;   ///< the process's peak resident memory (getrusage)
  std::vector<std::filesystem::path> outputs;  ///< the files written, by target rank
  std::vector<std::string> warnings;  ///< things done that the caller may not expect

  /// Bytes written per second.
  double throughput() const noexcept { return seconds > 0 ? static_cast<double>(bytes_written) / seconds : 0.0; }
};

/// The process's peak resident set size in bytes (getrusage ru_maxrss).
inline std::uint64_t peak_rss_bytes() noexcept {
  struct ::rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
#if defined(__APPLE__)
  return static_cast<std::uint64_t>(u.ru_maxrss);  // bytes
#else
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // KiB
#endif
}

// ---------------------------------------------------------------------------------------------
// the engine

namespace detail {

// Calls f(src_offset, dst_offset, bytes) for each contiguous run of box `b` copied from a
// row-major slice holding box `sb` to a row-major slice holding box `db`, in row-major order of
// `b` (so source and target offsets both increase). Dims contiguous in both are coalesced.
template <class F>
void for_each_run(const box& sb, const box& db, const box& b, std::size_t elem, F&& f) {
  if (volume(b) == 0) return;
  const std::size_t n = b.offset.size();
  std::vector<index_t> ss(n), ds(n);
  index_t s_acc = static_cast<index_t>(elem), d_acc = static_cast<index_t>(elem);
  for (std::size_t i = n; i-- > 0;) {
    ss[i] = s_acc;
    ds[i] = d_acc;
    s_acc *= sb.extent[i];
    d_acc *= db.extent[i];
  }
  index_t so = 0, dof = 0;
  for (std::size_t i = 0; i < n; ++i) {
    so += (b.offset[i] - sb.offset[i]) * ss[i];
    dof += (b.offset[i] - db.offset[i]) * ds[i];
  }
  index_t run = static_cast<index_t>(elem);
  std::size_t outer = n;
  while (outer > 0) {
    const std::size_t d = outer - 1;
    run *= b.extent[d];
    outer = d;
    if (b.extent[d] != sb.extent[d] || b.extent[d] != db.extent[d]) break;
  }
  std::vector<index_t> idx(outer, 0);
  while (true) {
    f(static_cast<std::uint64_t>(so), static_cast<std::uint64_t>(dof), static_cast<std::uint64_t>(run));
    std::size_t k = outer;
    while (k > 0) {
      --k;
      so += ss[k];
      dof += ds[k];
      if (++idx[k] < b.extent[k]) break;
      so -= b.extent[k] * ss[k];
      dof -= b.extent[k] * ds[k];
      idx[k] = 0;
      if (k == 0) return;
    }
    if (outer == 0) return;
  }
}

// The element offset of box `b` in a row-major slice holding box `held` if `b` is one contiguous
// run of it (leading dims of extent 1, then one partial dim, then whole dims); none otherwise.
inline std::optional<std::uint64_t> contiguous_offset(const box& held, const box& b) {
  const std::size_t n = b.offset.size();
  std::size_t d = n;
  while (d > 0 && b.extent[d - 1] == held.extent[d - 1]) --d;  // [d, n) whole
  for (std::size_t i = 0; i + 1 < d; ++i)
    if (b.extent[i] != 1) return std::nullopt;  // [0, d - 1) single, d - 1 partial
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < n; ++i)
    off = off * static_cast<std::uint64_t>(held.extent[i]) + static_cast<std::uint64_t>(b.offset[i] - held.offset[i]);
  return off;
}

// The chunks of a row-major slice of shape `e` (element size `elem`) of at most `limit` bytes
// each (at least one innermost row of the chosen dim): boxes in slice-local coordinates, in
// order, each a contiguous byte range of the slice.
template <class F>
void for_each_chunk(const extents& e, std::size_t elem, std::uint64_t limit, F&& f) {
  const std::size_t n = e.size();
  box whole{extents(n, 0), e};
  if (n == 0 || volume(e) == 0) {
    f(whole);
    return;
  }
  // inner[d]: bytes of one index of dim d (everything after it)
  std::vector<std::uint64_t> inner(n);
  std::uint64_t acc = elem;
  for (std::size_t d = n; d-- > 0;) {
    inner[d] = acc;
    acc *= static_cast<std::uint64_t>(e[d]);
  }
  if (acc <= limit) {
    f(whole);
    return;
  }
  std::size_t d = 0;
  while (d + 1 < n && inner[d] > limit) ++d;
  const index_t k = static_cast<index_t>(std::max<std::uint64_t>(1, limit / inner[d]));
  std::vector<index_t> idx(d, 0);  // odometer over dims before d
  box c{extents(n, 0), e};
  for (std::size_t i = 0; i < d; ++i) c.extent[i] = 1;
  while (true) {
    for (std::size_t i = 0; i < d; ++i) c.offset[i] = idx[i];
    for (index_t a = 0; a < e[d]; a += k) {
      c.offset[d] = a;
      c.extent[d] = std::min(k, e[d] - a);
      f(static_cast<const box&>(c));
    }
    std::size_t i = d;
    while (i > 0) {
      --i;
      if (++idx[i] < e[i]) break;
      idx[i] = 0;
      if (i == 0) return;
    }
    if (d == 0) return;
  }
}

// Copies `len` bytes at `offset` of a content split into `pieces` into `out`.
inline void copy_from_pieces(std::span<const std::span<const std::byte>> pieces,
                             std::span<const std::uint64_t> starts, std::uint64_t offset, std::byte* out,
                             std::uint64_t len) {
  std::size_t k = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin()) - 1;
  while (len > 0) {
    const std::uint64_t in = offset - starts[k];
    const std::uint64_t n = std::min<std::uint64_t>(len, pieces[k].size() - in);
    std::memcpy(out, pieces[k].data() + in, static_cast<std::size_t>(n));
    out += n;
    offset += n;
    len -= n;
    ++k;
  }
}

// Releases the pages of bytes [lo, hi) of a content split into `pieces`, in a file mapped at
// `file`.
inline void release_content(const tensor_ref& t, std::uint64_t lo, std::uint64_t hi,
                            std::span<const std::byte> file) noexcept {
  std::uint64_t at = 0;
  for (auto p : t.pieces) {
    const std::uint64_t b = std::max(lo, at), e = std::min(hi, at + p.size());
    if (b < e) release_pages(p.subspan(static_cast<std::size_t>(b - at), static_cast<std::size_t>(e - b)), file);
    at += p.size();
  }
}

// The source rank to read `region` of the source layout from, for target rank `t`: `t` itself
// when it holds the region, else the replica reshard::rank_list chooses, else any replica that
// `available` accepts; -1 if none is.
template <class Available>
index_t choose_source(const reshard::detail::geometry& gs, index_t region, index_t t, index_t dst_first_rank, Available&& available) {
  if (gs.holds(t, region) && available(t)) return t;
  const index_t begin = gs.owner_start[region], g = gs.owner_start[region + 1] - begin;
  const index_t preferred = gs.owners[begin + (t - dst_first_rank) % g];
  if (available(preferred)) return preferred;
  for (index_t k = 0; k < g; ++k)
    if (available(gs.owners[begin + k])) return gs.owners[begin + k];
  return -1;
}

inline std::string rank_range(const reshard::detail::geometry& gs, index_t region) {
  std::string s;
  for (index_t k = gs.owner_start[region]; k < gs.owner_start[region + 1]; ++k) {
    if (!s.empty()) s += ',';
    s += std::to_string(gs.owners[k]);  // appended, not "," + ...: GCC 12 -O3 -Wrestrict
  }
  return s;
}

// A parameter to be sliced: its layouts and what the sources hold.
struct param_info {
  std::string name;
  const std::vector<staged_layout>* src_entries = nullptr;  // null: not listed in the source strategy
  const std::vector<staged_layout>* dst_entries = nullptr;  // null: not listed in the target strategy
  bool resolved = false;
  extents shape;
  bool scalar = false;
  std::vector<std::int64_t> scalar_dims;  // how the source writes the scalar's dims
  bool type_known = false;
  dtype type = dtype::uint8;
  std::string type_file;
  std::optional<layout> src;  // listed in the source strategy: its layout (lowest stage)
  reshard::detail::geometry gs;
  std::vector<std::pair<std::uint32_t, layout>> dst;  // per target stage
  std::set<index_t> checked;  // source ranks whose entry was checked
};

// One parameter of one target file.
struct out_item {
  param_info* p = nullptr;          // sliced; null for a raw copy
  const tensor_ref* raw = nullptr;  // raw copy (or the unlisted source of a sliced parameter)
  const layout* dst = nullptr;      // null: the whole tensor
  index_t base = 0;                 // source rank t % M
  std::string_view name() const { return p ? std::string_view(p->name) : std::string_view(raw->name); }
};

struct target_spec {
  index_t rank = 0;
  std::filesystem::path path;
};

class transform_engine {
 public:
  transform_engine(strategy_layouts src, strategy_layouts dst, std::map<index_t, std::filesystem::path> files,
                   std::vector<target_spec> targets, transform_options opts, std::string op)
      : src_(std::move(src)), dst_(std::move(dst)), files_(std::move(files)), targets_(std::move(targets)),
        opts_(std::move(opts)), op_(std::move(op)) {
    M_ = src_.ranks();
    N_ = dst_.ranks();
    for (const auto& [r, f] : files_)
      if (r < 0 || r >= M_)
        report_error(op_ + ": source rank " + std::to_string(r) + " (" + f.string() + ") is not a rank of " +
                     source_desc() + ", which has " + std::to_string(M_) + " rank" + (M_ == 1 ? "" : "s"));
    for (const auto& t : targets_)
      if (t.rank < 0 || t.rank >= N_)
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " is not a rank of " + target_desc() +
                     ", which has " + std::to_string(N_) + " rank" + (N_ == 1 ? "" : "s"));
  }

  std::vector<std::string>& warnings() { return warnings_; }

  /// Source ranks to take parameter shapes from first (the files these targets read anyway);
  /// without a hint a shape comes from the lowest rank of its stage that has a file.
  void set_shape_hint(std::set<index_t> ranks) { shape_hint_ = std::move(ranks); }

  /// The tensor bytes each target gets, in the order of the targets (item bytes as the
  /// progress reports them). Reads the headers of the files that decide the items and shapes
  /// (each target's base file t % M, and one file per parameter), no tensor data; checks only
  /// what deciding them needs.
  std::vector<std::uint64_t> target_bytes() {
    collect_params();
    std::vector<std::uint64_t> out;
    for (const auto& t : targets_) {
      std::uint64_t n = 0;
      for_each_item(t.rank, [&](out_item& it) { n += item_bytes(t.rank, it); });
      out.push_back(n);
    }
    return out;
  }

  transform_summary run() {
    const auto start = std::chrono::steady_clock::now();
    check_outputs();
    prepare();
    if (opts_.checked) opts_.checked();
    transform_summary s = write_all();
    s.source_files = readers_.size();
    for (const auto& [r, rd] : readers_) s.source_bytes += rd->file_size();
    s.warnings = std::move(warnings_);
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.peak_rss_bytes = peak_rss_bytes();
    return s;
  }


 private:
  std::string source_desc() const {
    return src_.present() ? "the source strategy " + src_.source() : "the source (no strategy: one unsplit rank)";
  }
  std::string target_desc() const {
    return dst_.present() ? "the target strategy " + dst_.source() : "the target (no strategy: one unsplit rank)";
  }

  bool available(index_t r) const { return files_.count(r) != 0; }

  const checkpoint_reader& open(index_t r) {
    auto it = readers_.find(r);
    if (it != readers_.end()) return *it->second;
    auto f = files_.find(r);
    RESHARD_EXPECTS(f != files_.end(), "transform: open: no file for the rank");
    auto rd = std::make_unique<checkpoint_reader>(f->second);
    return *readers_.emplace(r, std::move(rd)).first->second;
  }

  // -- outputs
  void check_outputs() {
    for (const auto& t : targets_) {
      for (const auto& [r, f] : files_) {
        std::error_code ec;
        if (std::filesystem::equivalent(t.path, f, ec))
          report_error(op_ + ": output " + t.path.string() + " is the source file of rank " + std::to_string(r) +
                       " (inputs are never modified)");
      }
      std::error_code ec;
      if (!opts_.force && std::filesystem::symlink_status(t.path, ec).type() != std::filesystem::file_type::not_found)
        report_error(op_ + ": " + t.path.string() + " exists (pass force / --force to replace it)");
    }
  }

  // -- phase 1: every check that needs no data
  void prepare() {
    collect_params();
    std::uint64_t total = 0;
    for (const auto& t : targets_) {
      std::set<std::string_view> names;
      for_each_item(t.rank, [&](out_item& it) {
        if (!names.insert(it.name()).second)
          report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + quote_name(it.name()) +
                       " would be written twice");
        check_item(t, it);
        total += item_bytes(t.rank, it);
      });
      if (names.empty())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " would get no parameters");
    }
    bytes_total_ = total;
    check_opened();
    verify_crcs();
  }

  // The parameters to slice (params_), from the strategies and the targets' base files.
  void collect_params() {
    if (collected_) return;
    collected_ = true;
    for (const auto& t : targets_) {
      const index_t base = t.rank % M_;
      if (!available(base))
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " needs source rank " + std::to_string(base) +
                     " (rank " + std::to_string(t.rank) + " % " + std::to_string(M_) +
                     ": the parameters no strategy lists, such as learning_rate and global_step, come from "
                     "there), but no file was given for it");
      open(base);
    }
    // Sliced parameters listed in the source strategy.
    for (const auto& name : src_.names()) {
      auto& p = params_[name];
      p.name = name;
      p.src_entries = src_.find(name);
      p.dst_entries = dst_.present() ? dst_.find(name) : nullptr;
    }
    // Parameters of the base files that only the target strategy lists.
    for (const auto& t : targets_) {
      const auto& rd = open(t.rank % M_);
      for (const auto& e : rd.entries()) {
        if (src_.find(e.name) || !dst_.present() || !dst_.find(e.name)) continue;
        auto& p = params_[e.name];
        p.name = e.name;
        p.dst_entries = dst_.find(e.name);
      }
    }
    if (dst_.present()) {
      for (const auto& name : dst_.names()) {
        if (params_.count(name)) continue;
        warnings_.push_back("parameter " + quote_name(name) + " of the target strategy " + dst_.source() +
                            " is in no source (not in the source strategy, nor in the source file of rank " +
                            std::to_string(targets_.empty() ? 0 : targets_.front().rank % M_) + "): not written");
      }
    }
  }

  // Every source file opened holds every listed parameter of its stage with the dtype and the
  // dims the strategy says, whether or not this run reads that slice: a file that disagrees
  // with its strategy or with the other ranks is an error even when a replica could serve.
  void check_opened() {
    std::vector<index_t> ranks;
    for (const auto& [r, rd] : readers_) ranks.push_back(r);
    for (auto& [name, p] : params_) {
      if (!p.resolved || !p.src) continue;
      const index_t first = p.src->first_rank, last = first + num_ranks(*p.src);
      for (index_t r : ranks)
        if (r >= first && r < last) check_source(p, r);
    }
  }

  static std::string quote_name(std::string_view n) { return detail::quote_name(n); }

  // Calls f(item) for each parameter target `t` gets, in output order: the base file's order,
  // then the other listed parameters in strategy order.
  template <class F>
  void for_each_item(index_t t, F&& f) {
    const index_t base = t % M_;
    const auto& rd = open(base);
    auto visit_listed = [&](param_info& p) {
      out_item it;
      it.p = &p;
      it.base = base;
      if (!slice_applies(p, t, it)) return;
      if (!p.src_entries) it.raw = rd.find(p.name);
      f(it);
    };
    for (const auto& e : rd.entries()) {
      auto pit = params_.find(e.name);
      if (pit != params_.end()) {
        visit_listed(pit->second);
      } else {
        out_item it;
        it.raw = &e;
        it.base = base;
        f(it);
      }
    }
    for (const auto& name : src_.names())
      if (!rd.find(name)) visit_listed(params_.at(name));
  }

  // Does sliced parameter p go to target t, and with which layout (it.dst)?
  bool slice_applies(param_info& p, index_t t, out_item& it) {
    if (!p.dst_entries) {
      it.dst = nullptr;  // whole tensor
      return true;
    }
    const std::uint32_t stage = dst_.stage_of(t);
    for (const auto& e : *p.dst_entries)
      if (e.stage == stage) {
        resolve(p);
        for (const auto& [s, l] : p.dst)
          if (s == stage) it.dst = &l;
        return true;
      }
    return false;
  }

  std::string who_src(const std::string& name) const {
    return "strategy: " + src_.source() + ": parameter " + quote_name(name);
  }
  std::string who_dst(const std::string& name) const {
    return "strategy: " + dst_.source() + ": parameter " + quote_name(name);
  }

  // Derives p's full shape, dtype and layouts (once).
  void resolve(param_info& p) {
    if (p.resolved) return;
    const tensor_ref* shape_from = nullptr;
    std::string shape_file;
    if (p.src_entries) {
      const staged_layout& s = p.src_entries->front();
      detail::check_supported(s.stored, who_src(p.name) + ": ");
      const index_t n = src_.stage_ranks(), first = index_t{s.stage} * n;
      // the shape comes from the first file of the stage: of the shape hint's ranks, if any
      const auto take = [&](index_t r) {
        if (shape_from || !available(r)) return;
        const auto& rd = open(r);
        shape_from = rd.find(p.name);
        if (!shape_from)
          report_error(op_ + ": " + rd.path().string() + ": parameter " + quote_name(p.name) +
                       " is listed in the source strategy " + src_.source() + " (stage " + std::to_string(s.stage) +
                       ", ranks " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                       ") but missing from this checkpoint");
        shape_file = rd.path().string();
      };
      for (index_t r : shape_hint_)
        if (r >= first && r < first + n) take(r);
      for (index_t r = first; r < first + n && !shape_from; ++r) take(r);
      if (!shape_from)
        report_error(op_ + ": parameter " + quote_name(p.name) + " (stage " + std::to_string(s.stage) + " of " +
                     src_.source() + ") is held by source ranks " + std::to_string(first) + ".." +
                     std::to_string(first + n - 1) + ", but no file was given for any of them");
      check_tensor(*shape_from, shape_file, p);
      if (shape_from->is_scalar()) {
        p.scalar = true;
        p.scalar_dims = shape_from->dims;
        p.shape = {};
      } else if (!s.stored.tensor_shape.empty()) {
        p.shape = extents(s.stored.tensor_shape.begin(), s.stored.tensor_shape.end());
      } else {
        p.shape = full_shape_from_slice(s.stored, shape_from->dims,
                                        who_src(p.name) + " (slice dims " + format_dims(shape_from->dims) + " in " +
                                            shape_file + ")");
      }
      p.src = to_layout(s.stored, p.shape, s.stage, who_src(p.name));
      p.gs = reshard::detail::make_geometry(*p.src);
    } else {
      // not listed in the source strategy: every source rank holds it whole; take the shape
      // from the first base file that has it
      for (const auto& t : targets_) {
        const auto& rd = open(t.rank % M_);
        if ((shape_from = rd.find(p.name))) {
          shape_file = rd.path().string();
          break;
        }
      }
      RESHARD_EXPECTS(shape_from != nullptr, "transform: resolve: an unlisted parameter without a source");
      check_tensor(*shape_from, shape_file, p);
      p.scalar = shape_from->is_scalar();
      if (p.scalar) p.scalar_dims = shape_from->dims;
      if (!p.scalar) p.shape = extents(shape_from->dims.begin(), shape_from->dims.end());
    }
    if (p.dst_entries) {
      for (const auto& e : *p.dst_entries) {
        if (!e.stored.tensor_shape.empty() &&
            extents(e.stored.tensor_shape.begin(), e.stored.tensor_shape.end()) != p.shape)
          report_error(op_ + ": " + who_dst(p.name) + ": tensor_shape " + format_dims(e.stored.tensor_shape) +
                       " disagrees with the source's full shape " + to_string(p.shape) + " (from " +
                       (p.src_entries ? "the source strategy and " : std::string()) + shape_file + ")");
        p.dst.emplace_back(e.stage, to_layout(e.stored, p.shape, e.stage, who_dst(p.name)));
      }
    }
    p.resolved = true;
  }

  // A tensor the transform reads for p: a plain tensor of one dtype (the same in every file).
  void check_tensor(const tensor_ref& e, const std::string& file, param_info& p) {
    const std::string who = op_ + ": " + file + ": parameter " + quote_name(p.name) + ": ";
    if (e.map_tensor)
      report_error(who + "is a map tensor; a strategy cannot slice it (only unlisted map tensors are copied)");
    if (e.type == dtype::str)
      report_error(who + "is a str tensor; a strategy cannot slice it (only unlisted str tensors are copied)");
    if (!p.type_known) {
      p.type = e.type;
      p.type_known = true;
      p.type_file = file;
    } else if (e.type != p.type) {
      report_error(who + "dtype " + std::string(ms_name(e.type)) + " differs from " + std::string(ms_name(p.type)) +
                   " in " + p.type_file + " (mixed dtypes across ranks)");
    }
  }

  // Checks the source entry of p on source rank r (once per rank).
  void check_source(param_info& p, index_t r) {
    if (!p.checked.insert(r).second) return;
    const auto& rd = open(r);
    const std::string file = rd.path().string();
    const tensor_ref* e = rd.find(p.name);
    if (!e) {
      if (p.src_entries)
        report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + " is listed in the source strategy " +
                     src_.source() + " but missing from this checkpoint");
      report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + " is missing");
    }
    check_tensor(*e, file, p);
    if (p.scalar) {
      if (!e->is_scalar())
        report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + ": dims " + format_dims(e->dims) +
                     ", but it is a scalar in " + p.type_file);
      return;
    }
    const extents want = p.src ? slice_shape(*p.src, r) : p.shape;
    if (e->is_scalar() || extents(e->dims.begin(), e->dims.end()) != want)
      report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + ": dims " + format_dims(e->dims) +
                   " disagree with " +
                   (p.src ? "the source strategy " + src_.source() + ": layout " + to_string(*p.src) + " gives rank " +
                                std::to_string(r) + " the slice " + to_string(want)
                          : "the full shape " + to_string(want) + " found in " + p.type_file));
  }

  box target_box(const out_item& it, index_t t) const {
    const extents& shape = it.p->shape;
    if (!it.dst) return box{extents(shape.size(), 0), shape};
    return box_of(*it.dst, t);
  }

  // The pieces of target t's box of a sliced item: (source rank, piece box, source rank's box).
  struct piece {
    index_t rank;
    box where;
    box held;
  };
  std::vector<piece> pieces_of(const out_item& it, index_t t, const box& tb) {
    std::vector<piece> out;
    const param_info& p = *it.p;
    if (!p.src) {
      out.push_back({it.base, tb, box{extents(p.shape.size(), 0), p.shape}});
      return out;
    }
    const index_t dst_first = it.dst ? it.dst->first_rank : t;
    reshard::detail::for_each_piece(p.gs, tb, [&](index_t region, const box& b) {
      const index_t r = choose_source(p.gs, region, t, dst_first, [&](index_t x) { return available(x); });
      if (r < 0)
        report_error(op_ + ": target rank " + std::to_string(t) + " needs the box " + to_string(b) + " of parameter " +
                     quote_name(p.name) + " from one of the source ranks " + rank_range(p.gs, region) +
                     ", but no file was given for any of them (rank_list_for_transform lists the files a rank needs)");
      out.push_back({r, b, p.gs.region_box(region)});
    });
    return out;
  }

  void check_item(const target_spec& t, out_item& it) {
    const bool st = format_of(t.path) == checkpoint_format::safetensors;
    if (!it.p) {
      const tensor_ref& e = *it.raw;
      if (st && (e.map_tensor || e.type == dtype::str))
        report_error(op_ + ": " + open(it.base).path().string() + ": parameter " + quote_name(e.name) + " is a " +
                     (e.map_tensor ? "map tensor" : "str tensor") + ", which safetensors cannot hold (write ckpt)");
      return;
    }
    param_info& p = *it.p;
    resolve(p);
    if (!p.src) {
      check_source(p, it.base);
      return;
    }
    const box tb = target_box(it, t.rank);
    for (const auto& pc : pieces_of(it, t.rank, tb)) check_source(p, pc.rank);
  }

  std::uint64_t item_bytes(index_t t, const out_item& it) const {
    if (!it.p) return it.raw->content_size();
    if (it.p->scalar) return element_size(it.p->type);
    return static_cast<std::uint64_t>(volume(target_box(it, t))) * element_size(it.p->type);
  }

  void verify_crcs() {
    if (!opts_.verify_crc) return;
    std::vector<const checkpoint_reader*> list;
    for (const auto& [r, rd] : readers_) list.push_back(rd.get());
    parallel_for(list.size(), [&](std::size_t i) { list[i]->verify_crc(); });
  }

  template <class F>
  void parallel_for(std::size_t n, F&& f) {
    unsigned jobs = opts_.jobs == 0 ? std::max(1u, std::thread::hardware_concurrency()) : opts_.jobs;
    jobs = static_cast<unsigned>(std::min<std::size_t>(jobs, n));
    if (jobs <= 1) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    std::atomic<std::size_t> next{0};
    std::atomic<bool> stop{false};
    std::exception_ptr first;
    std::mutex m;
    auto work = [&] {
      for (std::size_t i; !stop.load() && (i = next.fetch_add(1)) < n;) {
        try {
          f(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(m);
          if (!first) first = std::current_exception();
          stop.store(true);
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < jobs; ++k) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    if (first) std::rethrow_exception(first);
  }

  // -- phase 2: writing
  struct sink {
    std::optional<ckpt_writer> ckpt;
    std::optional<safetensors_writer> st;
    void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) {
      if (ckpt) ckpt->begin(name, type, dims, bytes);
    }
    void append(std::span<const std::byte> b) {
      if (ckpt)
        ckpt->append(b);
      else
        st->append(b);
    }
    void end() {
      if (ckpt) ckpt->end();
    }
  };

  struct staged {
    std::filesystem::path part, final;
    bool committed = false;
  };

  // Creates the missing parent directories of the outputs, remembering them for the cleanup.
  void make_directories() {
    for (const auto& t : targets_) {
      std::vector<std::filesystem::path> missing;
      for (auto d = t.path.parent_path(); !d.empty(); d = d.parent_path()) {
        std::error_code ec;
        if (std::filesystem::exists(d, ec)) break;
        missing.push_back(d);
        if (d == d.parent_path()) break;
      }
      for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        std::error_code ec;
        if (!std::filesystem::create_directory(*it, ec) && ec)
          report_error(op_ + ": cannot create directory " + it->string() + ": " + ec.message());
        created_dirs_.push_back(*it);
      }
    }
  }

  transform_summary write_all() {
    transform_summary s;
    std::vector<staged> stage(targets_.size());
    for (std::size_t i = 0; i < targets_.size(); ++i) {
      stage[i].final = targets_[i].path;
      stage[i].part = targets_[i].path;
      stage[i].part += ".reshard-" + std::to_string(::getpid()) + ".part";
    }
    std::vector<transform_summary> per(targets_.size());
    try {
      make_directories();
      for (const auto& t : targets_) detail::remove_stale_temporaries(t.path);  // of killed runs
      parallel_for(targets_.size(), [&](std::size_t i) {
        per[i] = write_target(targets_[i], stage[i].part);
        stage[i].committed = true;
      });
      if (opts_.staged) opts_.staged();
      // every target is complete: move them into place
      for (std::size_t i = 0; i < stage.size(); ++i) {
        int err = 0;
        detail::crash_point();  // test-only (RESHARD_TEST_CRASH_AFTER)
        if (opts_.force) {
          if (::rename(stage[i].part.c_str(), stage[i].final.c_str()) != 0) err = errno;
        } else {
          err = detail::rename_no_replace(stage[i].part, stage[i].final);
        }
        if (err != 0) {
          for (std::size_t k = 0; k < i; ++k) {
            if (!opts_.force) ::unlink(stage[k].final.c_str());  // new files only: restore the state before
          }
          report_error(op_ + ": " + stage[i].final.string() + ": " +
                       (err == EEXIST ? std::string("appeared while transforming (pass force to replace it)")
                                      : "cannot rename " + stage[i].part.string() + ": " + std::strerror(err)));
        }
        stage[i].committed = false;  // renamed: nothing to clean up
        s.outputs.push_back(stage[i].final);
      }
      std::set<std::filesystem::path> dirs;  // make the renames durable
      for (const auto& st : stage) dirs.insert(st.final.parent_path());
      for (const auto& d : dirs) detail::fsync_directory(d);
    } catch (...) {
      for (const auto& st : stage)
        if (st.committed) ::unlink(st.part.c_str());
      for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
        std::error_code ec;
        std::filesystem::remove(*it, ec);  // only if empty
      }
      throw;
    }
    for (const auto& p : per) {
      s.files += 1;
      s.sliced += p.sliced;
      s.copied += p.copied;
      s.bytes_read += p.bytes_read;
      s.bytes_written += p.bytes_written;
    }
    return s;
  }

  transform_summary write_target(const target_spec& t, const std::filesystem::path& part) {
    transform_summary s;
    std::vector<out_item> items;
    for_each_item(t.rank, [&](out_item& it) { items.push_back(it); });
    sink out;
    const bool st = format_of(t.path) == checkpoint_format::safetensors;
    if (st) {
      std::sort(items.begin(), items.end(), [](const out_item& a, const out_item& b) { return a.name() < b.name(); });
      std::vector<safetensors_tensor_info> infos;
      for (const auto& it : items) {
        std::vector<std::int64_t> shape;
        if (it.p && !it.p->scalar) {
          const box tb = target_box(it, t.rank);
          shape.assign(tb.extent.begin(), tb.extent.end());
        } else if (!it.p && !it.raw->is_scalar()) {
          shape = it.raw->dims;
        }
        infos.push_back({std::string(it.name()), it.p ? it.p->type : it.raw->type, std::move(shape)});
      }
      out.st.emplace(part, std::move(infos), safetensors_write_options{.overwrite = true});
    } else {
      out.ckpt.emplace(part, ckpt_write_options{.crc = opts_.crc, .chunk_bytes = opts_.chunk_bytes, .overwrite = true});
    }
    std::vector<std::byte> buffer;
    std::set<index_t> used;
    for (const auto& it : items) {
      if (it.p) {
        write_sliced(out, it, t.rank, buffer, used, s);
        ++s.sliced;
      } else {
        write_raw(out, it, s);
        ++s.copied;
        used.insert(it.base);
      }
      report(t.rank, it.name(), item_bytes(t.rank, it), false);
    }
    if (out.ckpt)
      out.ckpt->commit();
    else
      out.st->commit();
    std::error_code ec;
    s.bytes_written = std::filesystem::file_size(part, ec);
    for (index_t r : used) open_const(r).release_all();
    report(t.rank, {}, 0, true);
    return s;
  }

  const checkpoint_reader& open_const(index_t r) const { return *readers_.at(r); }

  void report(index_t rank, std::string_view name, std::uint64_t bytes, bool file_done) {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    bytes_done_ += bytes;
    if (file_done) ++files_done_;
    if (opts_.progress)
      opts_.progress({rank, name, bytes_done_, bytes_total_, files_done_, targets_.size()});
  }

  void write_raw(sink& out, const out_item& it, transform_summary& s) {
    const tensor_ref& e = *it.raw;
    if (out.ckpt && e.ckpt) {
      out.ckpt->write_raw(*e.ckpt);
    } else {
      out.begin(e.name, e.type, e.dims, e.content_size());
      for (auto p : e.pieces) out.append(p);
      out.end();
    }
    s.bytes_read += e.content_size();
    const auto file = open_const(it.base).bytes();
    for (auto p : e.pieces) release_pages(p, file);
  }

  void write_sliced(sink& out, const out_item& it, index_t t, std::vector<std::byte>& buffer, std::set<index_t>& used,
                    transform_summary& s) {
    const param_info& p = *it.p;
    const std::size_t elem = element_size(p.type);
    const box tb = target_box(it, t);
    std::vector<std::int64_t> dims = p.scalar ? p.scalar_dims : tb.extent.to_vector();
    const std::uint64_t total = static_cast<std::uint64_t>(volume(tb)) * elem;
    out.begin(p.name, p.type, dims, total);
    const auto pieces = pieces_of(it, t, tb);
    struct src_view {
      const tensor_ref* e;
      std::span<const std::byte> file;
      std::vector<std::uint64_t> starts;
    };
    std::vector<src_view> views;
    for (const auto& pc : pieces) {
      used.insert(pc.rank);
      src_view v{open_const(pc.rank).find(p.name), open_const(pc.rank).bytes(), {}};
      std::uint64_t at = 0;
      for (auto q : v.e->pieces) v.starts.push_back(at), at += q.size();
      views.push_back(std::move(v));
    }
    for_each_chunk(tb.extent, elem, opts_.buffer_bytes, [&](const box& local) {
      box c = local;
      for (std::size_t i = 0; i < c.offset.size(); ++i) c.offset[i] += tb.offset[i];
      const std::uint64_t bytes = static_cast<std::uint64_t>(volume(c)) * elem;
      // the fast path: the chunk is one contiguous run of one source piece
      std::size_t hits = 0, hit = 0;
      for (std::size_t k = 0; k < pieces.size(); ++k)
        if (volume(intersect(pieces[k].where, c)) > 0) ++hits, hit = k;
      const auto at = hits == 1 && intersect(pieces[hit].where, c) == c ? contiguous_offset(pieces[hit].held, c)
                                                                         : std::nullopt;
      if (at) {
        const std::uint64_t first = *at * elem, len = bytes;
        const auto& v = views[hit];
        const std::size_t k = static_cast<std::size_t>(
            std::upper_bound(v.starts.begin(), v.starts.end(), first) - v.starts.begin() - 1);
        if (first + len <= v.starts[k] + v.e->pieces[k].size()) {
          const auto span = v.e->pieces[k].subspan(static_cast<std::size_t>(first - v.starts[k]),
                                                   static_cast<std::size_t>(len));
          out.append(span);
          release_pages(span, v.file);
          s.bytes_read += len;
          return;
        }
      }
      buffer.resize(static_cast<std::size_t>(bytes));
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        const box in = intersect(pieces[k].where, c);
        if (volume(in) == 0) continue;
        const auto& v = views[k];
        std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
        for_each_run(pieces[k].held, c, in, elem, [&](std::uint64_t so, std::uint64_t dof, std::uint64_t n) {
          copy_from_pieces(v.e->pieces, v.starts, so, buffer.data() + dof, n);
          lo = std::min(lo, so);
          hi = std::max(hi, so + n);
          s.bytes_read += n;
        });
        release_content(*v.e, lo, hi, v.file);
      }
      out.append(buffer);
    });
    out.end();
    if (buffer.capacity() > opts_.buffer_bytes) std::vector<std::byte>().swap(buffer);
  }

  strategy_layouts src_, dst_;
  std::map<index_t, std::filesystem::path> files_;
  std::vector<target_spec> targets_;
  transform_options opts_;
  std::string op_;
  index_t M_ = 1, N_ = 1;
  std::map<index_t, std::unique_ptr<checkpoint_reader>> readers_;
  std::map<std::string, param_info, std::less<>> params_;
  std::vector<std::string> warnings_;
  std::vector<std::filesystem::path> created_dirs_;
  std::set<index_t> shape_hint_;
  bool collected_ = false;
  std::mutex progress_mutex_;
  std::uint64_t bytes_total_ = 0, bytes_done_ = 0;
  std::size_t files_done_ = 0;
};

// The checkpoint file of `rank_dir`: the last *.ckpt or *.safetensors file in name order
// (MindSpore's rule), hidden files and staged outputs skipped.
inline std::filesystem::path rank_file(const std::filesystem::path& rank_dir, const std::string& op) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(rank_dir, ec);
  if (ec) report_error(op + ": source rank directory " + rank_dir.string() + " cannot be listed: " + ec.message());
  std::vector<fs::path> files;
  for (const auto& e : it) {
    const auto name = e.path().filename().string();
    std::error_code kind;
    if (name.empty() || name[0] == '.' || !e.is_regular_file(kind)) continue;
    const auto ext = e.path().extension();
    if (ext == ".ckpt" || ext == ".safetensors") files.push_back(e.path());
  }
  if (files.empty()) report_error(op + ": " + rank_dir.string() + " holds no .ckpt or .safetensors file");
  std::sort(files.begin(), files.end());
  return files.back();
}

// The files of src_dir/rank_<r> for r in [0, ranks): every rank directory must exist.
inline std::map<index_t, std::filesystem::path> rank_files(const std::filesystem::path& src_dir, index_t ranks,
                                                           const std::string& op, std::vector<std::string>& warnings) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(src_dir, ec)) report_error(op + ": source directory " + src_dir.string() + " does not exist");
  std::map<index_t, fs::path> out;
  for (index_t r = 0; r < ranks; ++r) {
    const fs::path d = src_dir / ("rank_" + std::to_string(r));
    if (!fs::is_directory(d, ec))
      report_error(op + ": " + d.string() + ": missing rank directory (the source has " + std::to_string(ranks) +
                   " rank" + (ranks == 1 ? "" : "s") + ": rank_0 .. rank_" + std::to_string(ranks - 1) + ")");
    out.emplace(r, rank_file(d, op));
  }
  if (fs::is_directory(src_dir / ("rank_" + std::to_string(ranks)), ec))
    warnings.push_back(src_dir.string() + " has more rank directories than the source's " + std::to_string(ranks) +
                       " ranks; rank_" + std::to_string(ranks) + " and above are not read");
  return out;
}

inline transform_summary run_engine(strategy_layouts src, strategy_layouts dst, std::map<index_t, std::filesystem::path> files,
                                    std::vector<target_spec> targets, const transform_options& opts, std::string op,
                                    std::vector<std::string> warnings = {}) {
  transform_engine e(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, std::move(op));
  for (auto& w : warnings) e.warnings().push_back(std::move(w));
  return e.run();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// the workflows

/// Converts the distributed checkpoint of `src_dir` (`src_dir/rank_<r>/<last *.ckpt or
/// *.safetensors>` for every source rank r) from the layouts of `src_strategy` to those of
/// `dst_strategy`, writing `dst_dir/rank_<t>/<prefix><t>.ckpt` (or .safetensors, per
/// `opts.format`) for every target rank t. Any M and N. An empty strategy path = no strategy.
inline transform_summary transform_checkpoints(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                                               std::string_view prefix, const std::filesystem::path& src_strategy,
                                               const std::filesystem::path& dst_strategy,
                                               const transform_options& opts = {}) {
  const std::string op = "transform_checkpoints";
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::vector<detail::target_spec> targets;
  for (index_t t = 0; t < dst.ranks(); ++t)
    targets.push_back({t, dst_dir / ("rank_" + std::to_string(t)) /
                              (std::string(prefix) + std::to_string(t) + std::string(extension_of(opts.format)))});
  return detail::run_engine(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, op,
                            std::move(warnings));
}

/// Writes target rank `rank`'s checkpoint `out_file` (ckpt, or safetensors if its name ends in
/// ".safetensors") from the source files `src_files` (source rank -> file). The files needed are
/// rank_list_for_transform(rank, ...); any replica of a needed rank's data also does.
inline transform_summary transform_checkpoint_by_rank(std::int64_t rank, const std::map<std::int64_t, std::filesystem::path>& src_files,
                                                      const std::filesystem::path& out_file,
                                                      const std::filesystem::path& src_strategy,
                                                      const std::filesystem::path& dst_strategy,
                                                      const transform_options& opts = {}) {
  std::map<index_t, std::filesystem::path> files(src_files.begin(), src_files.end());
  std::vector<detail::target_spec> targets{detail::target_spec{rank, out_file}};
  return detail::run_engine(strategy_layouts(src_strategy), strategy_layouts(dst_strategy), std::move(files),
                            std::move(targets), opts, "transform_checkpoint_by_rank");
}

/// Merges the distributed checkpoint of `src_dir` into one checkpoint of full tensors (MindSpore's
/// load_distributed_checkpoint + save, or merge_sliced_parameter for every parameter).
inline transform_summary merge_checkpoints(const std::filesystem::path& src_dir, const std::filesystem::path& out_file,
                                           const std::filesystem::path& src_strategy,
                                           const transform_options& opts = {}) {
  const std::string op = "merge_checkpoints";
  strategy_layouts src(src_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::vector<detail::target_spec> targets{detail::target_spec{0, out_file}};
  return detail::run_engine(std::move(src), strategy_layouts(), std::move(files), std::move(targets), opts, op,
                            std::move(warnings));
}

/// Splits the checkpoint `checkpoint` of full tensors by `dst_strategy` into
/// `dst_dir/rank_<t>/<prefix><t>.ckpt` (or .safetensors, per `opts.format`).
inline transform_summary split_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& dst_dir,
                                          const std::filesystem::path& dst_strategy, std::string_view prefix = "checkpoint_",
                                          const transform_options& opts = {}) {
  strategy_layouts dst(dst_strategy);
  std::vector<detail::target_spec> targets;
  for (index_t t = 0; t < dst.ranks(); ++t)
    targets.push_back({t, dst_dir / ("rank_" + std::to_string(t)) /
                              (std::string(prefix) + std::to_string(t) + std::string(extension_of(opts.format)))});
  std::map<index_t, std::filesystem::path> files;
  files.emplace(0, checkpoint);
  return detail::run_engine(strategy_layouts(), std::move(dst), std::move(files), std::move(targets), opts,
                            "split_checkpoint");
}

/// Converts one checkpoint between ckpt and safetensors (by the file names), tensor for tensor.
inline transform_summary convert_checkpoint(const std::filesystem::path& in_file, const std::filesystem::path& out_file,
                                            const transform_options& opts = {}) {
  std::map<index_t, std::filesystem::path> files;
  files.emplace(0, in_file);
  std::vector<detail::target_spec> targets{detail::target_spec{0, out_file}};
  return detail::run_engine(strategy_layouts(), strategy_layouts(), std::move(files), std::move(targets), opts,
                            "convert_checkpoint");
}

// ---------------------------------------------------------------------------------------------
// rank lists

namespace detail {

inline index_t lcm_of(index_t a, index_t b) { return a / std::gcd(a, b) * b; }

// A full shape for which both stored layouts are valid, when no checkpoint says the real one:
// JSON's tensor_shape if given, else per dim the lcm of both sides' slice counts (dim 0 times the
// optimizer parts, or the sum of param_split_shape). The overlaps of the two layouts' slices,
// hence the rank lists, do not depend on which such shape is taken.
inline extents probe_shape(const param_layout& s, const param_layout* d, const std::string& who_s,
                           const std::string& who_d) {
  if (!s.tensor_shape.empty()) return extents(s.tensor_shape.begin(), s.tensor_shape.end());
  if (d && !d->tensor_shape.empty()) return extents(d->tensor_shape.begin(), d->tensor_shape.end());
  check_supported(s, who_s + ": ");
  const auto cs = counts_of(s, who_s + ": ");
  extents shape;
  for (std::size_t i = 0; i < cs.slices.size(); ++i) shape.push_back(cs.slices[i] * (i == 0 ? cs.opt_parts : 1));
  if (d) {
    check_supported(*d, who_d + ": ");
    const auto cd = counts_of(*d, who_d + ": ");
    if (cd.slices.size() != cs.slices.size())
      report_error(who_d + ": tensor_map has " + std::to_string(cd.slices.size()) + " entries, the source's has " +
                   std::to_string(cs.slices.size()));
    for (std::size_t i = 0; i < shape.size(); ++i)
      shape[i] = lcm_of(shape[i], cd.slices[i] * (i == 0 ? cd.opt_parts : 1));
  }
  const auto sum = [](const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), index_t{0}); };
  if (!s.param_split_shape.empty()) shape[0] = sum(s.param_split_shape);
  if (d && !d->param_split_shape.empty()) {
    if (!s.param_split_shape.empty() && sum(d->param_split_shape) != shape[0])
      report_error(who_d + ": param_split_shape " + format_dims(d->param_split_shape) + " sums to " +
                   std::to_string(sum(d->param_split_shape)) + ", the source's " + format_dims(s.param_split_shape) +
                   " to " + std::to_string(shape[0]));
    shape[0] = sum(d->param_split_shape);
  }
  return shape;
}

}  // namespace detail

/// The source ranks whose files target rank `rank` needs, ascending: for every parameter the
/// source strategy lists (and that `rank` gets), one source rank per distinct source region that
/// overlaps its target slice (reshard::rank_list: `rank` itself where it holds the region), plus
/// `rank % M`, from which the parameters no strategy lists (learning_rate, global_step, ...) are
/// copied. Minimal, unlike MindSpore's, which unions whole all-gather groups.
inline std::vector<std::int64_t> rank_list_for_transform(std::int64_t rank, const strategy_layouts& src,
                                                         const strategy_layouts& dst) {
  const index_t M = src.ranks(), N = dst.ranks();
  if (rank < 0 || rank >= N)
    report_error("rank_list_for_transform: target rank " + std::to_string(rank) + " is not a rank of " +
                 (dst.present() ? "the target strategy " + dst.source() : std::string("the target (no strategy)")) +
                 ", which has " + std::to_string(N) + " rank" + (N == 1 ? "" : "s"));
  std::set<index_t> out{rank % M};
  for (const auto& name : src.names()) {
    const staged_layout& s = src.find(name)->front();
    const std::string who_s = "strategy: " + src.source() + ": parameter " + detail::quote_name(name);
    const std::string who_d = "strategy: " + dst.source() + ": parameter " + detail::quote_name(name);
    const std::vector<staged_layout>* d = dst.present() ? dst.find(name) : nullptr;
    const param_layout* dl = nullptr;
    index_t dst_stage = 0;
    if (d) {
      for (const auto& e : *d)
        if (e.stage == dst.stage_of(rank)) dl = &e.stored, dst_stage = e.stage;
      if (!dl) continue;  // not on this rank's stage
    }
    const extents shape = detail::probe_shape(s.stored, dl, who_s, who_d);
    const layout sl = to_layout(s.stored, shape, s.stage, who_s);
    const layout tl = dl ? to_layout(*dl, shape, dst_stage, who_d) : full_layout(shape, rank);
    for (index_t r : reshard::rank_list(sl, tl, rank)) out.insert(r);
  }
  return {out.begin(), out.end()};
}

/// rank_list_for_transform with strategy files (an empty path = no strategy).
inline std::vector<std::int64_t> rank_list_for_transform(std::int64_t rank, const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  return rank_list_for_transform(rank, strategy_layouts(src_strategy), strategy_layouts(dst_strategy));
}

// ---------------------------------------------------------------------------------------------
// one transform split among workers (processes, machines): see reshard/mpi/transform.hpp

/// The tensor bytes that transform_checkpoints(src_dir, ...) writes to each target rank (index =
/// target rank): what the progress counts, without the files' framing. Reads the headers of
/// the source files that decide each rank's parameters and their shapes, and no tensor data.
inline std::vector<std::uint64_t> transform_target_bytes(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy) {
  const std::string op = "transform_checkpoints";
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::vector<detail::target_spec> targets;
  for (index_t t = 0; t < dst.ranks(); ++t) targets.push_back({t, {}});
  detail::transform_engine e(std::move(src), std::move(dst), std::move(files), std::move(targets), {}, op);
  return e.target_bytes();
}

/// Splits the target ranks 0 .. bytes.size()-1 among `parts` workers, balanced by bytes
/// (bytes[t]: what rank t gets): largest first (equal sizes: lower rank first), each to the
/// worker with the fewest bytes so far (ties: the lower worker). Deterministic, so every process
/// computes the same split. Each worker's ranks ascending; workers beyond the ranks get none.
inline std::vector<std::vector<std::int64_t>> balance_targets(std::span<const std::uint64_t> bytes,
                                                              std::size_t parts) {
  if (parts == 0) report_error("balance_targets: parts is 0 (at least one worker is needed)");
  std::vector<std::int64_t> order(bytes.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return bytes[static_cast<std::size_t>(a)] > bytes[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<std::int64_t>> out(parts);
  std::vector<std::uint64_t> load(parts, 0);
  for (std::int64_t t : order) {
    const auto w = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[w].push_back(t);
    load[w] += bytes[static_cast<std::size_t>(t)];
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

/// transform_checkpoints for the target ranks `ranks` only: writes
/// `dst_dir/rank_<t>/<prefix><t>.<format>` for each t in `ranks` and nothing else, byte for byte
/// what transform_checkpoints writes for t. One worker's share of a transform split by
/// balance_targets. Of the source files it opens those its targets read (their base file t % M
/// and the ranks rank_list_for_transform names), preferring them for the parameters' shapes;
/// the files' CRC trailers are checked and their data read as transform_checkpoints would.
/// Progress and summary cover these targets only. An empty `ranks` writes nothing.
inline transform_summary transform_checkpoints_for_ranks(const std::filesystem::path& src_dir,
                                                         const std::filesystem::path& dst_dir, std::string_view prefix,
                                                         const std::filesystem::path& src_strategy,
                                                         const std::filesystem::path& dst_strategy,
                                                         std::span<const std::int64_t> ranks,
                                                         const transform_options& opts = {}) {
  const std::string op = "transform_checkpoints";
  strategy_layouts src(src_strategy), dst(dst_strategy);
  std::vector<std::string> warnings;
  auto files = detail::rank_files(src_dir, src.ranks(), op, warnings);
  std::set<index_t> seen, hint;
  std::vector<detail::target_spec> targets;
  for (std::int64_t t : ranks) {
    if (!seen.insert(t).second)
      report_error(op + ": ranks: target rank " + std::to_string(t) + " is listed twice");
    targets.push_back({t, dst_dir / ("rank_" + std::to_string(t)) /
                              (std::string(prefix) + std::to_string(t) + std::string(extension_of(opts.format)))});
    if (t >= 0 && t < dst.ranks()) {
      try {
        for (std::int64_t r : rank_list_for_transform(t, src, dst)) hint.insert(r);
      } catch (const reshard::error&) {
        // a hint only: the engine reports what is wrong with the strategies
      }
    }
  }
  detail::transform_engine e(std::move(src), std::move(dst), std::move(files), std::move(targets), opts, op);
  for (auto& w : warnings) e.warnings().push_back(std::move(w));
  e.set_shape_hint(std::move(hint));
  return e.run();
}

}  // namespace reshard::io
