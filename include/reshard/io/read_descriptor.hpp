// reshard/io/read_descriptor.hpp: source files read with pread(2) from descriptors kept open,
// within a budget of descriptors per process (an idle one not read lately closed over it).
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
// close it), whether it was read since its budget last passed over it (the hot path of a read
// sets it, without the budget's lock) and, while open, its place in its descriptor_budget's list.
struct kept_descriptor {
  std::shared_mutex mutex;
  int fd = -1;
  std::atomic<bool> referenced{false};
  bool listed = false;
  std::list<kept_descriptor*>::iterator at;
};
}  // namespace detail

/// How many descriptors the read_descriptors of a process keep open at once: RLIMIT_NOFILE's soft
/// limit less a margin for everything else the process opens (the outputs, directories, the
/// transports). Over it, an idle descriptor not read recently is closed (its read_descriptor
/// opens the file again if it is read again): the descriptors are kept in the order they were
/// opened, and one read since the budget last passed it gets a second chance (the "clock" of page
/// replacement, an approximation of least recently used), so that a read takes no lock of the
/// budget's, only its own descriptor's. Thread-safe.
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
  // d's descriptor was opened (d.mutex held exclusively): d joins the list (last), and while more
  // than the capacity are open the list is passed from its first: a descriptor read since it was
  // last passed (referenced) goes last with its mark cleared, an idle one (its lock free) is
  // closed, one in use (or d) goes last. Each is passed at most twice: with every descriptor in
  // use, more than the capacity stay open until one is idle at the next opening.
  void opened(detail::kept_descriptor& d) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!d.listed) d.at = lru_.insert(lru_.end(), &d), d.listed = true;
    d.referenced.store(false, std::memory_order_relaxed);
    for (std::size_t passes = 2 * lru_.size(); lru_.size() > capacity_.load() && passes > 0; --passes) {
      const auto it = lru_.begin();
      detail::kept_descriptor* c = *it;
      if (c != &d && !c->referenced.exchange(false, std::memory_order_relaxed) && c->mutex.try_lock()) {
        detail::close_fd(c->fd);
        c->listed = false;
        lru_.erase(it);
        c->mutex.unlock();
        continue;
      }
      lru_.splice(lru_.end(), lru_, it);  // read lately, in use, or d: a second chance
    }
  }
  // d's descriptor is being closed (d.mutex held exclusively).
  void closed(detail::kept_descriptor& d) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (d.listed) lru_.erase(d.at), d.listed = false;
  }

  mutable std::mutex mutex_;
  std::list<detail::kept_descriptor*> lru_;  // open descriptors, the next to be passed first
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

  /// Keeps `fd`, a descriptor of the file open for reading (taken: closed by this object), of a
  /// file of `size` bytes.
  void adopt(int fd, std::uint64_t size) {
    const std::unique_lock<std::shared_mutex> lock(d_->mutex);
    if (d_->fd >= 0) budget_->closed(*d_), detail::close_fd(d_->fd);
    d_->fd = fd;
    advise(size);
    budget_->opened(*d_);
  }

  /// Reads exactly out.size() bytes at `offset` of the file `path` (pread_exact; `context` names
  /// it in errors), opening it (input_file) if no descriptor is kept. A read through a kept
  /// descriptor takes its lock shared and marks it read (the budget keeps it over one not read
  /// since), and takes no lock of the budget's: threads reading different files do not wait for
  /// each other.
  void pread(std::span<std::byte> out, std::uint64_t offset, const std::filesystem::path& path,
             std::string_view context) const {
    {
      const std::shared_lock<std::shared_mutex> lock(d_->mutex);
      if (d_->fd >= 0) {
        if (!d_->referenced.load(std::memory_order_relaxed)) d_->referenced.store(true, std::memory_order_relaxed);
        return pread_exact(d_->fd, out, offset, path, context);
      }
    }
    const std::unique_lock<std::shared_mutex> lock(d_->mutex);
    if (d_->fd < 0) {
      input_file in(path, context);
      d_->fd = in.release();
      advise(in.size());
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

  /// Files larger than this get the read-ahead hint (POSIX_FADV_SEQUENTIAL): larger than Linux's
  /// default read-ahead window.
  static constexpr std::uint64_t sequential_hint_bytes = std::uint64_t{128} << 10;

 private:
  // A hint for a file of `size` bytes: a larger read-ahead (POSIX_FADV_SEQUENTIAL doubles the
  // window) for a file over sequential_hint_bytes; a smaller file is read in one window anyway,
  // and thousands of ranks' files of a few tensors would each pay a system call for nothing.
  void advise(std::uint64_t size) const noexcept {
    if (size > sequential_hint_bytes) ::posix_fadvise(d_->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }

  descriptor_budget* budget_;
  std::unique_ptr<detail::kept_descriptor> d_;
};


}  // namespace reshard::io
