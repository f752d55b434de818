# Sourced by the progress tests: `tiny_config DIR [EXTRA_TOML]` writes a
# 40-document fortune corpus and DIR/tiny.toml, a 30-step run of a tiny
# model logging every 10 steps, with EXTRA_TOML appended.
tiny_config() {
  local dir="$1" extra="${2:-}"
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
$extra
TOML
}
