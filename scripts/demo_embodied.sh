#!/usr/bin/env bash
# make demo ALGO=embodied_srpo — siiRL's embodied SRPO workload end to end on the built-in simulator
# grid_place (docs/embodied.md):
#   task rows + scripted demonstrations -> tokenizer -> random Qwen2 -> SFT warm start ->
#   held-out success -> SRPO through the DAG worker -> held-out success
# Ends with exactly one line on stdout:
#   heldout success rate: before B after A (greedy); sampled: before b after a
# (sampled: 4 episodes per row at temperature 1, as the rollout samples)
#
#   scripts/demo_embodied.sh [DISTFLOW]   (scripts/demo.sh hands ALGO=embodied_srpo here)
#   DEMO_OUT=dir      where everything goes (default demo_out); this demo writes DEMO_OUT/embodied
#   DEMO_SFT=dir      reuse the data and SFT checkpoint of an earlier run's DEMO_OUT (steps 1-4 skipped)
#   DEMO_TRAIN_ARGS="key=value ..."  extra overrides for the SRPO step
#   DEMO_NP=N         run the SRPO step as N ranks under mpiexec (DEMO_MPIEXEC, default mpiexec)
set -euo pipefail
DF=${1:-build/distflow}
cd "$(dirname "$0")/.."
EX=examples/demo
OUT=${DEMO_OUT:-demo_out}/embodied
SFT_FROM=${DEMO_SFT:+$DEMO_SFT/embodied}
. scripts/demo_lib.sh
start=$(date +%s)
ENV=$(cat $EX/embodied_env.args)
# the SRPO config's environment keys, as `distflow embodied eval` reads them
read -r -a EXTRA <<< "${DEMO_TRAIN_ARGS:-}"
# greedy, then sampled (4 episodes per row at temperature 1): "G S"
success() {
  local g s
  g=$("$DF" embodied eval "$EX/embodied_srpo.yaml" --model "$1" --data "$OUT/data/heldout.jsonl" \
      ${EXTRA[@]+"${EXTRA[@]}"} | awk '/^success_rate:/ {print $2}')
  s=$("$DF" embodied eval "$EX/embodied_srpo.yaml" --model "$1" --data "$OUT/data/heldout.jsonl" --temperature 1 \
      --n 4 --seed 1 ${EXTRA[@]+"${EXTRA[@]}"} | awk '/^success_rate:/ {print $2}')
  echo "$g $s"
}

if [ -z "$SFT_FROM" ]; then
  rm -rf "$OUT" && mkdir -p "$OUT/data"
  log "1/6 grid_place $ENV: task rows (150 training tasks x 3 trials, 20 held-out tasks x 8) and demonstrations"
  "$DF" embodied tasks --out "$OUT/data/train.jsonl" --split train --trials 3 --env-config "$ENV"
  "$DF" embodied tasks --out "$OUT/data/heldout.jsonl" --split heldout --trials 8 --env-config "$ENV"
  "$DF" embodied demos --out "$OUT/data/demos.jsonl" --max-steps 16 --chunks 2 --trials 3 --env-config "$ENV"

  log "2/6 tokenizer (byte-level BPE on the demonstrations: each action word one token) and a random Qwen2"
  "$DF" data tokenizer --in "$OUT/data/demos.jsonl" --response-key response --vocab-size 384 --out "$OUT/tokenizer"
  "$DF" init-model --config $EX/model_config_embodied.json --tokenizer "$OUT/tokenizer" --out "$OUT/init" --seed 1

  log "3/6 SFT warm start on the demonstrations"
  "$DF" sft $EX/sft_embodied.yaml data.train_files="[$OUT/data/demos.jsonl]" model.partial_pretrain="$OUT/init" \
      trainer.default_local_dir="$OUT/sft" >&2
  SFT=$(latest_ckpt "$OUT/sft")

  log "4/6 held-out success rate of the SFT policy (greedy, and sampled)"
  before=$(success "$SFT")
  echo "$before" > "$OUT/sft_success.txt"
else
  ckpt="$SFT_FROM/sft/latest_checkpointed_iteration.txt"
  if [ ! -f "$ckpt" ] || [ ! -f "$SFT_FROM/data/train.jsonl" ]; then
    echo "make demo: DEMO_SFT=$DEMO_SFT holds no earlier embodied demo run (needs embodied/data, embodied/sft)" >&2
    exit 2
  fi
  [ "$SFT_FROM" = "$OUT" ] || { rm -rf "$OUT" && mkdir -p "$OUT" && cp -r "$SFT_FROM/data" "$OUT/data"; }
  SFT=$(latest_ckpt "$SFT_FROM/sft")
  log "1-4/6 reusing the data and SFT policy of $SFT_FROM ($SFT)"
  before=$(cat "$SFT_FROM/sft_success.txt" 2>/dev/null || success "$SFT")
fi

log "5/6 SRPO through the DAG worker ($EX/embodied_srpo.yaml)"
rm -rf "$OUT/srpo"
demo_launch
${LAUNCH[@]+"${LAUNCH[@]}"} "$DF" train "$EX/embodied_srpo.yaml" data.train_files="[$OUT/data/train.jsonl]" \
    data.val_files="[$OUT/data/heldout.jsonl]" actor_rollout_ref.model.path="$SFT" \
    trainer.default_local_dir="$OUT/srpo" ${EXTRA[@]+"${EXTRA[@]}"} >&2
RL="$(latest_ckpt "$OUT/srpo")/actor"

log "6/6 held-out success rate after SRPO (greedy, and sampled)"
after=$(success "$RL")

log "done in $(( $(date +%s) - start )) s; metrics in $OUT/srpo/metrics.jsonl"
read -r bg bs <<< "$before"
read -r ag as <<< "$after"
printf 'heldout success rate: before %.3f after %.3f (greedy); sampled: before %.3f after %.3f\n' "$bg" "$ag" "$bs" "$as"
