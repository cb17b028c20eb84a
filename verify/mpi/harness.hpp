// verify/mpi/harness.hpp: a tiny test harness for programs run under mpirun.
//
// Every process checks its own results; failures are printed by the process that saw them,
// prefixed with its rank. finish() sums the counts over the communicator (MPI_Allreduce), rank 0
// prints "N passed, M failed", and every process returns the same exit code, so the test fails
// if any process failed. No output files, so processes never race on them.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace reshard_mpi_test {

class harness {
 public:
  explicit harness(MPI_Comm comm, const char* name) : comm_(comm), name_(name) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Records one check of this process.
  void check(bool ok, const std::string& what) {
    if (ok) {
      ++passed_;
      return;
    }
    ++failed_;
    std::fprintf(stderr, "[process %d] FAILED: %s\n", rank_, what.c_str());
    std::fflush(stderr);
  }

  /// Runs `f`; an exception it throws is a failure named `what`.
  template <class F>
  void run(const std::string& what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      check(false, what + ": unexpected exception: " + e.what());
    }
  }

  /// True on every process if any process failed so far (collective).
  bool any_failed() const {
    int mine = failed_ > 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, comm_);
    return all != 0;
  }

  /// Sums the counts over all processes; rank 0 prints them. Returns the exit code (collective).
  int finish() const {
    long long mine[2] = {passed_, failed_}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, comm_);
    if (rank_ == 0) {
      std::printf("%s: %d processes, %lld passed, %lld failed\n", name_, size_, all[0], all[1]);
      std::fflush(stdout);
    }
    return all[1] == 0 ? 0 : 1;
  }

 private:
  MPI_Comm comm_;
  const char* name_;
  int rank_ = 0, size_ = 0;
  long long passed_ = 0, failed_ = 0;
};

}  // namespace reshard_mpi_test
