// bench/sha256.cpp: reshard::io::sha256 (the manifests' digest) beside plain memcpy of the same
// bytes, with the processor's SHA instructions (when it has them) and in portable C++.
//
// One benchmark per variant and size (4 MiB: what one write(2) of the engine hashes at most;
// 64 MiB: beyond the caches) hashes the buffer and, in the same run, copies it with memcpy (timed
// by hand with the timing paused, once per iteration). Counters:
//   bytes_per_second   bytes hashed per second
//   memcpy_GBps        bytes copied by memcpy per second (1e9 bytes)
//   vs_memcpy          hash time / memcpy time
// RESHARD_BENCH_TINY: 64 KiB and 1 MiB.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common.hpp"
#include "reshard/io/sha256.hpp"

namespace {

using namespace reshard_bench;

void bm_sha256(benchmark::State& state, bool portable, std::size_t bytes) {
  std::vector<std::byte> src(bytes), dst(bytes);
  for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  using clock = std::chrono::steady_clock;
  double memcpy_seconds = 0, hash_seconds = 0;
  std::string hex;
  for (auto _ : state) {
    const auto t0 = clock::now();
    reshard::io::sha256 h(portable);
    h.update(src);
    hex = h.hex();
    benchmark::DoNotOptimize(hex);
    const auto t1 = clock::now();
    state.PauseTiming();
    const auto t2 = clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    const auto t3 = clock::now();
    state.ResumeTiming();
    hash_seconds += std::chrono::duration<double>(t1 - t0).count();
    memcpy_seconds += std::chrono::duration<double>(t3 - t2).count();
  }
  const double total = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["memcpy_GBps"] = memcpy_seconds > 0 ? total / memcpy_seconds / 1e9 : 0;
  state.counters["vs_memcpy"] = memcpy_seconds > 0 ? hash_seconds / memcpy_seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t sizes[] = {tiny() ? std::size_t{64} << 10 : std::size_t{4} << 20,
                               tiny() ? std::size_t{1} << 20 : std::size_t{64} << 20};
  for (bool portable : {false, true})
    for (std::size_t bytes : sizes) {
      const std::string name =
          std::string("sha256/") + (portable ? "portable" : "default") + "/" + std::to_string(bytes >> 10) + "KiB";
      configure(benchmark::RegisterBenchmark(name.c_str(), bm_sha256, portable, bytes), benchmark::kMillisecond);
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
