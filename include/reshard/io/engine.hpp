// reshard/io/engine.hpp: the checkpoint engine's planner and orchestrator, transform_job, that
// every workflow of reshard/io/transform.hpp runs. From the strategies, the sources' indexes and
// the options it makes the run's checkpoint plan (checkpoint_plan.hpp), once, with every check
// that needs no tensor data; then every step takes the plan as it is:
//   preview()  the dry run's numbers are the plan's (preview_of, summary.hpp)
//   stage()    write_plan_targets (execute.hpp): the plan executor (plan_executor.hpp) runs each
//              target's items into its file sink (tensor_sink.hpp), staged (staging.hpp)
//   load()     the executor into memory sinks
//   verify()   the executor into compare sinks
// What it decides apart, by pure functions that it calls (each testable without files): which
// parameters it writes and under which names (name_rules.hpp), their dtypes (dtype_rules.hpp),
// and the jobs and chunk buffer under a memory budget (memory_fit.hpp).
//
// Which parameters a target rank t gets, and from where (M source ranks):
//   * listed in the source strategy: sliced by the target strategy's layout for t's stage (a
//     parameter that the target strategy lists only for other stages is not written to t); the
//     data come from the source strategy's lowest stage that lists it, by the transfers to t of
//     the round-robin plan (rank_planner, plan.hpp: the core's planner and replica policy). A
//     parameter the target strategy does not list at all (or no target strategy) is written
//     whole: its target layout is the whole tensor on each target rank;
//   * not listed in the source strategy (learning_rate, global_step, ...): taken from source
//     rank t % M, byte-exact (ckpt -> ckpt copies its serialized Values); if the target strategy
//     lists it, t gets the slice of it that its layout says.
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
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/parallel.hpp>
#include <reshard/partition.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/dtype_rules.hpp>
#include <reshard/io/execute.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/memory_fit.hpp>
#include <reshard/io/name_rules.hpp>
#include <reshard/io/plan_executor.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/staging.hpp>
#include <reshard/io/strategy_layouts.hpp>
#include <reshard/io/summary.hpp>
#include <reshard/io/tensor_sink.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// options

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

// ---------------------------------------------------------------------------------------------
// the engine

namespace detail {

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

/// One target file of a transform_job: the target rank and the file to write.
struct transform_target {
  index_t rank = 0;
  std::filesystem::path path;
};

/// The engine behind every workflow (transform, by rank, merge, split, convert, and each
/// process's share under MPI): makes the checkpoint plan, then writes, loads or verifies the
/// targets by executing it. Three steps, each all or nothing:
///   check()    every check that needs no tensor data, and the plan made; nothing is written
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

  /// The tensor bytes each target gets, in the order of the targets (in the source dtypes: the
  /// casts are not decided yet). Reads the headers of the files that decide the items and shapes
  /// (each target's base file t % M, and one file per parameter), no tensor data; checks only
  /// what deciding them needs. For sizing targets before a job is split (work_split.hpp).
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
  ~transform_job() = default;  // the staged outputs, if not committed, are discarded

  /// Step 1: checks the outputs (none is a source; none exists unless `force`), the strategies,
  /// shapes, dtypes and every source file and parameter that will be read, and the CRC
  /// trailers; makes the plan (plan()).
  void check() {
    RESHARD_EXPECTS(phase_ == phase::created, "transform_job: check() twice, or after preview() or verify()");
    start_ = std::chrono::steady_clock::now();
    check_outputs();
    make_plan();
    phase_ = phase::checked;
  }

  /// Step 2: writes every target file in full, staged under a temporary name, and (`sync`)
  /// makes them durable.
  void stage() {
    RESHARD_EXPECTS(phase_ == phase::checked, "transform_job: stage() before check(), or twice");
    staging_ = std::make_unique<staged_outputs>(op_, opts_.force, opts_.sync);
    summary_ = write_plan_targets(*plan_, sources(), *staging_,
                                  {{threads(), exec_.buffer_bytes}, reads(), opts_.sync, opts_.digests, opts_.progress},
                                  op_);
    staging_->sync();
    phase_ = phase::staged;
  }

  /// Step 3: renames the staged files into place and makes the renames durable.
  transform_summary commit() {
    RESHARD_EXPECTS(phase_ == phase::staged, "transform_job: commit() before stage(), or twice");
    summary_.outputs = staging_->commit();
    phase_ = phase::done;
    transform_summary s = std::move(summary_);
    finish(s);
    return s;
  }

  /// Instead of check(), stage() and commit(): what the run would read and write, from the
  /// strategies and the sources' indexes alone. The checks of check() that need no tensor data
  /// run (existing outputs, strategies, shapes, dtypes, the files each target needs); the CRC
  /// trailers are not verified (that reads every byte) and nothing is written.
  transform_preview preview() {
    RESHARD_EXPECTS(phase_ == phase::created, "transform_job: preview() after check()");
    start_ = std::chrono::steady_clock::now();
    check_outputs();
    previewing_ = true;
    make_plan();
    phase_ = phase::done;
    return preview_of(*plan_);
  }

  /// What the run reads and writes, as a value (checkpoint_plan.hpp): per target file its items
  /// in file order, each a raw copy or its transfers, and the totals. Made by check(),
  /// preview() or verify(), once; reads no tensor data.
  const checkpoint_plan& plan() const {
    RESHARD_EXPECTS(plan_.has_value(), "transform_job: plan() before check() or preview()");
    return *plan_;
  }

  /// check(), stage(), commit().
  transform_summary run() {
    if (opts_.dry_run) {
      transform_summary s;
      s.preview = preview();
      s.plan = std::move(plan_);  // the plan the preview was computed from
      plan_.reset();
      finish(s);
      s.synced = false;  // nothing was written
      return s;
    }
    check();
    stage();
    return commit();
  }

  /// Instead of stage() and commit(): assembles every target in memory that `allocate` gives
  /// (the targets' paths are not used, nothing is written), executing the same plan with the
  /// same reads and copy jobs as the files. The chunks are assembled in place: besides what
  /// `allocate` returns, the engine holds only its read buffers. Checks first if check() has not
  /// run.
  transform_summary load(const tensor_allocator& allocate) {
    RESHARD_EXPECTS(phase_ == phase::created || phase_ == phase::checked, "transform_job: load() after stage()");
    if (phase_ == phase::created) check();
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
    plan_executor run(*plan_, sources(), {threads(), exec_.buffer_bytes}, reads(), op_, opts_.progress);
    std::vector<transform_summary> per(plan_->targets.size());
    reshard::parallel_for(per.size(), threads(), [&](std::size_t i) {
      memory_sink out(locked, plan_->targets[i].rank);
      per[i] = run.run_target(i, out);
    });
    phase_ = phase::done;
    transform_summary s = merge_summaries(per);
    finish(s);
    s.synced = false;  // nothing was written
    return s;
  }

  /// Instead of stage() and commit(): checks the targets' files, which must exist, against what
  /// the sources make, executing the same plan with the same reads and copy jobs as writing
  /// them, in chunks compared with the files' bytes (bounded memory: each chunk's pages of the
  /// file are released after it). Reports every difference (a missing or unreadable file, a
  /// missing, extra or differently typed or shaped parameter, the first differing element of a
  /// tensor, a wrong crc_num trailer) instead of throwing; bad sources and strategies are errors
  /// as for a run.
  verify_report verify() {
    RESHARD_EXPECTS(phase_ == phase::created, "transform_job: verify() after check()");
    start_ = std::chrono::steady_clock::now();
    make_plan();
    phase_ = phase::done;
    plan_executor run(*plan_, sources(), {threads(), exec_.buffer_bytes}, reads(), op_, opts_.progress);
    const std::size_t n = plan_->targets.size();
    std::vector<std::vector<verify_mismatch>> per(n);
    std::vector<std::size_t> tensors(n);
    std::vector<std::uint64_t> bytes(n);
    reshard::parallel_for(n, threads(), [&](std::size_t i) {
      const plan_target& t = plan_->targets[i];
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
      compare_sink out(*rd, found);
      const transform_summary s = run.run_target(i, out);
      tensors[i] = s.sliced + s.copied;
      bytes[i] = out.bytes_compared();
    });
    verify_report r;
    for (std::size_t i = 0; i < n; ++i) {
      r.files += 1;
      r.tensors += tensors[i];
      r.bytes += bytes[i];
      for (auto& m : per[i]) r.mismatches.push_back(std::move(m));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return r;
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

  // The source files opened, for the executor.
  plan_sources sources() const {
    plan_sources out;
    for (const auto& [r, rd] : readers_) out.emplace(r, rd.get());
    return out;
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

  // -- the plan (checkpoint_plan.hpp)
  // Walks every target's items once: checks each, decides its cast, and puts it in the plan;
  // then the checks over all of them, the memory fit and the totals.
  void make_plan() {
    collect_params();
    checkpoint_plan pl;
    for (const auto& t : targets_) {
      std::set<std::string_view> names;
      std::vector<plan_item> items;
      for_each_item(t.rank, [&](out_item& it) {
        if (!names.insert(it.name()).second)
          report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + quote_name(it.name()) +
                       " would be written twice");
        items.push_back(plan_item_of(t, it, pl));
      });
      if (items.empty())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " would get no parameters");
      place_items(t, std::move(items), pl.targets.emplace_back());
    }
    check_casts();
    check_opened();
    if (!previewing_) verify_crcs();
    fit_memory();
    sum_plan(pl, [&](index_t r) { return files_.at(r); });
    for (auto& [r, s] : pl.sources) {
      s.size = open(r).file_size();
      s.mtime_ns = detail::mtime_ns(s.path);
    }
    pl.jobs = threads();
    pl.buffer_bytes = exec_.buffer_bytes;
    pl.peak_memory_bound = current_rss_bytes() + pl.jobs * job().with_slack(exec_.buffer_bytes);
    pl.casts = cast_records_;
    pl.warnings = warnings_;
    pl.crc = opts_.crc;
    pl.chunk_bytes = opts_.chunk_bytes;
    plan_ = std::move(pl);
  }

  // Item `it` of target t in the plan, checked: a raw copy, or its transfers (pieces_of), each
  // sender's box recorded in the plan's source table.
  plan_item plan_item_of(const transform_target& t, out_item& it, checkpoint_plan& pl) {
    plan_item pi;
    pi.source_name = std::string(it.source_name());
    pi.name = std::string(it.name());
    if (!it.p) {
      const tensor_ref& e = *it.raw;
      if ((hf_target() || safetensors_target(t)) && (e.map_tensor || e.type == dtype::str))
        report_error(op_ + ": " + open(it.base).path().string() + ": parameter " + quote_name(e.name) + " is a " +
                     (e.map_tensor ? "map tensor" : "str tensor") + ", which safetensors cannot hold (write ckpt)");
      decide_item_cast(it);
      pi.raw = true;
      pi.source_rank = it.base;
      pi.from = e.type;
      pi.to = out_type(it);
      pi.dims = e.dims;
      pi.scalar = e.is_scalar();
      pi.source_bytes = item_source_bytes(t.rank, it);
      pi.bytes = item_bytes(t.rank, it);
      pi.own_rank_bytes = it.base == t.rank ? pi.source_bytes : 0;
      const checkpoint_reader& rd = open(it.base);
      for (auto q : e.pieces) pi.stored.push_back({rd.offset_of(q.data()), q.size()});
      return pi;
    }
    param_info& p = *it.p;
    resolve(p);
    pi.target = target_box(it, t.rank);
    std::vector<piece> pieces;
    if (!p.src) {  // not in the source strategy: whole from the base file t % M
      check_source(p, it.base);
      pieces.push_back({it.base, pi.target, box{index_list(p.shape.size(), 0), p.shape}});
    } else {
      pieces = pieces_of(it, t.rank, pi.target);
      for (const auto& pc : pieces) check_source(p, pc.rank);
    }
    decide_item_cast(it);
    const std::size_t elem = element_size(p.type);
    pi.from = p.type;
    pi.to = out_type(it);
    pi.scalar = p.scalar;
    pi.dims = p.scalar ? p.scalar_dims : pi.target.extent.to_vector();
    pi.source_bytes = item_source_bytes(t.rank, it);
    pi.bytes = item_bytes(t.rank, it);
    for (const piece& pc : pieces) {
      pi.transfers.push_back({pc.rank, pc.where, static_cast<std::uint64_t>(volume(pc.where)) * elem, pc.held});
      pl.sources[pc.rank].holds.try_emplace(pi.source_name, pc.held);
    }
    if (!p.src) {
      pi.own_rank_bytes = it.base == t.rank ? pi.source_bytes : 0;
    } else {
      const partition& src = (it.dst ? *it.dst->planner : *p.whole).source();
      pi.own_rank_bytes = src.has_rank(t.rank) && available(t.rank)
                              ? static_cast<std::uint64_t>(volume(intersect(src.box_of_rank(t.rank), pi.target))) * elem
                              : 0;
    }
    return pi;
  }

  // Target t's items in the order of its files: for_each_item's (ckpt); by name (a safetensors
  // file); or in Hugging Face shards (hf_shards over the target's order, then each shard in the
  // safetensors library's data order: by dtype, the widest first, then name).
  void place_items(const transform_target& t, std::vector<plan_item> items, plan_target& pt) {
    pt.rank = t.rank;
    pt.path = t.path;
    if (hf_target()) {
      pt.format = checkpoint_format::hf;
      pt.safetensors_format = "pt";
      std::vector<std::uint64_t> sizes;
      for (const auto& it : items) sizes.push_back(it.bytes);
      const std::vector<std::size_t> first = hf_shards(sizes, opts_.max_shard_bytes);
      for (std::size_t k = 0; k < first.size(); ++k) {
        const auto end = k + 1 < first.size() ? first[k + 1] : items.size();
        const auto from = items.begin() + static_cast<std::ptrdiff_t>(first[k]);
        const auto to = items.begin() + static_cast<std::ptrdiff_t>(end);
        std::sort(from, to, [](const plan_item& a, const plan_item& b) {
          return safetensors_before(safetensors_order::dtype, a.to, a.name, b.to, b.name);
        });
        for (auto i = from; i != to; ++i) i->file = k;
        pt.files.push_back(t.path / hf_shard_name(k, first.size()));
      }
      if (first.size() > 1) pt.files.push_back(t.path / hf_index_name);
    } else if (safetensors_target(t)) {
      pt.format = checkpoint_format::safetensors;
      // Hugging Face's metadata when the source is a Hugging Face checkpoint (transformers refuses
      // other values), MindSpore's otherwise
      pt.safetensors_format = open(t.rank % M_).format() == checkpoint_format::hf ? "pt" : "ms";
      std::sort(items.begin(), items.end(), [](const plan_item& a, const plan_item& b) { return a.name < b.name; });
      pt.files.push_back(t.path);
    } else {
      pt.format = checkpoint_format::ckpt;
      pt.files.push_back(t.path);
    }
    pt.items = std::move(items);
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

  strategy_layouts src_, dst_;
  std::map<index_t, std::filesystem::path> files_;
  std::vector<transform_target> targets_;
  const transform_options opts_;
  // the jobs and buffer run: opts_'s, or what fit_memory() fits into max_memory
  execution_config exec_;
  std::string op_;
  index_t M_ = 1, N_ = 1;
  enum class phase : std::uint8_t { created, checked, staged, done };
  phase phase_ = phase::created;
  std::chrono::steady_clock::time_point start_{};
  std::optional<checkpoint_plan> plan_;       // made once by check(), preview() or verify()
  std::unique_ptr<staged_outputs> staging_;   // stage(): the files staged, until commit()
  transform_summary summary_;                 // stage()'s, completed by commit()
  std::map<index_t, std::unique_ptr<checkpoint_reader>> readers_;
  std::map<std::string, param_info, std::less<>> params_;
  std::vector<std::string> warnings_;
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
using detail::transform_target;

}  // namespace reshard::io
