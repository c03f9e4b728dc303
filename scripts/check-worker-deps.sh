#!/usr/bin/env bash
# The call structure of src/workers (docs/architecture.md, "Role workers"): the DAG worker (dag/)
# walks the graph and may call every role; a role worker (rollout, reward, advantage, actor,
# reference, critic, sft) calls only its own folder and common/ (typed settings per node, layouts
# and group collectives, prompts); common/ calls only itself. So no role reaches into another or
# back into the DAG worker, and the folders form no cycle. Checked on the compiled objects (every
# global symbol a file uses against the folder that defines it), so it also sees calls through
# worker_internal.h. Usage: check-worker-deps.sh OBJECT... (ctest test_worker_deps passes the
# library's objects; those outside src/workers are ignored). Prints each violation, exits 1 if any.
set -euo pipefail

objs=()
for o in "$@"; do
  case $o in */src/workers/*/*.o) objs+=("$o") ;; esac
done
[ ${#objs[@]} -gt 0 ] || { echo "check-worker-deps: no object of src/workers/<folder>/ given" >&2; exit 2; }
command -v nm >/dev/null || { echo "check-worker-deps: needs nm (binutils)" >&2; exit 2; }

folder_of() {
  local p=${1#*/src/workers/}
  echo "${p%%/*}"
}

declare -A owner # global symbol -> the folder defining it
for o in "${objs[@]}"; do
  f=$(folder_of "$o")
  while read -r _ type sym; do
    case $type in [TDBR]) owner[$sym]=$f ;; esac
  done < <(nm --defined-only "$o")
done

bad=0
for o in "${objs[@]}"; do
  f=$(folder_of "$o")
  [ "$f" = dag ] && continue
  while read -r _ sym; do
    to=${owner[$sym]:-}
    if [ -n "$to" ] && [ "$to" != "$f" ] && [ "$to" != common ]; then
      echo "src/workers/$f/$(basename "${o%.o}"): calls $sym, defined in src/workers/$to/"
      bad=1
    fi
  done < <(nm --undefined-only "$o")
done
exit $bad
