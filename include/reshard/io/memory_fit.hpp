// reshard/io/memory_fit.hpp: how many jobs the engine runs and how large their chunk buffers are
// under a memory budget (transform_options::max_memory, --max-memory), decided from the budget,
// what the process holds, what a job needs for a buffer size, and what was asked for. A pure
// function: the engine (engine.hpp) measures the process (current_rss_bytes, below) and runs what
// fit_memory decides; it is tested without files (verify/io/memory_fit.cpp).
#pragma once

#include <reshard/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <sys/resource.h>
#include <unistd.h>

namespace reshard::io {

/// The process's resident set size now, in bytes (/proc/self/statm; 0 where it cannot be read).
inline std::uint64_t current_rss_bytes() noexcept {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// The process's peak resident set size in bytes: VmHWM of /proc/self/status, the peak of this
/// program's own memory; where that cannot be read, getrusage's ru_maxrss, which on Linux also
/// counts the memory of the process that forked this one before it exec'd the program (a large
/// parent, such as a Python script that started it, can then show as this program's peak).
inline std::uint64_t peak_rss_bytes() noexcept {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "VmHWM: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::uint64_t>(kib) * 1024;
  }
  struct ::rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
#if defined(__APPLE__)
  return static_cast<std::uint64_t>(u.ru_maxrss);  // bytes
#else
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // KiB
#endif
}

/// What one job of the engine holds for a chunk buffer of b bytes: the buffer, the read scratch
/// (at most 4 chunks, or 64 KiB), the mapped pages kept (b per job) and the file writer's
/// buffer; with casts, a second chunk buffer (the chunk in the source's dtype, then cast).
struct job_memory {
  std::uint64_t writer_bytes =
      0;  ///< the file writer's buffer (atomic_file_writer::buffer_capacity)
  bool casts = false;

  /// The smallest chunk buffer a job is given under a budget.
  static constexpr std::uint64_t min_buffer = std::uint64_t{64} << 10;
  /// The heap's own slack beside the buffers (allocator arenas, the threads' stacks, the
  /// progress and summary): measured below 2 MiB a job on the benchmarks; 4 MiB kept.
  static constexpr std::uint64_t slack = std::uint64_t{4} << 20;

  constexpr std::uint64_t operator()(std::uint64_t b) const noexcept {
    return b + std::max<std::uint64_t>(4 * b, std::uint64_t{64} << 10) + b + writer_bytes +
           (casts ? b : 0);
  }
  /// A job's bytes with the slack.
  constexpr std::uint64_t with_slack(std::uint64_t b) const noexcept { return (*this)(b) + slack; }
};

/// How the engine runs: the jobs (target files written at once) and each one's chunk buffer.
struct execution_config {
  unsigned jobs = 0;
  std::uint64_t buffer_bytes = 0;
  friend bool operator==(const execution_config&, const execution_config&) = default;
};

/// Fits `asked` (jobs >= 1: the jobs the run would use) into `budget` bytes of which the process
/// holds `held`: as many jobs as fit with the smallest buffer (at most asked.jobs, at least 1),
/// then the largest buffer, a multiple of 4 KiB, that fits each of them (at least
/// job_memory::min_buffer, at most asked.buffer_bytes). budget 0: no budget, `asked` as it is.
/// When even one job with the smallest buffer does not fit, a reshard::error after `op` (which
/// names `indexes`, the source indexes read when `held` was measured).
inline execution_config fit_memory(std::uint64_t budget, std::uint64_t held, const job_memory& job,
                                   execution_config asked, std::size_t indexes,
                                   const std::string& op) {
  if (budget == 0) return asked;
  const std::uint64_t one = job.with_slack(job_memory::min_buffer);
  const auto mib = [](std::uint64_t b) {
    return std::to_string((b + (std::uint64_t{1} << 20) - 1) >> 20) + " MiB";
  };
  if (held + one > budget)
    report_error(op + ": max_memory " + mib(budget) + " is too small: the process holds " +
                 mib(held) + " once the " + std::to_string(indexes) +
                 " source indexes are read, and one job needs " + mib(one) + " more");
  const std::uint64_t left = budget - held;
  execution_config out;
  out.jobs = std::max(1u, static_cast<unsigned>(std::min<std::uint64_t>(asked.jobs, left / one)));
  const std::uint64_t per = left / out.jobs - job_memory::slack;  // job(b) <= per
  const std::uint64_t b = (per - job.writer_bytes) / (job.casts ? 7 : 6);
  out.buffer_bytes =
      std::clamp<std::uint64_t>(b & ~std::uint64_t{4095}, job_memory::min_buffer,
                                std::max(asked.buffer_bytes, job_memory::min_buffer));
  return out;
}

}  // namespace reshard::io
