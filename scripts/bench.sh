#!/usr/bin/env bash
# make bench: the engine side by side with PyTorch (docs/performance.md, issue 14). Every row
# is its own process (its peak RSS is its own) and prints `metric: value` lines, the ratio
# against PyTorch measured in the same run, which kernels each side used, and its targets.
#
#   scripts/bench.sh [BUILD]          every row: the demo shape, the Qwen3-MoE shapes at the
#                                     demo's sizes, then the Qwen2.5-0.5B shape
#                                     (about 25 minutes on 2 idle cores, MoE rows included)
#   BENCH_QUICK=1 scripts/bench.sh    the demo shape only (about 2 minutes)
#   BENCH_MOE=1 BENCH_QUICK=1 ...     the demo shape and the Qwen3-MoE shapes (qwen3-moe-demo:
#                                     16 experts top 4; qwen3-moe-e64: 64 top 8; the model rows
#                                     beside PyTorch's Qwen3MoeSparseMoeBlock, docs/performance.md
#                                     "Qwen3-MoE rows"); BENCH_MOE=0 skips them in a full run
#   BENCH_ALL=1 scripts/bench.sh      then the component benchmarks too (every other build/bench_*)
#   BENCH_ASYNC=1 scripts/bench.sh    then the asynchronous runtime against the synchronous one
#                                     (bench_async: demo and longtail at 2 and 4 ranks, about
#                                     16 minutes on 2 cores; bench_async_weights: one weight update
#                                     per wire format; BENCH_ALL=1 runs them too; docs/async.md)
# Knobs (environment):
#   DF_BENCH_DTYPE=f32|bf16           the engine's path for the model rows (default: what
#                                     distflow train runs here, bf16 where the CPU has native bf16
#                                     matmuls; f32 forces float32 as param_dtype fp32 and
#                                     rollout.dtype float32 do)
#   BENCH_F32=1                       also each model row with the engine forced to float32
#                                     (--dtype f32, engine only: --torch none)
#   BENCH_TORCH=f32,bf16              PyTorch dtypes to run beside each row (none: skip torch)
#   BENCH_GRPO_RESPONSE=256           response tokens of the 0.5B GRPO step (default 32; 256 is
#                                     issue 14's step, about 25 minutes a run on 2 cores)
#   DF_BENCH_BF16_OVERRIDES, DF_BENCH_F32_OVERRIDES   the GRPO step's two configs (bench/grpo_step.c)
# One row by hand, e.g.:  build/bench_rows decode --shape qwen2.5-0.5b --iters 3
#                         build/bench_grpo_step --shape demo --response 64
set -euo pipefail
BUILD=${1:-build}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$(dirname "$0")/.."
TORCH=${BENCH_TORCH:-f32,bf16}
LOG=$BUILD/bench.log
: > "$LOG"

# Run one row, its output to the terminal and the log; remember its lines for the summary.
row() {
  echo "== $*" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
}
# The value of `key: value` in the log's last block for key (empty when absent).
value() { awk -v k="$1:" '$1 == k {v = $2} END {print v}' "$LOG"; }

# The Qwen3-MoE shapes run after the demo's (whose GEMM peak they share) unless BENCH_QUICK is
# set; BENCH_MOE=1 runs them under BENCH_QUICK too, BENCH_MOE=0 never.
moe="qwen3-moe-demo qwen3-moe-e64"
case "${BENCH_MOE:-}" in
  0) moe="" ;;
  "") [ -n "${BENCH_QUICK:-}" ] && moe="" ;;
esac

start=$(date +%s)
for shape in demo $moe qwen2.5-0.5b; do
  [ "$shape" = qwen2.5-0.5b ] && [ -n "${BENCH_QUICK:-}" ] && break
  echo "#### shape $shape" | tee -a "$LOG"
  case "$shape" in
    qwen3-moe-*) ;; # the GEMM row is the same 2048^3 for every shape: the demo's peak stands
    *)
      row "$BUILD/bench_rows" gemm --shape "$shape" --torch "$TORCH"
      peak=$(value gemm_bf16_best_gflop_per_s) ;;
  esac
  for r in prefill decode logprob update; do
    row "$BUILD/bench_rows" "$r" --shape "$shape" --torch "$TORCH" --peak-gflops "${peak:-0}"
    if [ -n "${BENCH_F32:-}" ]; then
      row "$BUILD/bench_rows" "$r" --shape "$shape" --dtype f32 --torch none --peak-gflops "${peak:-0}"
    fi
  done
  case "$shape" in
    demo) row "$BUILD/bench_grpo_step" --shape demo --response 64 ;;
    qwen3-moe-*) # the engine over PyTorch, each row's wall and per-CPU-second ratios, together
      sum=$(awk -v s="#### shape $shape" '$0 == s {on = 1; next} /^#### / {on = 0}
                on && /^ratio_[a-z]+_(cpu_)?vs_torch_/ {print "  " $0}' "$LOG")
      printf '== %s: engine / PyTorch (wall, per CPU-second)\n%s\n' "$shape" "$sum" | tee -a "$LOG" ;;
    *) row "$BUILD/bench_grpo_step" --shape qwen2.5-0.5b --response "${BENCH_GRPO_RESPONSE:-32}" ;;
  esac
done

if [ -n "${BENCH_ALL:-}" ]; then
  for b in "$BUILD"/bench_*; do
    case "$(basename "$b")" in bench_rows|bench_grpo_step|bench_grpo_*|bench_async*) continue ;; esac
    [ -x "$b" ] && [ -f "$b" ] || continue
    row "$b"
  done
fi

if [ -n "${BENCH_ASYNC:-}${BENCH_ALL:-}" ]; then
  echo "#### asynchronous runtime (issue 16)" | tee -a "$LOG"
  for shape in demo longtail; do
    for np in 2 4; do row "$BUILD/bench_async" --shape "$shape" --np "$np"; done
  done
  # one weight update per wire format, trainer rank 0 -> rollout rank 1 (about 2 minutes)
  for shape in demo qwen2.5-0.5b; do
    OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      row mpiexec --oversubscribe -np 2 "$BUILD/bench_async_weights" --shape "$shape"
  done
fi

echo "#### targets (issue 14; met or not)" | tee -a "$LOG"
awk '/^#### shape/ {s = $3} /^(target|ceiling)_/ {print s ": " $0}' "$LOG" | tee "$BUILD/bench-targets.txt"
echo "bench: $(( $(date +%s) - start )) s; full output in $LOG"
