#!/usr/bin/env bash
# Builds the tests with AddressSanitizer and UndefinedBehaviorSanitizer (g++-12,
# -fsanitize=address,undefined -fno-sanitize-recover=all) in build-asan/ and runs them with
# ctest: the properties and unit tests (verify/), the file formats against Python (verify/io/),
# and the fuzz targets replaying their corpora plus their regressions (fuzz/).
#
# Left out to keep CI within its time (a sanitized build of everything takes about 45 minutes of
# CPU): the CLI and its tests (verify/cli/), the examples, the self-containment objects (they only
# compile), the packaging tests (label consumer) and the benchmarks; and MPI (Open MPI itself is
# not leak-clean). Warnings are not errors here: GCC's sanitizer instrumentation produces false
# -Wstringop-overflow warnings, and scripts/test.sh checks the warnings without sanitizers.
#
# Any sanitizer report fails the script, even one from a process whose exit status a test does
# not check: reports go to build-asan/sanitizer/ and the script fails if that directory is not
# empty after ctest.
#
# Environment: RESHARD_JOBS (default nproc), RC_PARAMS (default max_success=200: RapidCheck
# runs slower under the sanitizers; scripts/test.sh runs 1000), RESHARD_ASAN_BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${RESHARD_ASAN_BUILD_DIR:-build-asan}
jobs=${RESHARD_JOBS:-$(nproc)}
export RC_PARAMS=${RC_PARAMS:-max_success=200}
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
echo "sanitize.sh: g++ with $sanitizers, RC_PARAMS=$RC_PARAMS, $jobs jobs, in $build_dir/"

# Tests that measure peak memory (RSS) are left to scripts/test.sh: ASan's shadow memory and its
# quarantine of freed blocks make a sanitized process's peak meaningless. The merged test programs
# of verify/ get a --gtest_filter of their own per ctest test (verify/CMakeLists.txt), which
# overrides GTEST_FILTER: they leave these out through RESHARD_TEST_EXCLUDE; GTEST_FILTER (below)
# does it for the programs of their own.
test_exclude='transform_memory.*'

# -Og, not -O1: these template-heavy tests compile in 0.6 to 0.8 of -O1's CPU time and run a little
# slower (compiling is nearly all of this script's time: docs/reliability.md, "CI time"); -Og
# optimizes less than -O1, so no access the sanitizers instrument is optimized away that -O1 would
# keep. -g1 (line tables, enough for the reports' stack traces) instead of full debug information.
cmake -S . -B "$build_dir" \
  -DCMAKE_CXX_COMPILER=g++-12 \
  -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="-Og -g1 $sanitizers" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" \
  -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" \
  -DRESHARD_WERROR=OFF \
  -DRESHARD_BUILD_TESTS=ON \
  -DRESHARD_BUILD_FUZZ=ON \
  -DRESHARD_BUILD_EXAMPLES=OFF \
  -DRESHARD_BUILD_CLI=OFF \
  -DRESHARD_BUILD_BENCH=OFF \
  -DRESHARD_INSTALL=OFF \
  -DRESHARD_MPI=OFF \
  -DRESHARD_TEST_EXCLUDE="$test_exclude"

# the test executables only (verify_* and fuzz_*), in parallel: the aggregate target
# reshard_test_programs (CMakeLists.txt)
echo "sanitize.sh: building the test executables"
cmake --build "$build_dir" -j "$jobs" --target reshard_test_programs

reports="$PWD/$build_dir/sanitizer"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:strict_string_checks=1:detect_stack_use_after_return=1:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$reports/ubsan"
export LSAN_OPTIONS="log_path=$reports/lsan"

export GTEST_FILTER="-$test_exclude"
status=0
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -L "verify|fuzz" || status=$?

if compgen -G "$reports/*" > /dev/null; then
  echo "sanitize.sh: sanitizer reports:"
  for f in "$reports"/*; do
    echo "==== $f"
    head -60 "$f"
  done
  status=1
fi
if (( status != 0 )); then
  echo "sanitize.sh: FAILED"
  exit "$status"
fi
echo "sanitize.sh: all tests passed under ASan+UBSan, no sanitizer report"
