// verify/mpi/errors.cpp (mpi.errors, 4 processes): bad input to reshard::mpi::redistribute is a
// reshard::error on EVERY process, never a hang, and leaves the communicator usable.
//
// A communicator too small for the plan; processes that disagree on the plan (another layout,
// one transfer changed), the element size, the exchange or the layouts; one process's shard of
// the wrong size, or source data on a process without a source rank, or a target buffer of the
// wrong size; a plan that misses part of a target, or names a box outside a shard or a rank
// outside the layouts; element size 0; invalid layouts. Each case checks the message on every
// process: the process with the bad input names it, the others name that process. Rank 0 prints
// the messages it got. The last case is a correct call on the same communicator.
#include "reshard/mpi/redistribute.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"
#include "testing.hpp"
#include "reshard.hpp"

namespace {

using namespace reshard;
using bytes = std::vector<std::byte>;

// reshard_test::error_of, but any other exception is reported (not thrown: a throw on one
// process would leave the others waiting) and no error reads "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    const std::string got = reshard_test::error_of(f);
    return got.empty() ? "no error" : got;
  } catch (const std::exception& e) {
    return std::string("not a reshard::error: ") + e.what();
  }
}

// Runs `f` on every process; each must throw reshard::error whose message contains `expect`
// (which may differ between processes).
template <class F>
void expect_error(reshard_mpi_test::harness& h, const std::string& what, const std::string& expect,
                  F&& f) {
  const std::string got = error_of(f);
  if (h.rank() == 0) std::printf("%-44s %s\n", what.c_str(), got.c_str());
  h.check(got.find(expect) != std::string::npos,
          what + ": expected an error containing \"" + expect + "\", got: " + got);
}

bytes shard_bytes(const layout& l, index_t rank, std::size_t elem) {
  if (rank < l.first_rank || rank >= l.first_rank + num_ranks(l)) return {};
  return bytes(static_cast<std::size_t>(volume(box_of(l, rank))) * elem, std::byte{1});
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    reshard_mpi_test::harness h(MPI_COMM_WORLD, "mpi.errors");
    const MPI_Comm comm = MPI_COMM_WORLD;
    const int me = h.rank();
    const std::string who = "process " + std::to_string(me) + " (global rank " + std::to_string(me) + ")";
    const index_list shape{8, 4};
    const layout rows4 = mindspore_layout({4}, {0, -1}, shape);
    const layout cols2 = mindspore_layout({2}, {-1, 0}, shape);
    const transfer_plan good = plan(rows4, cols2);
    const bytes mine = shard_bytes(rows4, me, 4);

    // 1. The plan needs more ranks than the communicator has (checked locally, everywhere).
    {
      layout eight = mindspore_layout({8}, {0, -1}, shape);
      expect_error(h, "communicator too small", "needs global ranks 0..7, but the communicator has " +
                       std::to_string(h.size()) + " processes", [&] {
        (void)mpi::redistribute(comm, plan(rows4, eight), mine, 4);
      });
      expect_error(h, "processes play ranks 2.., plan needs 0..", "needs global ranks 0..3", [&] {
        (void)mpi::redistribute(comm, good, mine, 4, {.first_rank = 2});
      });
    }

    // 2. The processes disagree: caught by the hash exchanged before any data moves.
    const std::string differ = "were given different plans, element sizes or options";
    expect_error(h, "process 2 has another target layout", differ, [&] {
      const layout other = mindspore_layout({2}, {0, -1}, shape);
      (void)mpi::redistribute(comm, me == 2 ? plan(rows4, other) : good, mine, 4);
    });
    expect_error(h, "process 1 changed one transfer", differ, [&] {
      transfer_plan p = good;
      if (me == 1) p.transfers[0].where.extent[1] = 1;  // same layouts, another box
      (void)mpi::redistribute(comm, p, mine, 4);
    });
    expect_error(h, "process 1 has another element size", differ, [&] {
      (void)mpi::redistribute(comm, good, shard_bytes(rows4, me, me == 1 ? 8 : 4), me == 1 ? 8 : 4);
    });
    expect_error(h, "process 0 uses another exchange", differ, [&] {
      (void)mpi::redistribute(comm, good, mine, 4,
                              {.method = me == 0 ? mpi::exchange::alltoallv
                                                 : mpi::exchange::point_to_point});
    });
    expect_error(h, "process 3 has other layouts (per-rank form)", differ, [&] {
      (void)mpi::redistribute(comm, rows4, me == 3 ? rows4 : cols2, mine, 4);
    });

    // 3. One process's buffers are wrong: it names them, the others name it.
    expect_error(h, "process 3's shard has the wrong size",
                 me == 3 ? who + " was given 4 bytes of source data, but its box [6:8,0:4]"
                         : "process 3 (global rank 3) rejected its input", [&] {
      (void)mpi::redistribute(comm, good, me == 3 ? bytes(4) : mine, 4);
    });
    expect_error(h, "source data on a process without source rank",
                 me == 3 ? who + " holds no rank of the source layout"
                         : "process 3 (global rank 3) rejected its input", [&] {
      const transfer_plan p = plan(cols2, rows4);  // source on ranks 0-1
      (void)mpi::redistribute(comm, p, me == 3 ? bytes(16) : shard_bytes(cols2, me, 4), 4);
    });
    expect_error(h, "process 0's target buffer has the wrong size",
                 me == 0 ? who + " was given a target buffer of 3 bytes, but its box [0:8,0:2]"
                         : "process 0 (global rank 0) rejected its input", [&] {
      bytes out(me == 0 ? 3 : me == 1 ? 64 : 0);
      mpi::redistribute(comm, good, mine, out, 4);
    });

    // 4. A plan that is wrong the same way everywhere.
    expect_error(h, "a transfer is missing",
                 me == 0 ? "the plan gives " + who + " 12 of the 16 elements of its target box"
                         : "process 0 (global rank 0) rejected its input", [&] {
      transfer_plan p = good;
      p.transfers.erase(p.transfers.begin() + 1);  // the rows 2:4 of target rank 0
      (void)mpi::redistribute(comm, p, mine, 4);
    });
    expect_error(h, "a box outside the shards", "is not inside the source box", [&] {
      transfer_plan p = good;
      for (auto& x : p.transfers) x.where.offset[0] += 1;
      (void)mpi::redistribute(comm, p, mine, 4);
    });
    expect_error(h, "a rank outside the layouts", "names a rank outside", [&] {
      transfer_plan p = good;
      for (auto& x : p.transfers) x.dst = 2;  // the target layout has ranks 0-1
      (void)mpi::redistribute(comm, p, mine, 4);
    });
    expect_error(h, "element size 0", "redistribute: element size is 0", [&] {
      (void)mpi::redistribute(comm, good, mine, 0);
    });
    expect_error(h, "different tensors (per-rank form)", "plan_for_rank: the layouts describe different tensors", [&] {
      (void)mpi::redistribute(comm, rows4, mindspore_layout({2}, {0}, {8}), mine, 4);
    });
    expect_error(h, "an invalid layout in a hand-made plan", "redistribute: source layout", [&] {
      transfer_plan p = good;
      p.src.dev_matrix = {0};
      (void)mpi::redistribute(comm, p, mine, 4);
    });
    expect_error(h, "no communicator", "redistribute: the communicator is MPI_COMM_NULL", [&] {
      (void)mpi::redistribute(MPI_COMM_NULL, good, mine, 4);
    });

    // 5. The communicator still works.
    h.run("a correct call after the errors", [&] {
      const bytes out = mpi::redistribute(comm, good, mine, 4);
      h.check(out.size() == (me < 2 ? 64u : 0u), "a correct call after the errors");
    });
    code = h.finish();
  }
  MPI_Finalize();
  return code;
}
