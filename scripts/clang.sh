#!/usr/bin/env bash
# Compiles the library with clang++-14 and -Wall -Wextra -Wpedantic -Werror (scripts/test.sh
# does the same with g++-12): every public header alone (the self-containment objects of
# verify/selfcontained/) and the fuzz targets with their replay main, which then replay their
# corpora (ctest -L fuzz). Fast: no test suite is built. In build-clang/.
#
# Environment: CXX (default clang++-14), RESHARD_JOBS (default nproc), RESHARD_CLANG_BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${RESHARD_CLANG_BUILD_DIR:-build-clang}
jobs=${RESHARD_JOBS:-$(nproc)}
cxx=${CXX:-clang++-14}
echo "clang.sh: $cxx -Werror, $jobs jobs, in $build_dir/"

cmake -S . -B "$build_dir" \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DRESHARD_WERROR=ON \
  -DRESHARD_BUILD_TESTS=ON \
  -DRESHARD_BUILD_FUZZ=ON \
  -DRESHARD_BUILD_BENCH=OFF \
  -DRESHARD_BUILD_EXAMPLES=OFF \
  -DRESHARD_BUILD_CLI=OFF \
  -DRESHARD_INSTALL=OFF > /dev/null

# the self-containment objects and the fuzz targets this configuration defines, in parallel: the
# aggregate target reshard_compile_checks (CMakeLists.txt; several --target names would be built
# one after another)
echo "clang.sh: building $(cmake --build "$build_dir" --target help |
  sed -n 's/^\.\.\. \(selfcontained_[a-z0-9_]*\|fuzz_[a-z0-9_]*\)$/\1/p' | sort | tr '\n' ' ')"
cmake --build "$build_dir" -j "$jobs" --target reshard_compile_checks
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -L fuzz
echo "clang.sh: every header and fuzz target compiles with $cxx -Werror; the corpora replay"
