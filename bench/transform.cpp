// bench/transform.cpp: reshard::io::transform_checkpoints on files, 8 source ranks -> 4 target
// ranks, beside the raw baseline of reading and writing the same bytes once (pread into a 1 MiB
// buffer, write, fsync: what any converter must at least do).
//
// The checkpoint: four float32 [8192, 8192] tensors (1 GiB in all; RESHARD_BENCH_TINY: [512,512],
// 4 MiB), each stored once across the 8 source ranks, every kind of move:
//   rows    dev[8] map[0,-1]    -> dev[4] map[0,-1]              (whole runs: written from the mapping)
//   cols    dev[8] map[-1,0]    -> dev[4] map[0,-1]              (each target row from 8 sources)
//   blocks  dev[2,4] map[1,0]   -> dev[4] map[-1,0]
//   opt     dev[2,4] map[0,1]   -> dev[2,2] map[1,-1] + optimizer sharding (step 1, size 2)
// The files live in RESHARD_BENCH_DIR (kept) or a fresh directory under /dev/shm (removed).
// Counters: bytes_per_second (tensor bytes written), peak_rss_MiB (the process's peak so far).
//
// `bench_transform --io-floor OUT_DIR [--mmap] --write BYTES [--write BYTES]... FILE...` runs the
// baseline alone, outside Google Benchmark, for bench/transform_e2e.py: it reads every FILE once
// and writes one file OUT_DIR/<k> of each BYTES (from the bytes read, in order, repeating the last
// chunk if the targets hold more than the sources), each written, fsynced and closed. --mmap
// writes from read-only mappings of the inputs instead of a pread buffer (one copy fewer).
#include <reshard/io/transform.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.hpp"

namespace {

namespace fs = std::filesystem;
namespace io = reshard::io;
using reshard::index_t;

struct dataset {
  fs::path dir;
  bool keep = false;
  std::uint64_t bytes = 0;  // tensor bytes of the checkpoint

  dataset() {
    const char* env = std::getenv("RESHARD_BENCH_DIR");
    keep = env && *env;
    dir = keep ? fs::path(env) : fs::path("/dev/shm") / ("reshard_bench_transform_" + std::to_string(::getpid()));
    const index_t n = reshard_bench::tiny() ? 512 : 8192;
    const auto stored = [](std::vector<std::int64_t> dev, std::vector<std::int64_t> map, int step = 0, int size = 0) {
      io::param_layout l;
      l.dev_matrix = std::move(dev);
      for (auto a : map) l.tensor_map.push_back({a});
      l.opt_weight_shard_step = step;
      l.opt_weight_shard_size = size;
      return l;
    };
    const std::vector<std::pair<std::string, std::pair<io::param_layout, io::param_layout>>> params{
        {"rows", {stored({8}, {0, -1}), stored({4}, {0, -1})}},
        {"cols", {stored({8}, {-1, 0}), stored({4}, {0, -1})}},
        {"blocks", {stored({2, 4}, {1, 0}), stored({4}, {-1, 0})}},
        {"opt", {stored({2, 4}, {0, 1}), stored({2, 2}, {1, -1}, 1, 2)}},
    };
    bytes = static_cast<std::uint64_t>(n) * n * 4 * params.size();
    if (keep && fs::exists(dir / "dst_strategy.ckpt")) return;  // made by an earlier run
    fs::create_directories(dir);
    io::strategy_file s, d;
    for (const auto& [name, l] : params) {
      s.layouts.emplace_back(name, l.first);
      d.layouts.emplace_back(name, l.second);
    }
    io::write_strategy(dir / "src_strategy.ckpt", s, true);
    std::vector<std::byte> block(1 << 20);
    for (index_t r = 0; r < 8; ++r) {
      fs::create_directories(dir / "src" / ("rank_" + std::to_string(r)));
      io::ckpt_writer w(dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt", {.overwrite = true});
      for (const auto& [name, l] : params) {
        const reshard::box b = reshard::box_of(io::to_layout(l.first, {n, n}, 0, name), r);
        const std::uint64_t size = static_cast<std::uint64_t>(reshard::volume(b)) * 4;
        w.begin(name, io::dtype::float32, b.extent.to_vector(), size);
        for (std::uint64_t at = 0; at < size; at += block.size()) {
          for (std::size_t k = 0; k < block.size(); k += 4096) block[k] = static_cast<std::byte>(at >> 12);
          w.append(std::span(block).first(static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), size - at))));
        }
        w.end();
      }
      w.commit();
    }
    io::write_strategy(dir / "dst_strategy.ckpt", d, true);  // last: marks a complete dataset
  }
  ~dataset() {
    std::error_code ec;
    if (!keep) fs::remove_all(dir, ec);
  }
};

dataset& data() {
  static dataset d;
  return d;
}

double peak_rss_mib() { return static_cast<double>(io::peak_rss_bytes()) / (1 << 20); }

void BM_transform_8to4(benchmark::State& state) {
  auto& d = data();
  const fs::path out = d.dir / "out";
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(out);
    state.ResumeTiming();
    const auto s = io::transform_checkpoints(d.dir / "src", out, "checkpoint_", d.dir / "src_strategy.ckpt",
                                             d.dir / "dst_strategy.ckpt",
                                             {.jobs = static_cast<unsigned>(state.range(0)),
                                              .buffer_bytes = static_cast<std::uint64_t>(state.range(1)) << 20});
    benchmark::DoNotOptimize(s.bytes_written);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * d.bytes));
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

// The bytes of the inputs, in order, in chunks: read with pread into a 1 MiB buffer, or (mapped)
// pointers into each input's read-only mapping, 4 MiB at a time (no copy into user memory, as
// reshard writes a piece that is one run of one source). After the last input the last chunk is
// given again, for outputs that hold more bytes than the inputs.
class source_stream {
 public:
  source_stream(const std::vector<fs::path>& inputs, bool mapped) : inputs_(inputs), mapped_(mapped) {
    if (!mapped_) buf_.resize(1 << 20);
  }
  ~source_stream() { close(); }
  source_stream(const source_stream&) = delete;
  source_stream& operator=(const source_stream&) = delete;

  // The next chunk, or an error message.
  std::string next(const char*& data, std::size_t& size) {
    for (;;) {
      if (fd_ < 0 && next_ < inputs_.size()) {
        if (auto e = open(inputs_[next_++]); !e.empty()) return e;
      }
      if (fd_ < 0) {  // inputs exhausted: the last chunk again
        if (!last_) {
          buf_.assign(1 << 20, 0);
          last_ = buf_.data();
          last_size_ = buf_.size();
        }
        data = last_;
        size = last_size_;
        return "";
      }
      if (at_ < file_size_) {
        if (mapped_) {
          data = map_ + at_;
          size = static_cast<std::size_t>(std::min<std::uint64_t>(4 << 20, file_size_ - at_));
        } else {
          const ::ssize_t k = ::pread(fd_, buf_.data(), buf_.size(), static_cast<::off_t>(at_));
          if (k <= 0) return "cannot read " + inputs_[next_ - 1].string();
          data = buf_.data();
          size = static_cast<std::size_t>(k);
        }
        at_ += size;
        last_ = data;
        last_size_ = size;
        return "";
      }
      if (mapped_ && last_ >= map_ && last_ < map_ + file_size_) {  // keep the last chunk valid
        buf_.assign(last_, last_ + last_size_);
        last_ = buf_.data();
      }
      close();
    }
  }

  // Reads what the outputs did not need (every source byte is read once).
  std::string drain() {
    std::uint64_t sum = 0;
    for (const char* d = nullptr; fd_ >= 0 || next_ < inputs_.size();) {
      std::size_t n = 0;
      if (auto e = next(d, n); !e.empty()) return e;
      if (fd_ < 0 && next_ >= inputs_.size()) break;
      if (mapped_)
        for (std::size_t k = 0; k < n; k += 4096) sum += static_cast<unsigned char>(d[k]);  // touch the pages
    }
    benchmark::DoNotOptimize(sum);
    return "";
  }

 private:
  std::string open(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    if (fd_ < 0) return "cannot open " + path.string();
    at_ = 0;
    file_size_ = fs::file_size(path);
    if (mapped_ && file_size_ > 0) {
      void* m = ::mmap(nullptr, file_size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (m == MAP_FAILED) return "cannot map " + path.string();
      map_ = static_cast<const char*>(m);
    }
    return "";
  }
  void close() {
    if (map_) ::munmap(const_cast<char*>(map_), file_size_);
    if (fd_ >= 0) ::close(fd_);
    map_ = nullptr;
    fd_ = -1;
  }

  const std::vector<fs::path>& inputs_;
  bool mapped_;
  std::vector<char> buf_;
  std::size_t next_ = 0;
  int fd_ = -1;
  const char* map_ = nullptr;
  std::uint64_t at_ = 0, file_size_ = 0;
  const char* last_ = nullptr;
  std::size_t last_size_ = 0;
};

// The I/O floor: reads every input once and writes each output's byte count from the bytes read,
// in order (write, fsync, close). Returns "" or what failed.
std::string io_floor(const std::vector<fs::path>& inputs, const std::vector<std::pair<fs::path, std::uint64_t>>& outputs,
                     bool mapped = false) {
  source_stream in(inputs, mapped);
  const char* data = nullptr;
  std::size_t size = 0, used = 0;
  for (const auto& [path, bytes] : outputs) {
    const int fo = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0) return "cannot create " + path.string();
    for (std::uint64_t left = bytes; left > 0;) {
      if (used == size) {
        if (auto e = in.next(data, size); !e.empty()) return e;
        used = 0;
      }
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, size - used));
      if (::write(fo, data + used, n) != static_cast<::ssize_t>(n)) return "cannot write " + path.string();
      used += n;
      left -= n;
    }
    if (::fsync(fo) != 0 || ::close(fo) != 0) return "cannot fsync " + path.string();
  }
  return in.drain();
}

// The raw baseline: every source byte read once and written once (no reshaping at all).
void BM_copy_bytes_baseline(benchmark::State& state) {
  auto& d = data();
  const fs::path out = d.dir / "copy";
  std::vector<fs::path> inputs;
  std::vector<std::pair<fs::path, std::uint64_t>> outputs;
  for (int r = 0; r < 8; ++r) {
    inputs.push_back(d.dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
    outputs.emplace_back(out / std::to_string(r), fs::file_size(inputs.back()));
  }
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(out);
    fs::create_directories(out);
    state.ResumeTiming();
    if (const auto e = io_floor(inputs, outputs); !e.empty()) state.SkipWithError(e.c_str());
  }
  fs::remove_all(out);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * d.bytes));
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

// bench_transform --io-floor OUT_DIR [--mmap] --write BYTES... FILE...
int io_floor_main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_transform --io-floor OUT_DIR [--mmap] --write BYTES [--write BYTES]... FILE...\n");
    return 2;
  }
  const fs::path out = argv[2];
  std::vector<fs::path> inputs;
  std::vector<std::pair<fs::path, std::uint64_t>> outputs;
  bool mapped = false;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--mmap") {
      mapped = true;
    } else if (std::string(argv[i]) == "--write" && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0') {
        std::fprintf(stderr, "bench_transform --io-floor: --write: '%s' is not a byte count\n", argv[i]);
        return 2;
      }
      outputs.emplace_back(out / std::to_string(outputs.size()), n);
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "bench_transform --io-floor: cannot create %s: %s\n", out.c_str(), ec.message().c_str());
    return 2;
  }
  if (const auto e = io_floor(inputs, outputs, mapped); !e.empty()) {
    std::fprintf(stderr, "bench_transform --io-floor: %s\n", e.c_str());
    return 1;
  }
  return 0;
}

// bench_transform --measure PROGRAM ARGS...: runs PROGRAM, then prints its wall time and peak
// resident set (wait4's ru_maxrss) as the last line of stderr. A small launcher, because a child
// of a large process (Python) inherits the parent's resident set into its ru_maxrss at exec.
int measure_main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_transform --measure PROGRAM ARGS...\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ::pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("bench_transform --measure: fork");
    return 2;
  }
  if (pid == 0) {
    ::execvp(argv[2], argv + 2);
    std::fprintf(stderr, "bench_transform --measure: cannot run %s: %s\n", argv[2], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  ::rusage usage{};
  if (::wait4(pid, &status, 0, &usage) != pid) {
    std::perror("bench_transform --measure: wait4");
    return 2;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::fprintf(stderr, "\nbench_transform --measure: seconds=%.6f peak_rss_bytes=%lld exit=%d\n", seconds,
               static_cast<long long>(usage.ru_maxrss) * 1024, code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--io-floor") return io_floor_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "--measure") return measure_main(argc, argv);
  reshard_bench::configure(benchmark::RegisterBenchmark("copy_bytes_baseline", BM_copy_bytes_baseline),
                           benchmark::kMillisecond);
  auto* t = benchmark::RegisterBenchmark("transform_8to4", BM_transform_8to4)->ArgNames({"jobs", "buffer_MiB"});
  for (auto [jobs, buffer] : {std::pair{1, 4}, {1, 64}, {2, 4}, {4, 4}}) t->Args({jobs, buffer});
  reshard_bench::configure(t, benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
