#!/usr/bin/env bash
# The CUDA backend's GPU checks, for a lent GPU machine that has the CUDA toolkit but none of
# distflow's Debian libraries (docs/cuda.md):
#   scripts/device-cuda.sh pack BUILD   here: copy BUILD's test_cuda_*, test_backend_ops, bench_cuda_*, the CLI and its CUDA module
#                                       and the shared libraries they need (not CUDA's own)
#                                       into .devpack/ (git-ignored, carried to the machine)
#   scripts/device-cuda.sh run [OUTDIR] there: the conformance tests, then the benchmark and
#                                       PyTorch on the same ops; logs in OUTDIR; a table last.
#                                       NO_BENCH=1: tests only; BENCH=ops|model: one of the two
#                                       benchmarks (default both); SANITIZE=1: then each test again
#                                       under compute-sanitizer memcheck and racecheck;
#                                       TESTS=GLOBS: only those tests (default test_cuda_*
#                                       test_backend_ops: every seam entry on the GPU)
#   scripts/device-cuda.sh grpo [OUTDIR] there: `distflow train` with trainer.device=cuda: the
#                                       demo configs, 2 steps each of GRPO, PPO, LoRA GRPO and the
#                                       optimal token baseline (its sums of p^2 from the CUDA head;
#                                       DEMO_ALGOS to choose), the same on the CPU, metrics side by
#                                       side, then 2 steps of the Qwen2.5-0.5B shape on
#                                       GSM8K with the Qwen2.5 tokenizer (packed from ../shared),
#                                       then bench_grpo_step --device cuda (NO_STEP=1: not)
#   scripts/device-cuda.sh all [OUTDIR] there: what issue 18 still needs, in one call of at most
#                                       BUDGET seconds (default 540; a lease has 15 minutes of
#                                       device time, its start included): the conformance and
#                                       golden tests, 2 GRPO steps of the demo on the GPU, 2 of the
#                                       Qwen2.5-0.5B shape, then the model benchmark beside PyTorch,
#                                       each stage cut to what is left of the budget
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
  local build=${1:?usage: device-cuda.sh pack BUILD}
  rm -rf .devpack && mkdir -p .devpack/bin .devpack/lib
  grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
  cp "$build"/test_cuda_* "$build"/test_backend_ops "$build"/bench_cuda_* "$build"/bench_grpo_step \
    "$build"/distflow "$build"/libdistflow_cuda.so .devpack/bin/
  # what `grpo` reads of ../shared (which does not travel): the Qwen2.5 tokenizer, 64 GSM8K rows
  mkdir -p .devpack/data/qwen2.5
  cp ../shared/data/tokenizers/qwen2.5/tokenizer.json ../shared/data/tokenizers/qwen2.5/tokenizer_config.json \
    .devpack/data/qwen2.5/
  head -64 ../shared/data/gsm8k/train.jsonl >.devpack/data/gsm8k_train.jsonl
  xz -T2 -6 .devpack/data/qwen2.5/tokenizer.json
  # every library the binaries load but the device image lacks (it has CUDA 13 with cuBLAS and
  # NCCL, a C/C++ runtime at least as new as Debian 12's, and PyTorch)
  ldd .devpack/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda[^/]*|libcublas[^/]*|libcudart[^/]*|libnccl[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" .devpack/lib/; done
  xz -T2 -6 .devpack/lib/*.so* .devpack/bin/* # the tree that travels is at most 64 MiB
  du -sh .devpack
}

# Unpack the carried libraries; sets `libs` (LD_LIBRARY_PATH for distflow's binaries only:
# PyTorch keeps its own). cuBLAS 13 from the toolkit, or else wherever the image has it.
unpack() {
  mkdir -p .devpack/lib
  for f in .devpack/lib/*.xz .devpack/bin/*.xz .devpack/data/*/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
  chmod +x .devpack/bin/*
  local cublas nccl
  cublas=$(find /usr/local/cuda/lib64 /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)
  nccl=$(find /usr/local/cuda/lib64 /usr/local /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
  libs="$PWD/.devpack/lib:${cublas:+$(dirname "$cublas"):}${nccl:+$(dirname "$nccl"):}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}

# The packed tests TESTS names (space-separated globs).
test_bins() {
  local g
  for g in ${TESTS:-test_cuda_* test_backend_ops}; do ls -d .devpack/bin/$g 2>/dev/null; done
}

run() {
  local out=${1:-${OUT:-/tmp/cuda-out}} rc=0 t n libs
  mkdir -p "$out"
  export DF_SOURCE_DIR=$PWD # the golden fixtures of this copy of the tree
  unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$out/gpu.txt"
  : >"$out/summary.txt"
  LD_LIBRARY_PATH=$libs ldd .devpack/bin/test_cuda_ops | grep 'not found' >>"$out/summary.txt"
  for t in $(test_bins); do
    n=$(basename "$t")
    LD_LIBRARY_PATH=$libs timeout 300 "$t" >"$out/$n.log" 2>&1
    local r=$?
    echo "$n: exit $r" >>"$out/summary.txt"
    grep -E 'rel err|\|\|err|SKIP|\[  ERROR|\[  FAILED|Failure|failed|^  cuda ' "$out/$n.log" >>"$out/summary.txt"
    [ $r -eq 0 ] || rc=1
  done
  : >"$out/bench.txt"
  : >"$out/torch.txt"
  if [ -z "${NO_BENCH:-}" ] && [ "${BENCH:-ops}" = ops ]; then
    LD_LIBRARY_PATH=$libs timeout 240 .devpack/bin/bench_cuda_backend ${BENCH_ARGS:-} >"$out/bench.txt" 2>&1 || rc=1
    timeout 240 python3 bench/torch_cuda_ops.py ${BENCH_ARGS:-} >"$out/torch.txt" 2>&1 ||
      echo "torch baseline failed (see torch.txt)" >>"$out/torch.txt"
  fi
  : >"$out/model.txt"
  if [ -z "${NO_BENCH:-}" ] && [ "${BENCH:-model}" = model ]; then
    LD_LIBRARY_PATH=$libs timeout 300 .devpack/bin/bench_cuda_model ${MODEL_ARGS:-} >"$out/model.txt" 2>&1 || rc=1
    timeout 240 python3 bench/torch_cuda_model.py ${MODEL_ARGS:-} >>"$out/model.txt" 2>&1 ||
      echo "torch model baseline failed" >>"$out/model.txt"
  fi
  if [ -n "${SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null; then
    for t in $(test_bins); do
      n=$(basename "$t")
      for tool in memcheck racecheck; do # logs outside OUT (a lease returns 8 files); a failure's tail in the summary
        local log=/tmp/sanitizer.$n.$tool
        LD_LIBRARY_PATH=$libs timeout 200 compute-sanitizer --tool $tool "$t" >"$log" 2>&1
        local r=$?
        echo "$tool $n: exit $r $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)" >>"$out/summary.txt"
        # a failure, or errors reported (also the CUDA API errors an error-path test provokes)
        if [ $r -ne 0 ] || ! grep -qE 'SUMMARY: 0 (errors|hazards)' "$log"; then
          grep -E -A3 '^========= (Program hit|Invalid|Race|Error)' "$log" | head -40 >>"$out/summary.txt"
        fi
      done
    done
  fi
  cat "$out/gpu.txt" "$out/summary.txt" "$out/bench.txt"
  head -1 "$out/torch.txt"
  echo "== distflow vs PyTorch on the same GPU (PyTorch time / distflow time)"
  grep '_ms:' "$out/bench.txt" | while read -r k v; do
    k=${k%:}
    t=$(grep -E "^torch_${k}:" "$out/torch.txt" | awk '{print $2}')
    [ -n "$t" ] && awk -v k="$k" -v a="$v" -v b="$t" 'BEGIN{printf "%-28s %10.4f ms | torch %10.4f ms | %.2fx\n", k, a, b, b / a}'
  done
  grep -E '^torch_.*bf16' "$out/torch.txt"
  echo "== the whole model (bench_cuda_model, bench/torch_cuda_model.py)"
  cat "$out/model.txt"
  echo "== the whole model, distflow vs PyTorch in the same dtype (PyTorch time / distflow time)"
  grep -E '^(logprob|update|prefill|decode)_(bf16|f32)_ms(_per_step)?:' "$out/model.txt" | while read -r k v; do
    k=${k%:}
    t=$(grep -E "^torch_${k}:" "$out/model.txt" | awk '{print $2}')
    [ -n "$t" ] && awk -v k="$k" -v a="$v" -v b="$t" 'BEGIN{printf "%-28s %10.3f ms | torch %10.3f ms | %.2fx\n", k, a, b, b / a}'
  done
  return $rc
}

# Metrics of `train` runs side by side: grpo_table METRIC_FILE... (a column per file, a row per
# step and metric)
grpo_table() {
  python3 - "$@" <<'PY'
import json, sys
runs = [[json.loads(l) for l in open(f) if l.strip()] for f in sys.argv[1:]]
keys = ["critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/entropy",
        "critic/vf_loss", "critic/vpred_mean", "critic/grad_norm", "critic/values/mean",
        "actor/ppo_kl", "actor/grad_norm", "actor/kl_loss", "training/rollout_probs_diff_mean",
        "variance_proxy/expected_w", "variance_proxy/proxy2_total_power",
        "timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor",
        "timing_s/step", "perf/throughput", "perf/mfu/actor", "perf/mfu/critic",
        "perf/max_memory_allocated_gb", "perf/cpu_memory_used_gb"]
print("%-36s" % "step metric" + "".join("%22s" % f.split("/")[-2] for f in sys.argv[1:]))
for step in range(max(len(r) for r in runs)):
    for k in keys:
        vals = [r[step].get(k) if step < len(r) else None for r in runs]
        if any(v is not None for v in vals):
            print("%-36s" % ("%d %s" % (step + 1, k)) +
                  "".join("%22s" % ("-" if v is None else "%.6g" % v) for v in vals))
PY
}

grpo() {
  local out=${1:-${OUT:-/tmp/cuda-out}} D=/tmp/dfgrpo libs dev rc=0
  mkdir -p "$out" && rm -rf "$D" && mkdir -p "$D"
  unpack
  local DF=(env LD_LIBRARY_PATH="$libs" OMP_WAIT_POLICY=passive .devpack/bin/distflow)
  local task
  task=$(cat examples/demo/task.args)
  # 1. the demo config (examples/demo/grpo.yaml) from a random init: 2 steps on each device (a
  # random init scores 0 everywhere: the entropy bonus gives the update a gradient to follow)
  # shellcheck disable=SC2086
  { "${DF[@]}" data synth --out $D/train.jsonl --split train --seed 1 $task --bare-answers 0.5 --n 2000 &&
    "${DF[@]}" data synth --out $D/test.jsonl --split test --seed 2 $task --exclude $D/train.jsonl --n 100 &&
    "${DF[@]}" data tokenizer --in $D/train.jsonl --vocab-size 512 --out $D/tok &&
    "${DF[@]}" init-model --config examples/demo/model_config.json --tokenizer $D/tok --out $D/init --seed 1
  } >"$out/grpo_setup.log" 2>&1 || { echo "demo setup failed"; tail "$out/grpo_setup.log"; rc=1; }
  local algo run
  for algo in ${DEMO_ALGOS:-grpo ppo grpo_lora otb}; do
    for dev in ${DEVICES:-cuda cpu}; do
      run=${algo}_$dev
      timeout "${DEMO_TIMEOUT:-200}" "${DF[@]}" train examples/demo/$algo.yaml data.train_files="[$D/train.jsonl]" \
        data.val_files="[$D/test.jsonl]" actor_rollout_ref.model.path=$D/init trainer.default_local_dir=$D/$run \
        trainer.total_training_steps=2 trainer.save_freq=2 trainer.val_before_train=false \
        actor_rollout_ref.actor.entropy_coeff=0.01 'trainer.logger=[console,file]' trainer.device=$dev >"$out/$run.log" 2>&1
      echo "demo $algo trainer.device=$dev: exit $? ($(grep -c . $D/$run/metrics.jsonl 2>/dev/null) metric lines)"
      grep -E 'error|trainer.device' "$out/$run.log" | head -3
    done
    ls $D/${algo}_cuda/global_step_2/* 2>/dev/null | tr '\n' ' '; echo
    grpo_table $D/${algo}_*/metrics.jsonl | tee "$out/${algo}_table.txt"
  done
  # 1b. the demo's SFT warm start (examples/demo/sft.yaml), 2 steps on each device: the losses must agree
  # within the forward's rounding (bf16 on both where the CPU has bf16 kernels, else compare the dtypes)
  for dev in ${DEVICES:-cuda cpu}; do
    timeout "${DEMO_TIMEOUT:-200}" "${DF[@]}" sft examples/demo/sft.yaml data.train_files="[$D/train.jsonl]" \
      model.partial_pretrain=$D/init trainer.default_local_dir=$D/sft_$dev trainer.total_training_steps=2 \
      'trainer.logger=[console]' trainer.device=$dev >"$out/sft_$dev.log" 2>&1
    echo "demo sft trainer.device=$dev: exit $?"
    grep -E '^sft step|error|matmuls' "$out/sft_$dev.log" | head -4
  done
  # 2. the Qwen2.5-0.5B shape, random weights, Qwen2.5 tokenizer, GSM8K (examples/gsm8k/grpo.yaml);
  # Q05=none skips it
  [ "${Q05:-}" = none ] && return $rc
  { "${DF[@]}" data gsm8k --in .devpack/data/gsm8k_train.jsonl --out $D/gsm8k.jsonl --split train &&
    "${DF[@]}" init-model --config "${Q05:-examples/models/qwen2.5-0.5b.json}" \
      --tokenizer .devpack/data/qwen2.5 --out $D/q05 --seed 1
  } >"$out/q05_setup.log" 2>&1 || { echo "0.5B setup failed"; tail "$out/q05_setup.log"; rc=1; }
  timeout "${Q05_TIMEOUT:-300}" "${DF[@]}" train examples/gsm8k/grpo.yaml data.train_files="[$D/gsm8k.jsonl]" \
    data.val_files="[$D/gsm8k.jsonl]" actor_rollout_ref.model.path=$D/q05 trainer.default_local_dir=$D/q05_out \
    trainer.total_training_steps=2 data.train_batch_size=8 actor_rollout_ref.rollout.n=4 \
    data.max_response_length=64 actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.entropy_coeff=0.01 'trainer.logger=[console,file]' \
    trainer.device=${Q05_DEVICE:-cuda} >"$out/q05.log" 2>&1
  echo "Qwen2.5-0.5B shape grpo: exit $? ($(grep -c . $D/q05_out/metrics.jsonl 2>/dev/null) metric lines)"
  grep -E 'error|trainer.device' "$out/q05.log" | head -3
  grpo_table $D/q05_out/metrics.jsonl | tee "$out/q05_table.txt"
  # 3. one whole GRPO step of the 0.5B shape on the GPU (bench_grpo_step: 8 prompts x 8, 256
  # tokens, bf16 and forced float32, per-stage timings); NO_STEP=1 skips it
  if [ -z "${NO_STEP:-}" ]; then
    LD_LIBRARY_PATH=$libs timeout "${STEP_TIMEOUT:-400}" .devpack/bin/bench_grpo_step --device cuda \
      --distflow .devpack/bin/distflow --workdir $D/step ${STEP_ARGS:-} >"$out/grpo_step.txt" 2>&1
    echo "bench_grpo_step --device cuda: exit $?"
    grep -E '^[a-z0-9_./]+: ' "$out/grpo_step.txt" | head -40
  fi
  return $rc
}

# Seconds left of the budget for a stage, at most $1 (at least 1: a spent budget still logs).
left() {
  local l=$((${BUDGET:-540} - SECONDS))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}

all() {
  local out=${1:-${OUT:-/tmp/cuda-out}} rc=0
  mkdir -p "$out"
  SECONDS=0
  NO_BENCH=1 timeout "$(left 240)" bash "$0" run "$out" || rc=1
  echo "== tests done at ${SECONDS}s"
  DEMO_ALGOS=grpo DEVICES=cuda NO_STEP=1 DEMO_TIMEOUT="$(left 100)" Q05_TIMEOUT="$(left 200)" \
    timeout "$(left 300)" bash "$0" grpo "$out" || rc=1
  echo "== grpo done at ${SECONDS}s"
  local t
  t=$(left 200)
  if [ "$t" -gt 60 ]; then
    unpack
    LD_LIBRARY_PATH=$libs timeout $((t / 2)) .devpack/bin/bench_cuda_model ${MODEL_ARGS:-} >"$out/model.txt" 2>&1 || rc=1
    timeout $((t / 2)) python3 bench/torch_cuda_model.py ${MODEL_ARGS:-} >>"$out/model.txt" 2>&1 ||
      echo "torch model baseline failed" >>"$out/model.txt"
    cat "$out/model.txt"
  fi
  echo "== all done at ${SECONDS}s of ${BUDGET:-540}"
  return $rc
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  grpo) shift; grpo "$@" ;;
  all) shift; all "$@" ;;
  *) echo "usage: $0 pack BUILD | run [OUTDIR] | grpo [OUTDIR] | all [OUTDIR]" >&2; exit 2 ;;
esac
