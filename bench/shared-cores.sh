#!/usr/bin/env bash
# Shared cores: the demo's training step alone and with K busy processes on
# the machine (`yes > /dev/null`, K = 1 2 4 by default), at the default
# thread count and at 1 and 2 threads, each as a ratio to its fair share,
# and PyTorch's bench-small step (bench/torch_bench_small.py, 1 and 2
# threads) under the same load (docs/performance.md, "Shared cores", defines
# the fair share). Medians of the steps after the first 3 (meshtrain) and
# after 2 warm-up steps (PyTorch).
#   bench/shared-cores.sh [BUILD_DIR] [STEPS] [K...]   (default build 20 1 2 4)
# TORCH=0 skips PyTorch (it runs when Debian's python3-torch imports).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-20}
shift $(( $# > 2 ? 2 : $# ))
loads=(1 2 4)
[ $# -eq 0 ] || loads=("$@")
meshtrain=$build/bin/meshtrain
[ -x "$meshtrain" ] || { echo "shared-cores: $meshtrain not built (make build)"; exit 2; }
python=${PYTHON:-/usr/bin/python3}
torch=${TORCH:-1}
[ "$torch" = 0 ] || "$python" -c "import torch" 2>/dev/null || torch=0
cores=$(nproc)

work=$(mktemp -d)
busy=()
stop_busy() {
  [ ${#busy[@]} -eq 0 ] || { kill "${busy[@]}" 2>/dev/null || true; wait "${busy[@]}" 2>/dev/null || true; }
  busy=()
}
trap 'stop_busy; rm -rf "$work"' EXIT
start_busy() {
  for ((i = 0; i < $1; ++i)); do
    (exec yes >/dev/null) &
    busy+=($!)
  done
  sleep 1  # running before the next process samples the load
}

# One demo run: prints "threads median_step_seconds".
demo() {  # demo RUN_NAME [THREADS]
  local dir=$work/$1
  local set_threads=()
  [ -z "${2:-}" ] || set_threads=(--set "training.threads=$2")
  "$meshtrain" train configs/demo.toml --set "training.steps=$steps" --set checkpoint.every=0 \
    --set training.eval_every=0 --set "metrics.run_dir=$dir" "${set_threads[@]}" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; exit 1; }
  "$python" - "$dir/metrics.jsonl" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
threads = next(r["layout"]["threads_per_rank"] for r in recs if r.get("event") == "run")
secs = [r["seconds"] for r in recs if "seconds" in r and r.get("step", 0) > 3]
print(threads, statistics.median(secs))
EOF
}

# One PyTorch run: prints "threads median_step_seconds".
torch_step() {  # torch_step THREADS
  OMP_NUM_THREADS=$1 "$python" bench/torch_bench_small.py --threads "$1" --steps 3 |
    awk -v t="$1" '{ for (i = 1; i < NF; ++i) if ($i == "median" && $(i + 1) == "step") print t, $(i + 2) / 1000 }'
}

echo "shared-cores: $cores core(s), $(nproc --all) CPU(s); demo $steps steps; $(date -u +%FT%TZ)"
echo "shared-cores: before: $(uptime)"
demo warmup 1 >/dev/null  # prepares the demo's data outside the timed runs
results=$work/results
for k in 0 "${loads[@]}"; do
  start_busy "$k"
  for t in default 1 2; do
    read -r used secs < <(demo "k$k-t$t" "$([ "$t" = default ] || echo "$t")")
    [ -n "${secs:-}" ] || { echo "shared-cores: the demo run k$k-t$t failed"; exit 1; }
    echo "meshtrain $k $t $used $secs" >>"$results"
  done
  if [ "$torch" != 0 ]; then
    for t in 1 2; do
      read -r used secs < <(torch_step "$t")
      [ -n "${secs:-}" ] || { echo "shared-cores: PyTorch at $t thread(s) failed"; exit 1; }
      echo "pytorch $k $t $used $secs" >>"$results"
    done
  fi
  stop_busy
done
echo "shared-cores: after: $(uptime)"

# fair time = alone time at the same threads x max(1, (threads + K) / cores);
# ratio = fair time / measured time (1.00: the whole fair share).
"$python" - "$results" "$cores" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
cores = int(sys.argv[2])
alone = {(r[0], int(r[3])): float(r[4]) for r in rows if r[1] == "0"}
one = {(r[0], r[1]): float(r[4]) for r in rows if r[2] == "1"}
print(f"{'':9} {'K':>2} {'threads':>12} {'step s':>8} {'fair s':>8} {'of fair':>8} {'vs 1 thread':>12}")
for impl, k, asked, used, secs in rows:
    k, used, secs = int(k), int(used), float(secs)
    base = alone.get((impl, used))
    fair = base * max(1.0, (used + k) / cores) if base else None
    label = f"{asked}({used})" if asked == "default" else asked
    print(f"{impl:9} {k:>2} {label:>12} {secs:8.3f} " + (f"{fair:8.3f} {fair / secs:8.2f}" if fair else f"{'-':>8} {'-':>8}")
          + f" {one[(impl, str(k))] / secs:11.2f}x")
EOF
