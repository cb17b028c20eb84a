// bench/common.hpp: what every reshard benchmark shares: tiny mode and the spread statistics.
#pragma once

#include <algorithm>
#include <cstdlib>
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

}  // namespace reshard_bench
