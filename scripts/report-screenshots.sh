#!/usr/bin/env bash
# The report pictures of docs/cli.md ("Reports"): three short real runs of a
# small model on the fortunes (tp = 2; dp = 2 with ZeRO 3; a 2-stage ZB-H1
# pipeline recording its timeline; one validation point each), their
# `meshtrain report`, and what headless Chromium draws of three parts of it,
# as OUT/report-{speed,memory-comm,pipeline}.png.
#   scripts/report-screenshots.sh [BIN] [OUT]   (defaults: build/bin/meshtrain docs/images)
set -euo pipefail
bin="$(realpath "${1:-build/bin/meshtrain}")"
out="$(realpath -m "${2:-docs/images}")"
chromium=/usr/bin/chromium
[ -x "$chromium" ] || { echo "needs Chromium (Debian package chromium)"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
cat > "$work/small.toml" <<TOML
[model]
vocab_size = 259
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 128
max_seq_len = 64
[data]
path = "$work/data"
sources = ["/usr/share/games/fortunes"]
format = "fortune"
seq_len = 64
[training]
steps = 40
micro_batch = 4
grad_accum = 2
eval_every = 40
eval_rows = 64
threads = 1
[metrics]
log_every = 20
TOML
run() { "$bin" --progress plain train "$work/small.toml" --set metrics.run_dir="$work/$1" "${@:2}" > "$work/$1.log"; }
run tp2 --set parallel.tp=2 --set parallel.sequence_parallel=true
run dp2_zero3 --set parallel.dp=2 --set parallel.zero_stage=3
run pp2_zbh1 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set metrics.pipeline_timeline=true
"$bin" report "$work/tp2" "$work/dp2_zero3" "$work/pp2_zbh1" --out "$work/report.html"

# One page per picture: the report's head and the sections it shows.
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
html = open(f"{work}/report.html", encoding="utf-8").read()
head, body = html.split("<body>", 1)
body = re.sub(r'<p class="note">MFU is.*?</p>', "", body.split("</body>")[0], flags=re.S)  # the closing note
parts = re.split(r"(?=<h2>)", body)
sections = {re.match(r"<h2>([^<]*)</h2>", p).group(1): p for p in parts if p.startswith("<h2>")}
pages = {"speed": ["Summary", "Layout and precision", "Loss", "Speed"], "memory-comm": ["Memory", "Communication"],
         "pipeline": ["Pipeline"]}
for name, titles in pages.items():
    with open(f"{work}/{name}.html", "w", encoding="utf-8") as f:
        f.write(head + "<body>" + "".join(sections[t] for t in titles) + "</body></html>\n")
PY
mkdir -p "$out"
shot() {  # page, height
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$work/profile-$1" --window-size=1220,"$2" --screenshot="$out/report-$1.png" \
    "file://$work/$1.html" > /dev/null 2>&1
  echo "wrote $out/report-$1.png"
}
shot speed 1090
shot memory-comm 800
shot pipeline 400
