#!/usr/bin/env bash
# Quick start: install the dependencies, build the seed example (8 ranks -> 4 ranks, planned and
# converted) in build/ and run it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build_dir=${RESHARD_BUILD_DIR:-build}
jobs=${RESHARD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" --target example_seed_8to4 -j "$jobs"
"$build_dir/examples/example_seed_8to4"
