#!/usr/bin/env bash
# Compare builds / kernel variants on the benchmarks, interleaved so that the
# load of a shared machine hits every configuration alike; prints the median of
# each metric per configuration and its ratio to the first configuration.
#
# Usage: scripts/bench-variants.sh REPS LABEL=BUILD_DIR[@DF_CPU_VARIANT] ...
#   e.g. scripts/bench-variants.sh 5 native=../main/build-native dispatch=build generic=build@generic
# Env: BENCHES (default: "model_step lmhead rollout rollout-tiny"), OUT (raw lines, default a temp file).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
reps=$1
shift
BENCHES=${BENCHES:-"model_step lmhead rollout rollout-tiny"}
OUT=${OUT:-$(mktemp /tmp/bench-variants.XXXXXX)}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

bench_cmd() { # build dir, bench name -> command line
  case $2 in
  model_step) echo "$1/bench_model_step --no-torch" ;;
  lmhead) echo "$1/bench_lmhead" ;;
  rollout) echo "$1/bench_rollout" ;;
  rollout-tiny) echo "$1/bench_rollout --qwen2-tiny" ;;
  esac
}

: >"$OUT"
for rep in $(seq 1 "$reps"); do
  for b in $BENCHES; do
    for cfg in "$@"; do
      label=${cfg%%=*} spec=${cfg#*=}
      dir=${spec%@*} variant=""
      [[ $spec == *@* ]] && variant=${spec#*@}
      echo "rep $rep/$reps $b $label" >&2
      # "name: 725 (cpu 1032)" -> name 725 and name_cpu 1032
      DF_CPU_VARIANT=$variant $(bench_cmd "$dir" "$b") 2>/dev/null |
        sed -nE 's/^([a-z0-9_.]+): ([0-9.e+-]+)( \(cpu ([0-9.e+-]+)\))?.*/\1 \2 \4/p' |
        while read -r k v c; do
          echo "$b $label $k $v"
          if [ -n "$c" ]; then echo "$b $label ${k}_cpu $c"; fi
        done >>"$OUT"
    done
  done
done
echo "raw: $OUT" >&2
python3 - "$OUT" "$@" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
labels = [c.split("=", 1)[0] for c in sys.argv[2:]]
vals = {}
for b, lab, k, v in rows:
    vals.setdefault((b, k), {}).setdefault(lab, []).append(float(v))
print("bench metric " + " ".join(labels) + " " + " ".join(f"{l}/{labels[0]}" for l in labels[1:]))
for (b, k), per in vals.items():
    if not all(l in per for l in labels):
        continue
    med = [statistics.median(per[l]) for l in labels]
    ratios = [f"{m / med[0]:.3f}" if med[0] else "-" for m in med[1:]]
    print(b, k, " ".join(f"{m:.4g}" for m in med), " ".join(ratios))
EOF
