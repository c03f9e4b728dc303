#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined, in
# build-fuzz/ with DF_FUZZ=ON) and run each for FUZZ_SECONDS, one after the other; then print per
# target the seconds run, executions, executions per second, corpus size and findings.
# docs/testing.md, "Fuzzing and sanitizers".
#
#   scripts/fuzz.sh [-t SECONDS] [-o SCRATCH_DIR] [-j JOBS] [TARGET...]   (default: every target)
#   FUZZ_SECONDS=600 scripts/fuzz.sh workflow
#
# Each run reads the seeds (tests/fuzz/corpus/<target>/) and regression cases
# (tests/fuzz/regressions/<target>/) and writes what it finds to the scratch directory
# (default build-fuzz/runs/<target>/): new corpus entries under corpus/, never back into the
# repository, and crashes, leaks, timeouts and out-of-memory inputs under findings/. A finding
# stops that target's run. Reproduce one with  build-fuzz/fuzz_<target> FILE; once fixed, copy it
# to tests/fuzz/regressions/<target>/ so the normal suite replays it (test_fuzz_replay_<target>).
# Exit status: 1 when any target had a finding.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-60}
scratch=""
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
while getopts "t:o:j:h" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    o) scratch=$OPTARG ;;
    j) jobs=$OPTARG ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
build=$root/build-fuzz
scratch=${scratch:-$build/runs}

command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/install-deps.sh --fuzz)" >&2; exit 1; }
# DF_NATIVE=ON: the kernels compile once (not per instruction set); the fuzzers run here only
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDF_FUZZ=ON -DDF_NATIVE=ON -DDF_WITH_MPI=OFF \
  -DDF_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in "$root"/tests/fuzz/fuzz_*.c; do
    t=$(basename "$src" .c)
    targets+=("${t#fuzz_}")
  done
fi

summary=()
found=0
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/fuzz_$t
  [ -x "$exe" ] || { echo "fuzz: no target '$t' ($exe)" >&2; exit 2; }
  work=$scratch/$t
  mkdir -p "$work/corpus" "$work/findings"
  dict=()
  [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
  seeds=("$root/tests/fuzz/corpus/$t")
  [ -d "$root/tests/fuzz/regressions/$t" ] && seeds+=("$root/tests/fuzz/regressions/$t")
  log=$work/fuzz.log
  echo "fuzz: $t for ${seconds}s (log $log)" >&2
  start=$(date +%s)
  rc=0
  # -timeout: an input taking 10 s is a finding (the parsers take microseconds); -rss_limit_mb:
  # a file of a few KB that needs 2 GB is one too. OMP: the library may start threads; one is enough.
  OMP_NUM_THREADS=1 "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/findings/" "${dict[@]}" \
    "$work/corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | sed 's/corp: //')
  findings=$(find "$work/findings" -type f -newermt "@$start" | sort | tr '\n' ' ')
  if [ $rc -ne 0 ] || [ -n "$findings" ]; then
    found=1
    findings="${findings:-exit $rc, see the log}"
  fi
  summary+=("$(printf '%-16s %6ss %12s execs %8s exec/s  corpus %-14s findings: %s' "$t" "$took" \
    "${execs:-?}" "${rate:-?}" "${corp:-?}" "${findings:-none}")")
done
echo
echo "fuzz summary (${seconds}s per target; corpus = units/bytes; scratch $scratch):"
printf '  %s\n' "${summary[@]}"
exit $found
