#!/usr/bin/env bash
# Fuzzes reshard: builds the libFuzzer binaries with clang-14 (-fsanitize=fuzzer,address,undefined)
# in build-fuzz/ and runs each target, one at a time, for SECONDS seconds, then prints a table of
# executions, coverage (cov: and ft: of libFuzzer's final status line), corpus size and outcome.
#
#   bash fuzz/run.sh SECONDS [target...]       # default: every target
#
# Each target starts from its committed seeds (fuzz/corpus/<target>/, read-only) and grows a
# working corpus in build-fuzz/corpus/<target>/ (kept between runs); fuzz/dict/<target>.dict is
# used when present. A finding stops that target: its input is saved as
# build-fuzz/artifacts/<target>/crash-* (or oom-*, timeout-*, leak-*) and the script exits 1
# after the other targets. Logs: build-fuzz/logs/<target>.log; the table: build-fuzz/results.md.
# Single malloc calls over 512 MiB are findings (-malloc_limit_mb): every target decodes small
# inputs, so only a size claimed by the input and trusted can allocate that much.
#
# Environment: CXX (default clang++-14), RESHARD_FUZZ_BUILD_DIR (default build-fuzz),
# RESHARD_JOBS (build jobs, default nproc), RESHARD_FUZZ_FLAGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."

if (( $# < 1 )) || ! [[ $1 =~ ^[0-9]+$ ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
seconds=$1
shift
all=(plan_convert layout_json ckpt ckpt_roundtrip safetensors safetensors_roundtrip
     strategy_json strategy_protobuf strategy_roundtrip json_reader rename_map hf_index
     pickle torch_archive)
targets=("$@")
(( ${#targets[@]} )) || targets=("${all[@]}")

build=${RESHARD_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${RESHARD_JOBS:-$(nproc)}
cxx=${CXX:-clang++-14}
command -v "$cxx" > /dev/null || { echo "fuzz/run.sh: $cxx not found (bash scripts/install-deps.sh)"; exit 2; }

cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRESHARD_FUZZ_LIBFUZZER=ON -DRESHARD_BUILD_FUZZ=ON -DRESHARD_WERROR=ON \
  -DRESHARD_BUILD_TESTS=OFF -DRESHARD_BUILD_BENCH=OFF -DRESHARD_BUILD_EXAMPLES=OFF \
  -DRESHARD_BUILD_CLI=OFF -DRESHARD_INSTALL=OFF -DRESHARD_XTENSOR=OFF -DRESHARD_MPI=OFF > /dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$build/logs"
results="$build/results.md"
{
  echo "| target | seconds | executions | exec/s | cov | ft | corpus | new units | peak RSS MB | outcome |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
} > "$results"
failed=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  artifacts="$build/artifacts/$t/"
  log="$build/logs/$t.log"
  mkdir -p "$work" "$artifacts"
  flags=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
         -malloc_limit_mb=512 -artifact_prefix="$artifacts")
  [[ -f fuzz/dict/$t.dict ]] && flags+=(-dict="fuzz/dict/$t.dict")
  # shellcheck disable=SC2206
  flags+=(${RESHARD_FUZZ_FLAGS:-})
  echo "fuzz/run.sh: $t for ${seconds}s (log: $log)"
  status=0
  "$build/fuzz/fuzz_$t" "${flags[@]}" "$work" "fuzz/corpus/$t" > "$log" 2>&1 || status=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  done_line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<< "$done_line")
  outcome=ok
  if (( status != 0 )); then
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    outcome="FINDING (exit $status) ${artifact:-see $log}"
  fi
  echo "| $t | $seconds | $(stat number_of_executed_units) | $(stat average_exec_per_sec) | ${cov:-?} | ${ft:-?} |" \
       "${corp:-?} | $(stat new_units_added) | $(stat peak_rss_mb) | $outcome |" >> "$results"
  tail -1 "$results"
done
echo
cat "$results"
exit "$failed"
