#!/usr/bin/env bash
# The whole ctest suite built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc,
# -fsanitize=address,undefined, DF_SANITIZE=ON) in build-asan/, MPI tests under mpiexec included.
# Any report fails the test that made it: memory errors, undefined behaviour (no recovery) and
# leaks at exit. Leaks inside OpenMPI, hwloc, oneDNN and the like are suppressed by library
# (tests/sanitizers/lsan.supp), never ours. docs/testing.md, "Fuzzing and sanitizers".
#
#   scripts/test-asan.sh [CTEST_ARGS...]      e.g. scripts/test-asan.sh -R '^test_config'
#
# The CUDA backend is left out (DF_WITH_CUDA=OFF): the CUDA runtime and ASan's shadow memory do
# not mix, and its tests need a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-asan
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDF_SANITIZE=ON -DDF_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs"

# halt_on_error / abort: the first report ends the process with a failure ctest sees.
# allocator_may_return_null: a failed huge malloc returns NULL as in a normal build, so the code
# paths that report DF_ENOMEM are tested rather than replaced by an ASan abort.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
cd "$build"
ctest --output-on-failure -j 1 "$@"
