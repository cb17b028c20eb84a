// reshard/io/mapped_file.hpp: a read-only memory mapping of a whole file, and an atomic output
// file (write a temporary beside the destination, fsync, rename on commit).
//
// POSIX only. Errors are reshard::error naming the path and the errno text, prefixed with the
// caller's context ("ckpt", "safetensors", ...).
//
// Temporaries. Every temporary reshard writes for a destination D is named
// `D.reshard-<pid>.<suffix>` in D's directory: `D.reshard-<pid>.<n>.tmp` here, and the staged
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
#include <reshard/parallel.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace reshard::io {

namespace detail {
// The live read-only mappings of source files (mapped_file, hf_checkpoint's shards), so that a
// write(2) out of a mapping whose file shrank (EFAULT: the pages past the new end are gone) can
// name the source instead of "Bad address".
struct mapped_range {
  std::size_t size = 0;
  std::filesystem::path path;
};
struct mapping_registry {
  std::mutex mutex;
  std::map<std::uintptr_t, mapped_range> ranges;  // by first byte
};
inline mapping_registry& mappings() {
  static mapping_registry r;
  return r;
}
/// Records that [base, base + size) maps the file `path` from its first byte.
inline void note_mapping(const void* base, std::size_t size, const std::filesystem::path& path) {
  if (size == 0) return;
  auto& r = mappings();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.ranges[reinterpret_cast<std::uintptr_t>(base)] = {size, path};
}
/// Forgets the mappings recorded in [base, base + size).
inline void forget_mappings(const void* base, std::size_t size) noexcept {
  auto& r = mappings();
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.ranges.erase(r.ranges.lower_bound(b), r.ranges.lower_bound(b + std::max<std::size_t>(size, 1)));
}
/// For bytes that could not be read (EFAULT) out of a recorded mapping: "the source <file> was
/// truncated while being read: its bytes from offset O are gone"; empty if no mapping holds them.
inline std::string truncated_source(const void* p) {
  auto& r = mappings();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.ranges.upper_bound(a);
  if (it == r.ranges.begin()) return {};
  --it;
  if (a - it->first >= it->second.size) return {};
  return "the source " + it->second.path.string() +
         " was truncated while being read: its bytes from offset " + std::to_string(a - it->first) +
         " are gone";
}
}  // namespace detail

namespace detail {
// A descriptor a read_descriptor keeps: its lock (shared while it is read, exclusive to open or
// close it) and, while open, its place in its descriptor_budget's list.
struct kept_descriptor {
  std::shared_mutex mutex;
  int fd = -1;
  bool listed = false;
  std::list<kept_descriptor*>::iterator at;
};
}  // namespace detail

/// How many descriptors the read_descriptors of a process keep open at once: RLIMIT_NOFILE's soft
/// limit less a margin for everything else the process opens (the outputs, directories, the
/// transports). Over it, the least recently used idle descriptor is closed (its read_descriptor
/// opens the file again if it is read again). Thread-safe.
class descriptor_budget {
 public:
  explicit descriptor_budget(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {}
  descriptor_budget(const descriptor_budget&) = delete;
  descriptor_budget& operator=(const descriptor_budget&) = delete;
  ~descriptor_budget() {
    for (auto* d : lru_) d->listed = false;  // (a read_descriptor must not outlive its budget)
  }

  /// The process's budget, of default_capacity() (never destroyed: a reader destroyed during the
  /// process's exit still finds it).
  static descriptor_budget& process() {
    static descriptor_budget* const b = new descriptor_budget(default_capacity());
    return *b;
  }
  /// RLIMIT_NOFILE's soft limit less max(256, an eighth of it); a quarter of it if that leaves
  /// less than the margin (at least 1).
  static std::size_t default_capacity() noexcept {
    ::rlimit l{};
    std::uint64_t soft = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &l) == 0)
      soft = l.rlim_cur == RLIM_INFINITY ? std::uint64_t{1} << 20 : static_cast<std::uint64_t>(l.rlim_cur);
    const std::uint64_t margin = std::max<std::uint64_t>(256, soft / 8);
    return static_cast<std::size_t>(std::max<std::uint64_t>(soft > 2 * margin ? soft - margin : soft / 4, 1));
  }

  std::size_t capacity() const noexcept { return capacity_.load(); }
  /// Changes the capacity (for tests); descriptors over it are closed as others open.
  void set_capacity(std::size_t n) noexcept { capacity_ = std::max<std::size_t>(n, 1); }
  /// The descriptors kept open now.
  std::size_t kept() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return lru_.size();
  }

 private:
  friend class read_descriptor;
  // d's descriptor was opened (d.mutex held exclusively): d becomes the most recent, and the least
  // recent idle descriptors (their lock free) are closed while more than the capacity are open.
  void opened(detail::kept_descriptor& d) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!d.listed) d.at = lru_.insert(lru_.end(), &d), d.listed = true;
    for (auto it = lru_.begin(); lru_.size() > capacity_.load() && it != lru_.end();) {
      detail::kept_descriptor* c = *it;
      if (c == &d || !c->mutex.try_lock()) {  // in use: the next
        ++it;
        continue;
      }
      detail::close_fd(c->fd);
      c->listed = false;
      it = lru_.erase(it);
      c->mutex.unlock();
    }
  }
  // d was read (d.mutex held, shared or exclusive): the most recent.
  void used(detail::kept_descriptor& d) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (d.listed) lru_.splice(lru_.end(), lru_, d.at);
  }
  // d's descriptor is being closed (d.mutex held exclusively).
  void closed(detail::kept_descriptor& d) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (d.listed) lru_.erase(d.at), d.listed = false;
  }

  mutable std::mutex mutex_;
  std::list<detail::kept_descriptor*> lru_;  // open descriptors, least recently used first
  std::atomic<std::size_t> capacity_;
};

/// A source file's descriptor for positioned reads (pread(2)), kept open from the first use, or
/// from the opening the file was mapped or indexed from (adopt()), until close(), within a
/// descriptor_budget: one open per file for the index and the reads while the budget holds every
/// file, a reopening for a file whose descriptor the budget closed. Reads from several threads at
/// once are safe. Not movable (the budget lists it).
class read_descriptor {
 public:
  explicit read_descriptor(descriptor_budget& budget = descriptor_budget::process())
      : budget_(&budget), d_(std::make_unique<detail::kept_descriptor>()) {}
  read_descriptor(const read_descriptor&) = delete;
  read_descriptor& operator=(const read_descriptor&) = delete;
  ~read_descriptor() { close(); }

  /// Keeps `fd`, a descriptor of the file open for reading (taken: closed by this object).
  void adopt(int fd) {
    const std::unique_lock<std::shared_mutex> lock(d_->mutex);
    if (d_->fd >= 0) budget_->closed(*d_), detail::close_fd(d_->fd);
    d_->fd = fd;
    advise();
    budget_->opened(*d_);
  }

  /// Reads exactly out.size() bytes at `offset` of the file `path` (pread_exact; `context` names
  /// it in errors), opening it (input_file) if no descriptor is kept.
  void pread(std::span<std::byte> out, std::uint64_t offset, const std::filesystem::path& path,
             std::string_view context) const {
    {
      const std::shared_lock<std::shared_mutex> lock(d_->mutex);
      if (d_->fd >= 0) {
        budget_->used(*d_);
        return pread_exact(d_->fd, out, offset, path, context);
      }
    }
    const std::unique_lock<std::shared_mutex> lock(d_->mutex);
    if (d_->fd < 0) {
      d_->fd = input_file(path, context).release();
      advise();
      budget_->opened(*d_);
    }
    pread_exact(d_->fd, out, offset, path, context);
  }

  /// Closes the descriptor (reopened if read again).
  void close() const noexcept {
    const std::unique_lock<std::shared_mutex> lock(d_->mutex);
    if (d_->fd < 0) return;
    budget_->closed(*d_);
    detail::close_fd(d_->fd);
  }

  /// A descriptor is kept open now.
  bool is_open() const {
    const std::shared_lock<std::shared_mutex> lock(d_->mutex);
    return d_->fd >= 0;
  }

 private:
  void advise() const noexcept { ::posix_fadvise(d_->fd, 0, 0, POSIX_FADV_SEQUENTIAL); }  // a hint: larger read-ahead

  descriptor_budget* budget_;
  std::unique_ptr<detail::kept_descriptor> d_;
};

/// Read-only mapping of a whole regular file. Move-only; the bytes stay valid (and at the same
/// address) for the lifetime of the mapping, across moves. An empty file maps to an empty span.
class mapped_file {
 public:
  mapped_file() = default;

  /// Maps `path`. `context` prefixes error messages ("ckpt: /a/b.ckpt: cannot open: ...").
  /// With `copy`, a file of at most `copy_most` bytes is also read into *copy with one pread(2)
  /// on the same descriptor (copied() tells): a caller that only parses a small file's headers
  /// reads them there, and the mapping's pages stay untouched (no page faults, nothing to
  /// release), its spans then rebased onto bytes(). With `keep`, the descriptor the file was
  /// mapped from is kept there for the reads that follow (one open of the file for both).
  explicit mapped_file(std::filesystem::path path, std::string_view context = "mapped_file",
                       std::vector<std::byte>* copy = nullptr, std::uint64_t copy_most = 0,
                       read_descriptor* keep = nullptr)
      : path_(std::move(path)) {
    input_file in(path_, context);  // a regular file, or an error naming what it is
    size_ = in.size();
    status_ = in.status();
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, in.fd(), 0);
      if (p == MAP_FAILED) detail::report_errno(context, path_, "cannot map", errno);
      data_ = static_cast<const std::byte*>(p);
      try {
        detail::note_mapping(data_, size_, path_);
        if (copy && size_ <= copy_most) {
          copy->resize(static_cast<std::size_t>(size_));
          in.pread_exact(*copy, 0);
          copied_ = true;
        }
      } catch (...) {
        unmap();
        throw;
      }
    }
    if (keep) keep->adopt(in.release());
  }  // the mapping keeps the file alive

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        status_(o.status_), copied_(o.copied_) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      status_ = o.status_;
      copied_ = o.copied_;
    }
    return *this;
  }
  ~mapped_file() { unmap(); }

  const std::filesystem::path& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, static_cast<std::size_t>(size_)}; }
  /// The file's identity and modification time when it was mapped (input_file::status).
  const file_status& status() const noexcept { return status_; }
  /// The constructor read the file into its `copy` too.
  bool copied() const noexcept { return copied_; }

 private:
  void unmap() noexcept {
    if (data_) {
      detail::forget_mappings(data_, size_);
      ::munmap(const_cast<std::byte*>(data_), size_);
    }
    data_ = nullptr;
    size_ = 0;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  file_status status_;
  bool copied_ = false;
};

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

/// When the bytes of an output file reach the disk.
enum class durability : std::uint8_t {
  /// commit() fsyncs the file before its rename and its directory after: crash-safe on its own.
  sync,
  /// Write-back starts while the file is written; commit() renames without waiting for it. The
  /// caller makes the file durable (sync_files) before it publishes it: several files then wait
  /// for the disk together instead of one after another. The workflows use this.
  deferred,
  /// Never fsynced. After a power cut or an OS crash, a file may be empty or torn under its final
  /// name: only for scratch outputs that can be made again.
  none,
};

/// How an output file's bytes go to its filesystem.
enum class write_mode : std::uint8_t {
  /// The default: `direct` where the outputs are made durable on a local disk filesystem (ext4,
  /// xfs, btrfs) and the sources are not read from mappings; `buffered` everywhere else (tmpfs,
  /// network and FUSE filesystems, --no-sync). resolve_write_mode decides, once per run.
  automatic,
  /// write(2) through the page cache; write-back started as the file grows.
  buffered,
  /// O_DIRECT: the bytes go from an aligned buffer of the writer to the disk, past the page cache
  /// (whose first touch of new pages is what varies most from run to run on a virtual machine:
  /// docs/benchmarks.md, "Durable writes"). The last partial block is written buffered, and the
  /// file is fsynced as in `buffered`. A filesystem that refuses O_DIRECT gets `buffered`.
  direct,
};

constexpr std::string_view to_string(write_mode m) noexcept {
  return m == write_mode::direct ? "direct" : m == write_mode::buffered ? "buffered" : "auto";
}

/// The write mode to_string names ("auto", "buffered", "direct"); nullopt for another name.
constexpr std::optional<write_mode> write_mode_from(std::string_view name) noexcept {
  for (write_mode m : {write_mode::automatic, write_mode::buffered, write_mode::direct})
    if (to_string(m) == name) return m;
  return std::nullopt;
}

/// The kind of filesystem that holds `path`, by its statfs(2) magic number: "ext4" (ext2/3/4),
/// "xfs", "btrfs", "zfs", "tmpfs", "ramfs", "overlay", "nfs", "fuse", "lustre", "cifs", "smb2",
/// "ceph", "gpfs", "9p", "squashfs"; "0x<magic>" for another; "" when statfs fails. Network and
/// FUSE filesystems are the ones where memory-mapped reads are known to be slow (remote_filesystem).
inline std::string filesystem_name(const std::filesystem::path& path) {
  struct ::statfs st {};
  if (::statfs(path.c_str(), &st) != 0) return {};
  static constexpr std::pair<std::uint64_t, const char*> names[] = {
      {0xEF53, "ext4"},       {0x58465342, "xfs"},    {0x9123683E, "btrfs"}, {0x2FC12FC1, "zfs"},
      {0x01021994, "tmpfs"},  {0x858458F6, "ramfs"},  {0x794C7630, "overlay"}, {0x6969, "nfs"},
      {0x65735546, "fuse"},   {0x0BD00BD0, "lustre"}, {0xFF534D42, "cifs"},  {0xFE534D42, "smb2"},
      {0x00C36400, "ceph"},   {0x47504653, "gpfs"},   {0x01021997, "9p"},    {0x73717368, "squashfs"}};
  const auto magic = static_cast<std::uint64_t>(static_cast<std::uint32_t>(st.f_type));
  for (const auto& [m, name] : names)
    if (m == magic) return name;
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(magic));
  return hex;
}

/// A filesystem of filesystem_name() reached over a network or through FUSE.
inline bool remote_filesystem(std::string_view name) noexcept {
  for (std::string_view n : {"nfs", "fuse", "lustre", "cifs", "smb2", "ceph", "gpfs", "9p"})
    if (name == n) return true;
  return false;
}

/// A local filesystem on a block device, where direct writes (write_mode::direct) skip the page
/// cache: "ext4", "xfs", "btrfs".
inline bool local_disk_filesystem(std::string_view name) noexcept {
  return name == "ext4" || name == "xfs" || name == "btrfs";
}

/// The write mode a run uses for outputs under `dir` (which need not exist yet: its nearest
/// existing ancestor is asked, one statfs): `requested` unless it is write_mode::automatic, which
/// is `direct` when the outputs are fsynced (`durable`), the sources are not read from mappings
/// (`mapped_reads`: their bytes must reach write(2) uncopied, so that a source truncated under
/// the run is named) and the filesystem is a local disk filesystem; `buffered` otherwise.
inline write_mode resolve_write_mode(write_mode requested, const std::filesystem::path& dir, bool durable,
                                     bool mapped_reads) {
  if (requested != write_mode::automatic) return requested;
  if (!durable || mapped_reads) return write_mode::buffered;
  std::filesystem::path p = dir;
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec))
    p = p.has_parent_path() && p.parent_path() != p ? p.parent_path() : std::filesystem::path();
  return local_disk_filesystem(filesystem_name(p.empty() ? "." : p)) ? write_mode::direct : write_mode::buffered;
}

/// Makes the named files' data and metadata durable (fsync each, up to `threads` at a time, as
/// disks and network filesystems serve several waits at once). Their names are not: fsync the
/// directories after renaming (detail::fsync_directory). Errors name the file
/// ("<context>: <file>: cannot fsync: <reason>").
inline void sync_files(std::span<const std::filesystem::path> files, unsigned threads = 8,
                       std::string_view context = "sync") {
  reshard::parallel_for(files.size(), std::max(1u, threads), [&](std::size_t i) {
    int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) detail::report_errno(context, files[i], "cannot open to fsync", errno);
    if (::fsync(fd) != 0) {
      const int err = errno;
      detail::close_fd(fd);
      detail::report_errno(context, files[i], "cannot fsync", err);
    }
    detail::close_fd(fd);
  });
}

/// An output file that appears at its destination complete or not at all. Bytes go to a unique
/// temporary `<destination>.reshard-<pid>.<n>.tmp` in the same directory; commit() flushes,
/// fsyncs and renames it over the destination, then fsyncs the directory. The destructor of an
/// uncommitted writer (an exception, an early return) removes the temporary; the temporaries of
/// killed processes are removed by the next writer of the same destination. A destination that
/// is itself a temporary of this process (a staged `.part` of io/staging.hpp, which no reader
/// takes for an output and which is renamed into place only once every file is complete) is
/// written in place: it is the writer's temporary, created (or, with `overwrite`, truncated) at
/// construction, removed by the destructor if uncommitted, and commit() renames nothing
/// (in_place()). An existing
/// destination is refused (at construction and again, atomically, at commit) unless `overwrite`
/// is true. Every failing call (open, write, fsync, close, rename) is an error naming the
/// destination, the temporary and errno's text (a full disk: "No space left on device").
///
/// write_mode::direct: the temporary is written with O_DIRECT, every byte through an aligned
/// buffer of buffer_capacity bytes written whole at offsets that are multiples of it, the last
/// partial block buffered at commit(); a filesystem that refuses O_DIRECT (or a direct write
/// that fails with EINVAL) turns the writer to buffered writes, the bytes unchanged.
class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path destination, bool overwrite = false,
                              std::string_view context = "atomic_file_writer", durability d = durability::sync,
                              write_mode w = write_mode::buffered)
      : dest_(std::move(destination)), context_(context), overwrite_(overwrite), durability_(d) {
    struct ::stat st {};
    if (!overwrite_ && ::lstat(dest_.c_str(), &st) == 0)
      report_error(context_ + ": " + dest_.string() + ": destination exists (pass overwrite to replace it)");
    in_place_ = detail::own_temporary(dest_);  // a staged output: written in place, no temporaries of it
    if (!in_place_) detail::remove_stale_temporaries(dest_);
    temp_ = in_place_ ? dest_ : detail::unique_temp_path(dest_);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (in_place_ && overwrite_ ? O_TRUNC : O_EXCL), 0666);
    if (fd_ < 0)
      detail::report_errno(context_, dest_, "cannot create temporary file " + temp_.string(), errno);
    if (w == write_mode::direct) start_direct();
    if (!direct_) buffer_.reserve(buffer_capacity);
  }

  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  atomic_file_writer(atomic_file_writer&& o) noexcept
      : dest_(std::move(o.dest_)),
        temp_(std::move(o.temp_)),
        context_(std::move(o.context_)),
        buffer_(std::move(o.buffer_)),
        aligned_(std::move(o.aligned_)),
        aligned_size_(std::exchange(o.aligned_size_, 0)),
        direct_(std::exchange(o.direct_, false)),
        refused_(o.refused_),
        fd_(std::exchange(o.fd_, -1)),
        size_(o.size_),
        written_(o.written_),
        kicked_(o.kicked_),
        overwrite_(o.overwrite_),
        in_place_(o.in_place_),
        durability_(o.durability_),
        committed_(std::exchange(o.committed_, true)),
        observer_(std::move(o.observer_)) {}
  atomic_file_writer& operator=(atomic_file_writer&&) = delete;

  ~atomic_file_writer() {
    detail::close_fd(fd_);
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  }

  /// Appends `bytes` (buffered).
  void write(std::span<const std::byte> bytes) {
    RESHARD_EXPECTS(fd_ >= 0 && !committed_, "atomic_file_writer: write after commit or failure");
    if (direct_) return write_direct(bytes);
    if (buffer_.size() + bytes.size() > buffer_capacity) flush();
    if (bytes.size() >= buffer_capacity) {
      write_fd(bytes);
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
    size_ += bytes.size();
  }
  void write(std::string_view bytes) { write(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))); }

  /// Bytes written so far.
  std::uint64_t size() const noexcept { return size_; }
  const std::filesystem::path& destination() const noexcept { return dest_; }
  const std::filesystem::path& temp_path() const noexcept { return temp_; }
  bool committed() const noexcept { return committed_; }
  /// The destination is a temporary of this process, written in place (temp_path() is it).
  bool in_place() const noexcept { return in_place_; }

  durability durability_mode() const noexcept { return durability_; }
  /// True while the file is written with O_DIRECT (write_mode::direct, and the filesystem took it).
  bool direct() const noexcept { return direct_; }
  /// True when a direct write was refused with EINVAL and the writer turned to buffered writes.
  bool direct_refused() const noexcept { return refused_; }

  /// Calls `f` with every byte written from now on, in order (for a digest of the file).
  void observe(std::function<void(std::span<const std::byte>)> f) { observer_ = std::move(f); }

  /// Flushes, fsyncs (durability::sync) and renames the temporary to the destination (refusing
  /// an existing one unless `overwrite`; in_place(): no rename). On failure the temporary is
  /// removed and reshard::error thrown.
  void commit() {
    RESHARD_EXPECTS(fd_ >= 0 && !committed_, "atomic_file_writer: commit twice or after failure");
    if (direct_) finish_direct();
    flush();
    if (durability_ == durability::deferred) detail::start_writeback(fd_, kicked_, written_);
    if (durability_ == durability::sync && ::fsync(fd_) != 0) fail("cannot fsync " + temp_.string(), errno);
    if (detail::close_fd(fd_) != 0) fail("cannot close " + temp_.string(), errno);
    if (!in_place_) rename_into_place();  // in place: the destination holds the bytes already
    committed_ = true;
    if (durability_ == durability::sync) detail::fsync_directory(dest_.parent_path());
  }

  /// The bytes buffered before a write(2) (appends this large or larger go straight through).
  static constexpr std::size_t buffer_capacity = std::size_t{1} << 20;

 private:
  // Write-back is started every this many bytes (not durability::none), so that the disk writes
  // while the process computes the next bytes and the final fsync has little left to wait for.
  static constexpr std::uint64_t writeback_bytes = std::uint64_t{8} << 20;

  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  // The alignment of direct writes' memory, offsets and lengths: a page, which every Linux block
  // device's logical block size divides.
  static constexpr std::size_t direct_alignment = 4096;
  static_assert(buffer_capacity % direct_alignment == 0);

  // Sets or clears O_DIRECT on fd_; false when the filesystem refuses it.
  bool set_o_direct(bool on) noexcept {
    const int flags = ::fcntl(fd_, F_GETFL);
    return flags >= 0 && ::fcntl(fd_, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) == 0;
  }
  // O_DIRECT on the open temporary, and the aligned buffer; left buffered when either fails.
  void start_direct() noexcept {
    if (!set_o_direct(true)) return;
    aligned_.reset(static_cast<std::byte*>(std::aligned_alloc(direct_alignment, buffer_capacity)));
    if (!aligned_) {
      set_o_direct(false);
      return;
    }
    direct_ = true;
  }
  // Back to buffered writes for good: the bytes still in the aligned buffer move to buffer_, and
  // the aligned buffer is freed first when more writes follow (`more`), so that the writer never
  // holds both buffers at their full size.
  void stop_direct(bool more) {
    set_o_direct(false);
    direct_ = false;
    std::vector<std::byte> rest(aligned_.get(), aligned_.get() + aligned_size_);
    aligned_.reset();
    aligned_size_ = 0;
    if (more) rest.reserve(buffer_capacity);
    buffer_ = std::move(rest);
  }
  void write_direct(std::span<const std::byte> bytes) {
    size_ += bytes.size();
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), buffer_capacity - aligned_size_);
      std::memcpy(aligned_.get() + aligned_size_, bytes.data(), n);
      aligned_size_ += n;
      bytes = bytes.subspan(n);
      if (aligned_size_ == buffer_capacity) flush_direct(buffer_capacity);
      if (!direct_) {  // a direct write was refused: the rest goes the buffered way
        buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
        return;
      }
    }
  }
  // Writes the first `n` bytes of the aligned buffer (a multiple of direct_alignment) directly
  // and keeps the rest; on EINVAL (the filesystem or device refuses this write), stop_direct().
  void flush_direct(std::size_t n) {
    if (n == 0) return;
    if (!write_fd(std::span<const std::byte>(aligned_.get(), n), true)) {
      refused_ = true;
      stop_direct(true);
      return;
    }
    std::memmove(aligned_.get(), aligned_.get() + n, aligned_size_ - n);
    aligned_size_ -= n;
  }
  // commit(): the whole blocks directly, then the last partial block through buffer_.
  void finish_direct() {
    flush_direct(aligned_size_ / direct_alignment * direct_alignment);
    if (direct_) stop_direct(false);
  }

  // commit(): the temporary renamed to the destination (one unit of the crash hook).
  void rename_into_place() {
    detail::crash_point();
    if (overwrite_) {
      if (::rename(temp_.c_str(), dest_.c_str()) != 0) fail("cannot rename " + temp_.string(), errno);
    } else if (int err = detail::rename_no_replace(temp_, dest_); err != 0) {
      if (err == EEXIST) {
        discard();
        report_error(context_ + ": " + dest_.string() + ": destination exists (pass overwrite to replace it)");
      }
      fail("cannot rename " + temp_.string(), err);
    }
  }

  void discard() noexcept {
    detail::close_fd(fd_);
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  [[noreturn]] void fail(const std::string& what, int err) {
    discard();
    detail::report_errno(context_, dest_, what, err);
  }
  void flush() {
    write_fd(buffer_);
    buffer_.clear();
  }
  // write(2)s all of `bytes`. `direct`: they are a whole aligned block of the aligned buffer;
  // returns false, nothing written, when the direct write is refused with EINVAL (the caller
  // turns to buffered writes).
  bool write_fd(std::span<const std::byte> bytes, bool direct = false) {
    if (direct && detail::direct_write_refused()) return false;  // test-only (the top of this file)
    const std::size_t allowed = static_cast<std::size_t>(detail::crash_allowance(bytes.size()));
    const bool crash = allowed < bytes.size();
    if (crash) {
      if (direct) set_o_direct(false);  // a length that is not a whole block: written buffered before the kill
      bytes = bytes.first(allowed);
    }
    bool wrote = false;  // some of the bytes are in the file (and were given to the observer)
    while (!bytes.empty()) {
      const ::ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n >= 0 && !wrote) {
        wrote = true;
        if (observer_) observer_(bytes);  // all of them: the loop writes the rest or fails
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        if (direct && err == EINVAL && !wrote) return false;
        if (err == EFAULT)  // the bytes come from a mapping whose file shrank
          if (std::string why = detail::truncated_source(bytes.data()); !why.empty()) {
            discard();
            report_error(context_ + ": " + dest_.string() + ": cannot write: " + why);
          }
        fail("cannot write " + temp_.string(), err);
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      written_ += static_cast<std::uint64_t>(n);
      // a short direct write leaves the offset inside a block: the rest (and, as the next direct
      // write then fails with EINVAL, the file's rest) goes buffered
      if (direct && !bytes.empty()) set_o_direct(false);
    }
    if (crash) detail::crash_now();
    if (!direct && durability_ != durability::none && written_ - kicked_ >= writeback_bytes) {
      detail::start_writeback(fd_, kicked_, written_);
      kicked_ = written_;
    }
    return true;
  }

  std::filesystem::path dest_;
  std::filesystem::path temp_;
  std::string context_;
  std::vector<std::byte> buffer_;
  std::unique_ptr<std::byte, free_deleter> aligned_;  // write_mode::direct: the aligned buffer
  std::size_t aligned_size_ = 0;                      // bytes in it
  bool direct_ = false;                               // O_DIRECT on fd_
  bool refused_ = false;                              // a direct write was refused (EINVAL)
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t written_ = 0;  // bytes passed to write(2)
  std::uint64_t kicked_ = 0;   // bytes whose write-back was started
  bool overwrite_ = false;
  bool in_place_ = false;  // the destination is this process's temporary: written in place
  durability durability_ = durability::sync;
  bool committed_ = false;
  std::function<void(std::span<const std::byte>)> observer_;
};

}  // namespace reshard::io
