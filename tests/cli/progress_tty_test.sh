#!/usr/bin/env bash
# The training progress of the real binary: plain lines through a pipe, a
# live status line (carriage returns, ETA, MFU) on a pseudo-terminal
# (util-linux `script` provides one).
set -euo pipefail
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 40); do printf 'A tiny fortune, number %d.\n%%\n' "$i"; done > "$dir/corpus.txt"
cat > "$dir/tiny.toml" <<TOML
[model]
vocab_size = 259
d_model = 16
n_layers = 1
n_heads = 2
n_kv_heads = 1
ffn_hidden = 32
max_seq_len = 32
[data]
path = "$dir/data"
sources = ["$dir/corpus.txt"]
format = "fortune"
seq_len = 32
[training]
steps = 30
micro_batch = 2
[metrics]
log_every = 10
TOML
"$bin" train "$dir/tiny.toml" --set metrics.run_dir="$dir/pipe" | cat > "$dir/pipe.log"
if grep -q $'\r' "$dir/pipe.log"; then echo "FAIL: carriage return in piped output"; exit 1; fi
grep -q "step    30/30" "$dir/pipe.log" || { echo "FAIL: no log lines through the pipe"; cat "$dir/pipe.log"; exit 1; }
TERM=xterm script -qec "$bin train $dir/tiny.toml --set metrics.run_dir=$dir/tty" /dev/null > "$dir/tty.log"
grep -q $'\rstep [0-9]*/30 | loss .* tok/s | MFU .*% | ETA ' "$dir/tty.log" || {
  echo "FAIL: no live status line on the terminal"; cat -A "$dir/tty.log" | head -20; exit 1; }
grep -q "step    30/30" "$dir/tty.log" || { echo "FAIL: log lines missing on the terminal"; exit 1; }
echo "progress: plain through a pipe, live on a terminal"
