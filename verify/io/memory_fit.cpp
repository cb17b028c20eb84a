// Tests of reshard/io/memory_fit.hpp without files: the jobs and chunk buffer fit_memory chooses
// under a budget, exactly, and its error when one job does not fit.
#include <reshard/io/memory_fit.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>

using namespace reshard::io;
using reshard_test::throws_error;

namespace {
constexpr std::uint64_t KiB = 1024, MiB = KiB * KiB, GiB = MiB * KiB;
constexpr job_memory plain{MiB, false}, casting{MiB, true};
}  // namespace

// A job with the smallest buffer: 64 KiB + 256 KiB of read scratch + 64 KiB of mapped pages +
// the writer's 1 MiB (+ 64 KiB with casts), and the 4 MiB of slack.
static_assert(plain(64 * KiB) == 384 * KiB + MiB);
static_assert(casting(64 * KiB) == 448 * KiB + MiB);
static_assert(plain.with_slack(64 * KiB) == 5 * MiB + 384 * KiB);
static_assert(plain(MiB) == 6 * MiB + MiB);  // above 16 KiB the scratch is 4 buffers

TEST(memory_fit, no_budget_keeps_what_was_asked) {
  EXPECT_EQ(fit_memory(0, 10 * GiB, plain, {8, 4 * MiB}, 3, "op"), (execution_config{8, 4 * MiB}));
}

TEST(memory_fit, jobs_then_buffer) {
  const std::uint64_t held = 100 * MiB;
  // 64 MiB left: 11 jobs would fit, 8 asked; 4 MiB each beside the slack: (4 MiB - 1 MiB) / 6.
  EXPECT_EQ(fit_memory(held + 64 * MiB, held, plain, {8, 4 * MiB}, 3, "op"),
            (execution_config{8, 512 * KiB}));
  // With casts, / 7, rounded down to 4 KiB: 3 MiB / 7 = 449389 -> 446464.
  EXPECT_EQ(fit_memory(held + 64 * MiB, held, casting, {8, 4 * MiB}, 3, "op"),
            (execution_config{8, 446464}));
  // 20 MiB left: 3 jobs of 5.5 MiB; 20 MiB / 3 - 4 MiB = 2796202, - 1 MiB, / 6 = 291271 -> 290816.
  EXPECT_EQ(fit_memory(held + 20 * MiB, held, plain, {8, 4 * MiB}, 3, "op"),
            (execution_config{3, 290816}));
  // Plenty: the buffer asked, never more.
  EXPECT_EQ(fit_memory(held + GiB, held, plain, {2, 4 * MiB}, 3, "op"),
            (execution_config{2, 4 * MiB}));
  // A buffer asked below the smallest gets the smallest.
  EXPECT_EQ(fit_memory(held + GiB, held, plain, {1, 4 * KiB}, 3, "op"),
            (execution_config{1, 64 * KiB}));
  // Exactly one job with the smallest buffer.
  const std::uint64_t one = plain.with_slack(job_memory::min_buffer);
  EXPECT_EQ(fit_memory(held + one, held, plain, {8, 4 * MiB}, 3, "op"),
            (execution_config{1, 64 * KiB}));
}

TEST(memory_fit, too_small_a_budget) {
  const std::uint64_t held = 100 * MiB, one = plain.with_slack(job_memory::min_buffer);
  EXPECT_TRUE(throws_error(
      [&] {
        fit_memory(held + one - 1, held, plain, {8, 4 * MiB}, 3, "merge");
      },
      {"merge: max_memory 106 MiB is too small: the process holds 100 MiB once the 3 source "
       "indexes are read, and one job needs 6 MiB more"}));
}

// Whatever fits: at least one job, never more jobs or a larger buffer than asked (but the
// smallest), and the jobs with their buffers and slack within the budget.
RC_GTEST_PROP(memory_fit_props, the_fit_is_within_the_budget, ()) {
  const job_memory job{*rc::gen::inRange<std::uint64_t>(0, 4 * MiB), *rc::gen::arbitrary<bool>()};
  const std::uint64_t held = *rc::gen::inRange<std::uint64_t>(0, 4 * GiB);
  const std::uint64_t budget =
      held + *rc::gen::inRange<std::uint64_t>(job.with_slack(job_memory::min_buffer), 8 * GiB);
  const execution_config asked{*rc::gen::inRange(1u, 257u),
                               *rc::gen::inRange<std::uint64_t>(1, 256 * MiB)};
  const execution_config fit = fit_memory(budget, held, job, asked, 1, "op");
  RC_ASSERT(fit.jobs >= 1u);
  RC_ASSERT(fit.jobs <= asked.jobs);
  RC_ASSERT(fit.buffer_bytes >= job_memory::min_buffer);
  RC_ASSERT(fit.buffer_bytes <= std::max(asked.buffer_bytes, job_memory::min_buffer));
  RC_ASSERT(held + fit.jobs * job.with_slack(fit.buffer_bytes) <= budget);
}
