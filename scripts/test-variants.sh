#!/usr/bin/env bash
# The test suite under the variations that change float32 rounding, so that a
# tolerance which only holds on one CPU fails here (docs/testing.md):
#   1. oneDNN restricted to AVX2 kernels        (ONEDNN_MAX_CPU_ISA=AVX2)
#   2. oneDNN restricted to AVX-512 core kernels (ONEDNN_MAX_CPU_ISA=AVX512_CORE)
#   3. our own kernels forced to each lower variant the CPU runs (DF_CPU_VARIANT=generic,
#      avx2: the build compiles them for generic x86-64, x86-64-v3 and -v4 when DF_NATIVE=OFF)
#   4. the other DF_NATIVE build: -march=native on or off, in <build>-alt/
# Each run leaves out the tests labelled rounding_free (their sources say `rounding-free:` and
# why: parsers, process control, two runs of one build compared), which no rounding can move.
# Usage: scripts/test-variants.sh [BUILD_DIR]   (default build; configured and built if needed)
set -euo pipefail
unset DF_CPU_VARIANT # each run below sets what it tests
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$JOBS" >/dev/null
native=$(sed -n 's/^DF_NATIVE:BOOL=//p' "$BUILD/CMakeCache.txt")
case "$native" in ON | on | 1 | TRUE | true) alt=OFF ;; *) alt=ON ;; esac

failed=()
run() { # label, build dir, env assignments...
  local label=$1 dir=$2
  shift 2
  echo "== $label" >&2
  if ! (cd "$dir" && env "$@" ctest -j 1 -LE rounding_free --output-on-failure | tail -n 3); then
    failed+=("$label")
  fi
}
run "ONEDNN_MAX_CPU_ISA=AVX2" "$BUILD" ONEDNN_MAX_CPU_ISA=AVX2
run "ONEDNN_MAX_CPU_ISA=AVX512_CORE" "$BUILD" ONEDNN_MAX_CPU_ISA=AVX512_CORE
# Kernel variants: every compiled one this CPU runs, except the default (already run above).
env_of() { "$BUILD/distflow" env | sed -n "s/^$1: //p"; }
best=$(DF_CPU_VARIANT= env_of kernel_variant)
for v in $(env_of kernel_variants_compiled); do
  [ "$v" = "$best" ] && continue
  if [ "$(DF_CPU_VARIANT=$v env_of kernel_variant)" != "$v" ]; then
    echo "== DF_CPU_VARIANT=$v: not supported by this CPU, skipped" >&2
    continue
  fi
  run "DF_CPU_VARIANT=$v" "$BUILD" DF_CPU_VARIANT=$v
done
cmake -S . -B "$BUILD-alt" -DCMAKE_BUILD_TYPE=Release -DDF_NATIVE=$alt >/dev/null
cmake --build "$BUILD-alt" -j "$JOBS" >/dev/null
run "DF_NATIVE=$alt" "$BUILD-alt"

if [ ${#failed[@]} -ne 0 ]; then
  echo "test-variants: failed under: ${failed[*]}" >&2
  exit 1
fi
echo "test-variants: the suite passed under every variant" >&2
