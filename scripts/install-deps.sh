#!/usr/bin/env bash
# Install the Debian packages distflow builds against, if any are missing.
#   scripts/install-deps.sh          what make build / test / demo need
#   scripts/install-deps.sh --fuzz   that, and clang with its libFuzzer runtime for make fuzz
#                                    (not pulled by the others; make test-asan uses gcc's sanitizers)
#   scripts/install-deps.sh --bench  that, and PyTorch with an optimised BLAS: the baseline make bench
#                                    runs beside the engine (docs/performance.md)
# As root it runs apt-get, quietly: apt's warnings and errors reach the terminal, and if a step
# fails its whole output is shown. Otherwise it prints the exact command to run as root and exits 1.
# scripts/check-fresh.sh checks on a fresh Debian 12 root that this is all `make test` and
# `make demo` need.
set -euo pipefail

PKGS=(
  make                # the README's entry point; a fresh Debian has no make (build-essential has it too)
  build-essential cmake pkg-config
  libdnnl-dev         # oneDNN: matmul
  libyaml-dev         # config files
  libjansson-dev      # JSON: config.json, tokenizer.json, datasets, metrics
  libpcre2-dev        # tokenizer pre-tokenizer regex
  libutf8proc-dev     # NFC normalisation
  libsnappy-dev libzstd-dev zlib1g-dev liblz4-dev libbrotli-dev # Parquet datasets: the page codecs
  libelf-dev          # plugin refs checked from the library's ELF symbol table, without loading it
  libprotobuf-c-dev   # TensorBoard event files (trainer.logger=[tensorboard]): protobuf-c runtime
  protobuf-c-compiler # protoc-c: compiles src/logging/tb_event.proto at build time
  protobuf-compiler   # Google's protoc: test_loggers decodes the event files with it (an independent reader)
  libplplot-dev       # distflow plot: PLplot
  plplot-driver-cairo # distflow plot: PLplot's pngcairo device (a run-time plug-in)
  libcmocka-dev       # unit tests
  libomp-dev          # OpenMP for clang builds (gcc ships its own)
  libopenmpi-dev      # MPI comm backend (without it: single-process build)
  openmpi-bin         # mpirun / mpiexec: multi-rank runs and the test_comm_mpi_np* tests
  python3             # test_reward_python: a reward function written in Python (custom_reward_function.path
                      # a .py file) runs in a python3 child; distflow itself needs none
)

# Optional group, with --fuzz: make fuzz builds the libFuzzer targets with clang; make test-asan
# builds the suite with gcc's -fsanitize=address,undefined (libasan / libubsan come with gcc).
FUZZ_PKGS=(
  clang               # libFuzzer targets (-fsanitize=fuzzer), tests/fuzz
  libclang-rt-14-dev  # clang's libFuzzer, ASan and UBSan runtimes (Debian 12's clang is 14)
)
# Optional group, with --bench: make bench runs PyTorch beside every row, as its users run it here.
BENCH_PKGS=(
  python3-torch        # the baseline (Debian 12: torch 1.13, its bf16 matmuls on oneDNN)
  libopenblas0-pthread # an optimised BLAS for torch's float32 matmuls: without it the libblas.so.3
                       # alternative is the reference BLAS, far slower (bench_rows prints which one ran)
)
case "${1:-}" in
  --fuzz) PKGS+=("${FUZZ_PKGS[@]}") ;;
  --bench) PKGS+=("${BENCH_PKGS[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--fuzz|--bench]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: not a Debian system (no dpkg-query / apt-get); install the equivalents of:" >&2
  echo "  ${PKGS[*]}" >&2
  exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "distflow needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $cmd" >&2
  exit 1
fi

# Runs apt-get with its progress output (stdout) kept aside; its stderr (W: / E: lines) goes to the
# terminal as it comes. On a failure the kept output is shown too, then what failed.
apt_quiet() {
  local log rc=0
  log=$(mktemp)
  apt-get "$@" >"$log" || rc=$?
  if [ $rc -ne 0 ]; then
    cat "$log" >&2
    rm -f "$log"
    echo "install-deps: 'apt-get $*' failed (exit $rc); apt's messages are above" >&2
    exit 1
  fi
  rm -f "$log"
}

echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# On a machine that has just booted, apt's daily timer or unattended-upgrades may hold the dpkg
# lock for a few minutes: wait for it instead of failing at once.
lock=(-o DPkg::Lock::Timeout=600)
apt_quiet "${lock[@]}" update -qq
apt_quiet "${lock[@]}" install -y --no-install-recommends "${missing[@]}"
