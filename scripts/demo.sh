#!/usr/bin/env bash
# make demo — the embedded default, end to end on synthetic arithmetic word problems:
#   data -> tokenizer -> random Qwen2 -> SFT warm start -> eval -> RL (DAG worker) -> eval
# Ends with exactly one line:  heldout accuracy: before B after A
# (the only line on stdout: the trainers' progress goes to stderr here, so $(scripts/demo.sh) is that line)
#
#   scripts/demo.sh [DISTFLOW [ALGO]]   ALGO: an examples/demo/<ALGO>.yaml (default grpo)
#   DEMO_OUT=dir      where everything goes (default demo_out); step 5 writes DEMO_OUT/ALGO
#   DEMO_SFT=dir      reuse the data and SFT checkpoint of an earlier run's DEMO_OUT: steps 1-4
#                     are skipped (dir may be DEMO_OUT itself; only DEMO_OUT/ALGO is replaced)
#   DEMO_TRAIN_ARGS="key=value ..."  extra overrides for step 5, e.g. a smoke run:
#                     DEMO_TRAIN_ARGS="trainer.total_training_steps=2 trainer.save_freq=2"
#   DEMO_NP=N         run step 5 as N ranks under mpiexec (DEMO_MPIEXEC, default mpiexec;
#                     OMP_NUM_THREADS defaults to the CPUs / N), e.g. the asynchronous runtime:
#                     DEMO_NP=2 DEMO_TRAIN_ARGS="actor_rollout_ref.rollout.mode=async rollout.n_gpus_per_node=1"
set -euo pipefail
DF=${1:-build/distflow}
ALGO=${2:-grpo}
cd "$(dirname "$0")/.."
EX=examples/demo
OUT=${DEMO_OUT:-demo_out}
SFT_FROM=${DEMO_SFT:-}
. scripts/demo_lib.sh

# the embodied workload has its own data, model and measure (docs/embodied.md); so has the
# two-agent MARFT one (a planner and a solver; docs/demo.md, "ALGO=marft")
[ "$ALGO" = embodied_srpo ] && exec bash scripts/demo_embodied.sh "$DF"
[ "$ALGO" = marft ] && exec bash scripts/demo_marft.sh "$DF"
# examples/demo/*.yaml that are not an RL config: SFT configs, the tool list, workflow files
not_algo() { case $1 in sft* | tool_config | *_workflow) return 0 ;; esac; return 1; }
algos() { for f in "$EX"/*.yaml; do f=${f##*/}; not_algo "${f%.yaml}" || printf ' %s' "${f%.yaml}"; done; }
if [ ! -f "$EX/$ALGO.yaml" ] || not_algo "$ALGO"; then
  echo "make demo: unknown ALGO=$ALGO; available:$(algos)" >&2
  exit 2
fi
start=$(date +%s)
EVAL=(--max-response-length 64)
# the tool variant (grpo_tool): large numbers, SFT conversations that call the calculator, and every
# evaluation answering the model's tool calls (docs/demo.md, "The tool variant")
# (a smaller budget: every step's conversations are longer)
TASK=$EX/task.args SFT_YAML=$EX/sft.yaml SYNTH=(--bare-answers 0.5) N_TRAIN=20000 N_TEST=500
if [ "$ALGO" = grpo_tool ]; then
  TASK=$EX/tool_task.args SFT_YAML=$EX/sft_tool.yaml N_TRAIN=10000 N_TEST=200
  # every two-operation demonstration calls the calculator, 70% of the one-operation ones answer at once
  SYNTH=(--tool --bare-answers 0 --bare-answers-short 0.7)
  EVAL=(--max-response-length 128 --max-prompt-length 256 --max-num-seqs 256
        --tool-config $EX/tool_config.yaml --max-assistant-turns 3)
fi
# greedy held-out accuracy of the model in directory $1
accuracy() { "$DF" eval --model "$1" --data "$DATA/test.jsonl" "${EVAL[@]}" | awk '/^accuracy:/ {print $2}'; }

if [ -z "$SFT_FROM" ]; then
  rm -rf "$OUT" && mkdir -p "$OUT"
  DATA="$OUT/data"
  log "1/6 synthetic task: $(cat "$TASK") ${SYNTH[*]}"
  # shellcheck disable=SC2046
  "$DF" data synth --out "$DATA/train.jsonl" --split train --seed 1 $(cat "$TASK") \
      "${SYNTH[@]}" --n $N_TRAIN
  # shellcheck disable=SC2046
  "$DF" data synth --out "$DATA/test.jsonl" --split test --seed 2 $(cat "$TASK") \
      --exclude "$DATA/train.jsonl" --n $N_TEST

  log "2/6 tokenizer (byte-level BPE trained on the training set's conversations) and a random Qwen2 model"
  "$DF" data tokenizer --in "$DATA/train.jsonl" --vocab-size 512 --out "$OUT/tokenizer"
  "$DF" init-model --config $EX/model_config.json --tokenizer "$OUT/tokenizer" --out "$OUT/init" --seed 1

  log "3/6 SFT warm start"
  "$DF" sft "$SFT_YAML" data.train_files="[$DATA/train.jsonl]" model.partial_pretrain="$OUT/init" \
      trainer.default_local_dir="$OUT/sft" >&2
  SFT=$(latest_ckpt "$OUT/sft")

  log "4/6 held-out accuracy of the SFT model (greedy)"
  before=$(accuracy "$SFT")
  echo "$before" > "$OUT/sft_accuracy.txt"
else
  DATA="$SFT_FROM/data"
  ckpt="$SFT_FROM/sft/latest_checkpointed_iteration.txt"
  if [ ! -f "$ckpt" ] || [ ! -f "$DATA/train.jsonl" ] || [ ! -f "$DATA/test.jsonl" ]; then
    echo "make demo: DEMO_SFT=$SFT_FROM holds no earlier demo run (needs data/train.jsonl, data/test.jsonl, sft/)" >&2
    exit 2
  fi
  SFT=$(latest_ckpt "$SFT_FROM/sft")
  mkdir -p "$OUT" && rm -rf "${OUT:?}/$ALGO"
  log "1-4/6 reusing the data and SFT model of $SFT_FROM ($SFT)"
  if [ -s "$SFT_FROM/sft_accuracy.txt" ]; then
    before=$(cat "$SFT_FROM/sft_accuracy.txt")
  else
    before=$(accuracy "$SFT")
    echo "$before" > "$SFT_FROM/sft_accuracy.txt"
  fi
fi

log "5/6 $ALGO through the DAG worker ($EX/$ALGO.yaml)"
read -r -a EXTRA <<< "${DEMO_TRAIN_ARGS:-}"
demo_launch
${LAUNCH[@]+"${LAUNCH[@]}"} "$DF" train "$EX/$ALGO.yaml" data.train_files="[$DATA/train.jsonl]" data.val_files="[$DATA/test.jsonl]" \
    actor_rollout_ref.model.path="$SFT" trainer.default_local_dir="$OUT/$ALGO" ${EXTRA[@]+"${EXTRA[@]}"} >&2
RL="$(latest_ckpt "$OUT/$ALGO")/actor"

log "6/6 held-out accuracy after $ALGO (greedy)"
after=$(accuracy "$RL")

log "done in $(( $(date +%s) - start )) s; metrics in $OUT/$ALGO/metrics.jsonl"
printf 'heldout accuracy: before %.3f after %.3f\n' "$before" "$after"
