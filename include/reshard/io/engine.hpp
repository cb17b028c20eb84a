// reshard/io/engine.hpp: the checkpoint engine, transform_job, that every workflow of
// reshard/io/transform.hpp runs. It writes target files from source files; for each parameter it
// executes the parameter's plan (rank_planner, plan.hpp: the core's planner and replica policy)
// with the core's copy jobs (convert.hpp), the sources being memory-mapped files and the
// targets file writers.
//
// Decided apart, by pure functions that it calls (each testable without files): which parameters
// it writes and under which names (name_rules.hpp), their dtypes (dtype_rules.hpp), and the jobs
// and chunk buffer under a memory budget (memory_fit.hpp). What a run reads and writes, per target
// file and parameter, is a value, its checkpoint plan (checkpoint_plan.hpp, plan()), made once
// after the checks; the dry run's preview is computed from it.
//
// Which parameters a target rank t gets, and from where (M source ranks):
//   * listed in the source strategy: sliced by the target strategy's layout for t's stage (a
//     parameter that the target strategy lists only for other stages is not written to t); the
//     data come from the source strategy's lowest stage that lists it, by the transfers to t of
//     the round-robin plan. A parameter the target strategy does not list at all (or no target
//     strategy) is written whole: its target layout is the whole tensor on each target rank;
//   * not listed in the source strategy (learning_rate, global_step, ...): taken from source
//     rank t % M, byte-exact (ckpt -> ckpt copies its serialized Values); if the target strategy
//     lists it, t gets the slice of it that its layout says.
//
// Memory: source files are memory-mapped, never read whole. A target tensor is assembled in
// chunks of at most `buffer_bytes` (contiguous row ranges of the target slice), each filled
// from the source pieces its transfers name and streamed to the output. read_mode::pread (the
// default) fills a chunk with pread(2) (each source range at once, into a scratch buffer of at
// most 4 chunks, or run by run); read_mode::mmap copies from the mappings, and the source pages
// read are released (madvise MADV_DONTNEED) when no target needs their file any more, or, oldest
// first, when the spans read exceed jobs * buffer_bytes. Either way the peak resident memory is a
// few buffers per job beside the file indexes, whatever the checkpoint sizes.
//
// Durability: the staged files are written with their write-back started as they grow, fsynced
// together (8 at a time) when all are written, then renamed into place, and the directories
// fsynced (transform_options::sync; without it nothing is fsynced).
//
// Cost: file-system calls are O(M + N) (one stat per source and per output, one listing per
// rank directory); planning is O(M + N) per parameter and stage, then O(pieces) per target.
//
// Errors: everything that can be checked before writing is (strategies, shapes, dtypes, every
// source file and parameter that will be read, CRC trailers); a reshard::error names the file,
// the parameter and the reason. Outputs are staged as `<file>.reshard-<pid>.<n>.part` and renamed
// into place only when every target file is complete; after a failure the staged files (and the
// directories the job created) are removed. A job first removes the temporaries that killed runs
// left for its outputs (detail::remove_stale_temporaries, io/mapped_file.hpp). An existing
// output is never replaced unless `force`. Inputs are only ever mapped read-only.
#pragma once

#include <reshard/box.hpp>
#include <reshard/convert.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/parallel.hpp>
#include <reshard/partition.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/ckpt.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/dtype_rules.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/memory_fit.hpp>
#include <reshard/io/name_rules.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/sha256.hpp>
#include <reshard/io/strategy_layouts.hpp>
#include <reshard/io/summary.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <regex>
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
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

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
  /// follow the output file's name: ".safetensors" or not). checkpoint_format::hf: the by-file
  /// functions (merge, convert, by rank) write a Hugging Face checkpoint into the output path, a
  /// directory: safetensors shards of at most max_shard_bytes filled in the target's order
  /// (hf_shards), then model.safetensors.index.json, all staged and renamed into place with the
  /// index last (hf.hpp; one shard: model.safetensors, no index).
  checkpoint_format format = checkpoint_format::ckpt;
  /// The bound on a Hugging Face shard's tensor bytes (format hf); 5 GB, as Hugging Face's default.
  std::uint64_t max_shard_bytes = 5'000'000'000;
  /// Target files written in parallel; 0 (the default): one per core, at most one per target
  /// file. The summary reports the number used.
  unsigned jobs = 0;
  bool force = false;         ///< replace existing output files
  /// Make the outputs durable before they appear: write-back starts while they are written, and
  /// all are fsynced together (in parallel) before the renames into place. false: no fsync at
  /// all, for scratch outputs; after a power cut or an OS crash an output may then be empty or
  /// torn under its final name (a killed process still leaves none).
  bool sync = true;
  bool crc = false;           ///< append MindSpore's crc_num trailer to ckpt outputs
  bool verify_crc = true;     ///< check the crc_num trailer of every source file read
  std::uint64_t buffer_bytes = std::uint64_t{4} << 20;  ///< most bytes a worker assembles at once
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;           ///< piece size of written ckpt tensors
  read_mode reads = read_mode::automatic;  ///< how source tensors are read
  /// A bound on the process's resident memory while the targets are written (0: none). The
  /// engine measures what the process holds once the sources' indexes are read, and fits the
  /// jobs and the chunk buffers (buffer_bytes, the read scratch, the pages of mapped sources
  /// kept) into what is left; it is an error when even one job with the smallest buffer does
  /// not fit. The summary reports the budget, the jobs and buffer chosen, and the peak.
  std::uint64_t max_memory = 0;
  /// Which parameters are written, under which names (see name_rules).
  name_rules names{};
  /// Which parameters are cast to another dtype (see dtype_rules).
  dtype_rules casts{};
  /// Compute the SHA-256 of every file written, as it is written (the summary's `written`; a
  /// manifest, manifest.hpp). Costs a pass of the CPU over the bytes (sha256.hpp: 1.4 GB/s a
  /// core with the x86 SHA extensions, 0.2 GB/s without).
  bool digests = false;
  /// Read the strategies and the sources' indexes, check, and report what would be read and
  /// written (transform_summary::preview, and the plan it is computed from:
  /// transform_summary::plan) without reading tensor data or writing anything.
  bool dry_run = false;
  std::function<void(const transform_progress&)> progress{};  ///< called as parameters are written
};

/// The process's resident set size now, in bytes (/proc/self/statm; 0 where it cannot be read).
inline std::uint64_t current_rss_bytes() noexcept {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// The process's peak resident set size in bytes: VmHWM of /proc/self/status, the peak of this
/// program's own memory; where that cannot be read, getrusage's ru_maxrss, which on Linux also
/// counts the memory of the process that forked this one before it exec'd the program (a large
/// parent, such as a Python script that started it, can then show as this program's peak).
inline std::uint64_t peak_rss_bytes() noexcept {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "VmHWM: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::uint64_t>(kib) * 1024;
  }
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

// The chunks of a row-major slice of shape `e` (element size `elem`) of at most `limit` bytes
// each (at least one innermost row of the chosen dim): boxes in slice-local coordinates, in
// order, each a contiguous byte range of the slice.
template <class F>
void for_each_chunk(const index_list& e, std::size_t elem, std::uint64_t limit, F&& f) {
  const std::size_t n = e.size();
  box whole{index_list(n, 0), e};
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
  box c{index_list(n, 0), e};
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

// The stored piece of a content holding byte `offset` (`starts`: each piece's first byte).
inline std::size_t piece_of(std::span<const std::uint64_t> starts, std::uint64_t offset) {
  return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin()) - 1;
}

// Calls f(span) for the stored bytes of [offset, offset + len) of a content split into
// `pieces`, in order (one span per piece the range meets).
template <class F>
void for_each_stored(std::span<const std::span<const std::byte>> pieces, std::span<const std::uint64_t> starts,
                     std::uint64_t offset, std::uint64_t len, F&& f) {
  std::size_t k = piece_of(starts, offset);
  while (len > 0) {
    const std::uint64_t in = offset - starts[k];
    const std::uint64_t n = std::min<std::uint64_t>(len, pieces[k].size() - in);
    f(pieces[k].subspan(static_cast<std::size_t>(in), static_cast<std::size_t>(n)));
    offset += n;
    len -= n;
    ++k;
  }
}

// Copies `len` bytes at `offset` of a content split into `pieces` into `out`.
inline void copy_from_pieces(std::span<const std::span<const std::byte>> pieces,
                             std::span<const std::uint64_t> starts, std::uint64_t offset, std::byte* out,
                             std::uint64_t len) {
  for_each_stored(pieces, starts, offset, len, [&](std::span<const std::byte> b) {
    std::memcpy(out, b.data(), b.size());
    out += b.size();
  });
}

// Each release of source pages is a page-table change (a TLB flush: about 100 us on some virtual
// machines, 30 a file when every tensor released its own range). So the ranges a job reads are
// not released one by one: each source file keeps the span it was read in, and the spans are
// released when no target needs the file any more or, oldest first, when the pages they may
// hold exceed the job's budget (jobs * buffer_bytes): the memory bound stays, the calls drop.

// Where one target stage of a parameter lives: its layout, its partition, and the plan from the
// source layout (none when the source strategy does not list the parameter).
struct target_plan {
  std::uint32_t stage = 0;
  layout dst;
  partition part;                      // of dst, arithmetic: boxes of ranks
  std::optional<rank_planner> planner;  // source layout -> dst
};

// A parameter to be sliced: its layouts and what the sources hold.
struct param_info {
  std::string name;
  const std::vector<staged_layout>* src_entries = nullptr;  // null: not listed in the source strategy
  const std::vector<staged_layout>* dst_entries = nullptr;  // null: not listed in the target strategy
  bool resolved = false;
  index_list shape;
  bool scalar = false;
  std::vector<std::int64_t> scalar_dims;  // how the source writes the scalar's dims
  bool type_known = false;
  dtype type = dtype::uint8;
  std::string type_file;
  std::optional<layout> src;  // listed in the source strategy: its layout (lowest stage)
  std::vector<target_plan> dst;        // per target stage
  std::optional<partition> src_part;   // of src, arithmetic: each source rank's box, no O(M) tables
  std::optional<rank_planner> whole;   // listed in the source strategy only: src -> whole_on_targets
  std::set<index_t> checked;  // source ranks whose entry was checked
};

// One parameter of one target file.
struct out_item {
  param_info* p = nullptr;          // sliced; null for a raw copy
  const tensor_ref* raw = nullptr;  // raw copy (or the unlisted source of a sliced parameter)
  const target_plan* dst = nullptr;  // null: the whole tensor
  index_t base = 0;                 // source rank t % M
  std::string_view out;             // the output name (name_rules), when it differs
  std::string_view source_name() const { return p ? std::string_view(p->name) : std::string_view(raw->name); }
  std::string_view name() const { return out.empty() ? source_name() : out; }
};


// transform_job::verify: the file a target's bytes are compared with.
struct verify_comparison {
  const checkpoint_reader* rd = nullptr;
  std::vector<verify_mismatch>* found = nullptr;
  std::set<std::string, std::less<>> seen;  // the parameters expected
  const tensor_ref* e = nullptr;            // the current one's tensor in the file (null: skip)
  std::vector<std::uint64_t> starts;
  std::uint64_t at = 0;
  std::size_t elem = 1;
  std::string name;
  std::vector<std::byte> scratch;
  std::uint64_t bytes = 0;
  void differ(std::string what) { found->push_back({rd->path(), name, std::move(what)}), e = nullptr; }
};

/// One target file of a transform_job: the target rank and the file to write.
struct transform_target {
  index_t rank = 0;
  std::filesystem::path path;
};

/// Where a target loaded into memory (transform_job::load) puts each parameter: called once per
/// parameter, in the target's order, with the target rank, the parameter's name, dtype, dims
/// (empty for a scalar) and size in bytes; returns writable memory of exactly `bytes` bytes,
/// which the engine fills. Calls are serialized. An exception thrown here abandons the load.
using tensor_allocator = std::function<std::span<std::byte>(index_t rank, std::string_view name, dtype type,
                                                            std::span<const std::int64_t> dims, std::uint64_t bytes)>;

/// The engine behind every workflow (transform, by rank, merge, split, convert, and each
/// process's share under MPI): writes the targets' files from the source files, executing for
/// each parameter its plan (rank_planner: one planner, one replica policy) with convert's copy
/// jobs (one copy engine). Three steps, each all or nothing:
///   check()    every check that needs no tensor data; nothing is written
///   stage()    every target written in full as `<file>.reshard-<pid>.<n>.part`, all fsynced
///              together at the end (write-back starts while they are written)
///   commit()   the staged files renamed into place, their directories fsynced
/// run() does the three. A job destroyed before commit() removes what it staged and the
/// directories it created. Callers that must agree with others between steps (MPI) call them
/// one by one.
class transform_job {
 public:
  /// `files`: source rank -> its file; `targets`: the files to write; `op` names the workflow in
  /// messages; `warnings` start the summary's.
  transform_job(strategy_layouts src, strategy_layouts dst, std::map<index_t, std::filesystem::path> files,
                std::vector<transform_target> targets, transform_options opts, std::string op,
                std::vector<std::string> warnings = {})
      : src_(std::move(src)), dst_(std::move(dst)), files_(std::move(files)), targets_(std::move(targets)),
        opts_(std::move(opts)), exec_{opts_.jobs, opts_.buffer_bytes}, op_(std::move(op)),
        warnings_(std::move(warnings)) {
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

  transform_job(transform_job&&) = default;  // before check() only
  transform_job(const transform_job&) = delete;
  transform_job& operator=(const transform_job&) = delete;
  transform_job& operator=(transform_job&&) = delete;
  ~transform_job() { discard(); }

  /// Step 1: checks the outputs (none is a source; none exists unless `force`), the strategies,
  /// shapes, dtypes and every source file and parameter that will be read, and the CRC trailers.
  void check() {
    start_ = std::chrono::steady_clock::now();
    check_outputs();
    prepare();
    fit_memory();
    checked_ = true;
  }

  /// Step 2: writes every target file in full, staged under a temporary name, and (`sync`)
  /// makes them durable.
  void stage() {
    RESHARD_EXPECTS(checked_ && !staged_, "transform_job: stage() before check(), or twice");
    summary_ = write_all();
    if (opts_.sync) {
      std::vector<std::filesystem::path> parts;
      parts.reserve(stage_.size());
      for (const auto& st : stage_) parts.push_back(st.part);
      sync_files(parts, fsync_threads, op_);
    }
    staged_ = true;
  }

  /// Step 3: renames the staged files into place and makes the renames durable.
  transform_summary commit() {
    RESHARD_EXPECTS(staged_ && !committed_, "transform_job: commit() before stage(), or twice");
    rename_all();
    committed_ = true;
    transform_summary s = std::move(summary_);
    finish(s);
    return s;
  }

  /// Instead of check(), stage() and commit(): what the run would read and write, from the
  /// strategies and the sources' indexes alone. The checks of check() that need no tensor data
  /// run (existing outputs, strategies, shapes, dtypes, the files each target needs); the CRC
  /// trailers are not verified (that reads every byte) and nothing is written.
  transform_preview preview() {
    RESHARD_EXPECTS(!checked_, "transform_job: preview() after check()");
    start_ = std::chrono::steady_clock::now();
    check_outputs();
    previewing_ = true;
    prepare();
    fit_memory();
    checked_ = committed_ = true;  // nothing to stage
    return preview_of(plan());
  }

  /// What the run reads and writes, as a value (checkpoint_plan.hpp): per target file its items
  /// in file order, each a raw copy or its transfers, and the totals. Made once, on the first
  /// call, after check() or preview(); reads no tensor data.
  const checkpoint_plan& plan() {
    RESHARD_EXPECTS(checked_, "transform_job: plan() before check() or preview()");
    if (!plan_) plan_ = make_plan();
    return *plan_;
  }

  /// check(), stage(), commit().
  transform_summary run() {
    if (opts_.dry_run) {
      transform_summary s;
      s.preview = preview();
      s.plan = std::exchange(plan_, std::nullopt);  // the plan the preview was computed from
      finish(s);
      s.synced = false;  // nothing was written
      return s;
    }
    check();
    stage();
    return commit();
  }

  /// Instead of stage() and commit(): assembles every target in memory that `allocate` gives
  /// (the targets' paths are not used, nothing is written), with the same plans, reads and copy
  /// jobs as the files. The chunks are assembled in place: besides what `allocate` returns, the
  /// engine holds only its read buffers. Checks first if check() has not run.
  transform_summary load(const tensor_allocator& allocate) {
    RESHARD_EXPECTS(!staged_ && !committed_, "transform_job: load() after stage()");
    if (!checked_) check();
    std::mutex serial;
    const tensor_allocator locked = [&](index_t rank, std::string_view name, dtype type,
                                        std::span<const std::int64_t> dims, std::uint64_t bytes) {
      const std::lock_guard<std::mutex> lock(serial);
      auto m = allocate(rank, name, type, dims, bytes);
      if (m.size() != bytes)
        report_error(op_ + ": parameter " + quote_name(name) + ": the allocator returned " + std::to_string(m.size()) +
                     " bytes for a tensor of " + std::to_string(bytes));
      return m;
    };
    std::vector<transform_summary> per(targets_.size());
    reshard::parallel_for(targets_.size(), threads(), [&](std::size_t i) {
      sink out;
      out.memory = &locked;
      out.rank = targets_[i].rank;
      per[i] = fill_target(targets_[i], out);
    });
    committed_ = true;
    transform_summary s;
    for (const auto& p : per) {
      s.sliced += p.sliced;
      s.copied += p.copied;
      s.bytes_read += p.bytes_read;
      s.bytes_written += p.bytes_written;
    }
    finish(s);
    s.synced = false;  // nothing was written
    return s;
  }

 private:
  // The summary's fields known at the end.
  void finish(transform_summary& s) {
    s.source_files = readers_.size();
    s.casts = cast_records_;
    for (const auto& [r, rd] : readers_) s.source_bytes += rd->file_size();
    s.warnings = std::move(warnings_);
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s.peak_rss_bytes = peak_rss_bytes();
    s.jobs = threads();
    s.reads = reads();
    s.synced = opts_.sync;
    s.max_memory = opts_.max_memory;
    s.buffer_bytes = exec_.buffer_bytes;
    std::set<std::string> kinds;  // one statfs per source file read
    for (const auto& [r, rd] : readers_) kinds.insert(filesystem_name(rd->path()));
    for (const auto& k : kinds) s.source_filesystem += (s.source_filesystem.empty() ? "" : ",") + k;
  }

  // -- the memory budget (memory_fit.hpp)
  job_memory job() const noexcept {
    return {atomic_file_writer::buffer_capacity, !opts_.casts.empty()};
  }

  // With max_memory: fits the jobs, then the buffer, into what the process does not hold yet.
  void fit_memory() {
    if (opts_.max_memory == 0) return;
    if (opts_.reads == read_mode::mmap)
      report_error(op_ + ": max_memory cannot be kept with read_mode mmap: around every read from a mapping the "
                   "kernel maps whole page-cache folios (measured: 4 MiB per source file on ext4), beyond the "
                   "engine's control; read with pread (the default)");
    exec_ = io::fit_memory(opts_.max_memory, current_rss_bytes(), job(),
                           {threads(), exec_.buffer_bytes}, readers_.size(), op_);
  }

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
  // No output may be a source file, and none may exist unless `force`: one stat per source file
  // and one per output (O(M + N) calls), the sources compared by device and inode.
  void check_outputs() {
    std::map<std::pair<dev_t, ino_t>, index_t> sources;
    for (const auto& [r, f] : files_) {
      struct ::stat st {};
      if (::stat(f.c_str(), &st) == 0) sources.emplace(std::pair{st.st_dev, st.st_ino}, r);
    }
    for (const auto& t : targets_) {
      struct ::stat st {};
      if (hf_target()) {  // a directory, which may exist (with config files): not a source, nor holding a checkpoint
        if (::stat(t.path.c_str(), &st) == 0) {
          const auto hit = sources.find({st.st_dev, st.st_ino});
          if (hit != sources.end())
            report_error(op_ + ": output directory " + t.path.string() + " is the source of rank " +
                         std::to_string(hit->second) + " (inputs are never modified)");
          for (const std::string_view name : {hf_index_name, hf_single_name})
            if (!opts_.force && ::lstat((t.path / name).c_str(), &st) == 0)
              report_error(op_ + ": " + (t.path / name).string() + " exists (pass force / --force to replace it)");
          if (::stat(t.path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
            report_error(op_ + ": " + t.path.string() + " is not a directory (a Hugging Face checkpoint is one)");
        }
        continue;
      }
      if (::lstat(t.path.c_str(), &st) != 0) continue;  // absent: the usual case
      struct ::stat target {};
      if (::stat(t.path.c_str(), &target) == 0) {
        const auto hit = sources.find({target.st_dev, target.st_ino});
        if (hit != sources.end())
          report_error(op_ + ": output " + t.path.string() + " is the source file of rank " +
                       std::to_string(hit->second) + " (inputs are never modified)");
      }
      if (!opts_.force) report_error(op_ + ": " + t.path.string() + " exists (pass force / --force to replace it)");
    }
  }

  // -- phase 1: every check that needs no data
  void prepare() {
    collect_params();
    std::uint64_t total = 0;
    for (const auto& t : targets_) {
      std::set<std::string_view> names;
      std::set<index_t> used;
      for_each_item(t.rank, [&](out_item& it) {
        if (!names.insert(it.name()).second)
          report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + quote_name(it.name()) +
                       " would be written twice");
        check_item(t, it, used);
        decide_item_cast(it);
        total += item_bytes(t.rank, it);
      });
      for (index_t r : used) ++uses_[r].targets;
      if (names.empty())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " would get no parameters");
    }
    bytes_total_ = total;
    check_casts();
    check_opened();
    if (!previewing_) verify_crcs();
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
    apply_name_rules();
    // Sliced parameters listed in the source strategy.
    for (const auto& name : src_.names()) {
      if (!selected(name)) continue;
      auto& p = params_[name];
      p.name = name;
      p.src_entries = src_.find(name);
      p.dst_entries = dst_.present() ? dst_.find(output_name(name)) : nullptr;
    }
    // Parameters of the base files that only the target strategy lists.
    for (const auto& t : targets_) {
      const auto& rd = open(t.rank % M_);
      for (const auto& e : rd.entries()) {
        if (!selected(e.name) || src_.find(e.name) || !dst_.present() || !dst_.find(output_name(e.name))) continue;
        auto& p = params_[e.name];
        p.name = e.name;
        p.dst_entries = dst_.find(output_name(e.name));
      }
    }
    if (dst_.present()) {
      std::set<std::string_view> outputs;
      for (const auto& [name, p] : params_) outputs.insert(output_name(name));
      for (const auto& name : dst_.names()) {
        if (outputs.count(name) || (names_ && names_->excluded.count(name))) continue;
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

  // Every parameter of the sources that rules may name: the source strategy's and the targets'
  // base files' (name_rules and dtype_rules are checked against these).
  std::set<std::string, std::less<>> source_names() {
    std::set<std::string, std::less<>> all(src_.names().begin(), src_.names().end());
    std::set<index_t> bases;
    for (const auto& t : targets_) bases.insert(t.rank % M_);
    for (index_t b : bases)
      for (const auto& e : open(b).entries()) all.insert(e.name);
    return all;
  }

  // -- dtype_rules (dtype_rules.hpp)
  // Decides the dtype item `it` is written in (once per parameter), and checks it.
  void decide_item_cast(const out_item& it) {
    const dtype_rules& r = opts_.casts;
    if (r.empty()) return;
    const std::string_view name = it.source_name();
    if (cast_decided_.count(name)) return;
    cast_decided_.emplace(name);
    named_hits_.resize(r.named.size());
    const dtype from = it.p ? it.p->type : it.raw->type;
    // where its dtype was read
    const std::string file = it.p ? it.p->type_file : open(it.base).path().string();
    const cast_decision d =
        io::decide_cast(r, name, from, !it.p && it.raw->map_tensor, op_ + ": " + file);
    if (d.rule != cast_decision::npos) ++named_hits_[d.rule];
    if (d.kept)
      ++kept_dtypes_, kept_example_ = kept_example_.empty() ? std::string(name) : kept_example_;
    if (!d.to) return;
    cast_to_.emplace(std::string(name), *d.to);
    cast_records_.push_back({std::string(it.name()), from, *d.to});
  }
  // After every item was decided: each named glob matches a parameter of the sources (one that
  // this job writes, or one of the source strategy or the targets' base files that it does not,
  // such as a parameter of another pipeline stage).
  void check_casts() {
    const dtype_rules& r = opts_.casts;
    check_cast_rules(r, named_hits_, [&] { return source_names(); }, op_);
    if (kept_dtypes_ > 0)
      warnings_.push_back(kept_dtype_warning(kept_dtypes_, kept_example_, *r.all));
    std::sort(cast_records_.begin(), cast_records_.end(),
              [](const cast_record& a, const cast_record& b) { return a.name < b.name; });
  }
  // The dtype item `it` is written in.
  dtype out_type(const out_item& it) const {
    const dtype from = it.p ? it.p->type : it.raw->type;
    if (cast_to_.empty()) return from;
    const auto c = cast_to_.find(it.source_name());
    return c == cast_to_.end() ? from : c->second;
  }

  // -- name_rules (name_rules.hpp)
  // Decides the selected parameters and their output names (names_), from every parameter of
  // the sources (the source strategy's and the targets' base files'), and checks the rules.
  void apply_name_rules() {
    if (opts_.names.empty()) return;
    names_ = select_names(opts_.names, source_names(), op_);
    if (dst_.present())
      for (const auto& [from, to] : names_->renamed)
        if (from != to && !dst_.find(to))
          report_error(op_ + ": parameter " + quote_name(from) + " is renamed " + quote_name(to) +
                       ", which the target strategy " + dst_.source() + " does not list");
  }
  bool selected(std::string_view name) const { return !names_ || names_->selected(name); }
  std::string_view output_name(std::string_view name) const {
    return names_ ? names_->output_name(name) : name;
  }
  // it.out: the output name when it differs from the source's
  void name_item(out_item& it) const {
    const auto o = output_name(it.source_name());
    it.out = o == it.source_name() ? std::string_view() : o;
  }

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
      name_item(it);
      f(it);
    };
    for (const auto& e : rd.entries()) {
      if (!selected(e.name)) continue;
      auto pit = params_.find(e.name);
      if (pit != params_.end()) {
        visit_listed(pit->second);
      } else {
        out_item it;
        it.raw = &e;
        it.base = base;
        name_item(it);
        f(it);
      }
    }
    for (const auto& name : src_.names())
      if (selected(name) && !rd.find(name)) visit_listed(params_.at(name));
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
        for (const auto& d : p.dst)
          if (d.stage == stage) it.dst = &d;
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
        p.shape = index_list(s.stored.tensor_shape.begin(), s.stored.tensor_shape.end());
      } else {
        p.shape = full_shape_from_slice(s.stored, shape_from->dims,
                                        who_src(p.name) + " (slice dims " + format_dims(shape_from->dims) + " in " +
                                            shape_file + ")");
      }
      p.src = to_layout(s.stored, p.shape, s.stage, who_src(p.name));
      p.src_part.emplace(*p.src, partition::mode::arithmetic);
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
      if (!p.scalar) p.shape = index_list(shape_from->dims.begin(), shape_from->dims.end());
    }
    if (p.dst_entries) {
      for (const auto& e : *p.dst_entries) {
        check_tensor_shape(
            e.stored, p.shape, op_ + ": " + who_dst(p.name),
            (p.src_entries ? "the source strategy and " : std::string()) + shape_file);
        target_plan& d = p.dst.emplace_back();
        d.stage = e.stage;
        d.dst = to_layout(e.stored, p.shape, e.stage, who_dst(p.name));
        d.part = partition(d.dst, partition::mode::arithmetic);
        if (p.src) d.planner.emplace(*p.src, d.dst);
      }
    } else if (p.src) {
      p.whole.emplace(*p.src, whole_on_targets(p.shape, N_));
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
    const index_list want = p.src ? p.src_part->box_of_rank(r).extent : p.shape;
    if (e->is_scalar() || index_list(e->dims.begin(), e->dims.end()) != want)
      report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + ": dims " + format_dims(e->dims) +
                   " disagree with " +
                   (p.src ? "the source strategy " + src_.source() + ": layout " + to_string(*p.src) + " gives rank " +
                                std::to_string(r) + " the slice " + to_string(want)
                          : "the full shape " + to_string(want) + " found in " + p.type_file));
  }

  box target_box(const out_item& it, index_t t) const {
    const index_list& shape = it.p->shape;
    if (!it.dst) return box{index_list(shape.size(), 0), shape};
    return it.dst->part.box_of_rank(t);
  }

  // The pieces of target t's box of a sliced item: (source rank, piece box, source rank's box).
  struct piece {
    index_t rank;
    box where;
    box held;
  };
  // The transfers to t of the parameter's plan (the one planner, the one replica policy:
  // rank_planner), as pieces. A planned sender whose file was not given (by-rank transforms
  // given other files than rank_list_for_transform names) is replaced by the lowest owner of the
  // same region whose file was given: the same bytes.
  std::vector<piece> pieces_of(const out_item& it, index_t t, const box& tb) {
    std::vector<piece> out;
    const param_info& p = *it.p;
    if (!p.src) {  // not listed in the source strategy: whole in the base file t % M
      out.push_back({it.base, tb, box{index_list(p.shape.size(), 0), p.shape}});
      return out;
    }
    const rank_planner& rp = it.dst ? *it.dst->planner : *p.whole;
    std::vector<transfer> xs;
    rp.receives(t, xs);
    out.reserve(xs.size());
    for (const transfer& x : xs) {
      index_t r = x.src;
      if (!available(r)) r = available_owner(rp.source(), rp.source().region_of(r));
      if (r < 0) {
        std::vector<index_t> buf;
        std::string ranks;
        for (index_t o : rp.source().owners_of(rp.source().region_of(x.src), buf)) {
          if (!ranks.empty()) ranks += ',';
          ranks += std::to_string(o);  // appended, not "," + ...: GCC 12 -O3 -Wrestrict
        }
        report_error(op_ + ": target rank " + std::to_string(t) + " needs the box " + to_string(x.where) +
                     " of parameter " + quote_name(p.name) + " from one of the source ranks " + ranks +
                     ", but no file was given for any of them (rank_list_for_transform lists the files a rank needs)");
      }
      out.push_back({r, x.where, rp.source().box_of_rank(r)});
    }
    return out;
  }

  // The lowest owner of source region k whose file was given; -1 if none.
  index_t available_owner(const partition& ps, index_t k) const {
    std::vector<index_t> buf;
    for (index_t o : ps.owners_of(k, buf))
      if (available(o)) return o;
    return -1;
  }

  // Checks one item of target t; adds the source ranks it reads to `used`.
  void check_item(const transform_target& t, out_item& it, std::set<index_t>& used) {
    const bool st = hf_target() || safetensors_target(t);
    if (!it.p) {
      const tensor_ref& e = *it.raw;
      if (st && (e.map_tensor || e.type == dtype::str))
        report_error(op_ + ": " + open(it.base).path().string() + ": parameter " + quote_name(e.name) + " is a " +
                     (e.map_tensor ? "map tensor" : "str tensor") + ", which safetensors cannot hold (write ckpt)");
      used.insert(it.base);
      return;
    }
    param_info& p = *it.p;
    resolve(p);
    if (!p.src) {
      check_source(p, it.base);
      used.insert(it.base);
      return;
    }
    const box tb = target_box(it, t.rank);
    for (const auto& pc : pieces_of(it, t.rank, tb)) {
      check_source(p, pc.rank);
      used.insert(pc.rank);
    }
  }

  // The bytes item `it` of target t reads (in its source dtype) and writes (in its output dtype).
  std::uint64_t item_source_bytes(index_t t, const out_item& it) const {
    if (!it.p) return it.raw->content_size();
    if (it.p->scalar) return element_size(it.p->type);
    return static_cast<std::uint64_t>(volume(target_box(it, t))) * element_size(it.p->type);
  }
  std::uint64_t item_bytes(index_t t, const out_item& it) const {
    const std::uint64_t n = item_source_bytes(t, it);
    const dtype from = it.p ? it.p->type : it.raw->type, to = out_type(it);
    return from == to ? n : n / element_size(from) * element_size(to);
  }

  void verify_crcs() {
    if (!opts_.verify_crc) return;
    std::vector<const checkpoint_reader*> list;
    for (const auto& [r, rd] : readers_) list.push_back(rd.get());
    // windows of 8 MiB; under max_memory, a quarter of the budget shared by the threads
    std::size_t window = std::size_t{8} << 20;
    if (opts_.max_memory != 0)
      window = static_cast<std::size_t>(std::clamp<std::uint64_t>(opts_.max_memory / (4 * threads()), 64 << 10, window));
    reshard::parallel_for(list.size(), threads(), [&](std::size_t i) { list[i]->verify_crc(window); });
  }

  // The jobs asked for, or (0) one per core and at most one per target file.
  unsigned threads() const {
    if (exec_.jobs != 0) return exec_.jobs;
    return static_cast<unsigned>(std::clamp<std::size_t>(targets_.size(), 1, reshard::thread_count(0)));
  }

  read_mode reads() const noexcept { return opts_.reads == read_mode::mmap ? read_mode::mmap : read_mode::pread; }

  // The targets are Hugging Face checkpoint directories.
  bool hf_target() const noexcept { return opts_.format == checkpoint_format::hf; }
  // Target t is a safetensors file (by its name: no system call, it is asked per parameter).
  static bool safetensors_target(const transform_target& t) { return t.path.extension() == ".safetensors"; }

  // Staged files are written with their write-back started, and fsynced together in stage().
  io::durability durability() const noexcept { return opts_.sync ? io::durability::deferred : io::durability::none; }
  // fsyncs in flight at once: waits on the disk, not work for the cores.
  static constexpr unsigned fsync_threads = 8;

  // -- phase 2: writing
  // A target's output: a ckpt or safetensors file, or memory from a tensor_allocator.
  struct sink {
    std::optional<ckpt_writer> ckpt;
    std::optional<safetensors_writer> st;
    const tensor_allocator* memory = nullptr;
    index_t rank = 0;             // memory: the target's
    std::span<std::byte> tensor;  // memory: the current tensor's
    std::size_t filled = 0;       // and the bytes of it written
    std::optional<verify_comparison> compare;  // verify: the file the bytes are compared with
    std::function<void(std::size_t)> open_shard;  // hf: makes `st` the writer of shard k
    void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) {
      if (ckpt) ckpt->begin(name, type, dims, bytes);
      if (memory) tensor = (*memory)(rank, name, type, dims, bytes), filled = 0;
      if (compare) begin_compare(name, type, dims, bytes);
    }
    void begin_compare(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) {
      auto& c = *compare;
      c.name = std::string(name);
      c.seen.insert(c.name);
      c.at = 0;
      c.elem = element_size(type);
      c.e = c.rd->find(name);
      if (!c.e) return c.differ("missing");
      if (c.e->type != type)
        return c.differ("dtype " + std::string(ms_name(c.e->type)) + ", expected " + std::string(ms_name(type)));
      if (!std::equal(c.e->dims.begin(), c.e->dims.end(), dims.begin(), dims.end()))
        return c.differ("dims " + format_dims(c.e->dims) + ", expected " +
                        format_dims(std::vector<std::int64_t>(dims.begin(), dims.end())));
      if (c.e->content_size() != bytes)
        return c.differ(std::to_string(c.e->content_size()) + " bytes, expected " + std::to_string(bytes));
      c.starts.clear();
      std::uint64_t at = 0;
      for (auto q : c.e->pieces) c.starts.push_back(at), at += q.size();
    }
    void append_compare(std::span<const std::byte> b) {
      auto& c = *compare;
      const std::uint64_t at = c.at;
      c.at += b.size();
      if (!c.e || b.empty()) return;
      c.scratch.resize(b.size());
      copy_from_pieces(c.e->pieces, c.starts, at, c.scratch.data(), b.size());
      for_each_stored(c.e->pieces, c.starts, at, b.size(), [](std::span<const std::byte> r) { release_pages(r); });
      c.bytes += b.size();
      if (std::memcmp(c.scratch.data(), b.data(), b.size()) == 0) return;
      std::size_t i = 0;
      while (c.scratch[i] == b[i]) ++i;
      c.differ("differs from element " + std::to_string((at + i) / c.elem) + " (byte " + std::to_string(at + i) + ")");
    }
    // memory: where the next n bytes go, for the engine to assemble them in place (then append()
    // them from there); otherwise nullptr.
    std::byte* direct(std::size_t n) const {
      RESHARD_EXPECTS(!memory || n <= tensor.size() - filled, "transform_job: a tensor overflows its memory");
      return memory ? tensor.data() + filled : nullptr;
    }
    void append(std::span<const std::byte> b) {
      if (ckpt) {
        ckpt->append(b);
      } else if (compare) {
        append_compare(b);
      } else if (st) {
        st->append(b);
      } else {
        RESHARD_EXPECTS(b.size() <= tensor.size() - filled, "transform_job: a tensor overflows its memory");
        if (b.data() != tensor.data() + filled && !b.empty()) std::memcpy(tensor.data() + filled, b.data(), b.size());
        filled += b.size();
      }
    }
    void end() {
      if (ckpt) ckpt->end();
      RESHARD_EXPECTS(!memory || filled == tensor.size(), "transform_job: a tensor's memory is not filled");
    }
  };

  struct staged {
    std::filesystem::path part, final;
    bool written = false;  // a staged file exists
  };

 public:
  /// Instead of stage() and commit(): checks the targets' files, which must exist, against what
  /// the sources make, with the same plans, reads and copy jobs as writing them, in chunks
  /// compared with the files' bytes (bounded memory: each chunk's pages of the file are released
  /// after it). Reports every difference (a missing or unreadable file, a missing, extra or
  /// differently typed or shaped parameter, the first differing element of a tensor, a wrong
  /// crc_num trailer) instead of throwing; bad sources and strategies are errors as for a run.
  verify_report verify() {
    RESHARD_EXPECTS(!checked_, "transform_job: verify() after check()");
    start_ = std::chrono::steady_clock::now();
    prepare();
    fit_memory();
    checked_ = committed_ = true;
    std::vector<std::vector<verify_mismatch>> per(targets_.size());
    std::vector<std::size_t> tensors(targets_.size());
    std::vector<std::uint64_t> bytes(targets_.size());
    reshard::parallel_for(targets_.size(), threads(), [&](std::size_t i) {
      const transform_target& t = targets_[i];
      auto& found = per[i];
      std::unique_ptr<checkpoint_reader> rd;
      try {
        std::error_code ec;
        if (!std::filesystem::exists(t.path, ec)) {
          found.push_back({t.path, {}, "missing file"});
          return;
        }
        rd = std::make_unique<checkpoint_reader>(t.path);
        rd->verify_crc();
      } catch (const reshard::error& e) {
        found.push_back({t.path, {}, std::string("cannot be read: ") + e.what()});
        return;
      }
      sink out;
      out.compare.emplace();
      out.compare->rd = rd.get();
      out.compare->found = &found;
      const transform_summary s = fill_target(t, out);
      tensors[i] = s.sliced + s.copied;
      bytes[i] = out.compare->bytes;
      for (const auto& e : rd->entries())
        if (!out.compare->seen.count(e.name)) found.push_back({t.path, e.name, "not expected (no source makes it)"});
    });
    verify_report r;
    for (std::size_t i = 0; i < per.size(); ++i) {
      r.files += 1;
      r.tensors += tensors[i];
      r.bytes += bytes[i];
      for (auto& m : per[i]) r.mismatches.push_back(std::move(m));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return r;
  }

 private:

  // Creates the missing parent directories of the outputs, remembering them for the cleanup.
  void make_directories() {
    for (const auto& t : targets_) {
      std::vector<std::filesystem::path> missing;
      for (auto d = hf_target() ? t.path : t.path.parent_path(); !d.empty(); d = d.parent_path()) {
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

  // Writes every target as a staged file (parallel over targets).
  // Every target is one staged file, or (hf) its shards then its index: first_stage_[i] ..
  // first_stage_[i + 1] of stage_, in the order they are renamed into place.
  transform_summary write_all() {
    stage_.clear();
    first_stage_.assign(targets_.size() + 1, 0);
    hf_plans_.assign(targets_.size(), {});
    const auto staged_as = [](const std::filesystem::path& final) {
      staged st;
      st.final = final;
      st.part = detail::unique_temp_path(final, ".part");  // unique per call: see unique_temp_path
      return st;
    };
    for (std::size_t i = 0; i < targets_.size(); ++i) {
      first_stage_[i] = stage_.size();
      if (!hf_target()) {
        stage_.push_back(staged_as(targets_[i].path));
        continue;
      }
      hf_plans_[i] = plan_hf(targets_[i]);
      const std::size_t k = hf_plans_[i].first.size();
      for (std::size_t j = 0; j < k; ++j) stage_.push_back(staged_as(targets_[i].path / hf_shard_name(j, k)));
      if (k > 1) stage_.push_back(staged_as(targets_[i].path / hf_index_name));
      if (!opts_.force)
        for (std::size_t j = first_stage_[i]; j < stage_.size(); ++j) {
          struct ::stat st {};
          if (::lstat(stage_[j].final.c_str(), &st) == 0)
            report_error(op_ + ": " + stage_[j].final.string() + " exists (pass force / --force to replace it)");
        }
    }
    first_stage_[targets_.size()] = stage_.size();
    std::vector<transform_summary> per(targets_.size());
    std::vector<std::vector<written_file>> records(targets_.size());
    make_directories();
    for (const auto& st : stage_) detail::remove_stale_temporaries(st.final);  // of killed runs
    reshard::parallel_for(targets_.size(), threads(), [&](std::size_t i) {
      if (hf_target()) {
        per[i] = write_hf(i, records[i]);
      } else {
        records[i].emplace_back();
        per[i] = write_target(targets_[i], stage_[first_stage_[i]].part, records[i].back());
        stage_[first_stage_[i]].written = true;
      }
    });
    transform_summary s;
    for (auto& r : records)
      for (auto& w : r) s.written.push_back(std::move(w));
    for (const auto& p : per) {
      s.files += p.files;
      s.sliced += p.sliced;
      s.copied += p.copied;
      s.bytes_read += p.bytes_read;
      s.bytes_written += p.bytes_written;
    }
    return s;
  }

  // Every target is complete: moves them into place; on a failure, the files renamed so far are
  // removed (new files only) and the staged ones stay for discard().
  void rename_all() {
    // force onto a Hugging Face checkpoint: its index (and single file) go first, so that from
    // here on no old or mixed checkpoint looks complete; its other shards go at the end
    if (hf_target() && opts_.force)
      for (const auto& t : targets_)
        for (const std::string_view name : {hf_index_name, hf_single_name}) ::unlink((t.path / name).c_str());
    for (std::size_t i = 0; i < stage_.size(); ++i) {
      int err = 0;
      detail::crash_point();  // test-only (RESHARD_TEST_CRASH_AFTER)
      if (opts_.force) {
        if (::rename(stage_[i].part.c_str(), stage_[i].final.c_str()) != 0) err = errno;
      } else {
        err = detail::rename_no_replace(stage_[i].part, stage_[i].final);
      }
      if (err != 0) {
        for (std::size_t k = 0; k < i; ++k) {
          if (!opts_.force) ::unlink(stage_[k].final.c_str());  // new files only: restore the state before
        }
        report_error(op_ + ": " + stage_[i].final.string() + ": " +
                     (err == EEXIST ? std::string("appeared while transforming (pass force to replace it)")
                                    : "cannot rename " + stage_[i].part.string() + ": " + std::strerror(err)));
      }
      stage_[i].written = false;  // renamed: nothing to clean up
      summary_.outputs.push_back(stage_[i].final);
    }
    if (hf_target() && opts_.force) remove_old_shards();
    std::set<std::filesystem::path> dirs;  // make the renames and the new directories durable
    for (const auto& st : stage_) dirs.insert(st.final.parent_path());
    for (const auto& d : created_dirs_) dirs.insert(d.parent_path());
    created_dirs_.clear();  // they hold outputs now
    if (!opts_.sync) return;
    for (const auto& d : dirs) detail::fsync_directory(d);
  }

  // force onto a Hugging Face checkpoint: removes the shards of the one replaced (files named
  // model-<k>-of-<n>.safetensors) that the new one does not have.
  void remove_old_shards() {
    std::set<std::filesystem::path> mine(summary_.outputs.begin(), summary_.outputs.end());
    const std::regex shard(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
    for (const auto& t : targets_) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(t.path, ec)) {
        const auto name = e.path().filename().string();
        if (!mine.count(e.path()) && std::regex_match(name, shard)) ::unlink(e.path().c_str());
      }
    }
  }

  // Removes the staged files and the directories this job created (only if empty).
  void discard() noexcept {
    for (const auto& st : stage_)
      if (st.written) ::unlink(st.part.c_str());
    stage_.clear();
    for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
      std::error_code ec;
      std::filesystem::remove(*it, ec);  // only if empty
    }
    created_dirs_.clear();
  }

  // Target t's items in the order of its file (not hf): for_each_item's, or by name in a
  // safetensors file.
  std::vector<out_item> file_items(const transform_target& t) {
    std::vector<out_item> items;
    for_each_item(t.rank, [&](out_item& it) { items.push_back(it); });
    if (safetensors_target(t))
      std::sort(items.begin(), items.end(), [](const out_item& a, const out_item& b) { return a.name() < b.name(); });
    return items;
  }

  transform_summary write_target(const transform_target& t, const std::filesystem::path& part, written_file& record) {
    std::vector<out_item> items = file_items(t);
    sink out;
    sha256 digest;
    std::function<void(std::span<const std::byte>)> on_write;
    if (opts_.digests) on_write = [&digest](std::span<const std::byte> b) { digest.update(b); };
    const bool st = safetensors_target(t);
    if (st) {
      std::vector<safetensors_tensor_info> infos;
      for (const auto& it : items) infos.push_back(st_info(it, t.rank));
      out.st.emplace(part, std::move(infos),
                     safetensors_write_options{.overwrite = true, .durability = durability(), .on_write = on_write});
    } else {
      out.ckpt.emplace(part, ckpt_write_options{.crc = opts_.crc,
                                                .chunk_bytes = opts_.chunk_bytes,
                                                .overwrite = true,
                                                .durability = durability(),
                                                .on_write = on_write});
    }
    record.path = t.path;
    for (const auto& it : items) record.tensors.push_back(tensor_record(it, t.rank));
    transform_summary s = fill_target(t, out, std::move(items));
    std::error_code ec;
    s.bytes_written = std::filesystem::file_size(part, ec);
    s.files = 1;
    record.bytes = s.bytes_written;
    if (opts_.digests) record.sha256 = digest.hex();
    return s;
  }

  // Item `it` of target t as a safetensors tensor (dims [] for a scalar), and as a manifest's.
  safetensors_tensor_info st_info(const out_item& it, index_t t) const {
    std::vector<std::int64_t> shape;
    if (it.p && !it.p->scalar)
      shape = target_box(it, t).extent.to_vector();
    else if (!it.p && !it.raw->is_scalar())
      shape = it.raw->dims;
    return {std::string(it.name()), out_type(it), std::move(shape)};
  }
  written_file::tensor tensor_record(const out_item& it, index_t t) const {
    written_file::tensor w{std::string(it.name()), out_type(it), {}};
    if (it.p)
      w.dims = it.p->scalar ? it.p->scalar_dims : target_box(it, t).extent.to_vector();
    else
      w.dims = it.raw->dims;
    return w;
  }

  // -- the plan (checkpoint_plan.hpp)
  checkpoint_plan make_plan() {
    const std::uint64_t held = current_rss_bytes();  // before the plan: the run does not hold one
    checkpoint_plan pl;
    for (const auto& t : targets_) {
      plan_target& pt = pl.targets.emplace_back();
      pt.rank = t.rank;
      pt.path = t.path;
      std::vector<out_item> items;
      std::vector<std::size_t> first;  // hf: each shard's first item
      if (hf_target()) {
        pt.format = checkpoint_format::hf;
        hf_plan h = plan_hf(t);
        items = std::move(h.items);
        first = std::move(h.first);
        for (std::size_t j = 0; j < first.size(); ++j) pt.files.push_back(t.path / hf_shard_name(j, first.size()));
        if (first.size() > 1) pt.files.push_back(t.path / hf_index_name);
      } else {
        pt.format = safetensors_target(t) ? checkpoint_format::safetensors : checkpoint_format::ckpt;
        items = file_items(t);
        pt.files.push_back(t.path);
      }
      std::size_t shard = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        while (shard + 1 < first.size() && first[shard + 1] <= i) ++shard;
        pt.items.push_back(plan_item_of(items[i], t.rank));
        pt.items.back().file = shard;
      }
    }
    sum_plan(pl, [&](index_t r) { return files_.at(r); });
    pl.jobs = threads();
    pl.buffer_bytes = exec_.buffer_bytes;
    pl.peak_memory_bound = held + pl.jobs * job().with_slack(exec_.buffer_bytes);
    pl.casts = cast_records_;
    pl.warnings = warnings_;
    return pl;
  }

  // Item `it` of target t in the plan: a raw copy, or its transfers (pieces_of).
  plan_item plan_item_of(const out_item& it, index_t t) {
    plan_item pi;
    pi.source_name = std::string(it.source_name());
    pi.name = std::string(it.name());
    pi.from = it.p ? it.p->type : it.raw->type;
    pi.to = out_type(it);
    pi.dims = tensor_record(it, t).dims;
    pi.bytes = item_bytes(t, it);
    pi.source_bytes = item_source_bytes(t, it);
    if (!it.p || !it.p->src)  // not in the source strategy: whole from the base file t % M
      pi.own_rank_bytes = it.base == t ? pi.source_bytes : 0;
    if (!it.p) {
      pi.raw = true;
      pi.source_rank = it.base;
      const checkpoint_reader& rd = open(it.base);
      for (auto q : it.raw->pieces) pi.stored.push_back({rd.offset_of(q.data()), q.size()});
      return pi;
    }
    const std::size_t elem = element_size(it.p->type);
    pi.target = target_box(it, t);
    if (!it.p->src) {
      pi.transfers.push_back({it.base, pi.target, pi.source_bytes});
      return pi;
    }
    for (const piece& pc : pieces_of(it, t, pi.target))
      pi.transfers.push_back({pc.rank, pc.where, static_cast<std::uint64_t>(volume(pc.where)) * elem});
    const partition& src = (it.dst ? *it.dst->planner : *it.p->whole).source();
    pi.own_rank_bytes = src.has_rank(t) && available(t)
                            ? static_cast<std::uint64_t>(volume(intersect(src.box_of_rank(t), pi.target))) * elem
                            : 0;
    return pi;
  }

  // -- Hugging Face targets
  // A target's items in shards: Hugging Face's rule (hf_shards) over the target's order, then
  // each shard in the safetensors library's data order (by dtype, the widest first, then name).
  struct hf_plan {
    std::vector<out_item> items;
    std::vector<std::size_t> first;  // each shard's first item
  };
  hf_plan plan_hf(const transform_target& t) {
    hf_plan pl;
    for_each_item(t.rank, [&](out_item& it) { pl.items.push_back(it); });
    std::vector<std::uint64_t> sizes;
    for (const auto& it : pl.items) sizes.push_back(item_bytes(t.rank, it));
    pl.first = hf_shards(sizes, opts_.max_shard_bytes);
    for (std::size_t k = 0; k < pl.first.size(); ++k) {
      const auto end = k + 1 < pl.first.size() ? pl.first[k + 1] : pl.items.size();
      std::sort(pl.items.begin() + static_cast<std::ptrdiff_t>(pl.first[k]),
                pl.items.begin() + static_cast<std::ptrdiff_t>(end),
                [&](const out_item& a, const out_item& b) {
                  return safetensors_before(safetensors_order::dtype, out_type(a), a.name(), out_type(b), b.name());
                });
    }
    return pl;
  }

  // Writes target i as a Hugging Face checkpoint: its shards, then (several shards) the index.
  transform_summary write_hf(std::size_t i, std::vector<written_file>& records) {
    const transform_target& t = targets_[i];
    const hf_plan& pl = hf_plans_[i];
    const std::size_t count = pl.first.size();
    staged* files = stage_.data() + first_stage_[i];
    std::vector<sha256> digests(count + 1);
    sink out;
    out.open_shard = [&](std::size_t k) {
      if (k > 0) files[k - 1].written = true;  // committed
      const std::size_t end = k + 1 < count ? pl.first[k + 1] : pl.items.size();
      std::vector<safetensors_tensor_info> infos;
      written_file rec;
      rec.path = files[k].final;
      for (std::size_t j = pl.first[k]; j < end; ++j) {
        infos.push_back(st_info(pl.items[j], t.rank));
        rec.tensors.push_back(tensor_record(pl.items[j], t.rank));
      }
      records.push_back(std::move(rec));
      std::function<void(std::span<const std::byte>)> on_write;
      if (opts_.digests) on_write = [d = &digests[k]](std::span<const std::byte> b) { d->update(b); };
      out.st.emplace(files[k].part, std::move(infos),
                     safetensors_write_options{.metadata = {{"format", "pt"}},
                                               .order = safetensors_order::dtype,
                                               .overwrite = true,
                                               .durability = durability(),
                                               .on_write = std::move(on_write)});
    };
    transform_summary s = fill_target(t, out, pl.items, pl.first);
    if (count > 0) files[count - 1].written = true;
    std::uint64_t total = 0;
    std::map<std::string, std::string> weight_map;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t end = k + 1 < count ? pl.first[k + 1] : pl.items.size();
      for (std::size_t j = pl.first[k]; j < end; ++j) {
        weight_map.emplace(std::string(pl.items[j].name()), hf_shard_name(k, count));
        total += item_bytes(t.rank, pl.items[j]);
      }
      std::error_code ec;
      records[k].bytes = std::filesystem::file_size(files[k].part, ec);
      if (opts_.digests) records[k].sha256 = digests[k].hex();
      s.bytes_written += records[k].bytes;
    }
    s.files = count;
    if (count > 1) {  // the index, last
      const std::string text = hf_index_json(total, weight_map);
      atomic_file_writer w(files[count].part, true, "hf", durability());
      if (opts_.digests) w.observe([d = &digests[count]](std::span<const std::byte> b) { d->update(b); });
      w.write(text);
      w.commit();
      files[count].written = true;
      records.push_back({files[count].final, text.size(), opts_.digests ? digests[count].hex() : std::string(), {}});
      s.bytes_written += text.size();
      s.files += 1;
    }
    return s;
  }

  // Writes target t's items (default: in for_each_item's order) to `out`, and commits a file.
  // With `shard_first` (hf), out.open_shard(k) is called before item shard_first[k], after the
  // previous shard's file is committed.
  transform_summary fill_target(const transform_target& t, sink& out, std::optional<std::vector<out_item>> given = {},
                                std::span<const std::size_t> shard_first = {}) {
    transform_summary s;
    std::vector<out_item> items;
    if (given)
      items = std::move(*given);
    else
      for_each_item(t.rank, [&](out_item& it) { items.push_back(it); });
    std::vector<std::byte> buffer;
    std::set<index_t> used;
    std::uint64_t tensor_bytes = 0;
    std::size_t shard = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const out_item& it = items[i];
      if (shard < shard_first.size() && shard_first[shard] == i) {
        if (out.st) out.st->commit();
        out.open_shard(shard++);
      }
      if (it.p) {
        write_sliced(out, it, t.rank, buffer, used, s);
        ++s.sliced;
      } else {
        write_raw(out, it, buffer, s);
        ++s.copied;
        used.insert(it.base);
      }
      const std::uint64_t bytes = item_bytes(t.rank, it);
      tensor_bytes += bytes;
      report(t.rank, it.name(), bytes, false);
    }
    if (out.ckpt)
      out.ckpt->commit();
    else if (out.st)
      out.st->commit();
    else
      s.bytes_written = tensor_bytes;
    retire(used);
    report(t.rank, {}, 0, true);
    return s;
  }

  const checkpoint_reader& open_const(index_t r) const { return *readers_.at(r); }

  // Source rank r's file was read in `range`: its span grows to cover it, and the oldest spans
  // are released while the pages they may hold (the span, plus the kernel's fault-around, at most
  // the file) exceed the budget.
  void touched(index_t r, std::span<const std::byte> range, std::span<const std::byte> file) {
    if (range.empty()) return;
    std::vector<std::pair<std::span<const std::byte>, std::span<const std::byte>>> now;  // (span, file)
    {
      const std::lock_guard<std::mutex> lock(*resident_mutex_);
      reader_use& u = uses_.at(r);
      const std::byte* lo = range.data();
      const std::byte* hi = range.data() + range.size();
      if (u.lo) lo = std::min(lo, u.lo), hi = std::max(hi, u.hi);
      u.lo = lo;
      u.hi = hi;
      u.file = file;
      const auto pages = std::min<std::uint64_t>(file.size(), static_cast<std::uint64_t>(hi - lo) + detail::fault_around_window);
      resident_ += pages - u.held;
      u.held = pages;
      if (!u.queued) {
        queue_.push_back(r);
        u.queued = true;
      }
      const std::uint64_t budget =
          std::uint64_t{threads()} * std::max<std::uint64_t>(exec_.buffer_bytes, 1);
      while (resident_ > budget && !queue_.empty()) {
        const index_t k = queue_.front();
        queue_.pop_front();
        take(uses_.at(k), now);
      }
    }
    for (const auto& [span, f] : now) release_pages(span, f);
  }

  // A target is done with the sources `used`: each is released when no target needs it any more.
  void retire(const std::set<index_t>& used) {
    std::vector<std::pair<std::span<const std::byte>, std::span<const std::byte>>> now;
    {
      const std::lock_guard<std::mutex> lock(*resident_mutex_);
      for (index_t r : used) {
        reader_use& u = uses_.at(r);
        if (--u.targets == 0) {
          take(u, now);
          readers_.at(r)->close_for_reads();
        }
      }
    }
    for (const auto& [span, f] : now) release_pages(span, f);
  }

  // Takes u's span out of the budget, to be released (resident_mutex_ held).
  struct reader_use;
  void take(reader_use& u, std::vector<std::pair<std::span<const std::byte>, std::span<const std::byte>>>& now) {
    u.queued = false;  // a stale entry in queue_ finds nothing to take
    if (!u.lo) return;
    now.push_back({std::span<const std::byte>(u.lo, static_cast<std::size_t>(u.hi - u.lo)), u.file});
    resident_ -= u.held;
    u.held = 0;
    u.lo = u.hi = nullptr;
  }

  void report(index_t rank, std::string_view name, std::uint64_t bytes, bool file_done) {
    std::lock_guard<std::mutex> lock(*progress_mutex_);
    bytes_done_ += bytes;
    if (file_done) ++files_done_;
    if (opts_.progress)
      opts_.progress({rank, name, bytes_done_, bytes_total_, files_done_, targets_.size()});
  }

  void write_raw(sink& out, const out_item& it, std::vector<std::byte>& buffer, transform_summary& s) {
    const tensor_ref& e = *it.raw;
    const dtype to = out_type(it);
    if (to != e.type) {  // cast: in steps of whole elements, from the mapping into the buffer
      const std::size_t in = element_size(e.type), o = element_size(to);
      const std::uint64_t size = e.content_size();
      const std::uint64_t step = std::max<std::uint64_t>(1, exec_.buffer_bytes / (in + o)) * in;
      std::vector<std::uint64_t> starts;
      std::uint64_t at = 0;
      for (auto q : e.pieces) starts.push_back(at), at += q.size();
      out.begin(it.name(), to, e.dims, size / in * o);
      buffer.resize(static_cast<std::size_t>(step + step / in * o));
      for (std::uint64_t off = 0; off < size; off += step) {
        const auto n = static_cast<std::size_t>(std::min(step, size - off));
        const std::size_t k = piece_of(starts, off);
        const std::byte* src = e.pieces[k].data() + (off - starts[k]);  // inside one stored piece: cast from there
        if (off + n > starts[k] + e.pieces[k].size()) {  // across stored pieces: joined first
          copy_from_pieces(e.pieces, starts, off, buffer.data(), n);
          src = buffer.data();
        }
        const std::span<std::byte> cast(buffer.data() + step, n / in * o);
        cast_elements(std::span<const std::byte>(src, n), e.type, cast, to);
        out.append(cast);
      }
      out.end();
    } else if (out.ckpt && e.ckpt && it.out.empty()) {  // the serialized Value as it is (same name)
      out.ckpt->write_raw(*e.ckpt);
    } else if (out.ckpt && e.ckpt && e.map_tensor) {  // renamed: the Values with the new tag
      out.ckpt->write_raw(*e.ckpt, it.name());
    } else {
      out.begin(it.name(), e.type, e.dims, e.content_size());
      for (auto p : e.pieces) out.append(p);
      out.end();
    }
    s.bytes_read += e.content_size();
    const auto file = open_const(it.base).bytes();
    for (auto p : e.pieces) touched(it.base, p, file);
  }

  void write_sliced(sink& out, const out_item& it, index_t t, std::vector<std::byte>& buffer, std::set<index_t>& used,
                    transform_summary& s) {
    const param_info& p = *it.p;
    const std::size_t elem = element_size(p.type);
    const dtype out_type_ = out_type(it);
    const bool cast = out_type_ != p.type;
    const std::size_t out_elem = element_size(out_type_);
    const box tb = target_box(it, t);
    std::vector<std::int64_t> dims = p.scalar ? p.scalar_dims : tb.extent.to_vector();
    const std::uint64_t total = static_cast<std::uint64_t>(volume(tb)) * out_elem;
    out.begin(it.name(), out_type_, dims, total);
    const auto pieces = pieces_of(it, t, tb);
    struct src_view {
      index_t rank;
      const tensor_ref* e;
      std::span<const std::byte> file;
      std::vector<std::uint64_t> starts;
    };
    std::vector<src_view> views;
    for (const auto& pc : pieces) {
      used.insert(pc.rank);
      src_view v{pc.rank, open_const(pc.rank).find(p.name), open_const(pc.rank).bytes(), {}};
      std::uint64_t at = 0;
      for (auto q : v.e->pieces) v.starts.push_back(at), at += q.size();
      views.push_back(std::move(v));
    }
    std::vector<reshard::detail::copy_job> jobs;
    std::vector<const src_view*> job_view;  // the source of each job
    std::vector<std::pair<const src_view*, std::span<const std::byte>>> read;
    std::vector<std::byte> scratch;  // pread: a job's source range, when its runs are short
    std::vector<std::byte> staged;   // with a cast: the chunk in the source's dtype
    // chunks of at most buffer_bytes in the larger of the source's and the target's dtype
    const std::uint64_t limit = exec_.buffer_bytes / std::max(elem, out_elem) * elem;
    for_each_chunk(tb.extent, elem, limit, [&](const box& local) {
      box c = local;
      for (std::size_t i = 0; i < c.offset.size(); ++i) c.offset[i] += tb.offset[i];
      const std::uint64_t bytes = static_cast<std::uint64_t>(volume(c)) * elem;
      const std::uint64_t out_bytes = static_cast<std::uint64_t>(volume(c)) * out_elem;
      // One copy job (convert.hpp) per source piece the chunk meets, from the source's mapping
      // (offsets from the content's first stored piece; the others follow it) to the buffer, or
      // straight to the target's memory. With a cast, the jobs assemble the chunk in the source's
      // dtype in `staged`, and the whole chunk is cast from there while it is in the cache (one
      // kernel call a chunk, not one a run: runs can be short).
      std::byte* to = nullptr;
      if (cast) {
        staged.resize(static_cast<std::size_t>(bytes));
        to = staged.data();
      } else {
        to = out.direct(static_cast<std::size_t>(bytes));
        if (!to) buffer.resize(static_cast<std::size_t>(bytes)), to = buffer.data();
      }
      const auto emit = [&] {  // the assembled chunk to the output (cast first)
        if (!cast) return out.append(std::span<const std::byte>(to, static_cast<std::size_t>(bytes)));
        std::byte* o = out.direct(static_cast<std::size_t>(out_bytes));
        if (!o) buffer.resize(static_cast<std::size_t>(out_bytes)), o = buffer.data();
        const std::span<std::byte> cast_chunk(o, static_cast<std::size_t>(out_bytes));
        cast_elements(std::span<const std::byte>(to, static_cast<std::size_t>(bytes)), p.type, cast_chunk, out_type_);
        out.append(cast_chunk);
      };
      jobs.clear();
      job_view.clear();
      read.clear();
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        const box in = intersect(pieces[k].where, c);
        if (volume(in) == 0) continue;
        const auto& v = views[k];
        const std::byte* base = v.e->pieces.front().data();
        jobs.push_back(reshard::detail::make_copy_job(base, pieces[k].held, to, c, in, elem));
        job_view.push_back(&v);
        const auto& j = jobs.back();
        read.push_back({&v, std::span<const std::byte>(j.src, reshard::detail::source_span(j))});
        s.bytes_read += static_cast<std::uint64_t>(volume(in)) * elem;
      }
      const auto done = [&] {  // the spans of the contents that were read (one mapping each)
        for (const auto& [v, range] : read) touched(v->rank, range, v->file);
      };
      if (reads() == read_mode::pread) {
        for (std::size_t k = 0; k < jobs.size(); ++k)
          read_job(jobs[k], *job_view[k]->e, job_view[k]->starts, open_const(job_view[k]->rank), scratch);
        emit();
        return;
      }
      // read_mode::mmap: the jobs gather the chunk in the buffer, read in place from the mappings.
      std::size_t kept = 0;
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        auto& j = jobs[k];
        const auto& v = *job_view[k];
        const std::byte* base = v.e->pieces.front().data();
        const auto lo = static_cast<std::uint64_t>(j.src - base), hi = lo + reshard::detail::source_span(j);
        const std::size_t first = piece_of(v.starts, lo);
        if (hi <= v.starts[first] + v.e->pieces[first].size()) {  // inside one stored piece
          j.src = v.e->pieces[first].data() + (lo - v.starts[first]);
          if (kept != k) jobs[kept] = std::move(j);
          ++kept;
        } else {  // across stored pieces: each run resolved through them
          reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
            copy_from_pieces(v.e->pieces, v.starts, static_cast<std::uint64_t>(src - base), dst, n);
          });
        }
      }
      jobs.resize(kept);
      reshard::detail::run_jobs(jobs, 1);
      emit();
      done();
    });
    out.end();
    if (buffer.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(buffer);
  }

  // read_mode::pread: does copy job j (its source pointers in e's mapping, its destination the
  // chunk buffer) with pread(2). The job's source range is read at once into `scratch` and copied
  // from there when it is at most 4 times the bytes needed (or 64 KiB): one system call per range,
  // which measured faster than one per run even for 16 KiB runs (docs/benchmarks.md). A sparser
  // range is read run by run, each into its place.
  void read_job(reshard::detail::copy_job& j, const tensor_ref& e, const std::vector<std::uint64_t>& starts,
                const checkpoint_reader& rd, std::vector<std::byte>& scratch) const {
    const std::byte* base = e.pieces.front().data();  // content offsets are from here
    const auto at = [&](std::uint64_t off) {            // the stored byte of content offset `off`
      const std::size_t k = piece_of(starts, off);
      return e.pieces[k].data() + (off - starts[k]);
    };
    const std::uint64_t lo = static_cast<std::uint64_t>(j.src - base);
    const std::uint64_t span = reshard::detail::source_span(j);
    const std::uint64_t need = static_cast<std::uint64_t>(j.outer) * j.run;
    if (span > std::max<std::uint64_t>(4 * need, std::uint64_t{64} << 10)) {
      reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
        for_each_stored(e.pieces, starts, static_cast<std::uint64_t>(src - base), n, [&](std::span<const std::byte> b) {
          rd.pread_into(std::span<std::byte>(dst, b.size()), rd.offset_of(b.data()));
          dst += b.size();
        });
      });
      return;
    }
    const std::uint64_t f_lo = rd.offset_of(at(lo)), f_hi = rd.offset_of(at(lo + span - 1)) + 1;
    scratch.resize(static_cast<std::size_t>(f_hi - f_lo));
    rd.pread_into(scratch, f_lo);
    if (f_hi - f_lo == span) {  // inside one stored piece: the job runs from the scratch copy
      j.src = scratch.data();
      reshard::detail::for_each_run(j, [](const std::byte* src, std::byte* dst, std::size_t n) { std::memcpy(dst, src, n); });
      return;
    }
    reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
      for_each_stored(e.pieces, starts, static_cast<std::uint64_t>(src - base), n, [&](std::span<const std::byte> b) {
        std::memcpy(dst, scratch.data() + (rd.offset_of(b.data()) - f_lo), b.size());
        dst += b.size();
      });
    });
  }

  strategy_layouts src_, dst_;
  std::map<index_t, std::filesystem::path> files_;
  std::vector<transform_target> targets_;
  std::vector<staged> stage_;
  std::vector<std::size_t> first_stage_;  // target i's files: stage_[first_stage_[i] .. first_stage_[i + 1])
  std::vector<hf_plan> hf_plans_;         // hf: each target's shards
  transform_summary summary_;
  std::optional<checkpoint_plan> plan_;  // plan(): made on its first call
  std::chrono::steady_clock::time_point start_{};
  bool checked_ = false, staged_ = false, committed_ = false;
  const transform_options opts_;
  // the jobs and buffer run: opts_'s, or what fit_memory() fits into max_memory
  execution_config exec_;
  std::string op_;
  index_t M_ = 1, N_ = 1;
  std::map<index_t, std::unique_ptr<checkpoint_reader>> readers_;
  // per source file read: the targets that still read it, and the bytes read but not released
  struct reader_use {  // all under resident_mutex_
    std::int64_t targets = 0;               // targets still to read it
    const std::byte* lo = nullptr;          // the span read since its last release
    const std::byte* hi = nullptr;
    std::span<const std::byte> file;        // its mapping
    std::uint64_t held = 0;                 // pages the span may hold, counted in resident_
    bool queued = false;                    // in queue_
  };
  std::map<index_t, reader_use> uses_;
  std::unique_ptr<std::mutex> resident_mutex_ = std::make_unique<std::mutex>();
  std::deque<index_t> queue_;       // sources holding spans, oldest first
  std::uint64_t resident_ = 0;      // the sum of their `held`
  std::map<std::string, param_info, std::less<>> params_;
  std::vector<std::string> warnings_;
  std::vector<std::filesystem::path> created_dirs_;
  std::set<index_t> shape_hint_;
  bool collected_ = false;
  bool previewing_ = false;  // preview(): no CRC verification
  std::optional<name_selection> names_;                      // with name_rules: the selection
  std::map<std::string, dtype, std::less<>> cast_to_;        // source name -> the dtype written (casts only)
  std::set<std::string, std::less<>> cast_decided_;          // the parameters decide_item_cast() saw
  std::vector<std::size_t> named_hits_;                      // per dtype_rules::named glob: parameters matched
  std::vector<cast_record> cast_records_;
  std::size_t kept_dtypes_ = 0;                              // not floating point: kept under dtype_rules::all
  std::string kept_example_;
  std::unique_ptr<std::mutex> progress_mutex_ = std::make_unique<std::mutex>();
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
  if (!fs::is_directory(src_dir, ec))
    report_error(op + ": source directory " + src_dir.string() + " " +
                 detail::not_a_directory(src_dir));
  std::map<index_t, fs::path> out;
  if (ranks == 1 && is_hf_directory(src_dir) && !fs::is_directory(src_dir / "rank_0", ec)) {
    out.emplace(0, src_dir);  // a Hugging Face checkpoint: the one rank of full tensors
    return out;
  }
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

}  // namespace detail

// The engine lives in detail beside its helpers; these are its public names.
using detail::transform_job;
using detail::tensor_allocator;
using detail::transform_target;

}  // namespace reshard::io
