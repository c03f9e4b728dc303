#!/usr/bin/env bash
# Regenerate the generated part of the fuzz seed corpora (tests/fuzz/corpus/; docs/testing.md,
# "Fuzzing"): the .safetensors files (binary, written here byte by byte), and the tokenizer and
# dataset seeds made by distflow's own writers (`distflow data synth`, `distflow data tokenizer`), and
# the Parquet seeds copied from tests/fixtures/parquet.
# The hand-written seeds beside them (YAML, config.json, near-valid JSON) are plain files.
# Seeds are named ok-* (the parser must accept them) or bad-* (it must refuse them); the replay
# tests check that.
#   tests/fuzz/make-corpus.sh [BUILD_DIR]      (default build/, for build/distflow)
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
distflow=${1:-$here/../../build}/distflow
[ -x "$distflow" ] || { echo "make-corpus: $distflow not built (make build)" >&2; exit 1; }
c=$here/corpus

# ---- safetensors: 8-byte little-endian header length, JSON header, data ------------------------
le64() { # the 8 bytes of $1, little-endian, as printf escapes
  local n=$1 i out=""
  for i in 0 1 2 3 4 5 6 7; do out+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  printf '%s' "$out"
}
st() { # st NAME HEADER DATA_ESCAPES [HEADER_LENGTH]: the length defaults to the header's
  local len=${4:-${#2}}
  { printf "$(le64 "$len")"; printf '%s' "$2"; printf "$3"; } > "$c/safetensors/$1.safetensors"
}
mkdir -p "$c/safetensors"
f32x6='\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\xbf\x00\x00\x00\x00\x00\x00\x80\x7f'
st ok-f32-2x3 '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' "$f32x6"
st ok-mixed-dtypes '{"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"i":{"dtype":"I64","shape":[1],"data_offsets":[12,20]},"d":{"dtype":"F64","shape":[1,1],"data_offsets":[20,28]},"u":{"dtype":"U8","shape":[3],"data_offsets":[28,31]},"k":{"dtype":"I32","shape":[],"data_offsets":[31,35]}}' \
  '\x80\x3f\x00\x40\x80\x7f\xc0\x7f\x00\x3c\x00\xfc\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x00\x00\x00\x00\x00\xf0\x3f\x01\x02\x03\x2a\x00\x00\x00'
st ok-empty-tensors '{"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}' '\x80\x3f'
st ok-no-tensors '{}' ''
st ok-padded-header '{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}        ' '\x38'
st bad-overlap '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' '\x00\x00\x00\x00\x00\x00\x00\x00'
st bad-gap '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' '\x00\x00\x00\x00\x00\x00\x00\x00'
st bad-trailing-bytes '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' '\x00\x00\x00\x00\x00'
st bad-header-length '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' '\x00\x00\x00\x00' 4096
st bad-unknown-dtype '{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,4]}}' '\x00\x00\x00\x00'
st bad-shape-size '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}' '\x00\x00\x00\x00'
st bad-shape-overflow '{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}}' ''
st bad-nine-dims '{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}' '\x00'
st bad-duplicate-name '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}' '\x00\x00'
st bad-offsets-reversed '{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}' '\x00'
st bad-metadata-number '{"__metadata__":{"format":1}}' ''
st bad-not-object '["a"]' ''
printf '\x10\x00\x00' > "$c/safetensors/bad-truncated-length.safetensors"

# ---- JSON lines rows and a tokenizer, from distflow's own writers ---------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$c/jsonl_dataset" "$c/tokenizer_json"
"$distflow" data synth --out "$tmp/synth.jsonl" --n 3 --seed 5 2>/dev/null
cp "$tmp/synth.jsonl" "$c/jsonl_dataset/ok-synth-rows.jsonl"
"$distflow" data synth --out "$tmp/train.jsonl" --n 40 --seed 6 2>/dev/null
"$distflow" data tokenizer --in "$tmp/train.jsonl" --vocab-size 300 --out "$tmp/tok" 2>/dev/null
cp "$tmp/tok/tokenizer.json" "$c/tokenizer_json/ok-bpe-300.json"
# the same tokenizer with its tokenizer_config.json after the marker line fuzz_tokenizer_json.c splits at
{ cat "$tmp/tok/tokenizer.json"; printf '\n//tokenizer_config.json\n'; cat "$tmp/tok/tokenizer_config.json"; } \
  > "$c/tokenizer_json/ok-bpe-300-with-config.json"

# ---- Parquet: the reader's fixtures (two writers, tests/fixtures/parquet), whole and cut ------------
pq=$here/../fixtures/parquet
mkdir -p "$c/parquet"
for f in gsm8k_verl types_zstd v1_plain_snappy v2_dict_zstd v2_delta_zstd empty; do
  cp "$pq/$f.parquet" "$c/parquet/ok-$f.parquet"
done
cp "$pq/map.parquet" "$c/parquet/ok-map.parquet"
cp "$pq/blob.parquet" "$c/parquet/bad-blob.parquet"
head -c 2000 "$pq/gsm8k_verl.parquet" > "$c/parquet/bad-truncated.parquet"
echo "make-corpus: wrote $(ls "$c/safetensors" | wc -l) safetensors seeds, the synth rows, the tokenizer and the Parquet seeds" >&2
