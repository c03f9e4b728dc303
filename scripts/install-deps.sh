#!/usr/bin/env bash
# Install the Debian packages distflow builds against, if any are missing.
# As root it runs apt-get; otherwise it prints the command to run and stops.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libdnnl-dev         # oneDNN: matmul
  libyaml-dev         # config files
  libjansson-dev      # JSON: config.json, tokenizer.json, datasets, metrics
  libpcre2-dev        # tokenizer pre-tokenizer regex
  libutf8proc-dev     # NFC normalisation
  libcmocka-dev       # unit tests
  libomp-dev          # OpenMP for clang builds (gcc ships its own)
  libopenmpi-dev      # MPI comm backend (without it: single-process build)
  openmpi-bin         # mpirun / mpiexec: multi-rank runs and the test_comm_mpi_np* tests
)

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
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
$cmd >/dev/null
