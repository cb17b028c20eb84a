#!/usr/bin/env bash
# bench/run.sh [--quick] [--only LIST] [--update-docs | --no-docs]: builds the benchmarks and the
# reshard program (Release, in build-bench/), runs them, and regenerates every table and chart:
#
#   planner    bench_planner: reshard::plan vs the naive all-pairs planner, 8 to 4096 ranks
#   convert    bench_convert: reshard::convert vs memcpy over run lengths, 1 and 2 threads
#   transform  bench_transform: transform_checkpoints (library) vs the I/O floor, 1 GiB 8 -> 4
#   e2e        bench/transform_e2e.py: `reshard transform` vs MindSpore's algorithm in numpy
#              (bench/mindspore_baseline.py) vs the I/O floor, 256 MiB / 1 GiB / 4 GiB, 8->4,
#              8->3, 4->8, wall time and peak RSS, outputs compared
#   quality    bench/plan_quality.py: cross bytes vs the lower bound, bytes sent per rank and
#              messages, reshard vs MindSpore's all-gather-then-slice
#
#   full       all of them: Google Benchmark 5 repetitions of at least 0.5 s; e2e 3 runs a size
#              (the numpy baseline once at 4 GiB). About 20 minutes on 2 cores. Then the tables in
#              docs/benchmarks.md (its "generated" blocks) and the charts docs/img/*.svg are
#              replaced, unless --no-docs.
#   --quick    3 repetitions of 0.05 s, e2e at 256 MiB with 1 run; about 3 minutes; numbers are
#              indicative only, and the docs are left alone unless --update-docs.
#   --only     a comma-separated subset, e.g. --only e2e,quality (the charts and tables of the parts
#              not run come from the JSON files an earlier run left in the results directory).
#
# Results (JSON, report.md, the charts) go to build-bench/results/. Environment: RESHARD_BENCH_BUILD
# another build directory; RESHARD_BENCH_JOBS compile jobs (default 2); RESHARD_BENCH_E2E extra
# arguments for transform_e2e.py (e.g. "--crc" or "--dir /scratch"). Needs /usr/bin/python3 with
# python3-numpy and python3-protobuf, and about 4x the largest checkpoint (16 GiB at 4 GiB) of free
# memory for /dev/shm and the numpy baseline, which is skipped, and said so, when the memory is
# not there. Run it on an otherwise idle machine: the reports record the load average when each
# part started.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RESHARD_BENCH_BUILD:-"$root/build-bench"}
results="$build/results"
py=/usr/bin/python3
reps=5
min_time=0.5
e2e_args=(--sizes 256M,1G,4G --runs 3 --numpy-runs-large 1)
only="planner,convert,transform,e2e,quality"
docs=full
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) reps=3; min_time=0.05; e2e_args=(--sizes 256M --runs 1); [[ $docs == full ]] && docs=no ;;
    --only) only="${2:-}"; [[ -n $only ]] || { echo "bench/run.sh: --only needs a list" >&2; exit 2; }; shift
      for part in ${only//,/ }; do
        case "$part" in planner|convert|transform|e2e|quality) ;;
          *) echo "bench/run.sh: --only: unknown part '$part' (planner, convert, transform, e2e, quality)" >&2
             exit 2 ;;
        esac
      done ;;
    --update-docs) docs=yes ;;
    --no-docs) docs=no ;;
    *) echo "usage: bench/run.sh [--quick] [--only planner,convert,transform,e2e,quality] [--update-docs | --no-docs]" >&2
       exit 2 ;;
  esac
  shift
done
[[ $docs == full ]] && docs=yes
wants() { [[ ",$only," == *",$1,"* ]]; }

generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build/CMakeCache.txt" ]]; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRESHARD_BUILD_BENCH=ON -DRESHARD_BUILD_CLI=ON -DRESHARD_IO=ON -DRESHARD_BUILD_TESTS=OFF \
  -DRESHARD_BUILD_FUZZ=OFF -DRESHARD_BUILD_EXAMPLES=OFF -DRESHARD_XTENSOR=OFF -DRESHARD_MPI=OFF \
  -DRESHARD_INSTALL=OFF >/dev/null
targets=()
wants planner && targets+=(bench_planner)
wants convert && targets+=(bench_convert)
{ wants transform || wants e2e; } && targets+=(bench_transform)
{ wants e2e || wants quality; } && targets+=(reshard_cli)
cmake --build "$build" --target "${targets[@]}" -j "${RESHARD_BENCH_JOBS:-2}" >/dev/null

mkdir -p "$results"
for bench in planner convert transform; do
  wants "$bench" || continue
  echo "running bench_$bench (repetitions $reps, min time $min_time s)..." >&2
  "$build/bench/bench_$bench" --benchmark_repetitions="$reps" \
    --benchmark_report_aggregates_only=true --benchmark_min_time="$min_time" \
    --benchmark_out="$results/$bench.json.tmp" --benchmark_out_format=json >&2
  mv "$results/$bench.json.tmp" "$results/$bench.json"
done

cli="$build/examples/reshard"
if wants e2e; then
  echo "running bench/transform_e2e.py ${e2e_args[*]}..." >&2
  "$py" "$root/bench/transform_e2e.py" --reshard "$cli" --floor "$build/bench/bench_transform" \
    "${e2e_args[@]}" ${RESHARD_BENCH_E2E:-} --json "$results/transform_e2e.json" > "$results/transform_e2e.md"
fi
if wants quality; then
  echo "running bench/plan_quality.py..." >&2
  "$py" "$root/bench/plan_quality.py" --reshard "$cli" --json "$results/plan_quality.json" \
    > "$results/plan_quality.md"
fi

# Tables: one file per doc block, and everything in report.md.
: > "$results/report.md.tmp"
for bench in planner convert transform; do
  if [[ -f "$results/$bench.json" ]]; then
    "$py" "$root/bench/report.py" "$results/$bench.json" > "$results/$bench.md"
    cat "$results/$bench.md" >> "$results/report.md.tmp"
    echo >> "$results/report.md.tmp"
  fi
done
for part in transform_e2e plan_quality; do
  if [[ -f "$results/$part.md" ]]; then
    cat "$results/$part.md" >> "$results/report.md.tmp"
    echo >> "$results/report.md.tmp"
  fi
done
mv "$results/report.md.tmp" "$results/report.md"

charts=()
[[ -f "$results/planner.json" ]] && charts+=(--planner "$results/planner.json")
[[ -f "$results/convert.json" ]] && charts+=(--convert "$results/convert.json")
[[ -f "$results/transform_e2e.json" ]] && charts+=(--e2e "$results/transform_e2e.json")
if [[ ${#charts[@]} -gt 0 ]]; then
  "$py" "$root/bench/charts.py" "$results/img" "${charts[@]}"
fi

if [[ $docs == yes ]]; then
  doc="$root/docs/benchmarks.md"
  blocks=()
  for pair in planner:planner convert:convert transform:transform e2e:transform_e2e quality:plan_quality; do
    part=${pair#*:}
    wants "${pair%%:*}" || continue  # only what this run measured
    if [[ -f "$results/$part.md" ]] && grep -q "<!-- begin generated: $part -->" "$doc"; then
      blocks+=("$part" "$results/$part.md")
    fi
  done
  if [[ ${#blocks[@]} -gt 0 ]]; then
    "$py" "$root/bench/report.py" --splice "$doc" "${blocks[@]}"
  fi
  mkdir -p "$root/docs/img"
  for svg in "$results"/img/*.svg; do
    [[ -e "$svg" ]] && cp "$svg" "$root/docs/img/$(basename "$svg").tmp" &&
      mv "$root/docs/img/$(basename "$svg").tmp" "$root/docs/img/$(basename "$svg")"
  done
  names=()
  for ((i = 0; i < ${#blocks[@]}; i += 2)); do names+=("${blocks[i]}"); done
  echo "updated $doc (generated blocks: ${names[*]:-none}) and docs/img/" >&2
fi
cat "$results/report.md"
