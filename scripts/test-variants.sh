#!/usr/bin/env bash
# The test suite under the variations that change float32 rounding, so that a
# tolerance which only holds on one CPU fails here (docs/testing.md):
#   - oneDNN restricted to AVX2, and to AVX-512 core kernels (ONEDNN_MAX_CPU_ISA), each cap
#     that changes the ISA oneDNN picks on this CPU;
#   - our own kernels forced to each lower variant the CPU runs (DF_CPU_VARIANT=generic,
#     avx2: the build compiles them for generic x86-64, x86-64-v3 and -v4 when DF_NATIVE=OFF);
#   - the other DF_NATIVE build: -march=native on or off, in <build>-alt/.
# The two axes are independent (oneDNN's matmuls, our kernels), so the runs pair them: the
# i-th oneDNN cap with the i-th kernel variant, each value of each axis covered once.
# Each run leaves out the tests labelled rounding_free (their sources say `rounding-free:` and
# why: parsers, process control, two runs of one build compared), which no rounding can move.
# Usage: scripts/test-variants.sh [BUILD_DIR]   (default build; configured and built if needed)
set -euo pipefail
unset DF_CPU_VARIANT ONEDNN_MAX_CPU_ISA # each run below sets what it tests
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
  if ! (cd "$dir" && env "$@" ctest -j "$JOBS" -LE rounding_free --output-on-failure | tail -n 3); then
    failed+=("$label")
  fi
}
env_of() { # key [env assignments...]: a line of `distflow env`
  local key=$1
  shift
  env "$@" "$BUILD/distflow" env | sed -n "s/^$key: //p"
}
# oneDNN caps that change what oneDNN runs here (a cap at or above the CPU's ISA is the default run).
isa=$(env_of onednn_effective_isa)
caps=()
for c in AVX2 AVX512_CORE; do
  if [ "$(env_of onednn_effective_isa ONEDNN_MAX_CPU_ISA=$c)" = "$isa" ]; then
    echo "== ONEDNN_MAX_CPU_ISA=$c: oneDNN already runs $isa here, skipped" >&2
  else
    caps+=("$c")
  fi
done
# Kernel variants: every compiled one this CPU runs, except the default (the main suite's).
best=$(env_of kernel_variant)
variants=()
for v in $(env_of kernel_variants_compiled); do
  [ "$v" = "$best" ] && continue
  if [ "$(env_of kernel_variant DF_CPU_VARIANT=$v)" != "$v" ]; then
    echo "== DF_CPU_VARIANT=$v: not supported by this CPU, skipped" >&2
    continue
  fi
  variants+=("$v")
done
n=$((${#caps[@]} > ${#variants[@]} ? ${#caps[@]} : ${#variants[@]}))
for ((i = 0; i < n; i++)); do
  assign=()
  [ $i -lt ${#caps[@]} ] && assign+=("ONEDNN_MAX_CPU_ISA=${caps[$i]}")
  [ $i -lt ${#variants[@]} ] && assign+=("DF_CPU_VARIANT=${variants[$i]}")
  run "${assign[*]}" "$BUILD" "${assign[@]}"
done
cmake -S . -B "$BUILD-alt" -DCMAKE_BUILD_TYPE=Release -DDF_NATIVE=$alt >/dev/null
cmake --build "$BUILD-alt" -j "$JOBS" >/dev/null
run "DF_NATIVE=$alt" "$BUILD-alt"

if [ ${#failed[@]} -ne 0 ]; then
  echo "test-variants: failed under: ${failed[*]}" >&2
  exit 1
fi
echo "test-variants: the suite passed under every variant" >&2
