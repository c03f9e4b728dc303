#!/usr/bin/env bash
# The CUDA backend's GPU checks, for a lent GPU machine that has the CUDA toolkit but none of
# distflow's Debian libraries (docs/cuda.md):
#   scripts/device-cuda.sh pack BUILD   here: copy BUILD's test_cuda_* and bench_cuda_*
#                                       and the shared libraries they need (not CUDA's own)
#                                       into .devpack/ (git-ignored, carried to the machine)
#   scripts/device-cuda.sh run [OUTDIR] there: the conformance tests, then the benchmark and
#                                       PyTorch on the same ops; logs in OUTDIR; a table last.
#                                       NO_BENCH=1: tests only; BENCH=ops|model: one of the two
#                                       benchmarks (default both); SANITIZE=1: then each test again
#                                       under compute-sanitizer memcheck and racecheck;
#                                       TESTS=GLOB: only those tests (default test_cuda_*)
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
  local build=${1:?usage: device-cuda.sh pack BUILD}
  rm -rf .devpack && mkdir -p .devpack/bin .devpack/lib
  grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
  cp "$build"/test_cuda_* "$build"/bench_cuda_* .devpack/bin/
  # every library the binaries load but the device image lacks (it has CUDA 13 with cuBLAS and
  # NCCL, a C/C++ runtime at least as new as Debian 12's, and PyTorch)
  ldd .devpack/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda[^/]*|libcublas[^/]*|libcudart[^/]*|libnccl[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" .devpack/lib/; done
  xz -T2 -6 .devpack/lib/*.so*
  du -sh .devpack
}

run() {
  local out=${1:-${OUT:-/tmp/cuda-out}} rc=0 t n
  mkdir -p "$out" .devpack/lib
  export DF_SOURCE_DIR=$PWD # the golden fixtures of this copy of the tree
  for f in .devpack/lib/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
  # for distflow's binaries only: PyTorch keeps its own libraries. cuBLAS 13 from the toolkit, or
  # else from wherever the image has it (PyTorch's wheels)
  local cublas nccl
  cublas=$(find /usr/local/cuda/lib64 /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)
  nccl=$(find /usr/local/cuda/lib64 /usr/local /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
  local libs="$PWD/.devpack/lib:${cublas:+$(dirname "$cublas"):}${nccl:+$(dirname "$nccl"):}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$out/gpu.txt"
  : >"$out/summary.txt"
  LD_LIBRARY_PATH=$libs ldd .devpack/bin/test_cuda_ops | grep 'not found' >>"$out/summary.txt"
  for t in .devpack/bin/${TESTS:-test_cuda_*}; do
    n=$(basename "$t")
    LD_LIBRARY_PATH=$libs timeout 300 "$t" >"$out/$n.log" 2>&1
    local r=$?
    echo "$n: exit $r" >>"$out/summary.txt"
    grep -E 'rel err|\|\|err|SKIP|\[  ERROR|\[  FAILED|Failure|failed' "$out/$n.log" >>"$out/summary.txt"
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
    LD_LIBRARY_PATH=$libs timeout 240 .devpack/bin/bench_cuda_model ${MODEL_ARGS:-} >"$out/model.txt" 2>&1 || rc=1
    timeout 240 python3 bench/torch_cuda_model.py ${MODEL_ARGS:-} >>"$out/model.txt" 2>&1 ||
      echo "torch model baseline failed" >>"$out/model.txt"
  fi
  if [ -n "${SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null; then
    for t in .devpack/bin/${TESTS:-test_cuda_*}; do
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
  return $rc
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 pack BUILD | run [OUTDIR]" >&2; exit 2 ;;
esac
