// reshard/io/page_budget.hpp: the page budget of a checkpoint run, the one place that decides
// when the pages of memory-mapped source files are given back to the kernel.
//
// Each release of source pages is a page-table change (a TLB flush: about 100 us on some virtual
// machines, 30 a file when every tensor released its own range). So the ranges a run reads are
// not released one by one: each source file keeps the span it was read in, and the spans are
// released when no target needs the file any more (retire) or, oldest first, when the pages they
// may hold exceed the budget (touched; the budget is jobs * buffer_bytes). The memory bound
// stays, the calls drop. Thread-safe: the plan executor's jobs share one.
#pragma once

#include <reshard/layout.hpp>
#include <reshard/io/checkpoint.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace reshard::io {

class page_budget {
 public:
  /// `budget`: the bytes of source pages the spans may hold together; `readers`: the source files
  /// by rank, each with the number of targets that read it (retire() counts them down).
  page_budget(std::uint64_t budget, const std::map<index_t, std::pair<const checkpoint_reader*, std::int64_t>>& readers)
      : budget_(std::max<std::uint64_t>(budget, 1)) {
    for (const auto& [r, use] : readers) {
      source& s = sources_[r];
      s.reader = use.first;
      s.targets = use.second;
    }
  }

  page_budget(const page_budget&) = delete;
  page_budget& operator=(const page_budget&) = delete;

  /// Source rank r's file was read in `range` (inside its mapping): its span grows to cover it,
  /// and the oldest spans are released while the pages they may hold (the span, plus the kernel's
  /// fault-around, at most the file) exceed the budget.
  void touched(index_t r, std::span<const std::byte> range) {
    if (range.empty()) return;
    releases now;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      source& u = sources_.at(r);
      const std::byte* lo = range.data();
      const std::byte* hi = range.data() + range.size();
      if (u.lo) lo = std::min(lo, u.lo), hi = std::max(hi, u.hi);
      u.lo = lo;
      u.hi = hi;
      const std::uint64_t file = u.reader->bytes().size();
      const auto pages = std::min<std::uint64_t>(file, static_cast<std::uint64_t>(hi - lo) + detail::fault_around_window);
      resident_ += pages - u.held;
      u.held = pages;
      if (!u.queued) {
        queue_.push_back(r);
        u.queued = true;
      }
      while (resident_ > budget_ && !queue_.empty()) {
        const index_t k = queue_.front();
        queue_.pop_front();
        take(sources_.at(k), now);
      }
    }
    release(now);
  }

  /// A target is done with the sources `used`: each is released, and its descriptor closed, when
  /// no target needs it any more.
  void retire(std::span<const index_t> used) {
    releases now;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (index_t r : used) {
        source& u = sources_.at(r);
        if (--u.targets == 0) {
          take(u, now);
          u.reader->close_for_reads();
        }
      }
    }
    release(now);
  }

  /// The bytes of source pages the spans may hold now (for the tests).
  std::uint64_t resident() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return resident_;
  }

 private:
  struct source {
    const checkpoint_reader* reader = nullptr;
    std::int64_t targets = 0;       // targets still to read it
    const std::byte* lo = nullptr;  // the span read since its last release
    const std::byte* hi = nullptr;
    std::uint64_t held = 0;         // pages the span may hold, counted in resident_
    bool queued = false;            // in queue_
  };
  using releases = std::vector<std::pair<std::span<const std::byte>, std::span<const std::byte>>>;  // (span, file)

  // Takes u's span out of the budget, to be released (mutex_ held).
  void take(source& u, releases& now) {
    u.queued = false;  // a stale entry in queue_ finds nothing to take
    if (!u.lo) return;
    now.push_back({std::span<const std::byte>(u.lo, static_cast<std::size_t>(u.hi - u.lo)), u.reader->bytes()});
    resident_ -= u.held;
    u.held = 0;
    u.lo = u.hi = nullptr;
  }
  static void release(const releases& now) {
    for (const auto& r : now) detail::release_pages(r.first, r.second);
  }

  std::uint64_t budget_;
  std::map<index_t, source> sources_;
  mutable std::mutex mutex_;
  std::deque<index_t> queue_;  // sources holding spans, oldest first
  std::uint64_t resident_ = 0;  // the sum of their `held`
};

}  // namespace reshard::io
