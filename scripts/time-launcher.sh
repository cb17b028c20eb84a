#!/usr/bin/env bash
# Compiler and linker launcher that measures what each command costs: appends
# "<user s> <system s> <wall s> <output>" to the file $RESHARD_TIMELOG (nothing when it is unset),
# then the command's own status. CPU seconds (user + system) are what to compare: wall time
# depends on what else the machine runs. Used to measure CI's compile time (docs/reliability.md,
# "CI time"):
#   cmake -S . -B build-time ... -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/time-launcher.sh \
#         -DCMAKE_CXX_LINKER_LAUNCHER=$PWD/scripts/time-launcher.sh
#   RESHARD_TIMELOG=$PWD/times.log cmake --build build-time -j 2
#   awk '{s += $1 + $2} END {print s}' times.log
out=unknown
prev=
for a in "$@"; do
  [[ $prev == -o ]] && out=$a
  prev=$a
done
if [[ -n ${RESHARD_TIMELOG:-} ]]; then
  exec /usr/bin/time -f "%U %S %e $out" -a -o "$RESHARD_TIMELOG" "$@"
fi
exec "$@"
