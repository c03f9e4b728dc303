#!/usr/bin/env bash
# The CUDA backend's GPU checks, for a lent GPU machine that has the CUDA toolkit but none of
# distflow's Debian libraries (docs/cuda.md):
#   scripts/device-cuda.sh pack BUILD   here: copy BUILD's test_cuda_* and bench_cuda_backend
#                                       and the shared libraries they need (not CUDA's own)
#                                       into .devpack/ (git-ignored, carried to the machine)
#   scripts/device-cuda.sh run [OUTDIR] there: the conformance tests, then the benchmark and
#                                       PyTorch on the same ops; logs in OUTDIR; a table last
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
  local build=${1:?usage: device-cuda.sh pack BUILD}
  rm -rf .devpack && mkdir -p .devpack/bin .devpack/lib
  grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
  cp "$build"/test_cuda_* "$build"/bench_cuda_backend .devpack/bin/
  # every non-CUDA, non-libc library the binaries load (the device image has CUDA 13 itself)
  ldd .devpack/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda[^/]*|libcublas[^/]*|libcudart[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" .devpack/lib/; done
  xz -T2 -6 .devpack/lib/*.so*
  du -sh .devpack
}

run() {
  local out=${1:-${OUT:-/tmp/cuda-out}} rc=0
  mkdir -p "$out" .devpack/lib
  for f in .devpack/lib/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
  export LD_LIBRARY_PATH="$PWD/.devpack/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv |
    tee "$out/gpu.txt"
  for t in .devpack/bin/test_cuda_*; do
    echo "== $(basename "$t")"
    timeout 300 "$t" >"$out/$(basename "$t").log" 2>&1
    local r=$?
    grep -E 'rel err|err\|\||PASSED|FAILED|SKIP|\[  ERROR|\[  FAILED|Failure|error' "$out/$(basename "$t").log" | head -60
    echo "== $(basename "$t") exit $r"
    [ $r -eq 0 ] || rc=1
  done
  timeout 240 .devpack/bin/bench_cuda_backend ${BENCH_ARGS:-} >"$out/bench.txt" 2>&1 || rc=1
  timeout 240 python3 bench/torch_cuda_ops.py ${BENCH_ARGS:-} >"$out/torch.txt" 2>&1 || echo "torch baseline failed (see torch.txt)"
  echo "== benchmark (distflow | PyTorch on the same GPU | PyTorch time / distflow time)"
  cat "$out/bench.txt"
  head -1 "$out/torch.txt"
  grep '_ms:' "$out/bench.txt" | while read -r k v; do
    k=${k%:}
    t=$(grep -E "^torch_${k}:" "$out/torch.txt" | awk '{print $2}')
    [ -n "$t" ] && awk -v k="$k" -v a="$v" -v b="$t" 'BEGIN{printf "%-28s %10.4f ms | torch %10.4f ms | %.2fx\n", k, a, b, b / a}'
  done
  return $rc
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 pack BUILD | run [OUTDIR]" >&2; exit 2 ;;
esac
