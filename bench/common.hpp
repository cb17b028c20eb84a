// bench/common.hpp: what every reshard benchmark shares: tiny mode, the spread statistics, and
// a pass over a buffer timed beside memcpy of it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace reshard_bench {

/// RESHARD_BENCH_TINY=1 (set by ctest): shrink sizes so that each bench runs in well under 5 s.
inline bool tiny() {
  const char* e = std::getenv("RESHARD_BENCH_TINY");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

/// Wall-clock timing (the converter runs worker threads) and min/max aggregates beside Google
/// Benchmark's mean/median/stddev, so that bench/report.py can print the spread of repetitions.
inline benchmark::internal::Benchmark* configure(benchmark::internal::Benchmark* b,
                                                 benchmark::TimeUnit unit) {
  return b->UseRealTime()
      ->Unit(unit)
      ->ComputeStatistics("min",
                          [](const std::vector<double>& v) {
                            return *std::min_element(v.begin(), v.end());
                          })
      ->ComputeStatistics("max", [](const std::vector<double>& v) {
        return *std::max_element(v.begin(), v.end());
      });
}

/// `bytes` of varied bytes (not zeros: a checksum of zeros may take shortcuts).
inline std::vector<std::byte> sample_bytes(std::size_t bytes) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  return v;
}

/// Runs `pass(src)` (a checksum of the buffer) once per iteration and, in the same run, copies
/// `src` with memcpy (timed by hand with the timing paused). Counters: bytes_per_second (bytes
/// passed over per second), memcpy_GBps (bytes copied per second, 1e9 bytes), vs_memcpy (pass
/// time / memcpy time).
template <class Pass>
void time_beside_memcpy(benchmark::State& state, std::span<const std::byte> src, Pass&& pass) {
  std::vector<std::byte> dst(src.size());
  using clock = std::chrono::steady_clock;
  double memcpy_seconds = 0, pass_seconds = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    auto out = pass(src);
    benchmark::DoNotOptimize(out);
    const auto t1 = clock::now();
    state.PauseTiming();
    const auto t2 = clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
    const auto t3 = clock::now();
    state.ResumeTiming();
    pass_seconds += std::chrono::duration<double>(t1 - t0).count();
    memcpy_seconds += std::chrono::duration<double>(t3 - t2).count();
  }
  const double total = static_cast<double>(state.iterations()) * static_cast<double>(src.size());
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["memcpy_GBps"] = memcpy_seconds > 0 ? total / memcpy_seconds / 1e9 : 0;
  state.counters["vs_memcpy"] = memcpy_seconds > 0 ? pass_seconds / memcpy_seconds : 0;
}

/// The sizes a checksum benchmark runs: 4 MiB (what one write(2) of the engine passes over at
/// most) and 64 MiB (beyond the caches); tiny: 64 KiB and 1 MiB.
inline std::vector<std::size_t> checksum_sizes() {
  if (tiny()) return {std::size_t{64} << 10, std::size_t{1} << 20};
  return {std::size_t{4} << 20, std::size_t{64} << 20};
}

/// Registers `bm(state, variant, bytes)` as `<what>/<names[variant]>/<KiB>KiB` for the variants
/// false and true and every size of checksum_sizes().
template <class Bm>
void register_checksums(const std::string& what, const char* const (&names)[2], Bm bm) {
  for (bool variant : {false, true})
    for (std::size_t bytes : checksum_sizes()) {
      const std::string name = what + "/" + names[variant ? 1 : 0] + "/" + std::to_string(bytes >> 10) + "KiB";
      configure(benchmark::RegisterBenchmark(name.c_str(), bm, variant, bytes), benchmark::kMillisecond);
    }
}

/// Initializes Google Benchmark, runs what was registered, and shuts it down: a main's end.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace reshard_bench
