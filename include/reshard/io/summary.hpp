// reshard/io/summary.hpp: what a checkpoint transform reports (io/engine.hpp, io/transform.hpp):
// the summary of a run, the preview of a dry run, verify's report and the files written; and
// the one JSON form of the summary and the preview that the command-line program, the Python
// module and the MPI front all use (docs/cli.md, "JSON output"), read back by summary_from_json,
// and merge_summaries, which puts together the summaries of the parts of one transform (the
// processes of `mpirun -n K reshard transform`).
//
//   auto s = transform_checkpoints(src, dst, "checkpoint_", a, b);
//   std::cout << to_json(s).dump(2);                        // every field, by name
//   auto back = summary_from_json(to_json(s, summary_detail::tensors));   // == s
//
// The JSON's keys are the fields' names, except: `read_mode` (reads), `write_mode` (writes), `throughput_bytes_per_second`
// (derived), and in the preview `file` (path), `bytes_written` (tensor_bytes), `cross_rank_bytes`
// and `peak_memory_bound_bytes`; dtypes are MindSpore's names ("Float32").
#pragma once

#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/atomic_file.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace reshard::io {

/// How the engine reads the source tensors.
enum class read_mode : std::uint8_t {
  automatic,  ///< the default: pread (see docs/cli.md, "Reading and writing", for the measurements)
  mmap,       ///< from read-only memory mappings (page faults; the pages released within the budget)
  pread,      ///< pread(2) into the chunk buffer: no page-table changes, the way for network filesystems
};

constexpr std::string_view to_string(read_mode m) noexcept {
  return m == read_mode::mmap ? "mmap" : m == read_mode::pread ? "pread" : "auto";
}


/// What a transform would do for one target file (transform_job::preview).
struct target_preview {
  index_t rank = 0;
  std::filesystem::path path;
  std::uint64_t tensor_bytes = 0;              ///< tensor bytes the file would hold
  std::map<index_t, std::uint64_t> reads;      ///< source rank -> tensor bytes read from its file
  std::uint64_t cross_bytes = 0;               ///< of those, bytes from the files of other ranks than `rank`
  std::uint64_t lower_bound_bytes = 0;         ///< bytes that source rank `rank` does not hold: the least cross_bytes
};

/// What a transform would do: per target, what it reads from which source file and writes; the
/// totals; the jobs, the buffer and a bound on the peak memory of the real run.
struct transform_preview {
  std::vector<target_preview> targets;
  std::map<index_t, std::filesystem::path> sources;  ///< the source files read (rank -> file)
  std::uint64_t bytes_read = 0, bytes_written = 0, cross_bytes = 0, lower_bound_bytes = 0;  ///< totals
  unsigned jobs = 1;
  std::uint64_t buffer_bytes = 0;
  std::uint64_t peak_memory_bound = 0;  ///< what the process holds now + the jobs' buffers at most
  std::vector<std::string> warnings;
};

/// One way a written checkpoint differs from what its sources make (transform_job::verify).
struct verify_mismatch {
  std::filesystem::path file;
  std::string parameter;  ///< empty: the file as a whole
  std::string what;       ///< "missing", "dtype Float16, expected Float32", "differs from element 12", ...
};

/// What transform_job::verify found.
struct verify_report {
  std::size_t files = 0;       ///< target files checked
  std::size_t tensors = 0;     ///< tensors compared
  std::uint64_t bytes = 0;     ///< tensor bytes compared
  double seconds = 0;
  std::vector<verify_mismatch> mismatches;  ///< every file and parameter that differs, by target
  bool ok() const noexcept { return mismatches.empty(); }
};

/// A file a transform wrote: its size, SHA-256 (transform_options::digests) and tensors.
struct written_file {
  struct tensor {
    std::string name;
    dtype type = dtype::uint8;
    std::vector<std::int64_t> dims;
  };
  std::filesystem::path path;
  std::uint64_t bytes = 0;
  std::string sha256;  ///< 64 lowercase hex digits; empty without transform_options::digests
  std::vector<tensor> tensors;  ///< in file order
};

/// What a transform did.
struct transform_summary {
  std::size_t files = 0;              ///< target files written
  std::size_t sliced = 0;             ///< tensors assembled from source slices (all targets)
  std::size_t copied = 0;             ///< parameters copied unchanged (all targets)
  std::size_t source_files = 0;       ///< source files read
  std::uint64_t source_bytes = 0;     ///< their total size
  std::uint64_t bytes_read = 0;       ///< tensor bytes the targets needed from the sources
  /// The bytes the reads took from the source files: the lengths of the pread(2) calls
  /// (read_mode::pread; a read shared by the targets of a read group counted once), the bytes
  /// copied from the mappings (mmap). bytes_read of them were needed; the rest lay between the
  /// needed runs of a range read whole.
  std::uint64_t file_bytes_read = 0;
  std::uint64_t bytes_written = 0;    ///< bytes of the files written
  double seconds = 0;                 ///< wall time
  std::uint64_t peak_rss_bytes = 0;   ///< the process's peak resident memory (peak_rss_bytes())
  unsigned jobs = 1;                  ///< target files written in parallel
  std::uint64_t max_memory = 0;       ///< transform_options::max_memory (0: none)
  std::uint64_t buffer_bytes = 0;     ///< the chunk buffer of each job (fitted to max_memory)
  read_mode reads = read_mode::pread;  ///< how the source tensors were read
  write_mode writes = write_mode::buffered;  ///< how the outputs were written (resolve_write_mode)
  /// write_mode::direct: the files written buffered instead, the filesystem having refused
  /// O_DIRECT when the file was opened or at a write (atomic_file_writer::direct_refused())
  std::size_t direct_refused_files = 0;
  std::string source_filesystem;      ///< the filesystems of the files read (filesystem_name), comma-separated
  bool synced = true;                 ///< the outputs were fsynced (transform_options::sync)
  std::vector<std::filesystem::path> outputs;  ///< the files written, by target rank
  std::vector<std::string> warnings;  ///< things done that the caller may not expect
  std::optional<transform_preview> preview;  ///< transform_options::dry_run: what would be done
  std::vector<written_file> written;  ///< the files written, by target, with their tensors (and digests)
  std::vector<cast_record> casts;     ///< the parameters cast (transform_options::casts), by name
  /// transform_options::dry_run: the plan the preview is computed from (transform_job::plan)
  std::optional<checkpoint_plan> plan;

  /// Bytes written per second.
  double throughput() const noexcept { return seconds > 0 ? static_cast<double>(bytes_written) / seconds : 0.0; }
};


/// How much of the files written (transform_summary::written) the JSON carries: `files`, each
/// file's path, size and SHA-256; `tensors`, also every tensor's name, dtype and dims (what
/// summary_from_json needs to give the summary back whole).
enum class summary_detail : std::uint8_t { files, tensors };

namespace detail {

inline std::optional<read_mode> read_mode_from(std::string_view s) noexcept {
  for (read_mode m : {read_mode::automatic, read_mode::mmap, read_mode::pread})
    if (to_string(m) == s) return m;
  return std::nullopt;
}

inline dtype dtype_field(const nlohmann::json& j, const char* key) {
  const std::string name = j.at(key).get<std::string>();
  if (auto t = dtype_from_ms_name(name)) return *t;
  report_error("transform summary: \"" + std::string(key) + "\" is not a dtype: \"" + name + "\"");
}

}  // namespace detail

/// The preview of a plan: per target its bytes written, reads per source file, cross-rank
/// bytes and lower bound (totals_of), and the plan's totals, memory and warnings.
inline transform_preview preview_of(const checkpoint_plan& p) {
  transform_preview pv;
  for (const auto& t : p.targets) {
    plan_target_totals s = totals_of(t);
    pv.targets.push_back({t.rank, t.path, s.bytes_written, std::move(s.reads), s.cross_bytes, s.lower_bound_bytes});
  }
  for (const auto& [r, src] : p.sources) pv.sources.emplace(r, src.path);
  pv.bytes_read = p.bytes_read;
  pv.bytes_written = p.bytes_written;
  pv.cross_bytes = p.cross_bytes;
  pv.lower_bound_bytes = p.lower_bound_bytes;
  pv.jobs = p.jobs;
  pv.buffer_bytes = p.buffer_bytes;
  pv.peak_memory_bound = p.peak_memory_bound;
  pv.warnings = p.warnings;
  return pv;
}

/// The preview of a dry run as JSON ({"dry_run": true, "targets": [...], totals, jobs, memory,
/// warnings}; the casts are the summary's, added by to_json(transform_summary)).
inline nlohmann::json to_json(const transform_preview& p) {
  nlohmann::json j;
  j["dry_run"] = true;
  j["targets"] = nlohmann::json::array();
  for (const auto& t : p.targets) {
    nlohmann::json reads = nlohmann::json::array();
    for (const auto& [r, b] : t.reads) {
      const auto f = p.sources.find(r);
      reads.push_back({{"rank", r}, {"file", f == p.sources.end() ? std::string() : f->second.string()}, {"bytes", b}});
    }
    j["targets"].push_back({{"rank", t.rank},
                            {"file", t.path.string()},
                            {"reads", reads},
                            {"bytes_written", t.tensor_bytes},
                            {"cross_rank_bytes", t.cross_bytes},
                            {"lower_bound_bytes", t.lower_bound_bytes}});
  }
  j["source_files"] = p.sources.size();
  detail::put_totals(j, p);
  return j;
}

/// The summary as JSON: every field by name; a dry run's summary is its preview (to_json above)
/// with the casts it would do.
inline nlohmann::json to_json(const transform_summary& s, summary_detail level = summary_detail::files) {
  if (s.preview) {
    nlohmann::json j = to_json(*s.preview);
    j["casts"] = detail::casts_json(s.casts);
    return j;
  }
  nlohmann::json j;
  j["files"] = s.files;
  j["outputs"] = nlohmann::json::array();
  for (const auto& p : s.outputs) j["outputs"].push_back(p.string());
  j["sliced"] = s.sliced;
  j["copied"] = s.copied;
  j["source_files"] = s.source_files;
  j["source_bytes"] = s.source_bytes;
  j["bytes_read"] = s.bytes_read;
  j["file_bytes_read"] = s.file_bytes_read;
  j["bytes_written"] = s.bytes_written;
  j["seconds"] = s.seconds;
  j["throughput_bytes_per_second"] = s.throughput();
  j["peak_rss_bytes"] = s.peak_rss_bytes;
  j["max_memory"] = s.max_memory;
  j["buffer_bytes"] = s.buffer_bytes;
  j["jobs"] = s.jobs;
  j["synced"] = s.synced;
  j["read_mode"] = to_string(s.reads);
  j["write_mode"] = to_string(s.writes);
  j["direct_refused_files"] = s.direct_refused_files;
  j["source_filesystem"] = s.source_filesystem;
  j["written"] = nlohmann::json::array();
  for (const auto& w : s.written) {
    nlohmann::json f = {{"path", w.path.string()}, {"bytes", w.bytes}, {"sha256", w.sha256}};
    if (level == summary_detail::tensors) {
      f["tensors"] = nlohmann::json::array();
      for (const auto& t : w.tensors) f["tensors"].push_back({{"name", t.name}, {"dtype", ms_name(t.type)}, {"dims", t.dims}});
    }
    j["written"].push_back(std::move(f));
  }
  j["casts"] = detail::casts_json(s.casts);
  j["warnings"] = s.warnings;
  return j;
}

/// The summary of a run (not a dry run) read back from to_json(s, summary_detail::tensors).
/// @post summary_from_json(to_json(s, summary_detail::tensors)) == s, field by field
/// @throws reshard::error when a key is missing or of the wrong type
inline transform_summary summary_from_json(const nlohmann::json& j) {
  try {
    transform_summary s;
    s.files = j.at("files").get<std::size_t>();
    for (const auto& p : j.at("outputs")) s.outputs.emplace_back(p.get<std::string>());
    s.sliced = j.at("sliced").get<std::size_t>();
    s.copied = j.at("copied").get<std::size_t>();
    s.source_files = j.at("source_files").get<std::size_t>();
    s.source_bytes = j.at("source_bytes").get<std::uint64_t>();
    s.bytes_read = j.at("bytes_read").get<std::uint64_t>();
    s.file_bytes_read = j.at("file_bytes_read").get<std::uint64_t>();
    s.bytes_written = j.at("bytes_written").get<std::uint64_t>();
    s.seconds = j.at("seconds").get<double>();
    s.peak_rss_bytes = j.at("peak_rss_bytes").get<std::uint64_t>();
    s.max_memory = j.at("max_memory").get<std::uint64_t>();
    s.buffer_bytes = j.at("buffer_bytes").get<std::uint64_t>();
    s.jobs = j.at("jobs").get<unsigned>();
    s.synced = j.at("synced").get<bool>();
    const auto mode = detail::read_mode_from(j.at("read_mode").get<std::string>());
    if (!mode) report_error("transform summary: \"read_mode\" is not auto, mmap or pread");
    s.reads = *mode;
    if (auto w = j.find("write_mode"); w != j.end()) {  // absent from the summaries of earlier versions
      const auto mode = write_mode_from(w->get<std::string>());  // what ran: never auto
      if (!mode || *mode == write_mode::automatic)
        report_error("transform summary: \"write_mode\" is not buffered or direct");
      s.writes = *mode;
    }
    if (auto n = j.find("direct_refused_files"); n != j.end())  // absent from the summaries of earlier versions
      s.direct_refused_files = n->get<std::size_t>();
    s.source_filesystem = j.at("source_filesystem").get<std::string>();
    for (const auto& f : j.at("written")) {
      written_file w;
      w.path = f.at("path").get<std::string>();
      w.bytes = f.at("bytes").get<std::uint64_t>();
      w.sha256 = f.at("sha256").get<std::string>();
      if (auto t = f.find("tensors"); t != f.end())
        for (const auto& e : *t)
          w.tensors.push_back({e.at("name").get<std::string>(), detail::dtype_field(e, "dtype"),
                               e.at("dims").get<std::vector<std::int64_t>>()});
      s.written.push_back(std::move(w));
    }
    for (const auto& c : j.at("casts"))
      s.casts.push_back({c.at("name").get<std::string>(), detail::dtype_field(c, "from"), detail::dtype_field(c, "to")});
    s.warnings = j.at("warnings").get<std::vector<std::string>>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    report_error(std::string("transform summary: ") + e.what());
  }
}

namespace detail {
template <class Part>
transform_summary merge_summaries(std::span<Part> parts, bool move_files) {
  transform_summary s;
  if (parts.empty()) return s;
  s.reads = parts.front().reads;
  s.writes = parts.front().writes;
  s.max_memory = parts.front().max_memory;
  s.jobs = 0;
  s.buffer_bytes = parts.front().buffer_bytes;
  std::set<std::string> filesystems;
  std::map<std::string, cast_record> casts;
  for (const auto& p : parts) {
    s.files += p.files;
    s.sliced += p.sliced;
    s.copied += p.copied;
    s.source_files += p.source_files;
    s.source_bytes += p.source_bytes;
    s.bytes_read += p.bytes_read;
    s.file_bytes_read += p.file_bytes_read;
    s.bytes_written += p.bytes_written;
    s.direct_refused_files += p.direct_refused_files;
    s.jobs += p.jobs;
    s.seconds = std::max(s.seconds, p.seconds);
    s.peak_rss_bytes = std::max(s.peak_rss_bytes, p.peak_rss_bytes);
    s.buffer_bytes = std::min(s.buffer_bytes, p.buffer_bytes);
    s.synced = s.synced && p.synced;
    if constexpr (std::is_const_v<Part>) {
      s.outputs.insert(s.outputs.end(), p.outputs.begin(), p.outputs.end());
      s.written.insert(s.written.end(), p.written.begin(), p.written.end());
    } else if (move_files) {
      s.outputs.insert(s.outputs.end(), std::make_move_iterator(p.outputs.begin()), std::make_move_iterator(p.outputs.end()));
      s.written.insert(s.written.end(), std::make_move_iterator(p.written.begin()), std::make_move_iterator(p.written.end()));
    } else {
      s.outputs.insert(s.outputs.end(), p.outputs.begin(), p.outputs.end());
      s.written.insert(s.written.end(), p.written.begin(), p.written.end());
    }
    for (const auto& c : p.casts) casts.emplace(c.name, c);
    for (const auto& w : p.warnings)
      if (std::find(s.warnings.begin(), s.warnings.end(), w) == s.warnings.end()) s.warnings.push_back(w);
    for (std::size_t at = 0; at < p.source_filesystem.size();) {  // "ext4,tmpfs": each name once, sorted
      std::size_t end = p.source_filesystem.find(',', at);
      if (end == std::string::npos) end = p.source_filesystem.size();
      if (end > at) filesystems.insert(p.source_filesystem.substr(at, end - at));
      at = end + 1;
    }
  }
  for (auto& [name, c] : casts) s.casts.push_back(std::move(c));
  for (const auto& fs : filesystems) s.source_filesystem += (s.source_filesystem.empty() ? "" : ",") + fs;
  return s;
}
}  // namespace detail

/// The summary of one transform done in parts (each part a share of its target files, e.g. the
/// processes of an MPI job): counts and bytes summed, jobs summed (target files in parallel, all
/// parts), seconds and peak memory the largest, the chunk buffer the smallest, synced only if
/// every part synced, the options' fields (reads, max_memory) of the first part; the outputs and
/// written files in part order; the casts of all parts by name, each once; every distinct
/// warning once, in order; the source filesystems each once, sorted. Previews are not merged (a dry run is one plan).
/// merge_summaries(parts, true) moves the parts' outputs and written files out of them (the
/// engine merges its targets' summaries so, without copying every tensor record).
inline transform_summary merge_summaries(std::span<const transform_summary> parts) {
  return detail::merge_summaries(parts, false);
}
inline transform_summary merge_summaries(std::span<transform_summary> parts, bool move_files) {
  return detail::merge_summaries(parts, move_files);
}

/// A verify_report as JSON: {"ok", "files", "tensors", "bytes", "seconds", "mismatches":
/// [{"file", "parameter", "what"}]}, what `reshard verify --json` prints and the Python verify
/// functions return.
inline nlohmann::json to_json(const verify_report& r) {
  nlohmann::json j;
  j["ok"] = r.ok();
  j["files"] = r.files;
  j["tensors"] = r.tensors;
  j["bytes"] = r.bytes;
  j["seconds"] = r.seconds;
  j["mismatches"] = nlohmann::json::array();
  for (const auto& m : r.mismatches)
    j["mismatches"].push_back({{"file", m.file.string()}, {"parameter", m.parameter}, {"what", m.what}});
  return j;
}

}  // namespace reshard::io
