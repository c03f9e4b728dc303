#!/usr/bin/env bash
# Data Coordinator redistribution vs a rank-0 gather/scatter baseline, at 2, 3 and
# 4 MPI ranks on this machine (bench/redistribute.c; docs/scaling.md uses the numbers).
# Usage: scripts/bench-redistribute.sh [build-dir] [extra bench_redistribute args...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
BIN="$BUILD/bench_redistribute"
[ -x "$BIN" ] || { echo "no $BIN: build first (cmake --build $BUILD)" >&2; exit 1; }
# one thread per rank; yield while waiting so oversubscribed ranks do not spin
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
for np in 2 3 4; do
  echo "== mpiexec -np $np $BIN $*"
  mpiexec --oversubscribe -np "$np" "$BIN" "$@"
done
echo "== the plan alone (what every rank repeats), up to 2^20 samples onto 1024 destinations"
"$BIN" --sizes 64 --reps 1 --plan | grep '^plan\.'
