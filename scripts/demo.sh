#!/usr/bin/env bash
# make demo — the embedded default, end to end on synthetic arithmetic word problems:
#   data -> tokenizer -> random Qwen2 -> SFT warm start -> eval -> GRPO (DAG worker) -> eval
# Ends with exactly one line:  heldout accuracy: before B after A
set -euo pipefail
DF=${1:-build/distflow}
ALGO=${2:-grpo}
cd "$(dirname "$0")/.."
EX=examples/demo
OUT=${DEMO_OUT:-demo_out}
# OpenMP threads that spin while waiting lose their core when anything else runs; yield instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

if [ "$ALGO" != grpo ]; then
  echo "make demo: ALGO=$ALGO is not available yet (grpo)" >&2
  exit 2
fi
log() { printf '\n[demo] %s\n' "$*" >&2; }
start=$(date +%s)
rm -rf "$OUT" && mkdir -p "$OUT"

log "1/6 synthetic task: $(cat $EX/task.args)"
# shellcheck disable=SC2046
"$DF" data synth --out "$OUT/data/train.jsonl" --split train --seed 1 $(cat $EX/task.args) \
    --bare-answers 0.5 --n 20000
# shellcheck disable=SC2046
"$DF" data synth --out "$OUT/data/test.jsonl" --split test --seed 2 $(cat $EX/task.args) \
    --exclude "$OUT/data/train.jsonl" --n 500

log "2/6 tokenizer (byte-level BPE trained on the training set) and a random Qwen2 model"
"$DF" data tokenizer --in "$OUT/data/train.jsonl" --vocab-size 512 --out "$OUT/tokenizer"
"$DF" init-model --config $EX/model_config.json --tokenizer "$OUT/tokenizer" --out "$OUT/init" --seed 1

log "3/6 SFT warm start"
"$DF" sft $EX/sft.yaml data.train_files="[$OUT/data/train.jsonl]" model.partial_pretrain="$OUT/init" \
    trainer.default_local_dir="$OUT/sft"
SFT="$OUT/sft/global_step_$(tr -d '[:space:]' < "$OUT/sft/latest_checkpointed_iteration.txt")"

EVAL=(--data "$OUT/data/test.jsonl" --max-response-length 64)
log "4/6 held-out accuracy of the SFT model (greedy)"
before=$("$DF" eval --model "$SFT" "${EVAL[@]}" | awk '/^accuracy:/ {print $2}')

log "5/6 GRPO through the DAG worker"
"$DF" train $EX/grpo.yaml data.train_files="[$OUT/data/train.jsonl]" data.val_files="[$OUT/data/test.jsonl]" \
    actor_rollout_ref.model.path="$SFT" trainer.default_local_dir="$OUT/grpo"
GRPO="$OUT/grpo/global_step_$(tr -d '[:space:]' < "$OUT/grpo/latest_checkpointed_iteration.txt")/actor"

log "6/6 held-out accuracy after GRPO (greedy)"
after=$("$DF" eval --model "$GRPO" "${EVAL[@]}" | awk '/^accuracy:/ {print $2}')

log "done in $(( $(date +%s) - start )) s; metrics in $OUT/grpo/metrics.jsonl"
printf 'heldout accuracy: before %.3f after %.3f\n' "$before" "$after"
