#!/usr/bin/env bash
# Mutation testing of the layer that assembles the kernels (docs/testing.md, "Mutation testing"):
# each mutation of a list (scripts/mutations.txt) is applied alone to a scratch copy of the tree,
# which is rebuilt incrementally and tested with the plain ctest suite. A mutation the suite fails
# on is KILLED; one it passes SURVIVED: a bug the suite would not notice.
#
# Usage: scripts/mutate.sh [-f REGEX] [-j N] [-l FILE] [-t SECONDS] [-w DIR] [-F] [-c]
#   -f REGEX    only the mutations whose name matches REGEX (grep -E)
#   -j N        ctest and build parallelism (default 2)
#   -l FILE     the mutation list (default scripts/mutations.txt; its format is described there)
#   -t SECONDS  time limit of one test run (default 600); a run past it counts as killed
#   -w DIR      scratch directory: copy of the tree, build, logs (default: one per checkout in
#               ${TMPDIR:-/tmp}, reused so that each run and each mutation rebuilds incrementally)
#   -F          no fast path: ignore the entries' `tests:` lines, the full suite for every mutation
#   -c          check the list only: report every mutation whose snippet is not found exactly once
#               (STALE) and every `tests:` regex (or alternative of one) that names no test
#               (NO-TEST), build and test nothing
# The working tree is never modified: the scratch copy holds its tracked and untracked,
# not-ignored files (uncommitted changes included), refreshed by content at every run.
# Fast path: a mutation with a `tests: REGEX` line first runs only `ctest -R REGEX` (same time
# limit, same rerun of a failure); when those tests fail it is KILLED without the full suite.
# When they pass (or select no test) the whole suite decides as without the line, and the
# mutation's line says that its tests did not kill it, so the verdict never rests on the line.
# Prints one line per mutation (KILLED with the failing tests, SURVIVED, STALE, INVALID when the
# mutant does not build; with its time), the survivors again with their descriptions, the
# mutations whose `tests:` did not kill them, and `mutation score: K/N` (N = killed + survived).
# Exit status: 0 when every selected mutation was killed, 1 when some survived or are stale or
# invalid (or, with -c, stale or NO-TEST), 2 on a usage or setup error (including an unmutated
# suite that fails).
set -euo pipefail

die() {
  echo "mutate.sh: $*" >&2
  exit 2
}
usage() {
  sed -n '7,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
list=$root/scripts/mutations.txt
filter=''
jobs=2
limit=600
work=''
check_only=false
full_only=false
while getopts 'f:j:l:t:w:Fch' opt; do
  case $opt in
  f) filter=$OPTARG ;;
  j) jobs=$OPTARG ;;
  l) list=$OPTARG ;;
  t) limit=$OPTARG ;;
  w) work=$OPTARG ;;
  F) full_only=true ;;
  c) check_only=true ;;
  *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j needs a positive integer, got '$jobs'"
[[ $limit =~ ^[1-9][0-9]*$ ]] || die "-t needs a positive number of seconds, got '$limit'"
[ -f "$list" ] || die "no mutation list at $list"

# ---- the list ------------------------------------------------------------------------------
# Entries: a `[name]` line, then `file:`, `desc:`, `why:`, one or more `old:` lines and one or
# more `new:` lines (several lines of one key are joined with newlines; one space after the colon
# is dropped, the rest is kept verbatim), and an optional `tests:` line (a ctest -R regex). `#`
# lines and blank lines between entries are ignored.
names=() files=() descs=() whys=() olds=() news=() tests=()
parse_list() {
  local line n=-1 key val lineno=0
  local -A seen=()
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $line in
    '#'* | '') continue ;;
    '['*']')
      n=$((n + 1))
      names[n]=${line:1:${#line}-2}
      [[ ${names[n]} =~ ^[a-z0-9][a-z0-9_.-]*$ ]] || die "$list:$lineno: bad mutation name '${names[n]}'"
      [ -z "${seen[${names[n]}]:-}" ] || die "$list:$lineno: mutation '${names[n]}' listed twice"
      seen[${names[n]}]=1
      files[n]='' descs[n]='' whys[n]='' olds[n]='' news[n]='' tests[n]=''
      continue
      ;;
    esac
    [ "$n" -ge 0 ] || die "$list:$lineno: text before the first [name] line"
    key=${line%%:*}
    [ "$key" != "$line" ] || die "$list:$lineno: expected 'key: value', got '$line'"
    val=${line#*:}
    val=${val# }
    case $key in
    file) files[n]=$val ;;
    desc) descs[n]=$val ;;
    why) whys[n]=$val ;;
    tests)
      [ -z "${tests[n]}" ] || die "$list:$lineno: a second tests: line for '${names[n]}' (join them with |)"
      [ -n "$val" ] || die "$list:$lineno: empty tests: line"
      tests[n]=$val
      ;;
    old) if [ -n "${olds_set[n]:-}" ]; then olds[n]+=$'\n'$val; else olds[n]=$val olds_set[n]=1; fi ;;
    new) if [ -n "${news_set[n]:-}" ]; then news[n]+=$'\n'$val; else news[n]=$val news_set[n]=1; fi ;;
    *) die "$list:$lineno: unknown key '$key' (known: file, desc, why, old, new, tests)" ;;
    esac
  done <"$list"
  local i
  for i in "${!names[@]}"; do
    if [ -z "${files[i]}" ] || [ -z "${descs[i]}" ] || [ -z "${whys[i]}" ] || [ -z "${olds[i]}" ] ||
      [ -z "${news_set[i]:-}" ]; then
      die "$list: mutation '${names[i]}' needs file, desc, why, old and new"
    fi
    [ "${olds[i]}" != "${news[i]}" ] || die "$list: mutation '${names[i]}' replaces its snippet by itself"
  done
}
olds_set=() news_set=()
parse_list
[ ${#names[@]} -gt 0 ] || die "$list lists no mutation"

selected=()
for i in "${!names[@]}"; do
  if [ -z "$filter" ] || grep -Eq -- "$filter" <<<"${names[i]}"; then
    selected+=("$i")
  fi
done
[ ${#selected[@]} -gt 0 ] || die "no mutation name matches '$filter'"

# How often snippet $2 occurs in text $1 (non-overlapping, literal).
count_in() {
  local text=$1 snip=$2 rest
  rest=${text//"$snip"/}
  echo $(((${#text} - ${#rest}) / ${#snip}))
}
# The whole file, trailing newlines included, into the variable named $2.
slurp() {
  IFS= read -r -d '' "$2" <"$1" || true
}
# File $1 into $text, and how often mutation $2's snippet occurs in it into $count (0, no file).
scan() {
  text='' count=0
  [ -f "$1" ] || return 0
  slurp "$1" text
  count=$(count_in "$text" "${olds[$2]}")
}

# The names ctest gives the tests of a CPU build of tree $1, one a line, for -c. They are derived
# from the sources by CMakeLists.txt's own rules rather than read from a build's `ctest -N`: -c
# builds nothing, the scratch build may not exist yet or may be older than the working tree (a
# test added since), and it would depend on what that configure found. The rules (CMakeLists.txt,
# "tests"): every literal `add_test(NAME x` of a CMakeLists.txt (test_layers ...), one test per
# tests/test_*.c but test_cuda_* (the scratch build is CPU-only), and <name>_mpi_np<N> for each N
# of a source's `mpi-test: np` line (these exist only in a build with MPI; without MPI a regex
# naming only them selects nothing and the run falls back to the full suite).
test_names() {
  local src name np
  git -C "$1" ls-files -co --exclude-standard -- CMakeLists.txt '*/CMakeLists.txt' |
    while IFS= read -r src; do cat "$1/$src"; done |
    sed -n 's/^[[:space:]]*add_test(NAME \([A-Za-z0-9_.-]*\)[[:space:]].*/\1/p'
  for src in "$1"/tests/test_*.c; do
    [ -f "$src" ] || continue
    name=$(basename "$src" .c)
    [[ $name == test_cuda_* ]] && continue
    echo "$name"
    for np in $(sed -n 's/.*mpi-test: np \([0-9 ]*\).*/\1/p' "$src" | head -n 1); do
      echo "${name}_mpi_np$np"
    done
  done
}
# The top-level alternatives of regex $1, one a line: split at each | outside ( ) and [ ], so
# that every alternative of `^test_a$|^test_b$` must name a test, not only one of them.
alternatives() {
  local re=$1 i c depth=0 bracket=false esc=false cur=''
  for ((i = 0; i < ${#re}; i++)); do
    c=${re:i:1}
    if $esc; then
      esc=false
    elif [ "$c" = "\\" ]; then
      esc=true
    elif $bracket; then
      [ "$c" != ']' ] || bracket=false
    elif [ "$c" = '[' ]; then
      bracket=true
    elif [ "$c" = '(' ]; then
      depth=$((depth + 1))
    elif [ "$c" = ')' ]; then
      depth=$((depth - 1))
    elif [ "$c" = '|' ] && [ "$depth" -eq 0 ]; then
      printf '%s\n' "$cur"
      cur=''
      continue
    fi
    cur+=$c
  done
  printf '%s\n' "$cur"
}

if $check_only; then
  stale=0 notest=0 untested=0
  known=$(test_names "$root" | sort -u)
  [ -n "$known" ] || die "found no test in $root/tests"
  for i in "${selected[@]}"; do
    scan "$root/${files[i]}" "$i"
    if [ "$count" -eq 1 ]; then
      printf '%-9s %s\n' OK "${names[i]}"
    else
      printf '%-9s %s (%s: snippet found %s times)\n' STALE "${names[i]}" "${files[i]}" "$count"
      stale=$((stale + 1))
    fi
    if [ -z "${tests[i]}" ]; then
      untested=$((untested + 1))
      continue
    fi
    bad=''
    while IFS= read -r alt; do
      # grep -E for ctest's regex: the same syntax for what these lines use (^ $ . * + ? [ ] |)
      if [ -z "$alt" ] || ! grep -Eq -- "$alt" <<<"$known" 2>/dev/null; then
        bad+="${bad:+, }'$alt'"
      fi
    done < <(alternatives "${tests[i]}")
    if [ -n "$bad" ]; then
      printf '%-9s %s (tests: %s matches no test name)\n' NO-TEST "${names[i]}" "$bad"
      notest=$((notest + 1))
    fi
  done
  echo "${#selected[@]} mutations, $stale stale, $notest with a tests: regex naming no test," \
    "$untested without tests:"
  [ "$stale" -eq 0 ] && [ "$notest" -eq 0 ]
  exit
fi

# ---- the scratch copy ------------------------------------------------------------------------
command -v git >/dev/null || die "needs git (to list the tree's files)"
command -v flock >/dev/null || die "needs flock (util-linux)"
key=$(printf '%s' "$root" | cksum | cut -d' ' -f1)
work=${work:-${TMPDIR:-/tmp}/distflow-mutate-$key}
mkdir -p "$work/tree" "$work/logs"
work=$(cd "$work" && pwd)
tree=$work/tree build=$work/build logs=$work/logs
exec 9>"$work/lock"
flock -n 9 || die "another mutate.sh is using $work (-w picks another directory)"
# the tests find the real data at <source>/../shared
if [ -d "$root/../shared" ]; then
  ln -sfn "$(cd "$root/../shared" && pwd)" "$work/shared"
fi

# Copy what differs by content, with a fresh mtime (never the source's: an object built from a
# mutant must look older than the restored file), and remove what the tree no longer has.
sync_tree() {
  local f want have
  want=$work/files.want have=$work/files.have
  git -C "$root" ls-files -z -co --exclude-standard | tr '\0' '\n' | sort -u >"$want"
  while IFS= read -r f; do
    [ -e "$root/$f" ] || [ -L "$root/$f" ] || continue # deleted but not yet committed
    if ! cmp -s "$root/$f" "$tree/$f"; then
      mkdir -p "$(dirname "$tree/$f")"
      cp -P --remove-destination "$root/$f" "$tree/$f"
    fi
  done <"$want"
  (cd "$tree" && find . \( -type f -o -type l \) -printf '%P\n' | sort) >"$have"
  comm -13 "$want" "$have" | while IFS= read -r f; do rm -f "$tree/$f"; done
}

build_tree() { # $1: log file; CPU only: the mutations are of the CPU layers (the CUDA tests need a GPU)
  cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDF_WITH_CUDA=OFF >"$1" 2>&1 &&
    cmake --build "$build" -j "$jobs" >>"$1" 2>&1
}

failed_file=$build/Testing/Temporary/LastTestsFailed.log
# The failing tests' names, space-separated, from ctest's record of the last run.
failed_names() {
  [ -f "$failed_file" ] && sed 's/^[0-9]*://' "$failed_file" | tr '\n' ' ' | sed 's/ $//'
  return 0
}
# ctest under the time limit; $1: log file, the rest: extra ctest arguments. Returns ctest's
# status, 124 / 137 when the limit ended it (timeout signals its whole process group).
run_suite() {
  local log=$1
  shift
  # --rerun-failed reads the record of the run before (without it ctest reruns every test);
  # any other run starts without one
  [ "${1:-}" = --rerun-failed ] || rm -f "$failed_file"
  (cd "$build" && timeout -k 20 "$limit" ctest -j "$jobs" --output-on-failure "$@") >"$log" 2>&1
}

mutated='' original=''
restore() {
  if [ -n "$mutated" ]; then
    printf '%s' "$original" >"$mutated"
    mutated=''
  fi
}
trap restore EXIT
trap 'restore; exit 130' INT TERM

echo "mutate.sh: ${#selected[@]} of ${#names[@]} mutations from ${list#"$root"/}; scratch tree $tree" >&2
sync_tree
echo "mutate.sh: building and testing the unmutated tree" >&2
build_tree "$logs/baseline.build.log" || die "the unmutated tree does not build: $logs/baseline.build.log"
if ! run_suite "$logs/baseline.test.log"; then
  first=$(failed_names)
  run_suite "$logs/baseline.rerun.log" --rerun-failed ||
    die "the unmutated suite fails (${first:-time limit}; $logs/baseline.test.log): fix that first"
  echo "mutate.sh: baseline: $first failed once and passed on the rerun (load?); going on" >&2
fi

# One test run of the mutant and its verdict in $verdict (KILLED or SURVIVED) and $note; $1: log
# file (the rerun's is beside it), the rest: extra ctest arguments (-R for the fast path).
judge() {
  local log=$1 rc=0 first
  shift
  run_suite "$log" "$@" || rc=$?
  verdict=SURVIVED note=''
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict=KILLED note="(time limit of ${limit}s; failed before it: $(failed_names))"
  elif [ "$rc" -ne 0 ]; then
    # a failure counts when it repeats: a timing test may fail once on a loaded machine
    first=$(failed_names)
    if run_suite "${log%.log}.rerun.log" --rerun-failed; then
      note="(flaky: $first failed once, passed on the rerun)"
    else
      verdict=KILLED note="($(failed_names))"
    fi
  fi
}
# How many tests of the scratch build regex $1 selects (ctest -R).
selects() {
  { (cd "$build" && ctest -N -R "$1" 2>/dev/null) || true; } | sed -n 's/^Total Tests: *\([0-9]*\).*/\1/p'
}

killed=0 survived=0 stale=0 invalid=0 k=0
survivors=() misses=()
for i in "${selected[@]}"; do
  k=$((k + 1))
  name=${names[i]}
  tag=$(printf '[%2d/%d]' "$k" "${#selected[@]}")
  f=$tree/${files[i]}
  scan "$f" "$i"
  original=$text
  if [ "$count" -ne 1 ]; then
    printf '%s %-9s %-34s %s: snippet found %s times\n' "$tag" STALE "$name" "${files[i]}" "$count"
    stale=$((stale + 1))
    continue
  fi
  start=$SECONDS
  mutated=$f
  printf '%s' "${original/"${olds[i]}"/"${news[i]}"}" >"$f"
  if ! build_tree "$logs/$name.build.log"; then
    restore
    printf '%s %-9s %-34s does not build: %s\n' "$tag" INVALID "$name" "$logs/$name.build.log"
    invalid=$((invalid + 1))
    continue
  fi
  verdict='' note='' miss=''
  if ! $full_only && [ -n "${tests[i]}" ]; then
    # the fast path: the tests named for this mutation first, the whole suite only if they pass
    n_sel=$(selects "${tests[i]}")
    if [ "${n_sel:-0}" -eq 0 ]; then
      miss="tests: '${tests[i]}' selects no test"
    else
      judge "$logs/$name.fast.log" -R "${tests[i]}"
      if [ "$verdict" != KILLED ]; then
        miss="tests: '${tests[i]}' did not kill it${note:+ $note}"
        verdict=''
      fi
    fi
    if [ -n "$miss" ]; then
      echo "mutate.sh: $name: $miss; running the full suite" >&2
      misses+=("$i")
    fi
  fi
  [ -n "$verdict" ] || judge "$logs/$name.log"
  restore
  [ -z "$miss" ] || note+="${note:+ }[$miss]"
  printf '%s %-9s %-34s %s%s\n' "$tag" "$verdict" "$name" "${note:+$note }" "$((SECONDS - start))s"
  if [ "$verdict" = KILLED ]; then
    killed=$((killed + 1))
  else
    survived=$((survived + 1))
    survivors+=("$i")
  fi
done

if [ ${#survivors[@]} -gt 0 ]; then
  echo
  echo "survivors (bugs the suite does not notice):"
  for i in "${survivors[@]}"; do
    printf '  %s (%s): %s\n      %s\n' "${names[i]}" "${files[i]}" "${descs[i]}" "${whys[i]}"
  done
fi
if [ ${#misses[@]} -gt 0 ]; then
  echo
  echo "mutations whose tests: line did not kill them (fix the line from the full suite's verdict):"
  for i in "${misses[@]}"; do
    printf '  %s: %s\n' "${names[i]}" "${tests[i]}"
  done
fi
echo
echo "mutation score: $killed/$((killed + survived))  (stale $stale, invalid $invalid; logs in $logs)"
[ "$survived" -eq 0 ] && [ "$stale" -eq 0 ] && [ "$invalid" -eq 0 ]
