// bench/cast.cpp: reshard::io::cast_elements beside plain memcpy of the same source bytes.
//
// For each cast (Float32 -> BFloat16, Float32 -> Float16, BFloat16 -> Float32, Float16 -> Float32)
// and source size (4 MiB: the copy engine's largest chunk; 64 MiB: beyond the caches), one
// benchmark times cast_elements over the whole source buffer and, in the same run, memcpy of the
// same source bytes into the same target buffer (timed by hand with the timing paused, once per
// iteration, right after the cast), so that both see one machine state. Counters:
//   bytes_per_second   source bytes converted per second
//   memcpy_GBps        source bytes copied by memcpy per second (1e9 bytes)
//   vs_memcpy          cast time / memcpy time (1.0: the cast costs what the copy costs)
// The source holds values of every kind (random bit patterns: normals, subnormals, infinities,
// NaNs) so that no branch is favoured. RESHARD_BENCH_TINY: 64 KiB and 1 MiB.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "reshard/io/cast.hpp"

namespace {

using reshard::io::dtype;
using namespace reshard_bench;

struct buffers {
  std::byte* src = nullptr;
  std::byte* dst = nullptr;
  std::size_t bytes = 0;
  explicit buffers(std::size_t n) : bytes(n) {
    src = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    dst = static_cast<std::byte*>(std::aligned_alloc(4096, 2 * n));  // room for a widening
    std::uint64_t x = 0x9E3779B97F4A7C15ull;
    for (std::size_t i = 0; i + 8 <= n; i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(src + i, &x, 8);
    }
    std::memset(dst, 0, 2 * n);
  }
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;
  ~buffers() {
    std::free(src);
    std::free(dst);
  }
};

void bm_cast(benchmark::State& state, dtype from, dtype to, std::size_t bytes) {
  static buffers small(tiny() ? std::size_t{64} << 10 : std::size_t{4} << 20);
  static buffers large(tiny() ? std::size_t{1} << 20 : std::size_t{64} << 20);
  buffers& b = bytes == small.bytes ? small : large;
  const std::size_t n = b.bytes / reshard::io::element_size(from);
  const std::span<const std::byte> src(b.src, b.bytes);
  const std::span<std::byte> dst(b.dst, n * reshard::io::element_size(to));
  using clock = std::chrono::steady_clock;
  double memcpy_seconds = 0, cast_seconds = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    reshard::io::cast_elements(src, from, dst, to);
    benchmark::ClobberMemory();
    const auto t1 = clock::now();
    state.PauseTiming();
    const auto t2 = clock::now();
    std::memcpy(b.dst, b.src, b.bytes);
    benchmark::ClobberMemory();
    const auto t3 = clock::now();
    state.ResumeTiming();
    cast_seconds += std::chrono::duration<double>(t1 - t0).count();
    memcpy_seconds += std::chrono::duration<double>(t3 - t2).count();
  }
  const double total = static_cast<double>(state.iterations()) * static_cast<double>(b.bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["memcpy_GBps"] = memcpy_seconds > 0 ? total / memcpy_seconds / 1e9 : 0;
  state.counters["vs_memcpy"] = memcpy_seconds > 0 ? cast_seconds / memcpy_seconds : 0;
}

std::string label(dtype t) { return std::string(reshard::io::numpy_name(t)); }

}  // namespace

int main(int argc, char** argv) {
  const std::size_t sizes[] = {tiny() ? std::size_t{64} << 10 : std::size_t{4} << 20,
                               tiny() ? std::size_t{1} << 20 : std::size_t{64} << 20};
  const std::pair<dtype, dtype> casts[] = {{dtype::float32, dtype::bfloat16},
                                           {dtype::float32, dtype::float16},
                                           {dtype::bfloat16, dtype::float32},
                                           {dtype::float16, dtype::float32}};
  for (const auto& [from, to] : casts) {
    for (std::size_t bytes : sizes) {
      const std::string name = "cast/" + label(from) + "_to_" + label(to) + "/" +
                               std::to_string(bytes >> 10) + "KiB";
      configure(benchmark::RegisterBenchmark(name.c_str(), bm_cast, from, to, bytes),
                benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
