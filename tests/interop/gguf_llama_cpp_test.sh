#!/usr/bin/env bash
# GGUF export checked by a real llama.cpp (docs/checkpoints.md, "GGUF"):
# a byte-level and a SentencePiece BPE model are trained for a few seconds
# on a small corpus, exported as f32, f16, bf16 and q8_0 GGUF files, and
# llama.cpp's greedy continuation of each prompt must equal
# `meshtrain generate --temperature 0`: exactly for f32; for the 16- and
# 8-bit files exactly too, except after a step where llama.cpp's own top-1
# probability margin is at most 0.05 (a near tie that rounding the weights
# may flip). llama.cpp is node-llama-cpp's prebuilt binary, installed by
# scripts/install-llama-cpp.sh (called by scripts/install-deps.sh).
# Usage: gguf_llama_cpp_test.sh MESHTRAIN NODE_PREFIX
set -euo pipefail
meshtrain=$1
prefix=$2
here=$(cd "$(dirname "$0")" && pwd)

if ! command -v node >/dev/null || [ ! -f "$prefix/node_modules/node-llama-cpp/package.json" ]; then
  echo "llama.cpp (node-llama-cpp) is not installed under $prefix: run scripts/install-deps.sh"
  # CI and anyone who asks must run the check, not skip it.
  if [ "${CI:-}" = true ] || [ "${MESHTRAIN_REQUIRE_INTEROP:-0}" = 1 ]; then exit 1; fi
  exit 77
fi

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/gguf-llama.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

subjects=("The mesh trains" "Every layout computes" "A tiny model learns" "The same update" "Each rank holds")
for i in $(seq 0 299); do
  printf '%s the same numbers, step by step, until the loss is low.\n%%\n' "${subjects[$(( (i * 7 + i / 5) % 5 ))]}"
done > corpus.txt

# model vocabulary, data directory, run directory, extra [data] lines
config() {
  cat <<TOML
[model]
vocab_size = $1
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 128
max_seq_len = 64
[data]
path = "$work/$2"
sources = ["$work/corpus.txt"]
format = "fortune"
seq_len = 64
$4
[training]
steps = 80
micro_batch = 8
eval_rows = 8
threads = 1
[optimizer]
lr = 1e-2
warmup_steps = 5
[metrics]
run_dir = "$work/$3"
log_every = 40
[checkpoint]
every = 80
TOML
}

"$meshtrain" tokenizer train --vocab 300 --out tok.model corpus.txt
config 259 bytes_data bytes "" > bytes.toml
config 300 sp_data sp "tokenizer = \"$work/tok.model\"" > sp.toml
for m in bytes sp; do
  "$meshtrain" train $m.toml > $m.log
  for t in f32 f16 bf16 q8_0; do
    "$meshtrain" ckpt export $m/checkpoints --format gguf --dtype $t --out gguf/$m-$t.gguf --no-progress
  done
done

# Continuations stay within max_seq_len (meshtrain slides its window past it).
echo "[" > cases.json
n=0
for m in bytes sp; do
  for prompt in "The mesh" "Every" "A tiny"; do
    n=$((n + 1))
    # (x keeps the text's own trailing newlines; puts adds one more)
    out=$("$meshtrain" generate --from $m/checkpoints --prompt "$prompt" --tokens 40 --temperature 0; printf x)
    out=${out%$'\n'x}
    printf '%s' "${out#"$prompt"}" > expected-$n.txt
    for t in f32 f16 bf16 q8_0; do
      tol=0.05
      [ $t = f32 ] && tol=0
      printf '%s{"model": "%s", "prompt": "%s", "tokens": 40, "expected_file": "%s", "tolerance": %s}\n' \
        "$([ -s cases.json.body ] && echo ,)" "$work/gguf/$m-$t.gguf" "$prompt" "$work/expected-$n.txt" $tol >> cases.json.body
    done
  done
done
cat cases.json.body >> cases.json
echo "]" >> cases.json

node "$here/llama_cpp_greedy.mjs" "$prefix" cases.json
