// examples/cli/transform_common.hpp: what the checkpoint subcommands (transform, transform-rank,
// merge, split, convert) share: their common options, the progress bar and the summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <reshard/io/manifest.hpp>
#include <reshard/io/rename_map.hpp>
#include <reshard/io/transform.hpp>

#include "common.hpp"

namespace reshard::cli {

/// The processes this run of the program is: one, or K started together by an MPI launcher
/// (`mpirun -n K reshard transform ...`), which `reshard transform` splits its target ranks among.
struct process_group {
  int index = 0;       ///< this process, 0 .. size-1
  int size = 1;        ///< the processes started together
  bool mpi = false;    ///< MPI is initialized (the program was built with MPI and started by mpirun)
  bool launched = false;  ///< an MPI launcher started the program (its environment says so)
};

inline process_group& processes() {
  static process_group g;
  return g;
}

/// What the environment says about an MPI launcher: Open MPI's OMPI_COMM_WORLD_SIZE/RANK, or
/// the PMI_SIZE/PMI_RANK of MPICH's and Intel MPI's Hydra. Started directly: {0, 1, not launched}.
inline process_group launcher_environment() {
  const auto number = [](const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return *end == '\0' && n >= 0 && n < (1L << 30) ? static_cast<int>(n) : -1;
  };
  process_group g;
  for (const auto& [size, rank] : {std::pair{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                   std::pair{"PMI_SIZE", "PMI_RANK"}}) {
    const int n = number(size), r = number(rank);
    if (n >= 1 && r >= 0 && r < n) {
      g.size = n;
      g.index = r;
      g.launched = true;
      break;
    }
  }
  return g;
}

/// Options every checkpoint-writing subcommand takes.
struct transform_flags {
  std::string format = "ckpt";
  unsigned jobs = 0;  // auto: io::transform_options::jobs, shared among the processes on this machine
  std::string read_mode = "auto";
  std::string write_mode = "auto";
  std::string max_memory;  // empty: no bound
  std::string max_shard_size;  // --format hf: empty = 5GB
  std::string dcp_torch;       // --format dcp: "1.13" or "2"; empty = not given (2)
  std::vector<std::string> include, exclude, rename, dtypes;
  std::string rename_map, manifest;
  std::string plan_out;  // --plan-out: the plan's JSON, and a dry run
  bool format_given = false;  // --format was given (merge, convert)
  bool force = false, crc = false, no_verify_crc = false, no_sync = false, progress = false, json = false,
       dry_run = false;
};

/// --dtype DTYPE | GLOB=DTYPE (repeatable): the casts of io::dtype_rules.
inline void add_dtype_option(CLI::App* sub, std::vector<std::string>& dtypes) {
  sub->add_option("--dtype", dtypes,
                  "DTYPE: cast every floating-point parameter to DTYPE (float32, float16, bfloat16 or float64; "
                  "rounding to nearest even); GLOB=DTYPE: cast the parameters whose source name (before any --rename or --rename-map) matches GLOB (the first "
                  "such rule applies, before a plain DTYPE); repeatable; integer parameters are never cast")
      ->check([](const std::string& v) {
        const auto eq = v.rfind('=');
        const std::string name = eq == std::string::npos ? v : v.substr(eq + 1);
        if (eq == 0) return "not GLOB=DTYPE: " + v;
        return io::dtype_from_name(name) ? std::string() : "not a dtype: " + name + " (float32, float16, bfloat16, float64)";
      });
}

/// The check of a SIZE option (parse_size: 64MiB, 5GB, ...; 0 is refused: no size option has a
/// use for it, and --max-memory 0 read as "no bound" hid a mistake).
inline std::string check_size(const std::string& v) {
  const auto n = parse_size(v);
  return n && *n > 0 ? std::string()
                     : "not a size: " + v + " (a whole number above 0 and a unit: B, KiB, MiB, GiB, KB, MB, GB, ...)";
}

/// --format FORMAT, one option for every command that names a checkpoint format (transform, split,
/// merge, convert, transform-rank and verify): ckpt, safetensors or hf, and (`dcp`: the commands
/// that write all target ranks at once) dcp; `help` says what it means for the command's outputs.
inline void add_format_option(CLI::App* sub, std::string& format, const std::string& help, bool dcp = false) {
  if (dcp)
    sub->add_option("--format", format, help)->check(CLI::IsMember({"ckpt", "safetensors", "hf", "dcp"}));
  else
    sub->add_option("--format", format, help)->check(CLI::IsMember({"ckpt", "safetensors", "hf"}));
}

/// --write-mode auto|buffered|direct of every command that writes checkpoint files from a plan.
inline void add_write_mode_option(CLI::App* sub, std::string& mode) {
  sub->add_option("--write-mode", mode,
                  "how output files are written: buffered (through the page cache), direct (O_DIRECT: from an "
                  "aligned buffer to the disk, past the page cache), or auto (the default: direct where the "
                  "outputs are fsynced on ext4, xfs or btrfs and --read-mode is not mmap; buffered elsewhere)")
      ->check(CLI::IsMember({"auto", "buffered", "direct"}));
}

/// The write mode --write-mode names.
inline io::write_mode write_mode_of(const std::string& name) {
  return io::write_mode_from(name).value_or(io::write_mode::automatic);  // CLI::IsMember checked the name
}

/// --dcp-torch 1.13|2 of the commands that can write a PyTorch DCP checkpoint.
inline void add_dcp_torch_option(CLI::App* sub, std::string& dcp_torch) {
  sub->add_option("--dcp-torch", dcp_torch,
                  "with --format dcp: the torch whose module paths .metadata names, 1.13 "
                  "(torch.distributed._shard.checkpoint) or 2 (torch.distributed.checkpoint; the default)")
      ->check(CLI::IsMember({"1.13", "2"}));
}

/// The text --format adds for the commands that can write a PyTorch DCP checkpoint.
inline constexpr const char* dcp_format_help =
    "; dcp: a PyTorch Distributed Checkpoint directory (.metadata and __<rank>_0.distcp per target rank; "
    "see --dcp-torch)";

/// --max-shard-size SIZE of the commands that can write Hugging Face checkpoints.
inline void add_shard_size_option(CLI::App* sub, std::string& max_shard_size) {
  sub->add_option("--max-shard-size", max_shard_size,
                  "with --format hf: the most tensor bytes per shard, as Hugging Face writes it (5GB = 5*10^9, the "
                  "default; 500MB, 2GiB, ...); a larger tensor gets a shard of its own")
      ->check(check_size);
}

/// --max-shard-size is refused without --format hf, --dcp-torch without --format dcp (they would
/// do nothing).
inline void check_shard_size(const transform_flags& f) {
  if (f.format != "hf" && !f.max_shard_size.empty())
    throw CLI::ValidationError("--max-shard-size", "only with --format hf");
  if (f.format != "dcp" && !f.dcp_torch.empty())
    throw CLI::ValidationError("--dcp-torch", "only with --format dcp (it names the torch a DCP checkpoint's .metadata is for)");
}

/// The text of --format for the commands that write one checkpoint (merge, convert, transform-rank).
inline constexpr const char* file_format_help =
    "hf: write a Hugging Face checkpoint into the directory --out (safetensors shards of at most "
    "--max-shard-size and model.safetensors.index.json, or one model.safetensors); ckpt or safetensors: as "
    "--out's name says (the default)";

/// The text of --format for the commands that write one checkpoint per target rank (transform, split).
inline constexpr const char* rank_format_help =
    "format of the files written: ckpt (the default), safetensors, or hf: a Hugging Face checkpoint "
    "directory per target rank, DST_DIR/rank_<t>/<prefix><t>/ (safetensors shards of at most "
    "--max-shard-size and model.safetensors.index.json, or one model.safetensors)";

/// --format and --max-shard-size of the commands that write one checkpoint (merge, convert,
/// transform-rank): the format follows --out's name unless it is hf, a Hugging Face checkpoint
/// directory.
inline void add_file_format_flags(CLI::App* sub, transform_flags& f, bool dcp = false) {
  add_format_option(sub, f.format, dcp ? std::string(file_format_help) + dcp_format_help + ", into the directory --out" : file_format_help, dcp);
  add_shard_size_option(sub, f.max_shard_size);
  if (dcp) add_dcp_torch_option(sub, f.dcp_torch);
}

/// Checks --format against the file --out names (merge, convert, transform-rank, verify --out):
/// ckpt and safetensors must agree with its name, hf wants a directory.
inline void check_file_format(const transform_flags& f, const std::string& out) {
  const bool st_name = std::filesystem::path(out).extension() == ".safetensors";
  if (f.format == "safetensors" && !st_name)
    throw CLI::ValidationError("--format", "safetensors, but --out " + out + " does not end in .safetensors");
  if (f.format == "ckpt" && st_name && f.format_given)
    throw CLI::ValidationError("--format", "ckpt, but --out " + out + " ends in .safetensors");
  check_shard_size(f);
}

/// The options that choose, rename and cast the parameters (--include, --exclude, --rename,
/// --rename-map, --dtype): every checkpoint command, and verify, which must be given those of
/// the run it checks. The globs match the source names, before any renaming.
inline void add_name_options(CLI::App* sub, transform_flags& f) {
  sub->add_option("--include", f.include,
                  "write only the parameters whose source name (before any --rename or --rename-map) matches this "
                  "glob (*, ?, [...]; repeatable; default: all)");
  sub->add_option("--exclude", f.exclude,
                  "leave out the parameters whose source name (before any --rename or --rename-map) matches this "
                  "glob (repeatable)");
  sub->add_option("--rename", f.rename,
                  "REGEX=REPLACEMENT (split at the first '='): rename the parameters in which the RE2 "
                  "REGEX is found, every match replaced ($1: its first group); repeatable, the first rule that "
                  "matches applies")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '=' ? "not REGEX=REPLACEMENT: " + v : std::string();
      });
  sub->add_option(
         "--rename-map", f.rename_map,
         "a JSON file {\"old name\": \"new name\", ...}; applied before the --rename rules")
      ->check(CLI::ExistingPath);  // what it is (a directory, a FIFO, ...) is told when it is read
  add_dtype_option(sub, f.dtypes);
}

inline void add_transform_flags(CLI::App* sub, transform_flags& f, bool with_format, bool with_jobs) {
  if (with_format) {  // the commands that write one file per target rank (transform, split)
    add_format_option(sub, f.format, std::string(rank_format_help) + dcp_format_help + ", all in DST_DIR", true);
    add_shard_size_option(sub, f.max_shard_size);
    add_dcp_torch_option(sub, f.dcp_torch);
  }
  if (with_jobs)
    sub->add_option("--jobs,-j", f.jobs,
                    "target files written in parallel (default 0: one per core, two per core with direct writes, at most one per target file; "
                    "under mpirun the cores are shared among the processes on the machine)");
  sub->add_flag("--force", f.force, "replace existing output files");
  sub->add_flag("--crc", f.crc, "end every ckpt file written with MindSpore's crc_num trailer");
  sub->add_flag("--no-verify-crc", f.no_verify_crc, "do not check the crc_num trailers of the source files");
  sub->add_option("--read-mode", f.read_mode,
                  "how source tensors are read: pread (system calls into a bounded buffer), mmap (memory "
                  "mappings), or auto (the default: pread)")
      ->check(CLI::IsMember({"auto", "mmap", "pread"}));
  add_write_mode_option(sub, f.write_mode);
  sub->add_option("--max-memory", f.max_memory,
                  "bound on the resident memory while writing, e.g. 64MiB, 2G, 500MB (default: none); the jobs "
                  "and buffers are fitted to it, and it is an error when even one job does not fit")
      ->check(check_size);
  sub->add_flag("--no-sync", f.no_sync,
                "do not fsync the outputs (scratch outputs only: after a power cut or an OS crash an output "
                "may be empty or torn under its final name)");
  add_name_options(sub, f);
  sub->add_option("--manifest", f.manifest,
                  "also write FILE: per file written its size, SHA-256 and parameters, as JSON (reshard verify "
                  "--manifest checks it); hashing costs a pass over the bytes");
  sub->add_flag("--dry-run", f.dry_run,
                "write nothing: read the strategies and the sources' indexes, check, and print per target rank "
                "the source files read and the bytes from each, the bytes written, the cross-rank bytes against "
                "their lower bound, and a bound on the peak memory");
  sub->add_option("--plan-out", f.plan_out,
                  "a dry run that also writes its checkpoint plan to FILE as JSON (every target file, each "
                  "parameter's copy or transfers, the totals; docs/formats.md): no tensor data read, no output "
                  "written; an existing FILE is replaced only with --force");
  sub->add_flag("--progress", f.progress, "show a progress bar on stderr (the default when stderr is a terminal)");
  sub->add_flag("--json", f.json, "print the summary as JSON");
}

/// A one-line progress bar on stderr, redrawn at most 10 times a second.
class progress_bar {
 public:
  void operator()(const io::transform_progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool done = p.files_done == p.files_total;
    if (!done && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                                      : static_cast<double>(p.files_done) / static_cast<double>(p.files_total);
    constexpr int width = 30;
    const int fill = static_cast<int>(frac * width);
    std::string bar(static_cast<std::size_t>(fill), '#');
    bar.resize(width, '.');
    std::string name(p.parameter.substr(0, 40));
    std::fprintf(stderr, "\r%3d%% [%s] %s / %s  %zu/%zu files  rank %lld %s\033[K", static_cast<int>(frac * 100),
                 bar.c_str(), short_bytes(static_cast<double>(p.bytes_done)).c_str(),
                 short_bytes(static_cast<double>(p.bytes_total)).c_str(), p.files_done, p.files_total,
                 static_cast<long long>(p.rank), name.c_str());
    if (done) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

  static std::string short_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
    return buf;
  }

 private:
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

/// The library options from the flags (a progress bar when asked or when stderr is a terminal).
inline io::transform_options transform_options_of(const transform_flags& f) {
  io::transform_options o;
  o.format = f.format == "safetensors" ? io::checkpoint_format::safetensors
             : f.format == "hf"        ? io::checkpoint_format::hf
             : f.format == "dcp"       ? io::checkpoint_format::dcp
                                       : io::checkpoint_format::ckpt;
  o.dcp_torch = f.dcp_torch == "1.13" ? io::dcp_layout::torch_1_13 : io::dcp_layout::torch_2;
  if (!f.max_shard_size.empty()) o.max_shard_bytes = *parse_size(f.max_shard_size);
  o.jobs = f.jobs;
  if (o.jobs == 0 && processes().launched) {  // K processes on this machine: the cores shared
    int local = processes().size;
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* v = std::getenv(name); v && std::atoi(v) > 0) {
        local = std::atoi(v);
        break;
      }
    o.jobs = std::max(1u, reshard::thread_count(0) / static_cast<unsigned>(std::max(local, 1)));
  }
  o.force = f.force;
  o.dry_run = f.dry_run || !f.plan_out.empty();
  o.manifest = f.manifest;  // staged with the outputs, renamed into place last
  o.names.include = f.include;
  o.names.exclude = f.exclude;
  for (const auto& r : f.rename) {
    const auto eq = r.find('=');
    o.names.rename.emplace_back(r.substr(0, eq), r.substr(eq + 1));
  }
  if (!f.rename_map.empty()) {
    const std::string text = io::read_input_file(f.rename_map, "--rename-map");
    o.names.rename_exact = io::decode_rename_map(text, "--rename-map " + f.rename_map);
  }
  for (const auto& d : f.dtypes) {
    const auto eq = d.rfind('=');
    const io::dtype t = *io::dtype_from_name(eq == std::string::npos ? d : d.substr(eq + 1));
    if (eq != std::string::npos) {
      o.casts.named.emplace_back(d.substr(0, eq), t);
    } else {
      if (o.casts.all && *o.casts.all != t)
        throw CLI::ValidationError("--dtype", "given two dtypes for all parameters: " +
                                              std::string(io::ms_name(*o.casts.all)) + " and " + std::string(io::ms_name(t)));
      o.casts.all = t;
    }
  }
  if (o.dry_run && processes().launched && processes().size > 1)
    throw CLI::ValidationError(f.dry_run ? "--dry-run" : "--plan-out",
                               "not under mpirun: run it as one process (the plan is the same)");
  o.crc = f.crc;
  o.verify_crc = !f.no_verify_crc;
  o.sync = !f.no_sync;
  if (!f.max_memory.empty()) o.max_memory = *parse_size(f.max_memory);
  o.reads = f.read_mode == "mmap" ? io::read_mode::mmap : f.read_mode == "pread" ? io::read_mode::pread : io::read_mode::automatic;
  o.writes = write_mode_of(f.write_mode);
  if (f.progress || ::isatty(STDERR_FILENO)) {
    auto bar = std::make_shared<progress_bar>();
    o.progress = [bar](const io::transform_progress& p) { (*bar)(p); };
  }
  return o;
}

/// The targets a summary is about: written, or (dry run) that would be. A Hugging Face target
/// (`hf`) is a directory of several files: the directories are counted; a DCP checkpoint
/// (`format` dcp) holds one data file per target rank and .metadata.
inline std::size_t target_count(const io::transform_summary& s, bool hf, const std::string& format = "") {
  if (s.preview) return s.preview->targets.size();
  if (format == "dcp") return s.files - (s.files > 0 ? 1 : 0);
  if (!hf) return s.files;
  std::set<std::filesystem::path> dirs;
  for (const auto& p : s.outputs) dirs.insert(p.parent_path());
  return dirs.size();
}

/// The first line of split's and transform's summaries: "<verb> FROM -> TO (N target ranks, FORMAT<more>)".
inline std::string targets_line(const char* verb, const std::string& from, const std::string& to, std::size_t files,
                                const std::string& format, const std::string& more = "") {
  std::string s(verb);
  s.append(" ").append(from).append(" -> ").append(to).append(" (").append(std::to_string(files));
  s.append(files == 1 ? " target rank, " : " target ranks, ").append(format).append(more).append(")");
  return s;
}

/// The casts of a summary as a text line: "3 parameters (2 Float32 -> BFloat16, 1 Float16 -> BFloat16)".
inline std::string casts_text(const std::vector<io::cast_record>& casts) {
  std::map<std::pair<io::dtype, io::dtype>, std::size_t> by;
  for (const auto& c : casts) ++by[{c.from, c.to}];
  std::string t = std::to_string(casts.size()) + (casts.size() == 1 ? " parameter (" : " parameters (");
  std::size_t k = 0;
  for (const auto& [ft, n] : by)
    t += (k++ ? ", " : "") + std::to_string(n) + " " + std::string(io::ms_name(ft.first)) + " -> " +
         std::string(io::ms_name(ft.second));
  return t + ")";
}

/// Prints a dry run's preview on stdout, with the casts it would do.
inline void print_preview(const std::string& what, const io::transform_preview& p,
                          const std::vector<io::cast_record>& casts) {
  const auto mib = [](std::uint64_t b) { return progress_bar::short_bytes(static_cast<double>(b)); };
  const auto sp = what.find(' ');  // "transformed A -> B (...)": "A -> B (...) would be transformed"
  std::cout << "dry run, nothing written: "
            << (sp == std::string::npos ? what : what.substr(sp + 1) + " would be " + what.substr(0, sp)) << '\n';
  for (const auto& t : p.targets) {
    std::cout << "  rank " << t.rank << " -> " << t.path.string() << ": writes " << mib(t.tensor_bytes)
              << ", cross-rank " << mib(t.cross_bytes) << " (lower bound " << mib(t.lower_bound_bytes) << ")\n"
              << "    reads";
    std::size_t k = 0;
    for (const auto& [r, b] : t.reads) std::cout << (k++ ? ", " : " ") << "rank " << r << ": " << mib(b);
    std::cout << '\n';
  }
  std::cout << "  total           " << p.sources.size() << " source file" << (p.sources.size() == 1 ? "" : "s")
            << " read, " << format_bytes(static_cast<double>(p.bytes_read)) << "; written "
            << format_bytes(static_cast<double>(p.bytes_written)) << '\n'
            << "  cross-rank      " << format_bytes(static_cast<double>(p.cross_bytes)) << ", lower bound "
            << format_bytes(static_cast<double>(p.lower_bound_bytes)) << '\n'
            << "  memory          at most " << format_bytes(static_cast<double>(p.peak_memory_bound)) << " (" << p.jobs
            << (p.jobs == 1 ? " job" : " jobs") << ", chunk buffers of " << mib(p.buffer_bytes) << ")\n";
  if (!casts.empty()) std::cout << "  casts           " << casts_text(casts) << '\n';
}

/// Prints the warnings on stderr and the summary on stdout (text or JSON). `shares`: the target
/// ranks of each process, when several processes wrote the files.

inline void print_summary(const std::string& prog, const std::string& what, const io::transform_summary& s,
                          const transform_flags& f, const std::vector<std::vector<std::int64_t>>* shares = nullptr) {
  const bool json = f.json;
  for (const auto& w : s.warnings) std::cerr << prog << ": warning: " << w << '\n';
  if (s.plan && !f.plan_out.empty()) {  // staged and renamed into place: whole or not at all
    io::atomic_file_writer w(f.plan_out, f.force, "--plan-out");
    w.write(io::to_json(*s.plan).dump(1) + "\n");
    w.commit();
  }
  if (json) {  // the library's JSON of the summary (or of the dry run's preview)
    nlohmann::json j = io::to_json(s);
    if (!s.preview && !f.manifest.empty()) j["manifest"] = f.manifest;
    if (shares) j["processes"] = *shares;
    print_json(std::cout, j);
    return;
  }
  if (s.preview) {
    print_preview(what, *s.preview, s.casts);
    return;
  }
  char time[64];
  std::snprintf(time, sizeof time, "%.3f s", s.seconds);
  std::cout << what << '\n'
            << "  files written   " << s.files << " (" << s.sliced << " tensors sliced, " << s.copied
            << " parameters copied unchanged)\n"
            << "  sources read    " << s.source_files << " file" << (s.source_files == 1 ? "" : "s") << " of "
            << format_bytes(static_cast<double>(s.source_bytes)) << "; tensor bytes copied "
            << format_bytes(static_cast<double>(s.bytes_read)) << ", read from the files "
            << format_bytes(static_cast<double>(s.file_bytes_read)) << '\n'
            << "  bytes written   " << format_bytes(static_cast<double>(s.bytes_written)) << '\n'
            << "  time            " << time << ", " << progress_bar::short_bytes(s.throughput()) << "/s written\n"
            << "  jobs            " << s.jobs << (s.jobs == 1 ? " target file at a time" : " target files at a time")
            << ", reads by " << io::to_string(s.reads)
            << (s.source_filesystem.empty() ? std::string() : " from " + s.source_filesystem) << ", writes "
            << io::to_string(s.writes)
            << (s.direct_refused_files == 0
                    ? std::string()
                    : " (" + std::to_string(s.direct_refused_files) + (s.direct_refused_files == 1 ? " file" : " files") +
                          " buffered: the filesystem refused O_DIRECT)")
            << (s.synced ? "" : ", outputs not fsynced (--no-sync)") << '\n'
            << "  peak memory     " << format_bytes(static_cast<double>(s.peak_rss_bytes))
            << (shares ? " (resident set of the largest process" : " (resident set of the process")
            << (s.max_memory ? "; --max-memory " + format_bytes(static_cast<double>(s.max_memory)) + ", chunk buffers of " +
                                   format_bytes(static_cast<double>(s.buffer_bytes))
                             : std::string())
            << ")\n";
  if (shares) {
    std::cout << "  processes       " << shares->size() << " (target ranks";
    for (std::size_t p = 0; p < shares->size(); ++p)
      std::cout << (p ? " | " : " ") << ((*shares)[p].empty() ? std::string("none") : format_ranks((*shares)[p]));
    std::cout << ")\n";
  }
  if (!s.casts.empty()) std::cout << "  casts           " << casts_text(s.casts) << '\n';
  if (!f.manifest.empty())
    std::cout << "  manifest        " << f.manifest << " (" << s.written.size() << " files: size, SHA-256, parameters)\n";
}

}  // namespace reshard::cli
