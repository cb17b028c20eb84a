// reshard/io/read_descriptor.hpp: source files read with pread(2) from descriptors kept open,
// within a budget of descriptors per process (the least recently used idle one closed over it).
//
// POSIX only. Errors are reshard::error naming the path and the errno text, prefixed with the
// caller's context ("ckpt", "safetensors", ...).
#pragma once

#include <reshard/io/input_file.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string_view>

#include <fcntl.h>
#include <sys/resource.h>

namespace reshard::io {


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


}  // namespace reshard::io
