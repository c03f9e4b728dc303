#!/usr/bin/env bash
# The CUDA backend as a module (docs/cuda.md "The module"): the distflow CLI of a CUDA build links
# none of the CUDA libraries and loads BUILD/libdistflow_cuda.so only when asked for the GPU.
# Checks, none of which needs a GPU:
#   1. `ldd distflow` names no libcudart / libcublas / libnccl;
#   2. the module exports df_cuda_module_get only, and every df_* it leaves undefined is in the
#      CLI's dynamic symbol table (else dlopen's RTLD_NOW fails on a user's machine);
#   3. `distflow env` loads it: cuda_devices / cuda_nccl lines, no cuda_module line;
#   4. a copy of the CLI without the module beside it: `env` and `train trainer.device=cuda` name
#      the missing libdistflow_cuda.so (train exits non-zero).
# Usage: scripts/check-cuda-module.sh BUILD_DIR. Run by ctest (test_cuda_module) in CUDA builds.
set -euo pipefail
build=$(cd "${1:?usage: check-cuda-module.sh BUILD_DIR}" && pwd)
cli=$build/distflow module=$build/libdistflow_cuda.so
fail() { printf 'check-cuda-module: FAIL: %s\n' "$*" >&2; exit 1; }
[ -x "$cli" ] && [ -f "$module" ] || fail "$cli or $module missing"

linked=$(ldd "$cli" | grep -E -o 'lib(cudart|cublas|cublasLt|nccl)\.so[^ ]*' || true)
[ -z "$linked" ] || fail "the CLI links $(echo $linked)"

exported=$(nm -D --defined-only "$module" | awk '$2 ~ /^[TDBR]$/ && $3 ~ /^df_/ {print $3}')
[ "$exported" = df_cuda_module_get ] || fail "the module exports: $(echo $exported)"
missing=$(comm -23 <(nm -D --undefined-only "$module" | awk '$2 ~ /^df_/ {print $2}' | sort -u) \
                   <(nm -D --defined-only "$cli" | awk '{print $3}' | sort -u))
[ -z "$missing" ] || fail "the module needs what the CLI does not export: $(echo $missing)"

env_out=$("$cli" env)
grep -q '^backends: cpu, cuda$' <<<"$env_out" || fail "env: no 'backends: cpu, cuda' line"
grep -q '^cuda_devices: [0-9]' <<<"$env_out" || fail "env did not load the module: $(grep cuda <<<"$env_out")"
grep -q '^cuda_nccl: ' <<<"$env_out" || fail "env: no cuda_nccl line"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$cli" "$tmp/distflow"
cd "$tmp"
grep -q '^cuda_module: unavailable (.*/libdistflow_cuda.so: ' <<<"$(./distflow env)" ||
  fail "env without the module: $(./distflow env | grep cuda)"
# the smallest job that reaches the backend: a synthetic task, its tokenizer, a 1-layer model
./distflow data synth --out d.jsonl --n 8 >/dev/null
./distflow data tokenizer --in d.jsonl --out tok --vocab-size 300 >/dev/null
printf '%s' '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 300,
  "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
  "num_key_value_heads": 1, "max_position_embeddings": 256, "tie_word_embeddings": true}' >c.json
./distflow init-model --config c.json --tokenizer tok --out m >/dev/null
if out=$(./distflow train data.train_files=[d.jsonl] data.val_files=[] actor_rollout_ref.model.path=m \
    trainer.device=cuda trainer.default_local_dir=out data.train_batch_size=2 data.max_prompt_length=96 \
    data.max_response_length=16 algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 2>&1); then
  fail "train trainer.device=cuda without the module succeeded"
fi
grep -q 'loading the CUDA backend: .*/libdistflow_cuda.so' <<<"$out" || fail "train without the module: $out"
echo "check-cuda-module: the CLI links no CUDA library; the module loads on demand; its absence is named"
