// reshard/parallel.hpp: parallel_for calls every index once, and of several throws reports the
// one of the lowest index, whatever the threads' timing; background runs its tasks one at a
// time, in order, and rethrows what they threw.
#include <reshard/parallel.hpp>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// The index in the message of the exception parallel_for rethrew, or -1 if none.
template <class F>
long thrown_index(std::size_t n, unsigned threads, F&& f) {
  try {
    reshard::parallel_for(n, threads, f);
  } catch (const std::runtime_error& e) {
    return std::stol(e.what());
  }
  return -1;
}

}  // namespace

RC_GTEST_PROP(parallel_for, calls_every_index_once, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(0, 300);
  const auto threads = *rc::gen::inRange(0u, 5u);
  std::vector<std::atomic<int>> calls(n);
  reshard::parallel_for(n, threads, [&](std::size_t i) { calls[i].fetch_add(1); });
  for (const auto& c : calls) RC_ASSERT(c.load() == 1);
}

// Of the indices that throw, the lowest is reported: the threads take indices in ascending order,
// so it always runs, and a later one that throws first does not win.
RC_GTEST_PROP(parallel_for, reports_the_lowest_index_that_threw, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(1, 40);
  const auto threads = *rc::gen::inRange(1u, 5u);
  const auto throwing = *rc::gen::container<std::set<std::size_t>>(rc::gen::inRange<std::size_t>(0, n));
  const auto lowest = throwing.empty() ? -1L : static_cast<long>(*throwing.begin());
  RC_ASSERT(thrown_index(n, threads, [&](std::size_t i) {
              // the lowest thrower is slow, later ones fast: timing alone would report a later one
              if (static_cast<long>(i) == lowest) std::this_thread::sleep_for(std::chrono::milliseconds(2));
              if (throwing.count(i)) throw std::runtime_error(std::to_string(i));
            }) == lowest);
}

// Regression (CI, cli.write_faults): two target files written in parallel both failed against
// a file size limit; the error reported named whichever failed first in time, not the first file.
TEST(parallel_for, a_slow_first_failure_wins_over_a_fast_second) {
  for (int round = 0; round < 20; ++round) {
    EXPECT_EQ(thrown_index(2, 2,
                           [](std::size_t i) {
                             if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                             throw std::runtime_error(std::to_string(i));
                           }),
              0);
  }
}

// background runs its tasks one at a time, in the order started: start() waits for the task
// before, so each task sees every earlier one done; all of them on one thread of its own, made
// once (not a thread per task), and not the caller's.
RC_GTEST_PROP(background, runs_its_tasks_one_after_another_in_order, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(0, 60);
  std::vector<std::size_t> done;  // no lock: the tasks never run at once
  std::atomic<int> running{0};
  bool overlapped = false;
  std::vector<std::thread::id> ran_on;  // no lock either
  {
    reshard::background b;
    for (std::size_t i = 0; i < n; ++i)
      b.start([&, i] {
        ran_on.push_back(std::this_thread::get_id());
        if (running.fetch_add(1) != 0) overlapped = true;
        std::this_thread::yield();
        done.push_back(i);
        running.fetch_sub(1);
      });
    b.wait();
    RC_ASSERT(done.size() == n);
  }
  RC_ASSERT(!overlapped);
  for (std::size_t i = 0; i < n; ++i) RC_ASSERT(done[i] == i);
  RC_ASSERT(ran_on.size() == n);
  for (const std::thread::id id : ran_on) {
    RC_ASSERT(id == ran_on.front());
    RC_ASSERT(id != std::this_thread::get_id());
  }
}

// What a task threw reaches the caller once, at the next wait() or start(); a start() that
// rethrows does not start its own task; the destructor waits for the task running.
TEST(background, rethrows_what_a_task_threw_once) {
  reshard::background b;
  b.start([] { throw std::runtime_error("7"); });
  EXPECT_THROW(b.wait(), std::runtime_error);
  EXPECT_NO_THROW(b.wait());  // once
  b.start([] { throw std::runtime_error("8"); });
  bool ran = false;
  try {
    b.start([&] { ran = true; });
    ADD_FAILURE() << "start() did not rethrow the task before";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "8");
  }
  b.wait();
  EXPECT_FALSE(ran);
  std::atomic<bool> finished{false};
  {
    reshard::background c;
    c.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      finished = true;
    });
  }  // the destructor waits
  EXPECT_TRUE(finished.load());
}
