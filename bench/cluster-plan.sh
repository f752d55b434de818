#!/usr/bin/env bash
# The planner on a cluster (docs/performance.md, "The planner on the
# emulated cluster"): brings up the emulated 2-node cluster
# (scripts/emulated-cluster.sh, 2 slots a node, the link shaped to
# --link-gbit), measures it with `meshtrain bench machine --hostfile`, ranks
# the meshes of 4 devices with `meshtrain plan --devices 4 --nodes 2`, then
# trains each layout on the cluster (`meshtrain launch --hostfile`) and
# prints the predicted step beside the measured median step, their ratio,
# and both rankings. The model is the demo's with 8 query heads (so that tp=4
# splits them), micro-batches of 4 rows, one compute thread a rank and the
# global batch held at 32 rows (grad_accum = 32 / (4 dp)); the runs get the
# profile as comm.hardware, so that comm.hierarchical = auto chooses each
# collective's form as the planner does. Needs root (the cluster's
# namespaces).
#   bench/cluster-plan.sh [BUILD_DIR] [--link-gbit G] [--steps N] [--rounds K] [--name NAME] [--keep DIR]
# Defaults: build, 1 Gbit/s, 8 steps, 3 rounds (the median of steps 2..N of
# every round), cluster name plan$$. --keep DIR leaves the profile, plans and run logs there.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
build=build
gbit=1
steps=8
rounds=3
name="plan$$"
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --link-gbit) gbit="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -*) echo "cluster-plan: unknown option $1" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
meshtrain=$(realpath "$build/bin/meshtrain")
[ -x "$meshtrain" ] || { echo "cluster-plan: $meshtrain not built (make build)" >&2; exit 2; }
[ "$steps" -ge 3 ] || { echo "cluster-plan: --steps $steps: at least 3 (the first step warms up)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "cluster-plan: --rounds $rounds: at least 1" >&2; exit 2; }
cluster="$repo/scripts/emulated-cluster.sh"
agent="$repo/scripts/cluster-rsh.sh"
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
export MESHTRAIN_CLUSTER="$name"
cleanup() {
  "$cluster" --name "$name" --dir "$work/cluster" down > /dev/null 2>&1 || true
  [ -n "$keep" ] || rm -rf "$work"
}
trap cleanup EXIT

# The layouts: dp across nodes, tp inside, tp across (allowed), pp across
# with tp inside, pp across with dp inside.
layouts=("dp=4" "dp=2,tp=2" "tp=4" "pp=2,tp=2" "pp=2,dp=2")
model=(--set model.n_heads=8 --set training.micro_batch=4 --set training.grad_accum=8 --set training.threads=1)
accum() {  # the grad_accum of a layout at 32 rows of 4
  local dp
  dp=$(echo "$1" | sed -n 's/.*dp=\([0-9]*\).*/\1/p')
  echo $((8 / ${dp:-1}))
}

echo "# cluster-plan: $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "link $gbit Gbit/s, $steps steps per layout, $rounds rounds"
"$cluster" --name "$name" --dir "$work/cluster" up 2 --link-gbit "$gbit"
on_node0() { "$agent" node0 "$@"; }

# The profile, measured on every slot of the cluster.
on_node0 "$meshtrain" bench machine --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" \
  --out "$work/cluster.toml" > "$work/bench.log" 2>&1 || { cat "$work/bench.log"; exit 1; }
grep -E '^(name|devices|shared_by|\[link|all_reduce|send) ' "$work/cluster.toml" | sed 's/^/#   /'
# The smallest intra-node all-reduce: a few microseconds on a quiet machine;
# milliseconds when waiting ranks gave their cores to other processes.
small=$(sed -n '/^\[link.intra\]/,/^$/p' "$work/cluster.toml" | sed -n 's/^#   measured: 256B \([0-9]*\)us.*/\1/p' | head -1)
[ "${small:-0}" -lt 1000 ] || echo "# warning: a 256 B all-reduce inside a node took ${small} us (a busy machine's" \
  "scheduler, not the link): this profile and the runs below do not show what a quiet machine does"

echo "# meshtrain plan configs/demo.toml ${model[*]} --hardware cluster.toml --devices 4 --nodes 2"
"$meshtrain" plan configs/demo.toml "${model[@]}" --hardware "$work/cluster.toml" --devices 4 --nodes 2 > "$work/plan.txt"
head -12 "$work/plan.txt"

# Each layout runs --rounds times, the layouts taking turns, so that a slow
# minute of the machine falls on every layout alike; measured = the median
# of steps 2..N over all rounds.
run_layout() {  # LAYOUT ROUND
  local layout="$1" round="$2" G dir sets=() axis
  G=$(accum "$layout")
  dir="$work/run-${layout//[=,]/-}-$round"
  for axis in $(echo "$layout" | tr ',' ' '); do sets+=(--set "parallel.$axis"); done
  on_node0 "$meshtrain" launch -n 4 --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" --allow-cross-node-tp \
    configs/demo.toml "${model[@]}" --set training.grad_accum="$G" "${sets[@]}" --set data.path="$work/data" \
    --set comm.hardware="$work/cluster.toml" --set training.steps="$steps" --set training.eval_every=0 \
    --set checkpoint.every=0 --set metrics.log_every=1 \
    --set metrics.run_dir="$dir" > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  jq -c 'select(.seconds != null and .step > 1) | .seconds' "$dir/metrics.jsonl" >> "$work/steps-${layout//[=,]/-}.txt"
}
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
for ((round = 1; round <= rounds; ++round)); do
  for layout in "${layouts[@]}"; do run_layout "$layout" "$round"; done
done

printf '%-12s %12s %12s %8s\n' layout predicted measured ratio
results="$work/results.txt"
: > "$results"
for layout in "${layouts[@]}"; do
  predicted=$("$meshtrain" plan configs/demo.toml "${model[@]}" --set training.grad_accum="$(accum "$layout")" \
    --layout "$layout" --hardware "$work/cluster.toml" --nodes 2 --json | jq '.time.step_s')
  measured=$(median "$work/steps-${layout//[=,]/-}.txt")
  ratio=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%.3f", p / m }')
  printf '%-12s %10.3f s %10.3f s %8s\n' "$layout" "$predicted" "$measured" "$ratio"
  echo "$layout $predicted $measured" >> "$results"
done
echo "# predicted ranking: $(sort -k2 -g "$results" | awk '{ printf "%s ", $1 }')"
echo "# measured ranking:  $(sort -k3 -g "$results" | awk '{ printf "%s ", $1 }')"
# Within 15%, and every pair of layouts whose measured steps differ by more
# than 5% in the predicted order.
awk '{ n[NR] = $1; p[NR] = $2; m[NR] = $3; if ($2 / $3 >= 1 / 1.15 && $2 / $3 <= 1.15) ok++ }
     END { for (i = 1; i <= NR; ++i) for (j = 1; j <= NR; ++j)
             if (m[i] * 1.05 < m[j] && p[i] >= p[j]) { bad = bad " " n[i] "<" n[j]; }
           printf "# within 15%%: %d of %d layouts; pairs measured >5%% apart in the other order than predicted:%s\n",
                  ok, NR, bad == "" ? " none" : bad }' "$results"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
