#!/usr/bin/env bash
# bench/mpi.sh [processes] [mpirun flags...]: builds bench_mpi_redistribute (Release, in
# build-mpi/) and runs it under mpirun on 4 processes (or the number given), printing one table
# per scenario: reshard::mpi::redistribute (point-to-point, Alltoallv, per-rank planning) beside a
# raw MPI_Alltoallv and raw Isend/Irecv of the same bytes (the floor) and a naive gather to rank 0
# + scatter. The output is also written to build-mpi/results/mpi.txt.
#
# Several machines sharing this file system: pass a hostfile, e.g.
#   bench/mpi.sh 8 --hostfile hosts.txt
# RESHARD_BENCH_REPS sets the repetitions (default 15), RESHARD_BENCH_TINY=1 shrinks the tensors.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-mpi"
procs=${1:-4}
shift || true

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DRESHARD_MPI=ON -DRESHARD_BUILD_TESTS=ON -DRESHARD_BUILD_BENCH=ON -DRESHARD_BUILD_FUZZ=OFF \
    -DRESHARD_BUILD_EXAMPLES=OFF -DRESHARD_BUILD_CLI=OFF -DRESHARD_IO=OFF -DRESHARD_XTENSOR=OFF \
    -DRESHARD_INSTALL=OFF >/dev/null
fi
cmake --build "$build" --target bench_mpi_redistribute >/dev/null

flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  flags+=(--oversubscribe)  # more processes than cores
  if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
fi

mkdir -p "$build/results"
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$build/results/mpi.txt"
echo "# mpirun -n $procs ${flags[*]} $* $build/bench/mpi/bench_mpi_redistribute" \
  | tee -a "$build/results/mpi.txt"
mpirun -n "$procs" "${flags[@]}" "$@" "$build/bench/mpi/bench_mpi_redistribute" \
  | tee -a "$build/results/mpi.txt"
