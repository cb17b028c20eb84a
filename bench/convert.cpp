// bench/convert.cpp: reshard::convert beside plain memcpy of the same bytes.
//
// For a contiguous run length R (64 B .. 64 MiB) the tensor is [rows, cols] of 4-byte elements
// with cols * 4 = 4 R and rows = total / (4 R); the source splits the columns over 2 ranks, the
// target over 4 (tensor parallel 2 -> 4), so each of the 4 transfers copies `rows` runs of exactly
// R bytes (strided in the source, contiguous in the target). Total data per iteration: 256 MiB
// (RESHARD_BENCH_TINY: 1 MiB). Three rows per (R, threads):
//   reshard      reshard::convert(plan, ...) with convert_options{threads}
//   memcpy       one memcpy of the whole buffer (two halves on two std::threads): the ceiling;
//                it does not depend on R, but runs beside each R so that ratios see one machine state
//   memcpy_runs  a raw loop of memcpy calls with the same runs and strides as reshard's copies
// bytes_per_second counts each byte once (bytes copied per second).
// Note: glibc's memcpy switches to non-temporal stores at glibc.cpu.x86_non_temporal_threshold
// (3/4 of the last-level cache the system reports; 192 MiB on the reference machine), so the
// one-thread whole-buffer memcpy (256 MiB in one call) skips the read-for-ownership traffic that
// smaller copies pay (its two-thread halves of 128 MiB, the raw loop's runs). reshard::convert
// makes the same choice for a whole call (convert_options::streaming_bytes, same default
// threshold): this 256 MiB call streams, and it walks the source row by row for all the targets
// that read that row. See docs/benchmarks.md.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "reshard/convert.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace {

using reshard::index_t;
using namespace reshard_bench;

constexpr std::size_t elem = 4;
constexpr std::size_t src_ranks = 2, dst_ranks = 4;

std::size_t total_bytes() { return tiny() ? std::size_t{1} << 20 : std::size_t{256} << 20; }

// Two page-aligned arenas of total_bytes(), touched once; shards are consecutive pieces.
struct arenas {
  std::byte* src = nullptr;
  std::byte* dst = nullptr;
  arenas() {
    const std::size_t n = total_bytes();
    src = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    dst = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
    std::memset(dst, 0, n);
  }
  ~arenas() {
    std::free(src);
    std::free(dst);
  }
};

arenas& mem() {
  static arenas a;
  return a;
}

struct setup {
  std::size_t run = 0, rows = 0, cols = 0;  // run in bytes, cols in elements
  reshard::transfer_plan plan;
  std::vector<const std::byte*> src;
  std::vector<std::byte*> dst;
};

setup make_setup(std::size_t run) {
  setup s;
  s.run = run;
  s.cols = dst_ranks * run / elem;
  s.rows = total_bytes() / (dst_ranks * run);
  const reshard::index_list shape{static_cast<index_t>(s.rows), static_cast<index_t>(s.cols)};
  s.plan = reshard::plan(reshard::mindspore_layout({src_ranks}, {-1, 0}, shape),
                         reshard::mindspore_layout({dst_ranks}, {-1, 0}, shape));
  const std::size_t n = total_bytes();
  for (std::size_t i = 0; i < src_ranks; ++i) s.src.push_back(mem().src + i * n / src_ranks);
  for (std::size_t j = 0; j < dst_ranks; ++j) s.dst.push_back(mem().dst + j * n / dst_ranks);
  return s;
}

// The copies reshard makes, written by hand: target j takes column block j % 2 of source j / 2.
void raw_runs(const setup& s, std::size_t first_target, std::size_t last_target) {
  const std::size_t per = dst_ranks / src_ranks;
  for (std::size_t j = first_target; j < last_target; ++j) {
    const std::byte* from = s.src[j / per] + (j % per) * s.run;
    std::byte* to = s.dst[j];
    for (std::size_t r = 0; r < s.rows; ++r) std::memcpy(to + r * s.run, from + r * per * s.run, s.run);
  }
}

// Checks, once per run length, that reshard's result equals the raw loop's.
bool check(const setup& s) {
  const std::size_t n = total_bytes();
  std::memset(mem().dst, 0, n);
  raw_runs(s, 0, dst_ranks);
  std::vector<std::byte> want(mem().dst, mem().dst + n);
  std::memset(mem().dst, 0, n);
  reshard::convert(s.plan, std::span<const std::byte* const>(s.src),
                   std::span<std::byte* const>(s.dst), elem);
  return std::memcmp(want.data(), mem().dst, n) == 0;
}

void bm_reshard(benchmark::State& state, std::size_t run, unsigned threads) {
  const setup s = make_setup(run);
  static std::vector<std::size_t> checked;
  if (std::find(checked.begin(), checked.end(), run) == checked.end()) {
    if (!check(s)) {
      state.SkipWithError("reshard::convert result differs from the raw copy");
      return;
    }
    checked.push_back(run);
  }
  reshard::convert_options o;
  o.threads = threads;
  for (auto _ : state) {
    reshard::convert(s.plan, std::span<const std::byte* const>(s.src),
                     std::span<std::byte* const>(s.dst), elem, o);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(total_bytes()));
}

void bm_memcpy(benchmark::State& state, unsigned threads) {
  const std::size_t n = total_bytes();
  std::byte* dst = mem().dst;
  const std::byte* src = mem().src;
  for (auto _ : state) {
    if (threads == 1) {
      std::memcpy(dst, src, n);
    } else {
      const std::size_t half = n / 2;
      std::thread other([&] { std::memcpy(dst + half, src + half, n - half); });
      std::memcpy(dst, src, half);
      other.join();
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n));
}

void bm_memcpy_runs(benchmark::State& state, std::size_t run, unsigned threads) {
  const setup s = make_setup(run);
  for (auto _ : state) {
    if (threads == 1) {
      raw_runs(s, 0, dst_ranks);
    } else {
      std::thread other([&] { raw_runs(s, dst_ranks / 2, dst_ranks); });
      raw_runs(s, 0, dst_ranks / 2);
      other.join();
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(total_bytes()));
}

std::string bytes_label(std::size_t b) {
  if (b >= (std::size_t{1} << 20)) return std::to_string(b >> 20) + "MiB";
  if (b >= (std::size_t{1} << 10)) return std::to_string(b >> 10) + "KiB";
  return std::to_string(b) + "B";
}

}  // namespace

int main(int argc, char** argv) {
  // run lengths 64 B, 256 B, ... up to total / 4 (64 MiB; tiny: 256 KiB); the three rows of a
  // (run, threads) pair run back to back so that their ratios see the same machine state
  for (std::size_t run = 64; run <= total_bytes() / dst_ranks; run *= 4) {
    for (unsigned threads : {1u, 2u}) {
      const std::string suffix = "/threads:" + std::to_string(threads);
      const std::string base = "convert/run:" + bytes_label(run) + "/";
      configure(benchmark::RegisterBenchmark((base + "reshard" + suffix).c_str(), bm_reshard, run,
                                             threads),
                benchmark::kMillisecond);
      configure(benchmark::RegisterBenchmark((base + "memcpy" + suffix).c_str(), bm_memcpy,
                                             threads),
                benchmark::kMillisecond);
      configure(benchmark::RegisterBenchmark((base + "memcpy_runs" + suffix).c_str(),
                                             bm_memcpy_runs, run, threads),
                benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
