#!/usr/bin/env bash
# make demo ALGO=marft — two agents on one episode (siiRL's MARFT; docs/multi_agent.md): a planner that
# writes the operations of a synthetic arithmetic word problem and a solver that works them out:
#   data -> planner / solver demonstrations -> tokenizer -> random Qwen2 -> SFT warm start (one model,
#   both roles) -> MARFT through the DAG worker (each agent its own copy, GRPO on the shared reward),
#   whose validation before the first step and after the last gives the pair's held-out accuracy
# Ends with exactly one line on stdout:
#   heldout accuracy (planner+solver): before B after A
# (greedy; the solver's "#### N" scored against the problem's answer; docs/demo.md, "ALGO=marft")
#
#   scripts/demo_marft.sh [DISTFLOW]   (scripts/demo.sh hands ALGO=marft here)
#   DEMO_OUT=dir      where everything goes (default demo_out); this demo writes DEMO_OUT/marft
#   DEMO_SFT=dir      reuse the data and SFT checkpoint of an earlier run's DEMO_OUT (steps 1-3 skipped)
#   DEMO_TRAIN_ARGS="key=value ..."  extra overrides for the MARFT step, e.g. a smoke run:
#                     DEMO_TRAIN_ARGS="trainer.total_training_steps=2 trainer.test_freq=2 trainer.save_freq=2"
#   DEMO_NP=N         run the MARFT step as N ranks under mpiexec (DEMO_MPIEXEC, default mpiexec)
set -euo pipefail
DF=${1:-build/distflow}
cd "$(dirname "$0")/.."
EX=examples/demo
WORKFLOW=$EX/marft_workflow.yaml
OUT=${DEMO_OUT:-demo_out}/marft
SFT_FROM=${DEMO_SFT:+$DEMO_SFT/marft}
. scripts/demo_lib.sh
start=$(date +%s)
# problems: each gives the SFT a planner row and a solver row; half the solver rows a bare answer
N_TRAIN=12000 N_TEST=500 BARE=0.5
# the agents' demonstrations, their prompts built from the workflow's templates with tokenizer $1
demos() {
  "$DF" data marft-demos --workflow $WORKFLOW --in "$OUT/data/train.jsonl" --out "$OUT/data/demos.jsonl" \
      --tokenizer "$1" --bare-answers $BARE --seed 1
}

if [ -z "$SFT_FROM" ]; then
  rm -rf "$OUT" && mkdir -p "$OUT/data"
  DATA="$OUT/data"
  log "1/4 synthetic task: $(cat $EX/task.args), worked solutions; planner and solver demonstrations"
  # shellcheck disable=SC2046
  "$DF" data synth --out "$DATA/train.jsonl" --split train --seed 1 $(cat $EX/task.args) --n $N_TRAIN
  # shellcheck disable=SC2046
  "$DF" data synth --out "$DATA/test.jsonl" --split test --seed 2 $(cat $EX/task.args) \
      --exclude "$DATA/train.jsonl" --n $N_TEST
  # The prompts are chat-templated text, and the tokenizer is trained on them: a first tokenizer (any
  # trained by `data tokenizer` has the same chat template) renders them, the real one is trained on
  # the result, and the demonstrations are made again with it (the same text).
  "$DF" data synth --out "$OUT/template/rows.jsonl" --seed 3 --n 16
  "$DF" data tokenizer --in "$OUT/template/rows.jsonl" --vocab-size 300 --out "$OUT/template/tokenizer"
  demos "$OUT/template/tokenizer"

  log "2/4 tokenizer (byte-level BPE on the agents' prompts and demonstrations) and a random Qwen2 model"
  "$DF" data tokenizer --in "$DATA/demos.jsonl" --response-key response --vocab-size 512 --out "$OUT/tokenizer"
  demos "$OUT/tokenizer"
  "$DF" init-model --config $EX/model_config.json --tokenizer "$OUT/tokenizer" --out "$OUT/init" --seed 1

  log "3/4 SFT warm start of both agents (one model on both roles' demonstrations)"
  "$DF" sft $EX/sft_marft.yaml data.train_files="[$DATA/demos.jsonl]" model.partial_pretrain="$OUT/init" \
      trainer.default_local_dir="$OUT/sft" >&2
  SFT=$(latest_ckpt "$OUT/sft")
else
  DATA="$SFT_FROM/data"
  ckpt="$SFT_FROM/sft/latest_checkpointed_iteration.txt"
  if [ ! -f "$ckpt" ] || [ ! -f "$DATA/train.jsonl" ] || [ ! -f "$DATA/test.jsonl" ]; then
    echo "make demo: DEMO_SFT=$DEMO_SFT holds no earlier marft demo run (needs marft/data/{train,test}.jsonl, marft/sft/)" >&2
    exit 2
  fi
  SFT=$(latest_ckpt "$SFT_FROM/sft")
  log "1-3/4 reusing the data and SFT model of $SFT_FROM ($SFT)"
fi

log "4/4 MARFT through the DAG worker ($EX/marft.yaml, $WORKFLOW): validation before the first step and after the last"
mkdir -p "$OUT" && rm -rf "${OUT:?}/rl"
read -r -a EXTRA <<< "${DEMO_TRAIN_ARGS:-}"
demo_launch
${LAUNCH[@]+"${LAUNCH[@]}"} "$DF" train $EX/marft.yaml data.train_files="[$DATA/train.jsonl]" \
    data.val_files="[$DATA/test.jsonl]" actor_rollout_ref.model.path="$SFT" \
    trainer.default_local_dir="$OUT/rl" ${EXTRA[@]+"${EXTRA[@]}"} >&2

# the held-out accuracy of each validation in metrics.jsonl, in order: the core validation metric of the
# synthetic source (acc, or reward where a scorer gives no acc), whatever prefix the run gives it
METRICS="$OUT/rl/metrics.jsonl"
mapfile -t accs < <(grep -oE '"[A-Za-z0-9_]*val-core/synthetic/arithmetic/(acc|reward)/mean@1": *[-+0-9.eE]+' \
                    "$METRICS" | sed 's/.*: *//')
if [ "${#accs[@]}" -lt 2 ]; then
  echo "make demo: $METRICS has ${#accs[@]} validation(s) of synthetic/arithmetic; need the one before training" \
       "(trainer.val_before_train) and the last step's (trainer.test_freq)" >&2
  exit 1
fi
log "done in $(( $(date +%s) - start )) s; metrics in $METRICS"
printf 'heldout accuracy (planner+solver): before %.3f after %.3f\n' "${accs[0]}" "${accs[${#accs[@]} - 1]}"
