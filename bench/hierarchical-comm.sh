#!/usr/bin/env bash
# Hierarchical vs flat collectives on the emulated cluster (docs/performance.md,
# "Hierarchical collectives"): 2 nodes x 2 ranks under mpirun, the link shaped
# to each rate in turn; per rate one `meshtrain bench comm --backend mpi
# --hierarchical` (the flat and the hierarchical form alternating, medians of
# at least ITERS calls, max over ranks), printed as one markdown table.
#   bench/hierarchical-comm.sh [BUILD_DIR] [GBIT...]     (default: build 1 10)
# Environment: MIN / MAX message (default 1M / 64M: 1, 4, 16, 64 MiB), ITERS
# (default 5), OPS (default all_reduce,reduce_scatter,all_gather).
# Needs root (network namespaces); brings up its own cluster (--name
# hier-bench) and takes it down at the end. Four ranks share this machine's
# cores, so Open MPI yields when idle (mpi_yield_when_idle): busy-polling
# ranks on fewer cores than ranks starve each other (a flat 64 KiB
# all-reduce took 80 ms instead of 0.3 ms at 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift $(( $# > 0 ? 1 : 0 ))
rates=(1 10)
[ $# -eq 0 ] || rates=("$@")
bin="$(realpath "$build/bin/meshtrain")"
[ -x "$bin" ] || { echo "hierarchical-comm: $build/bin/meshtrain not built"; exit 2; }
export MESHTRAIN_CLUSTER=hier-bench
work="$(mktemp -d /tmp/hier-bench-XXXXXX)"
cluster() { scripts/emulated-cluster.sh --name "$MESHTRAIN_CLUSTER" --dir "$work" "$@"; }
trap 'cluster down > /dev/null 2>&1; rm -rf "$work"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo "| link | op | size | flat ms | hierarchical ms | flat / hierarchical |"
echo "|---|---|---:|---:|---:|---:|"
for g in "${rates[@]}"; do
  cluster up 2 --link-gbit "$g" > /dev/null
  scripts/cluster-rsh.sh node0 mpirun --allow-run-as-root --hostfile "$work/hostfile" -np 4 \
    --mca plm_rsh_agent "$PWD/scripts/cluster-rsh.sh" --mca mpi_yield_when_idle 1 \
    "$bin" bench comm --backend mpi --hierarchical --min-bytes "${MIN:-1M}" --max-bytes "${MAX:-64M}" \
    --iters "${ITERS:-5}" --ops "${OPS:-all_reduce,reduce_scatter,all_gather}" > "$work/bench-$g.txt" 2>&1 ||
    { cat "$work/bench-$g.txt"; exit 1; }
  # op bytes time_us algbw busbw bound_us x_bound raw_us overhead hier_us flat/hier
  awk -v g="$g" '$1 ~ /^(all_reduce|reduce_scatter|all_gather)$/ {
    printf "| %s Gbit/s | %s | %s | %.1f | %.1f | %.2f |\n", g, $1, $2 "iB", $3 / 1000, $10 / 1000, $3 / $10 }' \
    "$work/bench-$g.txt"
done
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
