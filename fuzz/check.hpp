// fuzz/check.hpp: what counts as a finding in a fuzz target.
//
// reshard::error is the expected outcome of bad input: expect_errors() swallows it. Everything
// else is a finding and ends the process so that libFuzzer (or the replay main under ctest)
// reports the input: another exception, a contract_violation (a precondition the library broke
// itself), a sanitizer report, or a failed FUZZ_CHECK (a differential or round-trip mismatch).
#pragma once

#include <reshard/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

namespace reshard_fuzz {

[[noreturn]] inline void finding(const char* what, const char* detail, const char* file, int line) {
  std::fprintf(stderr, "FUZZ FINDING at %s:%d: %s%s%s\n", file, line, what, *detail ? ": " : "", detail);
  std::fflush(stderr);
  std::abort();
}

/// Runs fn(); reshard::error is the expected outcome of bad input; anything else is a finding.
/// Returns 0 (libFuzzer's "keep going").
template <class F>
int expect_errors(F&& fn) {
  try {
    fn();
  } catch (const reshard::error&) {
    // bad input, reported as promised
  } catch (const reshard::contract_violation& e) {
    finding("contract_violation (a library precondition broke)", e.what(), __FILE__, __LINE__);
  } catch (const std::exception& e) {
    finding("exception other than reshard::error", e.what(), __FILE__, __LINE__);
  } catch (...) {
    finding("non-std exception", "", __FILE__, __LINE__);
  }
  return 0;
}

/// A directory for the write-then-read targets: /dev/shm when writable (the writers fsync),
/// else the system temporary directory; one per process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  // never destroyed, so that the atexit cleanup can still read it
  static const std::filesystem::path* dir = [] {
    std::filesystem::path root = "/dev/shm";
    if (::access(root.c_str(), W_OK | X_OK) != 0) root = std::filesystem::temp_directory_path();
    auto* d = new std::filesystem::path(root / ("reshard_fuzz_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*d);
    return d;
  }();
  static const bool cleanup = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(*dir, ec);
  }) == 0;
  (void)cleanup;
  return *dir;
}

}  // namespace reshard_fuzz

/// A property of a successful run; failing it is a finding.
#define FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::reshard_fuzz::finding("check failed", #cond, __FILE__, __LINE__))
