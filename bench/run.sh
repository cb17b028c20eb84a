#!/usr/bin/env bash
# bench/run.sh [--quick]: builds the benchmarks (Release, in build-bench/), runs them and prints
# markdown tables (median of the repetitions, min-max spread, ratios against the raw baselines).
#
#   full     5 repetitions, min time 0.5 s per repetition (about 6 minutes on 2 cores)
#   --quick  3 repetitions, min time 0.05 s (about 1 minute; numbers are indicative only)
#
# JSON results and the report go to build-bench/results/. Run it on an otherwise idle machine:
# the report warns when the load average was above 0.5 when a bench started.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-bench"
results="$build/results"
reps=5
min_time=0.5
case "${1:-}" in
  "") ;;
  --quick) reps=3; min_time=0.05 ;;
  *) echo "usage: bench/run.sh [--quick]" >&2; exit 2 ;;
esac

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DRESHARD_BUILD_BENCH=ON -DRESHARD_BUILD_TESTS=OFF -DRESHARD_BUILD_FUZZ=OFF \
    -DRESHARD_BUILD_EXAMPLES=OFF -DRESHARD_BUILD_CLI=OFF -DRESHARD_IO=OFF -DRESHARD_XTENSOR=OFF \
    -DRESHARD_MPI=OFF -DRESHARD_INSTALL=OFF >/dev/null
fi
cmake --build "$build" --target bench_planner bench_convert >/dev/null

mkdir -p "$results"
jsons=()
for bench in planner convert; do
  echo "running bench_$bench (repetitions $reps, min time $min_time s)..." >&2
  "$build/bench/bench_$bench" --benchmark_repetitions="$reps" \
    --benchmark_report_aggregates_only=true --benchmark_min_time="$min_time" \
    --benchmark_out="$results/$bench.json" --benchmark_out_format=json >&2
  jsons+=("$results/$bench.json")
done

/usr/bin/python3 "$root/bench/report.py" "${jsons[@]}" | tee "$results/report.md"
