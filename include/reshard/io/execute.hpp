// reshard/io/execute.hpp: a checkpoint plan written to files. write_plan_targets is the one
// function that writes a plan's targets (staged, in parallel over targets, through the plan
// executor and the file sinks), and verify_plan_targets the one that compares them with existing
// files (compare sinks); transform_job runs them on the plan it made, and execute_plan runs
// write_plan_targets on a plan read back from its JSON (plan_file.hpp), whole or one part of it:
//
//   auto plan = plan_from_json(json, "plan.json");
//   execute_plan(plan_part(plan, i, k), {.jobs = 2});   // part i of k; the k parts write the plan
//
// execute_plan checks the plan (check_checkpoint_plan), then that every source file is the one
// the plan was made from (size and modification time, then each item against the file's index
// as it is read), that no output is a source and none exists unless `force`, and verifies the
// sources' CRC trailers; then it stages, syncs and commits as a transform does (staging.hpp).
#pragma once

#include <reshard/error.hpp>
#include <reshard/parallel.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/manifest.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/memory_fit.hpp>
#include <reshard/io/plan_executor.hpp>
#include <reshard/io/plan_file.hpp>
#include <reshard/io/staging.hpp>
#include <reshard/io/summary.hpp>
#include <reshard/io/tensor_sink.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace reshard::io {

/// How write_plan_targets runs.
struct plan_write_config {
  execution_config exec{1, std::uint64_t{4} << 20};  ///< jobs (>= 1) and the chunk buffer
  read_mode reads = read_mode::pread;
  bool sync = true;      ///< write-back started as the files grow (staged_outputs::sync fsyncs them)
  write_mode writes = write_mode::buffered;  ///< resolved (resolve_write_mode): buffered or direct
  bool digests = false;  ///< SHA-256 of every file written
  std::function<void(const transform_progress&)> progress{};
  /// The targets that read the same source files written together, each range they share read
  /// once (read_groups, at most 8 to a group; with fewer groups than jobs, a group's reads, copies
  /// and writes shared by the jobs), and each group's small source files read whole, once
  /// (plan_executor::read_small_files_whole). Off under a memory budget: each target of a group
  /// holds its file writer's buffer, and the files read whole are beside the read scratch.
  bool read_groups = true;
};

/// The write mode of a run whose outputs go where `first_output` is (resolve_write_mode: one
/// statfs of it or its nearest existing ancestor; empty: buffered). write_mode::direct with
/// mapped reads is refused: a direct write copies the bytes into its aligned buffer first, where
/// a source truncated under the run would kill the process (SIGBUS) instead of being named.
inline write_mode run_write_mode(write_mode requested, const std::filesystem::path& first_output, bool sync,
                                 read_mode reads, const std::string& op) {
  if (requested == write_mode::direct && reads == read_mode::mmap)
    report_error(op + ": write_mode direct cannot be used with read_mode mmap: a direct write copies "
                      "the bytes through its own buffer, so a source file truncated during the run could "
                      "not be reported (use read_mode pread, or write_mode buffered)");
  if (first_output.empty()) return write_mode::buffered;
  return resolve_write_mode(requested, first_output, sync, reads == read_mode::mmap);
}

/// The target files written at once when `asked` is 0: one per core (two when they are written
/// directly), at most one per target.
inline unsigned default_jobs(unsigned asked, std::size_t targets, write_mode writes = write_mode::buffered) {
  if (asked != 0) return asked;
  // a direct write waits for the disk: a second job per core assembles its chunk meanwhile
  // (docs/benchmarks.md, "Durable writes": 1 GiB 4 -> 8 on the ext4 disk, 2 jobs 0.68-0.81 s,
  // 4 jobs 0.54-0.65 s, 8 jobs no faster)
  const std::size_t per_core = writes == write_mode::direct ? 2 : 1;
  return static_cast<unsigned>(std::clamp<std::size_t>(targets, 1, per_core * reshard::thread_count(0)));
}

/// The threads of a run's CPU-bound work (the sources' CRC check, a load into memory, a verify)
/// in a run of `jobs` jobs (default_jobs; 0: one per core): at most one per core, so never the
/// second job per core that direct writes get to wait for the disk.
inline unsigned cpu_jobs(unsigned jobs) noexcept {
  return std::min(reshard::thread_count(jobs), reshard::thread_count(0));
}

/// Writes every target of `plan` to staged files of `out` (parallel over targets); the caller
/// then syncs and commits `out`. Returns the counts (files, sliced, copied, bytes_read,
/// bytes_written: the files' sizes, direct_refused_files) and the files written (written), merged
/// over the targets.
inline transform_summary write_plan_targets(const checkpoint_plan& plan, const plan_sources& sources,
                                            staged_outputs& out, const plan_write_config& c, const std::string& op) {
  std::vector<std::vector<std::filesystem::path>> parts;
  parts.reserve(plan.targets.size());
  std::vector<std::filesystem::path> dcp_dirs;  // each PyTorch DCP directory written, once
  for (const auto& t : plan.targets) {
    parts.push_back(out.add(t.files));
    if (t.format == checkpoint_format::hf) out.replaces_hf(t.path);
    if (t.format == checkpoint_format::dcp && std::find(dcp_dirs.begin(), dcp_dirs.end(), t.path) == dcp_dirs.end())
      dcp_dirs.push_back(t.path);
  }
  // a DCP directory's .metadata: staged after every data file, so renamed into place after them all
  std::vector<std::filesystem::path> metadata_finals, metadata_parts;
  for (const auto& d : dcp_dirs) metadata_finals.push_back(dcp_metadata_path(d));
  if (!metadata_finals.empty()) metadata_parts = out.add(metadata_finals);
  out.prepare();
  plan_executor run(plan, sources, c.exec, c.reads, op, c.progress);
  run.read_small_files_whole(c.read_groups);
  run.overlap_writes(c.writes == write_mode::direct);
  // write-back started as the files grow, unless they are in memory (tmpfs), where it does nothing
  const durability written = c.sync && !out.in_memory_only() ? durability::deferred : durability::none;
  const file_sink_options fo{plan.crc, plan.chunk_bytes, written, c.writes, c.digests};
  std::vector<transform_summary> per(plan.targets.size());
  const unsigned jobs = std::max(c.exec.jobs, 1u);
  const auto groups = read_groups(plan, c.read_groups ? 8 : 1);
  // fewer groups than jobs: each group's rounds shared by the jobs it leaves free
  const auto inner = static_cast<unsigned>(std::max<std::size_t>(1, jobs / std::max<std::size_t>(groups.size(), 1)));
  reshard::parallel_for(groups.size(), jobs, [&](std::size_t k) {
    const std::vector<std::size_t>& group = groups[k];
    std::vector<std::unique_ptr<target_file_sink>> sinks;
    std::vector<tensor_sink*> outs;
    for (std::size_t i : group) {
      sinks.push_back(std::make_unique<target_file_sink>(plan.targets[i], std::move(parts[i]), fo));
      outs.push_back(sinks.back().get());
    }
    std::vector<transform_summary> done = run.run_targets(group, outs, inner);
    for (std::size_t g = 0; g < group.size(); ++g) {
      transform_summary& s = done[g];
      s.written = std::move(sinks[g]->records());
      s.files = s.written.size();
      s.direct_refused_files = sinks[g]->direct_refused_files();
      s.bytes_written = 0;
      for (const auto& w : s.written) s.bytes_written += w.bytes;
      per[group[g]] = std::move(s);
    }
  });
  transform_summary s = merge_summaries(std::span<transform_summary>(per), true);
  s.writes = c.writes;
  for (std::size_t k = 0; k < dcp_dirs.size(); ++k) {  // from the plan alone (dcp_metadata_of)
    const std::string text = encode_dcp_metadata(dcp_metadata_of(plan, dcp_dirs[k], plan.dcp_torch));
    atomic_file_writer w(metadata_parts[k], true, "dcp", written);
    sha256 d;
    if (c.digests) w.observe([&d](std::span<const std::byte> b) { d.update(b); });
    w.write(text);
    w.commit();
    s.written.push_back({metadata_finals[k], text.size(), c.digests ? d.hex() : std::string(), {}});
    s.files += 1;
    s.bytes_written += text.size();
  }
  return s;
}

/// Checks every target file of `plan`, which must exist, against what the sources make: the
/// same plan executor and reads as write_plan_targets, into compare sinks (tensor_sink.hpp), in
/// parallel over targets; bounded memory (each chunk's pages of the file are released after it).
/// Adds to `r` per target a file, its tensors and bytes compared, and its mismatches (a missing
/// or unreadable file, a missing, extra or differently typed or shaped parameter, the first
/// differing element, a wrong crc_num trailer), in the plan's order.
inline void verify_plan_targets(const checkpoint_plan& plan, const plan_sources& sources, const execution_config& exec,
                                read_mode reads, const std::string& op,
                                const std::function<void(const transform_progress&)>& progress, verify_report& r) {
  plan_executor run(plan, sources, exec, reads, op, progress);
  const std::size_t n = plan.targets.size();
  std::vector<std::vector<verify_mismatch>> per(n);
  std::vector<std::size_t> tensors(n);
  std::vector<std::uint64_t> bytes(n);
  reshard::parallel_for(n, cpu_jobs(exec.jobs), [&](std::size_t i) {  // compares: CPU-bound
    const plan_target& t = plan.targets[i];
    auto& found = per[i];
    const auto rd = compare_sink::open(t.format == checkpoint_format::dcp ? t.files.front() : t.path, found);
    if (!rd) return;
    compare_sink out(*rd, found);
    const transform_summary s = run.run_target(i, out);
    tensors[i] = s.sliced + s.copied;
    bytes[i] = out.bytes_compared();
  });
  for (std::size_t i = 0; i < n; ++i) {
    r.files += 1;
    r.tensors += tensors[i];
    r.bytes += bytes[i];
    for (auto& m : per[i]) r.mismatches.push_back(std::move(m));
  }
}

/// Each source file's device and inode, and its rank (one stat a file): what check_output_paths
/// and check_manifest_path compare the outputs with.
/// Source files by device and inode: their ranks.
using source_node_map = std::map<std::pair<dev_t, ino_t>, index_t>;

inline source_node_map source_inodes(const std::map<index_t, std::filesystem::path>& files) {
  source_node_map out;
  for (const auto& [r, f] : files) {
    struct ::stat st {};
    if (::stat(f.c_str(), &st) == 0) out.emplace(std::pair{st.st_dev, st.st_ino}, r);
  }
  return out;
}

/// One path a run writes: a file, or (hf) a Hugging Face checkpoint directory.
struct output_path {
  std::filesystem::path path;
  bool hf = false;
};

namespace detail {
/// The deepest directory that holds every one of `outputs` (the leading components their parent
/// directories share); empty when they share none.
inline std::filesystem::path common_directory(const std::vector<output_path>& outputs) {
  if (outputs.empty()) return {};
  std::filesystem::path c = outputs.front().path.parent_path();
  for (const auto& o : outputs) {
    const std::filesystem::path d = o.path.parent_path();
    std::filesystem::path shared;
    for (auto a = c.begin(), b = d.begin(); a != c.end() && b != d.end() && *a == *b; ++a, ++b) shared /= *a;
    c = std::move(shared);
    if (c.empty()) break;
  }
  return c;
}
}  // namespace detail

/// No output may be a source (compared by device and inode), and none may exist unless `force`;
/// a Hugging Face directory may exist (with config files) but not hold a checkpoint unless
/// `force`, nor be a file. One stat or two per output; one in all when the directory that holds
/// them all does not exist (stat fails with ENOENT: then no path under it resolves either, as a
/// run into a new directory finds). Errors follow `op`.
/// `source_nodes()` gives the sources' identities; it is called for the first output that exists.
inline void check_output_paths(const std::vector<output_path>& outputs,
                               const std::function<const source_node_map&()>& source_nodes, bool force,
                               const std::string& op) {
  if (const auto dir = detail::common_directory(outputs); !dir.empty()) {
    struct ::stat st {};
    if (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) return;
  }
  for (const auto& o : outputs) {
    struct ::stat st {};
    if (o.hf) {
      if (::stat(o.path.c_str(), &st) != 0) continue;
      const source_node_map& sources = source_nodes();
      const auto hit = sources.find({st.st_dev, st.st_ino});
      if (hit != sources.end())
        report_error(op + ": output directory " + o.path.string() + " is the source of rank " +
                     std::to_string(hit->second) + " (inputs are never modified)");
      if (!S_ISDIR(st.st_mode))
        report_error(op + ": " + o.path.string() + " is not a directory (a Hugging Face checkpoint is one)");
      for (const std::string_view name : {hf_index_name, hf_single_name})
        if (!force && ::lstat((o.path / name).c_str(), &st) == 0)
          report_error(op + ": " + (o.path / name).string() + " exists (pass force / --force to replace it)");
      continue;
    }
    if (::lstat(o.path.c_str(), &st) != 0) continue;  // absent: the usual case
    if (::stat(o.path.c_str(), &st) == 0) {
      const source_node_map& sources = source_nodes();
      const auto hit = sources.find({st.st_dev, st.st_ino});
      if (hit != sources.end())
        report_error(op + ": output " + o.path.string() + " is the source file of rank " +
                     std::to_string(hit->second) + " (inputs are never modified)");
    }
    if (!force) report_error(op + ": " + o.path.string() + " exists (pass force / --force to replace it)");
  }
}
inline void check_output_paths(const std::vector<output_path>& outputs, const source_node_map& sources, bool force,
                               const std::string& op) {
  check_output_paths(outputs, [&sources]() -> const source_node_map& { return sources; }, force, op);
}
/// The same with the source files `files`, stat'ed only when an output exists (the usual run
/// finds none: no stat of the sources at all).
inline void check_output_paths(const std::vector<output_path>& outputs,
                               const std::map<index_t, std::filesystem::path>& files, bool force,
                               const std::string& op) {
  std::optional<source_node_map> nodes;
  check_output_paths(outputs, [&]() -> const source_node_map& {
    if (!nodes) nodes = source_inodes(files);
    return *nodes;
  }, force, op);
}

/// The source files a run opened, by source rank.
using source_readers = std::map<index_t, std::unique_ptr<checkpoint_reader>>;

/// The CRC check's window per file: 8 MiB, or under a memory budget (`max_memory`, 0: none) a
/// quarter of it shared by the `threads` (at least 64 KiB).
inline std::size_t crc_window(std::uint64_t max_memory, unsigned threads) noexcept {
  const std::size_t window = std::size_t{8} << 20;
  if (max_memory == 0) return window;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(max_memory / (4 * std::max(threads, 1u)), 64 << 10, window));
}

/// Checks the crc_num trailers of `readers` on cpu_jobs(`jobs`) threads, streaming each file in
/// windows of crc_window(`max_memory`, those threads).
inline void verify_source_crcs(const source_readers& readers, unsigned jobs, std::uint64_t max_memory = 0) {
  std::vector<const checkpoint_reader*> sources;
  for (const auto& [r, rd] : readers) sources.push_back(rd.get());
  const unsigned threads = cpu_jobs(jobs);
  const std::size_t window = crc_window(max_memory, threads);
  reshard::parallel_for(sources.size(), threads, [&](std::size_t i) { sources[i]->verify_crc(window); });
}

/// The summary's fields about the source files read: their count, total size and filesystems
/// (filesystem_name: one statfs per device; distinct names, comma-separated).
inline void describe_sources(transform_summary& s, const source_readers& read) {
  s.source_files = read.size();
  s.source_bytes = 0;
  std::set<std::string> kinds;
  std::set<dev_t> devices;  // asked already (a file of unknown identity, {0, 0}, is always asked)
  for (const auto& [r, rd] : read) {
    s.source_bytes += rd->file_size();
    const auto [dev, ino] = rd->file_id();
    if (dev == 0 && ino == 0) {
      kinds.insert(filesystem_name(rd->path()));
    } else if (devices.insert(dev).second) {
      kinds.insert(filesystem_name(rd->path()));
    }
  }
  s.source_filesystem.clear();
  for (const auto& k : kinds) s.source_filesystem += (s.source_filesystem.empty() ? "" : ",") + k;
}

/// How a run ran, as its summary reports it (finish_summary).
struct run_setting {
  unsigned jobs = 1;
  std::uint64_t buffer_bytes = 0;
  read_mode reads = read_mode::pread;
  write_mode writes = write_mode::buffered;
  bool synced = true;
  std::uint64_t max_memory = 0;
};

/// The summary's fields known when a run (transform_job, plan_run) ends: its sources
/// (describe_sources), its casts, its `warnings` before the summary's own (the commit's), how it
/// ran, the seconds since `start` and the peak resident memory.
inline void finish_summary(transform_summary& s, const source_readers& read, const std::vector<cast_record>& casts,
                           const std::vector<std::string>& warnings, const run_setting& how,
                           std::chrono::steady_clock::time_point start) {
  describe_sources(s, read);
  s.casts = casts;
  s.warnings.insert(s.warnings.begin(), warnings.begin(), warnings.end());
  s.jobs = how.jobs;
  s.buffer_bytes = how.buffer_bytes;
  s.reads = how.reads;
  s.writes = how.writes;
  s.synced = how.synced;
  s.max_memory = how.max_memory;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.peak_rss_bytes = peak_rss_bytes();
}

/// Checks the path a manifest of a run will be written to: not a source file (`sources`: each
/// source's device and inode, and its rank), not a file the run writes (`outputs`) nor one of
/// its Hugging Face directories (`hf_dirs`), not a directory, and (without force) not an existing
/// file. `op` names the run in messages.
inline void check_manifest_path(const std::filesystem::path& manifest,
                                const source_node_map& sources,
                                const std::vector<std::filesystem::path>& outputs,
                                const std::vector<std::filesystem::path>& hf_dirs, bool force, const std::string& op) {
  const auto who = op + ": manifest " + manifest.string() + ": ";
  struct ::stat st {};
  if (::stat(manifest.c_str(), &st) == 0) {
    const auto hit = sources.find({st.st_dev, st.st_ino});
    if (hit != sources.end())
      report_error(who + "is the source file of rank " + std::to_string(hit->second) + " (inputs are never modified)");
    if (S_ISDIR(st.st_mode)) report_error(who + "is a directory");
  }
  const auto norm = [](const std::filesystem::path& p) { return std::filesystem::absolute(p).lexically_normal(); };
  const auto m = norm(manifest);
  for (const auto& o : outputs)
    if (norm(o) == m) report_error(who + "is an output of this run");
  for (const auto& d : hf_dirs) {
    const auto dir = norm(d);
    if (m == dir || m == dir / hf_index_name || m == dir / hf_single_name ||
        is_hf_shard_name(m.filename().string()))
      if (m.parent_path() == dir || m == dir)
        report_error(who + "is a file of the Hugging Face checkpoint " + d.string() + " this run writes");
  }
  if (!force && ::lstat(manifest.c_str(), &st) == 0) report_error(who + "exists (pass force / --force to replace it)");
}

/// Stages the manifest of `written` (manifest.hpp) in `out`, to be renamed into place after
/// every file staged before it: a manifest appears only beside the complete outputs it lists,
/// and when it cannot be written nothing is committed.
inline void stage_manifest(staged_outputs& out, const std::filesystem::path& manifest,
                           const std::vector<written_file>& written) {
  const std::filesystem::path finals[] = {manifest};
  const auto part = out.add(finals).front();
  out.prepare();
  write_manifest(part, written, true);
}

/// How execute_plan runs (what the plan does not fix).
struct execute_options {
  bool force = false;       ///< replace existing outputs
  bool sync = true;         ///< make the outputs durable (transform_options::sync)
  bool verify_crc = true;   ///< check the crc_num trailer of every source file read
  bool digests = false;     ///< SHA-256 of every file written (transform_summary::written)
  /// Write a manifest of the files written here (stage_manifest; implies digests).
  std::filesystem::path manifest{};
  unsigned jobs = 0;        ///< target files written in parallel; 0: one per core, at most one per target
  std::uint64_t buffer_bytes = std::uint64_t{4} << 20;
  read_mode reads = read_mode::automatic;
  write_mode writes = write_mode::automatic;  ///< transform_options::writes
  std::uint64_t max_memory = 0;  ///< the CRC check's windows fit a quarter of it (0: no limit)
  std::function<void(const transform_progress&)> progress{};
};


/// Stages every target of `plan` in `out` (write_plan_targets) and, if `manifest` is set, the
/// manifest of the files written (its path checked first against `source_nodes`, the outputs and
/// `force`: check_manifest_path), then syncs them: what commit_plan_outputs renames into place.
inline transform_summary stage_plan(const checkpoint_plan& plan, const plan_sources& sources, staged_outputs& out,
                                    const plan_write_config& c, const std::filesystem::path& manifest,
                                    const source_node_map& source_nodes, bool force,
                                    const std::string& op) {
  transform_summary s = write_plan_targets(plan, sources, out, c, op);
  if (!manifest.empty()) {
    std::vector<std::filesystem::path> outputs, hf_dirs;  // the shards are known now
    for (const auto& t : plan.targets) {
      outputs.insert(outputs.end(), t.files.begin(), t.files.end());
      if (t.format == checkpoint_format::hf) hf_dirs.push_back(t.path);
    }
    check_manifest_path(manifest, source_nodes, outputs, hf_dirs, force, op);
    stage_manifest(out, manifest, s.written);
  }
  out.sync();
  return s;
}

/// Renames what stage_plan staged into place: the plan's files (not the manifest) become
/// `s.outputs`, and what the renames did that the caller may not expect (a Hugging Face
/// checkpoint replaced in place: staged_outputs::notes) is added to `s.warnings`.
inline void commit_plan_outputs(staged_outputs& out, bool manifest, transform_summary& s) {
  s.outputs = out.commit();
  if (manifest) s.outputs.pop_back();  // the manifest, renamed last
  s.warnings.insert(s.warnings.end(), out.notes().begin(), out.notes().end());
}

/// One run of a checkpoint plan (a plan read back with plan_from_json, or one part of it), in
/// three steps, as transform_job runs the plan it makes; `plan` must outlive it. Processes that
/// each run a part step them in agreement (reshard/mpi/transform.hpp):
///   check()    the plan adds up (check_checkpoint_plan); every source file is the one the plan
///              was made from (size and modification time); no output is a source, none exists
///              unless `force`; the manifest's path; the sources' CRC trailers
///   stage()    every target written in full, staged, synced (stage_plan)
///   commit()   the staged files renamed into place
/// Destroyed before commit(), it removes what it staged.
class plan_run {
 public:
  plan_run(const checkpoint_plan& plan, execute_options o, std::string op = "execute")
      : plan_(plan), o_(std::move(o)), op_(std::move(op)) {}

  void check() {
    RESHARD_EXPECTS(phase_ == phase::created, "plan_run: check() twice");
    start_ = std::chrono::steady_clock::now();
    check_checkpoint_plan(plan_, op_);
    writes_ = run_write_mode(o_.writes, plan_.targets.empty() ? std::filesystem::path() : plan_.targets.front().path,
                             o_.sync, reads(), op_);
    for (const auto& [r, s] : plan_.sources) {
      auto rd = std::make_unique<checkpoint_reader>(s.path);
      const std::int64_t mtime = rd->mtime_ns();
      if (rd->file_size() != s.size || mtime != s.mtime_ns)
        report_error(op_ + ": " + s.path.string() + " (source rank " + std::to_string(r) +
                     ") changed since the plan was made: " + std::to_string(rd->file_size()) + " bytes, the plan saw " +
                     std::to_string(s.size) + (mtime != s.mtime_ns ? ", and a new modification time" : "") +
                     " (make the plan again)");
      if (rd->file_id() != std::pair<dev_t, ino_t>{0, 0}) nodes_.emplace(rd->file_id(), r);  // its stat, not another
      sources_.emplace(r, rd.get());
      readers_.emplace(r, std::move(rd));
    }
    std::vector<output_path> outputs;
    std::vector<std::filesystem::path> output_files, hf_dirs;
    for (const auto& t : plan_.targets) {
      if (t.format == checkpoint_format::hf) hf_dirs.push_back(t.path);
      for (const auto& f : t.files) output_files.push_back(f);
      // a Hugging Face target's files: its old shards are replaced (staged_outputs::replaces_hf)
      if (t.format == checkpoint_format::hf) outputs.push_back({t.path, true});
      else for (const auto& f : t.files) outputs.push_back({f, false});
    }
    if (!o_.manifest.empty()) check_manifest_path(o_.manifest, nodes_, output_files, hf_dirs, o_.force, op_);
    check_output_paths(outputs, nodes_, o_.force, op_);
    if (o_.verify_crc) verify_source_crcs(readers_, jobs(), o_.max_memory);
    phase_ = phase::checked;
  }

  void stage() {
    RESHARD_EXPECTS(phase_ == phase::checked, "plan_run: stage() before check(), or twice");
    staging_ = std::make_unique<staged_outputs>(op_, o_.force, o_.sync);
    const plan_write_config c{{jobs(), o_.buffer_bytes}, reads(), o_.sync, writes_,
                              o_.digests || !o_.manifest.empty(), o_.progress, o_.max_memory == 0};
    summary_ = stage_plan(plan_, sources_, *staging_, c, o_.manifest, nodes_, o_.force, op_);
    phase_ = phase::staged;
  }

  transform_summary commit() {
    RESHARD_EXPECTS(phase_ == phase::staged, "plan_run: commit() before stage(), or twice");
    transform_summary s = std::move(summary_);
    commit_plan_outputs(*staging_, !o_.manifest.empty(), s);
    phase_ = phase::done;
    finish_summary(s, readers_, plan_.casts, plan_.warnings,
                   {jobs(), o_.buffer_bytes, reads(), writes_, o_.sync, o_.max_memory},
                   start_);
    return s;
  }

 private:
  unsigned jobs() const { return default_jobs(o_.jobs, plan_.targets.size(), writes_); }
  read_mode reads() const noexcept { return o_.reads == read_mode::mmap ? read_mode::mmap : read_mode::pread; }

  const checkpoint_plan& plan_;
  const execute_options o_;
  const std::string op_;
  enum class phase : std::uint8_t { created, checked, staged, done };
  phase phase_ = phase::created;
  std::chrono::steady_clock::time_point start_{};
  source_readers readers_;
  plan_sources sources_;
  source_node_map nodes_;
  std::unique_ptr<staged_outputs> staging_;  // stage(): the files staged, until commit()
  transform_summary summary_;
  write_mode writes_ = write_mode::buffered;  // check(): o_.writes resolved (run_write_mode)
};

/// Writes the targets of `plan` (a plan read back with plan_from_json, or one part of it) from its
/// source files: plan_run's check(), stage() and commit(). `op` names the run in messages
/// ("execute: plan.json"). Returns the summary of a run (casts and warnings: the plan's).
inline transform_summary execute_plan(const checkpoint_plan& plan, const execute_options& o = {},
                                      const std::string& op = "execute") {
  plan_run run(plan, o, op);
  run.check();
  run.stage();
  return run.commit();
}

}  // namespace reshard::io
