// reshard/io/engine.hpp: the checkpoint engine's planner and orchestrator, transform_job, that
// every workflow of reshard/io/transform.hpp runs. From the strategies, the sources' indexes and
// the options it makes the run's checkpoint plan (checkpoint_plan.hpp), once, with every check
// that needs no tensor data; then every step takes the plan as it is:
//   preview()  the dry run's numbers are the plan's (preview_of, summary.hpp)
//   stage()    write_plan_targets (execute.hpp): the plan executor (plan_executor.hpp) runs each
//              target's items into its file sink (tensor_sink.hpp), staged (staging.hpp)
//   load()     the executor into memory sinks
//   verify()   the executor into compare sinks (verify_plan_targets, execute.hpp)
// What it decides apart, each in its own header and testable alone: which parameters each target
// gets, from where and with which shapes and layouts (param_catalogue.hpp), which it writes and
// under which names (name_rules.hpp), their dtypes (dtype_rules.hpp), the jobs and chunk
// buffer under a memory budget (memory_fit.hpp), and what a PyTorch DCP target does apart
// (dcp_target.hpp: dcp_target_policy). What is left here is the plan's assembly (each
// item checked, cast, and placed in its file's order) and the steps' order, kept in an explicit
// phase: created -> checked -> staged -> done.
//
// Durability: the staged files are written with their write-back started as they grow, fsynced
// together (8 at a time) when all are written, then renamed into place, and the directories
// fsynced (transform_options::sync; without it nothing is fsynced).
//
// Cost: file-system calls are O(M + N) (one stat per source and per output, one listing per
// rank directory, a stat per source read for the plan's fingerprint).
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
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dcp_target.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/dtype_rules.hpp>
#include <reshard/io/execute.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/memory_fit.hpp>
#include <reshard/io/name_rules.hpp>
#include <reshard/io/param_catalogue.hpp>
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
#include <unordered_map>
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
  /// checkpoint_format::dcp: the targets are one PyTorch DCP directory (the output path; every
  /// target rank's path is that directory): `__<rank>_0.distcp` per target rank, each target's
  /// boxes its chunks (a box replicated on several ranks stored once, by the lowest), and
  /// `.metadata` written last, after every data file (dcp_writer.hpp).
  checkpoint_format format = checkpoint_format::ckpt;
  /// format dcp: the module paths of `.metadata` (torch 1.13's or torch 2.x's).
  dcp_layout dcp_torch = dcp_layout::torch_2;
  /// The bound on a Hugging Face shard's tensor bytes (format hf); 5 GB, as Hugging Face's default.
  std::uint64_t max_shard_bytes = 5'000'000'000;
  /// Target files written in parallel; 0 (the default): one per core (two with direct writes:
  /// write_mode), at most one per target
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
  /// How the outputs are written: automatic (the default) writes them with O_DIRECT where they
  /// are fsynced on a local disk filesystem, through the page cache elsewhere (resolve_write_mode,
  /// docs/cli.md "Reading and writing").
  write_mode writes = write_mode::automatic;
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
  /// Write a manifest of the files written (manifest.hpp) to this path, staged with the outputs
  /// and renamed into place after all of them: it appears only beside complete outputs, and when
  /// it cannot be written nothing is committed. It may not be a source or an output of the run;
  /// an existing file is replaced only with `force`. Implies `digests`. Empty: none.
  std::filesystem::path manifest{};
  /// Read the strategies and the sources' indexes, check, and report what would be read and
  /// written (transform_summary::preview, and the plan it is computed from:
  /// transform_summary::plan) without reading tensor data or writing anything.
  bool dry_run = false;
  std::function<void(const transform_progress&)> progress{};  ///< called as parameters are written
};

// ---------------------------------------------------------------------------------------------
// the engine

namespace detail {

// How a target's files are laid out: the format, the Hugging Face shard bound, and the
// safetensors metadata's "format".
struct plan_format {
  checkpoint_format format = checkpoint_format::ckpt;
  std::uint64_t max_shard_bytes = 0;  // hf
  std::string safetensors_format = "ms";
};

// Target t's items in the order of its files: the walk's order (ckpt); by name (a safetensors
// file); or in Hugging Face shards (hf_shards over the target's order, then each shard in the
// safetensors library's data order: by dtype, the widest first, then name).
inline void place_items(const transform_target& t, std::vector<plan_item> items, const plan_format& f, plan_target& pt) {
  pt.rank = t.rank;
  pt.path = t.path;
  pt.format = f.format;
  pt.safetensors_format = f.safetensors_format;
  if (f.format == checkpoint_format::hf) {
    std::vector<std::uint64_t> sizes;
    for (const auto& it : items) sizes.push_back(it.bytes);
    const std::vector<std::size_t> first = hf_shards(sizes, f.max_shard_bytes);
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
  } else if (f.format == checkpoint_format::dcp) {  // the rank's data file of the DCP directory
    pt.files.push_back(t.path / dcp_data_file_name(t.rank));
  } else {
    if (f.format == checkpoint_format::safetensors)
      std::sort(items.begin(), items.end(), [](const plan_item& a, const plan_item& b) { return a.name < b.name; });
    pt.files.push_back(t.path);
  }
  pt.items = std::move(items);
}

// transform_job::plan_item_of's state across the items of a plan: per sliced parameter its
// checkpoint_plan::holds entry and the source ranks listed there so far; scratch for the pieces
// of the item at hand.
struct listed_holds {
  rank_boxes* holds = nullptr;
  std::vector<bool> seen;
};
struct listed_ranks {
  std::unordered_map<const param_info*, listed_holds> by_param;
  std::vector<parameter_catalogue::piece> pieces;
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
      : targets_(std::move(targets)),
        catalogue_(std::move(src), std::move(dst), std::move(files), targets_, op),
        opts_(std::move(opts)), exec_{opts_.jobs, opts_.buffer_bytes}, op_(std::move(op)),
        warnings_(std::move(warnings)) {
    for (const auto& [r, f] : catalogue_.files())
      if (r < 0 || r >= catalogue_.source_ranks())
        report_error(op_ + ": source rank " + std::to_string(r) + " (" + f.string() + ") is not a rank of " +
                     catalogue_.source_desc() + ", which has " + std::to_string(catalogue_.source_ranks()) + " rank" + (catalogue_.source_ranks() == 1 ? "" : "s"));
    check_target_ranks();
  }

  /// From a PyTorch DCP checkpoint (its chunks are its layout: no source strategy) to the targets
  /// of `dst`; its byte items are left out, with a warning naming them.
  transform_job(dcp_source src, strategy_layouts dst, std::vector<transform_target> targets, transform_options opts,
                std::string op, std::vector<std::string> warnings = {})
      : targets_(std::move(targets)), catalogue_(std::move(src), std::move(dst), targets_, op), opts_(std::move(opts)),
        exec_{opts_.jobs, opts_.buffer_bytes}, op_(std::move(op)), warnings_(std::move(warnings)) {
    const bool in_memory = !targets_.empty() && targets_.front().path.empty();  // load(): no file
    const auto w = dcp_.byte_item_warnings(*catalogue_.dcp(), in_memory     ? "tensors in memory"
                                                              : hf_target() ? "a Hugging Face checkpoint"
                                                              : dcp_.on()   ? ""
                                                                            : "ckpt or safetensors files");
    warnings_.insert(warnings_.end(), w.begin(), w.end());
    check_target_ranks();
  }

  /// Source ranks to take parameter shapes from first (the files these targets read anyway);
  /// without a hint a shape comes from the lowest rank of its stage that has a file.
  void set_shape_hint(std::set<index_t> ranks) { catalogue_.set_shape_hint(std::move(ranks)); }

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
    const bool digests = opts_.digests || !opts_.manifest.empty();
    summary_ = stage_plan(*plan_, sources(), *staging_,
                          {{threads(), exec_.buffer_bytes}, reads(), opts_.sync, writes_, digests, opts_.progress,
                           opts_.max_memory == 0},
                          opts_.manifest,
                          opts_.manifest.empty() ? source_node_map{} : source_inodes(catalogue_.files()), opts_.force, op_);
    phase_ = phase::staged;
  }

  /// Step 3: renames the staged files into place and makes the renames durable.
  transform_summary commit() {
    RESHARD_EXPECTS(phase_ == phase::staged, "transform_job: commit() before stage(), or twice");
    commit_plan_outputs(*staging_, !opts_.manifest.empty(), summary_);
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
    std::mutex serial;  // the allocator is called by one job at a time
    const unsigned jobs = cpu_jobs(threads());  // nothing is written: no job waits for a disk
    plan_executor run(*plan_, sources(), {jobs, exec_.buffer_bytes}, reads(), op_, opts_.progress);
    std::vector<transform_summary> per(plan_->targets.size());
    reshard::parallel_for(per.size(), jobs, [&](std::size_t i) {
      memory_sink out(allocate, plan_->targets[i].rank, &serial, op_);
      per[i] = run.run_target(i, out);
    });
    phase_ = phase::done;
    transform_summary s = merge_summaries(std::span<transform_summary>(per), true);
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
    verify_report r;
    dcp_.verify_metadata(*plan_, targets_, r);  // first, as .metadata is what torch reads first
    verify_plan_targets(*plan_, sources(), {threads(), exec_.buffer_bytes}, reads(), op_, opts_.progress, r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return r;
  }

 private:
  // The summary's fields known at the end.
  void finish(transform_summary& s) {
    finish_summary(s, catalogue_.readers(), casts_.records(), warnings_,
                   {threads(), exec_.buffer_bytes, reads(), writes_, opts_.sync, opts_.max_memory}, start_);
  }

  // The source files opened, for the executor.
  plan_sources sources() const {
    plan_sources out;
    for (const auto& [r, rd] : catalogue_.readers()) out.emplace(r, rd.get());
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
                           {threads(), exec_.buffer_bytes}, catalogue_.readers().size(), op_);
  }

  // -- the plan (checkpoint_plan.hpp)
  // Walks every target's items once: checks each, decides its cast, and puts it in the plan;
  // then the checks over all of them, the memory fit and the totals.
  void make_plan() {
    writes_ = run_write_mode(opts_.writes, targets_.empty() ? std::filesystem::path() : targets_.front().path,
                             opts_.sync, reads(), op_);
    catalogue_.collect(opts_.names, warnings_);
    checkpoint_plan pl;
    pl.targets.reserve(targets_.size());
    std::size_t last = 0;  // the previous target's item count: most targets have the same
    std::vector<std::string_view> names;  // a target's output names, to find one written twice
    listed_ranks listed;
    for (const auto& t : targets_) {
      std::vector<plan_item> items;
      items.reserve(last);
      catalogue_.for_each_item(t.rank, [&](out_item& it) { items.push_back(plan_item_of(t, it, pl, listed)); });
      if (items.empty())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " would get no parameters");
      names.clear();
      for (const auto& it : items) names.push_back(it.name);
      std::sort(names.begin(), names.end());
      if (const auto twice = std::adjacent_find(names.begin(), names.end()); twice != names.end())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + detail::quote_name(*twice) +
                     " would be written twice");
      last = items.size();
      const plan_format f = hf_target()                 ? plan_format{checkpoint_format::hf, opts_.max_shard_bytes, "pt"}
                            : dcp_target()              ? plan_format{checkpoint_format::dcp, 0, "pt"}
                            : safetensors_target(t)     ? plan_format{checkpoint_format::safetensors, 0, source_metadata(t)}
                                                        : plan_format{checkpoint_format::ckpt, 0, "ms"};
      place_items(t, std::move(items), f, pl.targets.emplace_back());
    }
    casts_.finish([&] { return catalogue_.source_names(); }, op_, warnings_);
    catalogue_.check_opened();
    if (!previewing_) verify_crcs();
    fit_memory();
    for (auto& [name, by_rank] : pl.holds) sort_by_rank(by_rank);
    dcp_.finish_plan(pl, catalogue_.dcp(), op_);
    sum_plan(pl, [&](index_t r) { return catalogue_.files().at(r); });
    for (auto& [r, s] : pl.sources) {
      s.size = catalogue_.open(r).file_size();
      s.mtime_ns = catalogue_.open(r).mtime_ns();
    }
    pl.jobs = threads();
    pl.buffer_bytes = exec_.buffer_bytes;
    pl.peak_memory_bound = current_rss_bytes() + pl.jobs * job().with_slack(exec_.buffer_bytes);
    pl.casts = casts_.records();
    pl.warnings = warnings_;
    pl.crc = opts_.crc;
    pl.chunk_bytes = opts_.chunk_bytes;
    plan_ = std::move(pl);
  }

  // Item `it` of target t in the plan, checked: a raw copy, or its transfers (pieces_of), each
  // sender's box recorded in the plan's source table.
  plan_item plan_item_of(const transform_target& t, out_item& it, checkpoint_plan& pl, listed_ranks& listed) {
    plan_item pi;
    pi.source_name = std::string(it.source_name());
    pi.name = std::string(it.name());
    if (!it.p) {
      const tensor_ref& e = *it.raw;
      if ((hf_target() || dcp_target() || safetensors_target(t)) && (e.map_tensor || e.type == dtype::str))
        report_error(op_ + ": " + catalogue_.open(it.base).path().string() + ": parameter " + detail::quote_name(e.name) + " is a " +
                     (e.map_tensor ? "map tensor" : "str tensor") + ", which " + (dcp_target() ? "a PyTorch DCP checkpoint" : "safetensors") +
                     " cannot hold (write ckpt)");
      decide_item_cast(it);
      pi.raw = true;
      pi.source_rank = it.base;
      pi.from = e.type;
      pi.to = out_type(it);
      pi.dims = e.dims;
      pi.scalar = e.is_scalar();
      pi.source_bytes = catalogue_.item_source_bytes(t.rank, it);
      pi.bytes = item_bytes(t.rank, it);
      pi.own_rank_bytes = it.base == t.rank ? pi.source_bytes : 0;
      const checkpoint_reader& rd = catalogue_.open(it.base);
      for (auto q : e.pieces) pi.stored.push_back({rd.offset_of(q.data()), q.size()});
      return pi;
    }
    param_info& p = *it.p;
    catalogue_.resolve(p);
    pi.target = catalogue_.target_box(it, t.rank);
    std::vector<parameter_catalogue::piece>& pieces = listed.pieces;
    if (!p.src && !p.chunked) {  // not in the source strategy: whole from the base file t % M
      catalogue_.check_source(p, it.base);
      pieces.clear();
      pieces.push_back({it.base, pi.target, box{index_list(p.shape.size(), 0), p.shape}});
    } else {
      catalogue_.pieces_of(it, t.rank, pi.target, pieces);
      for (const auto& pc : pieces) catalogue_.check_source(p, pc.rank, &pc.held);
    }
    decide_item_cast(it);
    const std::size_t elem = element_size(p.type);
    pi.from = p.type;
    pi.to = out_type(it);
    pi.scalar = p.scalar;
    pi.dims = p.scalar ? p.scalar_dims : pi.target.extent.to_vector();
    // item_source_bytes and item_bytes, from the target box at hand (not made again twice)
    pi.source_bytes = p.scalar ? elem : static_cast<std::uint64_t>(volume(pi.target)) * elem;
    pi.bytes = pi.from == pi.to ? pi.source_bytes : pi.source_bytes / elem * element_size(pi.to);
    pi.transfers.reserve(pieces.size());
    listed_holds& l = listed.by_param[&p];
    if (!l.holds) {  // what each sender's file holds of the parameter, and the ranks listed
      l.holds = &pl.holds[pi.source_name];
      l.seen.resize(static_cast<std::size_t>(catalogue_.source_ranks()));
    }
    std::uint64_t own = 0;  // what t's own file holds of the target box: its pieces read from t
    for (parameter_catalogue::piece& pc : pieces) {
      const std::uint64_t bytes = static_cast<std::uint64_t>(volume(pc.where)) * elem;
      pi.transfers.push_back({pc.rank, std::move(pc.where), bytes});
      if (pc.rank == t.rank) own += bytes;
      if (p.chunked) {  // a DCP file may hold several chunks: each listed (sort_by_rank drops repeats)
        l.holds->emplace_back(pc.rank, std::move(pc.held));
      } else if (!l.seen[static_cast<std::size_t>(pc.rank)]) {
        l.seen[static_cast<std::size_t>(pc.rank)] = true;
        l.holds->emplace_back(pc.rank, std::move(pc.held));
      }
    }
    // the pieces tile the target box, and every one that t's own file holds is read from it
    // (catalogue_pieces: a source region a rank holds is its own to send)
    pi.own_rank_bytes = own;
    return pi;
  }

  // Every target is a rank of the target strategy; a PyTorch DCP target (one directory whose
  // .metadata lists every rank's chunks) is every rank, once, in one directory.
  void check_target_ranks() const {
    for (const auto& t : targets_)
      if (t.rank < 0 || t.rank >= catalogue_.target_ranks())
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " is not a rank of " + catalogue_.target_desc() +
                     ", which has " + std::to_string(catalogue_.target_ranks()) + " rank" + (catalogue_.target_ranks() == 1 ? "" : "s"));
    dcp_.check_targets(targets_, catalogue_.target_ranks(), op_);
  }

  // -- outputs: none is a source, none exists unless `force` (check_output_paths, execute.hpp)
  void check_outputs() {
    std::vector<output_path> outputs = dcp_.outputs(targets_);  // a DCP directory: its files
    if (!dcp_.on())
      for (const auto& t : targets_) outputs.push_back({t.path, hf_target()});
    if (opts_.manifest.empty()) {  // the sources stat'ed only if an output exists
      check_output_paths(outputs, catalogue_.files(), opts_.force, op_);
      return;
    }
    const auto sources = source_inodes(catalogue_.files());
    {  // again in stage(), against the files of Hugging Face targets too
      std::vector<std::filesystem::path> files, hf_dirs;
      for (const auto& t : targets_) (hf_target() ? hf_dirs : files).push_back(t.path);
      check_manifest_path(opts_.manifest, sources, files, hf_dirs, opts_.force, op_);
    }
    check_output_paths(outputs, sources, opts_.force, op_);
  }

  // -- dtype_rules (dtype_rules.hpp): the dtype item `it` is written in, decided once per parameter
  void decide_item_cast(const out_item& it) {
    if (opts_.casts.empty()) return;
    const dtype from = it.p ? it.p->type : it.raw->type;
    const std::string file = it.p ? it.p->type_file : catalogue_.open(it.base).path().string();  // where read
    casts_.decide(it.source_name(), it.name(), from, !it.p && it.raw->map_tensor, op_ + ": " + file);
  }
  dtype out_type(const out_item& it) const { return casts_.type_of(it.source_name(), it.p ? it.p->type : it.raw->type); }

  // The bytes item `it` of target t writes (in its output dtype).
  std::uint64_t item_bytes(index_t t, const out_item& it) const {
    const std::uint64_t n = catalogue_.item_source_bytes(t, it);
    const dtype from = it.p ? it.p->type : it.raw->type, to = out_type(it);
    return from == to ? n : n / element_size(from) * element_size(to);
  }

  void verify_crcs() {
    if (opts_.verify_crc) verify_source_crcs(catalogue_.readers(), threads(), opts_.max_memory);
  }

  // The jobs asked for (or fitted to max_memory), or (0) one per core and at most one per target file.
  unsigned threads() const { return default_jobs(exec_.jobs, targets_.size(), writes_); }

  read_mode reads() const noexcept { return opts_.reads == read_mode::mmap ? read_mode::mmap : read_mode::pread; }

  // The safetensors metadata's "format" for target t: Hugging Face's when its source is a Hugging
  // Face checkpoint (transformers refuses other values), MindSpore's otherwise.
  std::string source_metadata(const transform_target& t) {
    const checkpoint_format f = catalogue_.open(t.rank % catalogue_.source_ranks()).format();
    return f == checkpoint_format::hf || f == checkpoint_format::dcp ? "pt" : "ms";
  }

  // The targets are Hugging Face checkpoint directories.
  bool hf_target() const noexcept { return opts_.format == checkpoint_format::hf; }
  // The targets are one PyTorch DCP directory (dcp_target.hpp: what it does apart).
  bool dcp_target() const noexcept { return dcp_.on(); }
  // Target t is a safetensors file (by its name: no system call, it is asked per parameter).
  static bool safetensors_target(const transform_target& t) { return t.path.extension() == ".safetensors"; }

  std::vector<transform_target> targets_;
  parameter_catalogue catalogue_;  // the parameters, their layouts and sources, the source files
  const transform_options opts_;
  dcp_target_policy dcp_{opts_.format == checkpoint_format::dcp, opts_.dcp_torch, !opts_.names.empty()};
  // the jobs and buffer run: opts_'s, or what fit_memory() fits into max_memory
  execution_config exec_;
  std::string op_;
  enum class phase : std::uint8_t { created, checked, staged, done };
  phase phase_ = phase::created;
  std::chrono::steady_clock::time_point start_{};
  std::optional<checkpoint_plan> plan_;       // made once by check(), preview() or verify()
  std::unique_ptr<staged_outputs> staging_;   // stage(): the files staged, until commit()
  transform_summary summary_;                 // stage()'s, completed by commit()
  std::vector<std::string> warnings_;
  bool previewing_ = false;  // preview(): no CRC verification
  write_mode writes_ = write_mode::buffered;  // make_plan(): opts_.writes resolved (run_write_mode)
  cast_decisions casts_{opts_.casts};  // which parameters are cast (dtype_rules.hpp)
};

// The checkpoint file of `rank_dir`: the last *.ckpt or *.safetensors file in name order
// (MindSpore's rule), hidden files and staged outputs skipped; with none, the one Hugging Face
// checkpoint directory in it (a rank written with --format hf). `missing`: called first when
// rank_dir cannot be listed and is no directory (it reports that).
inline std::filesystem::path rank_file(const std::filesystem::path& rank_dir, const std::string& op,
                                       const std::function<void()>& missing = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(rank_dir, ec);
  if (ec && missing) {
    std::error_code dir_ec;
    if (!fs::is_directory(rank_dir, dir_ec)) missing();
  }
  if (ec) report_error(op + ": source rank directory " + rank_dir.string() + " cannot be listed: " + ec.message());
  std::vector<fs::path> files, hf_dirs;
  for (const auto& e : it) {
    const auto name = e.path().filename().string();
    std::error_code kind;
    if (name.empty() || name[0] == '.') continue;
    if (e.is_directory(kind)) {
      if (is_hf_directory(e.path())) hf_dirs.push_back(e.path());
      continue;
    }
    if (!e.is_regular_file(kind)) continue;
    const auto ext = e.path().extension();
    if (ext == ".ckpt" || ext == ".safetensors") files.push_back(e.path());
  }
  if (files.empty() && hf_dirs.size() == 1) return hf_dirs.front();  // written with --format hf
  if (files.empty() && hf_dirs.size() > 1)
    report_error(op + ": " + rank_dir.string() + " holds several Hugging Face checkpoints (" +
                 hf_dirs[0].filename().string() + ", " + hf_dirs[1].filename().string() +
                 "); give the rank's files with transform-rank --checkpoint R=DIR");
  if (files.empty())
    report_error(op + ": " + rank_dir.string() + " holds no .ckpt or .safetensors file, nor a Hugging Face checkpoint");
  std::sort(files.begin(), files.end());
  return files.back();
}

// A PyTorch DCP checkpoint `dir` as a source: its chunks are its layout, and a source strategy
// given for it is an error naming the strategy.
inline dcp_source dcp_source_of(const std::string& op, const std::filesystem::path& dir,
                                const std::filesystem::path& src_strategy) {
  if (!src_strategy.empty())
    report_error(op + ": " + dir.string() + " is a PyTorch DCP checkpoint (it holds .metadata), whose chunks are its "
                 "layout: give no source strategy (" + src_strategy.string() + " was given)");
  return dcp_source(dir);
}

// The job from the DCP checkpoint `dir` to `targets` of `dst` (`src_strategy`: what the caller was
// given, refused unless empty).
inline transform_job dcp_job(std::string op, const std::filesystem::path& dir, const std::filesystem::path& src_strategy,
                             strategy_layouts dst, std::vector<transform_target> targets, const transform_options& opts) {
  dcp_source src = dcp_source_of(op, dir, src_strategy);  // before op is moved from
  return transform_job(std::move(src), std::move(dst), std::move(targets), opts, std::move(op));
}

// The files of src_dir/rank_<r> for r in [0, ranks): every rank directory must exist. With
// `only`, the files of those ranks alone are looked up (a directory listing each); the other
// rank directories are only checked to exist (one stat each), those in [check.first,
// check.second) (a worker's share of the check, when workers split it; all by default).
inline std::map<index_t, std::filesystem::path> rank_files(const std::filesystem::path& src_dir, index_t ranks,
                                                           const std::string& op, std::vector<std::string>& warnings,
                                                           const std::set<index_t>* only = nullptr,
                                                           std::pair<index_t, index_t> check = {0, reshard::detail::max_ranks}) {
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
    const auto missing = [&] {  // (asked only when d cannot be listed: one stat a rank fewer)
      report_error(op + ": " + d.string() + ": missing rank directory (the source has " + std::to_string(ranks) +
                   " rank" + (ranks == 1 ? "" : "s") + ": rank_0 .. rank_" + std::to_string(ranks - 1) + ")");
    };
    if (!only || only->count(r))
      out.emplace(r, rank_file(d, op, missing));
    else if (r >= check.first && r < check.second && !fs::is_directory(d, ec))
      missing();
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
using detail::dcp_source;

}  // namespace reshard::io
