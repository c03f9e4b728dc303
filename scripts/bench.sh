#!/usr/bin/env bash
# make bench: run every benchmark in bench/ (each prints `metric: value` lines and
# its ratio against a baseline measured in the same run).
set -euo pipefail
BUILD=${1:-build}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$(dirname "$0")/.."
for b in "$BUILD"/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b"
done
