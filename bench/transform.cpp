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
#include <reshard/io/transform.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
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

// The raw baseline: every source byte read once and written once (no reshaping at all).
void BM_copy_bytes_baseline(benchmark::State& state) {
  auto& d = data();
  const fs::path out = d.dir / "copy";
  std::vector<char> buf(1 << 20);
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(out);
    fs::create_directories(out);
    state.ResumeTiming();
    for (int r = 0; r < 8; ++r) {
      const fs::path in = d.dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt";
      const int fi = ::open(in.c_str(), O_RDONLY);
      const int fo = ::open((out / std::to_string(r)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::off_t at = 0;
      for (::ssize_t k; (k = ::pread(fi, buf.data(), buf.size(), at)) > 0; at += k)
        if (::write(fo, buf.data(), static_cast<std::size_t>(k)) != k) state.SkipWithError("write failed");
      ::fsync(fo);
      ::close(fo);
      ::close(fi);
    }
  }
  fs::remove_all(out);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * d.bytes));
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

}  // namespace

int main(int argc, char** argv) {
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
