// reshard/io/temporary_files.hpp: the temporaries reshard writes beside its outputs (their names,
// removing those of killed processes, renames that never replace), directory fsyncs, write-back,
// and the test-only fault injection of the writers.
//
// Temporaries. Every temporary reshard writes for a destination D is named
// `D.reshard-<pid>.<suffix>` in D's directory: `D.reshard-<pid>.<n>.tmp` for atomic_file_writer (io/atomic_file.hpp), and the staged
// outputs of the workflows `D.reshard-<pid>.<n>.part` (io/staging.hpp; atomic_file_writer writes
// one in place, with no temporary of its own). None ends in `.ckpt` or
// `.safetensors`, so no reader takes one for a checkpoint. A process killed while writing leaves
// its temporaries; the next writer of D removes those whose process is no longer running
// (remove_stale_temporaries). Replacing a Hugging Face checkpoint directory D assembles the new
// one in the directory `D.reshard-<pid>.<n>.swap` beside it (io/staging.hpp): the one kind of
// temporary that is a directory.
//
// Test-only fault injection: with RESHARD_TEST_CRASH_AFTER=N in the environment, the process
// SIGKILLs itself when its writers have made N units of progress, a unit being one byte written
// or one rename: the first N units happen, the next does not (see docs/reliability.md). Unset,
// it costs one relaxed atomic load per write(2) call. With RESHARD_TEST_DIRECT_EINVAL_AFTER=N, the
// first N direct writes of atomic_file_writer happen and every later one fails with EINVAL, as on a
// filesystem that refuses O_DIRECT: the writer turns to buffered writes (direct_refused()).
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/input_file.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

namespace detail {
// -- test-only fault injection (see the top of this file): a count read once from the
// environment variable `name` (unset or not a decimal count: off), and what was counted against it
struct test_limit {
  std::atomic<std::uint64_t> limit{std::numeric_limits<std::uint64_t>::max()};  ///< max = off
  std::atomic<std::uint64_t> used{0};
  explicit test_limit(const char* name) noexcept {
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (errno == 0 && *end == '\0' && v[0] != '-') limit.store(n);
    }
  }
};
// Sets `h` to `limit` from zero used, and off again when it goes (tests drive the hooks in-process).
struct scoped_test_limit {
  test_limit& h;
  scoped_test_limit(test_limit& hook, std::uint64_t limit) noexcept : h(hook) {
    h.used = 0;
    h.limit = limit;
  }
  scoped_test_limit(const scoped_test_limit&) = delete;
  scoped_test_limit& operator=(const scoped_test_limit&) = delete;
  ~scoped_test_limit() { h.limit = std::numeric_limits<std::uint64_t>::max(); }
};
// RESHARD_TEST_CRASH_AFTER: units of progress (bytes written, renames) before the process dies
inline test_limit& crash_hook() noexcept {
  static test_limit h("RESHARD_TEST_CRASH_AFTER");
  return h;
}
// RESHARD_TEST_DIRECT_EINVAL_AFTER: direct write(2)s that happen before every later one fails
// with EINVAL, as on a filesystem or device that refuses O_DIRECT writes (atomic_file_writer)
inline test_limit& direct_refusal_hook() noexcept {
  static test_limit h("RESHARD_TEST_DIRECT_EINVAL_AFTER");
  return h;
}
// True when the injected refusal of direct writes is due (one direct write(2) more is counted).
inline bool direct_write_refused() noexcept {
  auto& h = direct_refusal_hook();
  const std::uint64_t limit = h.limit.load(std::memory_order_relaxed);
  return limit != std::numeric_limits<std::uint64_t>::max() && h.used.fetch_add(1) >= limit;
}
[[noreturn]] inline void crash_now() noexcept {
  ::kill(::getpid(), SIGKILL);
  ::_exit(128 + SIGKILL);
}
// Accounts for `units` units of progress; returns how many of them may happen (all of them
// unless the injected crash is due: then the caller does that many and calls crash_now()).
inline std::uint64_t crash_allowance(std::uint64_t units) noexcept {
  auto& h = crash_hook();
  const std::uint64_t limit = h.limit.load(std::memory_order_relaxed);
  if (limit == std::numeric_limits<std::uint64_t>::max()) return units;
  const std::uint64_t before = h.used.fetch_add(units);
  return before >= limit ? 0 : std::min(units, limit - before);
}
// One unit (a rename that publishes a file): the process dies here if the crash is due.
inline void crash_point() noexcept {
  if (crash_allowance(1) == 0) crash_now();
}

// -- temporaries
constexpr std::string_view temp_marker() noexcept { return ".reshard-"; }

// This process's id: getpid(2) once, not once per temporary named (asked again in the child of
// a fork, which pthread_atfork tells).
inline ::pid_t own_pid() noexcept {
  static std::atomic<::pid_t> pid{0};
  [[maybe_unused]] static const int reset_in_child = ::pthread_atfork(nullptr, nullptr, [] { pid.store(0); });
  ::pid_t p = pid.load(std::memory_order_relaxed);
  if (p == 0) {
    p = ::getpid();
    pid.store(p, std::memory_order_relaxed);
  }
  return p;
}

// `dest` + ".reshard-<pid>.<n><ending>", n counting up in this process: unique per call, so two
// threads (or two jobs) of one process writing the same destination never share a temporary.
inline std::filesystem::path unique_temp_path(const std::filesystem::path& dest, std::string_view ending = ".tmp") {
  static std::atomic<std::uint64_t> counter{0};
  std::filesystem::path tmp = dest;
  std::string suffix(temp_marker());
  suffix.append(std::to_string(own_pid())).append(".").append(std::to_string(counter.fetch_add(1))).append(ending);
  tmp += suffix;
  return tmp;
}

// True if process `pid` runs (or may run: it exists but is not ours to signal) on this machine.
inline bool process_alive(long long pid) noexcept {
  if (pid <= 0 || pid > std::numeric_limits<::pid_t>::max()) return false;
  return ::kill(static_cast<::pid_t>(pid), 0) == 0 || errno == EPERM;
}

// The pid in what follows the marker of a temporary's name ("<pid>.<rest>", up to 12 digits and
// something after the dot), or -1 when `rest` is not of that form.
inline long long temporary_pid(std::string_view rest) noexcept {
  std::size_t digits = 0;
  long long pid = 0;
  while (digits < rest.size() && digits < 12 && rest[digits] >= '0' && rest[digits] <= '9')
    pid = pid * 10 + (rest[digits++] - '0');
  if (digits == 0 || digits + 1 >= rest.size() || rest[digits] != '.') return -1;
  return pid;
}

// Whether `name` is the name of one of reshard's temporaries, `<anything>.reshard-<pid>.<rest>`.
inline bool is_temporary_name(std::string_view name) noexcept {
  constexpr std::string_view marker = temp_marker();
  for (auto at = name.find(marker); at != std::string_view::npos; at = name.find(marker, at + 1))
    if (temporary_pid(name.substr(at + marker.size())) >= 0) return true;
  return false;
}

// Whether `dest` is named like a temporary of this process (`<anything>.reshard-<own pid>.<rest>`,
// a staged output of io/staging.hpp): its name is unique to this process, so no killed process
// left temporaries of it (theirs carry their own pid after the first marker).
inline bool own_temporary(const std::filesystem::path& dest) {
  const std::string name = dest.filename().string();
  const auto at = name.find(temp_marker());
  return at != std::string::npos && temporary_pid(std::string_view(name).substr(at + temp_marker().size())) == own_pid();
}

/// Removes the temporaries that killed processes left for destination `dest`: the regular files
/// in its directory named `<dest name>.reshard-<pid>.<anything>` whose process <pid> is not
/// running, and the directories `<dest name>.reshard-<pid>.<anything>.swap` (a Hugging Face
/// checkpoint being swapped in, io/staging.hpp) with everything in them. A temporary of a running
/// process (another writer, this one) is kept, and so is everything else. Best effort: returns how
/// many were removed; errors are ignored (a temporary that cannot be removed harms nothing but
/// space). This overload: for every destination named in `names` (file names in `directory`,
/// "" for the current one), one scan of the directory for all of them.
inline std::size_t remove_stale_temporaries(const std::filesystem::path& directory,
                                            std::span<const std::string> names) noexcept {
  std::size_t removed = 0;
  try {
    const std::filesystem::path dir = directory.empty() ? std::filesystem::path(".") : directory;
    std::vector<std::string> prefixes;
    prefixes.reserve(names.size());
    for (const auto& n : names) prefixes.push_back(n + std::string(temp_marker()));
    std::sort(prefixes.begin(), prefixes.end());
    DIR* d = ::opendir(dir.c_str());
    if (!d) return 0;
    std::vector<std::string> stale;
    while (const ::dirent* e = ::readdir(d)) {
      const std::string_view name(e->d_name);
      // stale for any destination whose prefix it has (each prefix ends at one of its markers)
      for (auto at = name.find(temp_marker()); at != std::string_view::npos; at = name.find(temp_marker(), at + 1)) {
        const std::size_t end = at + temp_marker().size();
        if (name.size() <= end || !std::binary_search(prefixes.begin(), prefixes.end(), name.substr(0, end))) continue;
        const long long pid = temporary_pid(name.substr(end));
        if (pid < 0 || process_alive(pid)) continue;
        stale.emplace_back(name);
        break;
      }
    }
    ::closedir(d);
    for (const auto& name : stale) {
      const std::filesystem::path p = dir / name;
      struct ::stat st {};
      if (::lstat(p.c_str(), &st) != 0) continue;
      if (S_ISREG(st.st_mode) && ::unlink(p.c_str()) == 0) ++removed;
      const std::string_view swap = ".swap";
      if (S_ISDIR(st.st_mode) && name.size() > swap.size() &&
          name.compare(name.size() - swap.size(), swap.size(), swap) == 0) {
        std::error_code ec;
        if (std::filesystem::remove_all(p, ec) != static_cast<std::uintmax_t>(-1) && !ec) ++removed;
      }
    }
  } catch (...) {  // std::bad_alloc from a path: nothing removed, nothing lost
  }
  return removed;
}

/// The same for the one destination `dest`.
inline std::size_t remove_stale_temporaries(const std::filesystem::path& dest) noexcept {
  try {
    const std::string name = dest.filename().string();
    return remove_stale_temporaries(dest.parent_path(), std::span<const std::string>(&name, 1));
  } catch (...) {  // std::bad_alloc
    return 0;
  }
}

// rename(from, to) failing with EEXIST if `to` exists. Returns 0 or an errno value.
inline int rename_no_replace(const std::filesystem::path& from, const std::filesystem::path& to) noexcept {
#if defined(RENAME_NOREPLACE)
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
#endif
  // Without renameat2 support: a hard link fails atomically if `to` exists.
  if (::link(from.c_str(), to.c_str()) == 0) {
    ::unlink(from.c_str());
    return 0;
  }
  if (errno == EEXIST) return EEXIST;
  // Filesystems without hard links: check, then rename (not atomic against a concurrent writer).
  struct ::stat st {};
  if (::lstat(to.c_str(), &st) == 0) return EEXIST;
  return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

// Exchanges the entries `a` and `b` (two directories, or files) in one step: renameat2's
// RENAME_EXCHANGE. Returns 0 or an errno value (EINVAL where the filesystem cannot, ENOSYS where
// the system has no renameat2).
inline int exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b) noexcept {
#if defined(RENAME_EXCHANGE)
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0 ? 0 : errno;
#else
  (void)a, (void)b;
  return ENOSYS;
#endif
}

inline void fsync_directory(const std::filesystem::path& dir) noexcept {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some filesystems refuse fsync on directories
  close_fd(fd);
}

// Starts write-back of [from, to) of `fd` without waiting for it (Linux sync_file_range; a no-op
// elsewhere). Best effort: a failure shows at the fsync that follows.
inline void start_writeback(int fd, std::uint64_t from, std::uint64_t to) noexcept {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
  if (to > from)
    ::sync_file_range(fd, static_cast<::off64_t>(from), static_cast<::off64_t>(to - from), SYNC_FILE_RANGE_WRITE);
#else
  (void)fd, (void)from, (void)to;
#endif
}
}  // namespace detail

}  // namespace reshard::io
