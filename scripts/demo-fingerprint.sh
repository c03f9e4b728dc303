#!/usr/bin/env bash
# A fingerprint of `make demo`'s numbers, to show that a refactoring changed no bit of what the demo
# computes: runs scripts/demo.sh with DISTFLOW into DIR and prints one sha256 per stage's output —
# the SFT and RL metrics.jsonl with every wall-clock metric (timing_s/*, timing_per_token_ms/*,
# perf/*, SFT's train/tokens_per_second) and the rows' timestamp removed, and the final checkpoints'
# weights (and training state, where a checkpoint holds one) — plus the accuracy line. Two builds that
# compute the same bits print the same lines (on the same machine: see docs/demo.md on why the
# digits differ across CPUs).
#
#   scripts/demo-fingerprint.sh DISTFLOW DIR [ALGO]
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
df=$(realpath "$1")
out=$(realpath -m "$2")
algo=${3:-grpo}
root=$(cd "$(dirname "$0")/.." && pwd)
acc=$(cd "$root" && DEMO_OUT="$out" bash scripts/demo.sh "$df" "$algo" 2>"$out.log")
# one metrics line per step; drop wall-clock keys, keep key order and number text as written
numbers() {
  sed -E 's/"((timing_s|timing_per_token_ms|perf)\/[^"]*|train\/tokens_per_second|timestamp)": *[^,}]*(, *)?//g' "$1" |
    sha256sum | cut -c1-16
}
# the model weights (model*.safetensors: comparable with fingerprints from before checkpoints held a
# training state), then the training state (AdamW moments: train_state.safetensors) on its own line
weights() { find "$1" -name "${2:-model*.safetensors}" -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16; }
latest() { echo "$1/global_step_$(tr -d '[:space:]' <"$1/latest_checkpointed_iteration.txt")"; }
for stage in sft "$algo"; do
  d=$out/$stage
  m=$(find "$d" -maxdepth 1 -name metrics.jsonl | head -1)
  [ -n "$m" ] && echo "$stage metrics: $(numbers "$m") ($(wc -l <"$m") lines)"
  echo "$stage weights: $(weights "$(latest "$d")")"
  [ -z "$(find "$(latest "$d")" -name train_state.safetensors)" ] ||
    echo "$stage train state: $(weights "$(latest "$d")" train_state.safetensors)"
done
echo "$acc"
