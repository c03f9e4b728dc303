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
# Not detect_stack_use_after_return: its fake stack frames are only 32-byte aligned, and gcc
# turns the AVX-512 kernels' stores to 64-byte-aligned local arrays into aligned stores, which
# then fault (seen in sampling.c's xbuckets16) -- a limit of the tool, not a bug of the code.
# fast_unwind_on_malloc=0: OpenMPI is built without frame pointers, so the fast unwinder stops
# after a frame or two inside it and a leak's stack would not show the library to suppress it by.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1:check_initialization_order=1:fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
cd "$build"
ctest --output-on-failure -j 1 "$@"
