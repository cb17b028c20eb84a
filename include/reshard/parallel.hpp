// reshard/parallel.hpp: the one parallel loop of reshard.
//
// parallel_for(n, threads, f) calls f(i) once for every i in [0, n), on at most `threads`
// threads (0: the hardware's; the calling thread is one of them), handing the indices out in
// ascending order, one at a time, to whichever thread is free. The first exception thrown by f
// stops the hand-out; the loop waits for the threads running and rethrows the exception of the
// lowest index that threw (so the error reported does not depend on the threads' timing: the
// lowest index that fails is always started before any later one). convert's copies, the
// checkpoint engine's files and CRC checks, and MPI's local copies all run through it.
//   @post every index is called exactly once, unless f throws
//   @post a throw from f reaches the caller, after every thread has ended; with several, the
//         one of the lowest index
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace reshard {

/// The number of threads `threads` asks for: itself, or the hardware concurrency for 0.
inline unsigned thread_count(unsigned threads) noexcept {
  return threads != 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
}

/// Calls f(i) for i in [0, n) on up to thread_count(threads) threads, then done() once on each
/// thread that took part (for example a store fence after non-temporal stores).
template <class F, class Done>
void parallel_for(std::size_t n, unsigned threads, F&& f, Done&& done) {
  const auto workers = static_cast<unsigned>(std::min<std::size_t>(thread_count(threads), n));
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    done();
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first;
  std::size_t first_index = n;
  std::mutex m;
  auto work = [&] {
    for (std::size_t i; !stop.load(std::memory_order_relaxed) &&
                        (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        f(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(m);
        if (!first || i < first_index) first = std::current_exception(), first_index = i;
        stop.store(true, std::memory_order_relaxed);
      }
    }
    done();
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  try {
    for (unsigned k = 1; k < workers; ++k) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // fewer threads than asked: the ones started, and this one, do the work
  }
  work();
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

/// parallel_for without a per-thread epilogue.
template <class F>
void parallel_for(std::size_t n, unsigned threads, F&& f) {
  parallel_for(n, threads, std::forward<F>(f), [] {});
}

/// One task at a time on a thread of its own while the caller goes on: start(f) runs f there
/// (on the calling thread, before start returns, when no thread can be made), wait() waits for
/// it and rethrows what it threw. The thread is made by the first start() and kept for the
/// next ones (the plan executor starts one task per chunk written: a thread each would cost
/// more than a small chunk's write). The destructor waits for the task, and drops what it threw
/// (the caller is leaving by an exception of its own). The plan executor writes a chunk round
/// through it while it reads the next.
class background {
 public:
  background() = default;
  background(const background&) = delete;
  background& operator=(const background&) = delete;
  ~background() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Waits for the task before (rethrowing what it threw), then starts f.
  template <class F>
  void start(F&& f) {
    wait();
    std::function<void()> task(std::forward<F>(f));
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { serve(); });
      } catch (const std::system_error&) {
        failed_ = run(task);
        return;
      }
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      task_ = std::move(task);
      busy_ = true;
    }
    changed_.notify_all();
  }

  /// Waits for the task started last, if any; rethrows what it threw.
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !busy_; });
    if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
  }

 private:
  static std::exception_ptr run(std::function<void()>& task) noexcept {
    try {
      task();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  // The thread: runs each task given, until the destructor says stop (a task given first is run).
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return busy_ || stop_; });
      if (!busy_) return;
      std::function<void()> task = std::move(task_);
      lock.unlock();
      std::exception_ptr failed = run(task);
      task = nullptr;  // what the task holds goes before the caller hears it is done
      lock.lock();
      failed_ = std::move(failed);
      busy_ = false;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;  // the fields below
  std::condition_variable changed_;
  std::function<void()> task_;
  bool busy_ = false;  // a task was given and has not ended
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;
};

}  // namespace reshard
