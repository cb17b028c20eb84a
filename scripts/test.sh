#!/usr/bin/env bash
# Builds everything in build/ (RelWithDebInfo, warnings as errors) and runs every test with ctest:
# properties, file formats against Python, packaging (self-containment, consumers), examples, the
# CLI and tiny benchmark runs. Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build_dir=${RESHARD_BUILD_DIR:-build}
jobs=${RESHARD_JOBS:-$(nproc)}
export RC_PARAMS=${RC_PARAMS:-max_success=1000}
echo "test.sh: RC_PARAMS=$RC_PARAMS, $jobs jobs, in $build_dir/"

# RelWithDebInfo with -g1 (line tables: enough for stack traces and perf) instead of -g: full debug
# information is most of the code generation time of these template-heavy programs, and nothing
# here reads it (docs/reliability.md, "CI time"). The same -O2, so the same warnings and the same
# optimized code are tested.
cmake -S . -B "$build_dir" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DRESHARD_WERROR=ON \
  -DRESHARD_BUILD_TESTS=ON \
  -DRESHARD_BUILD_BENCH=ON \
  -DRESHARD_BUILD_EXAMPLES=ON \
  -DRESHARD_BUILD_CLI=ON \
  -DRESHARD_BUILD_FUZZ=ON \
  -DRESHARD_BUILD_PYTHON=ON
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
