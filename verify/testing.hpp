// verify/testing.hpp: helpers shared by every test program (verify/, verify/io/, verify/mpi/ and
// fuzz/regressions.cpp). No test framework here, so the MPI tests can include it too.
#pragma once

#include <string>

#include "reshard/error.hpp"

namespace reshard_test {

/// The message of the reshard::error that `f` throws ("" if it throws nothing). Any other
/// exception propagates (a test failure in GoogleTest, an abort under MPI).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const reshard::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace reshard_test
