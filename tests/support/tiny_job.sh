# Shell helpers for the tests and scripts that run whole training jobs
# (tests/faults/fault_suite.sh, tests/train/*.sh, scripts/kill-trials.sh):
# a small corpus and a 2-layer byte-level model trained on it. Sourced.

# tiny_corpus FILE DOCS: DOCS short documents in fortune format.
tiny_corpus() {
  local i
  for i in $(seq 1 "$2"); do
    echo "document $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times."
    echo "%"
  done > "$1"
}

# tiny_config FILE WORK: the model, on WORK/corpus.txt prepared into
# WORK/data, with the TOML on stdin ([training], [checkpoint], ...) after it.
tiny_config() {
  cat > "$1" <<TOML
[model]
d_model = 32
n_layers = 2
n_heads = 2
n_kv_heads = 1
max_seq_len = 32
[data]
path = "$2/data"
sources = ["$2/corpus.txt"]
format = "fortune"
seq_len = 32
TOML
  cat >> "$1"
}
