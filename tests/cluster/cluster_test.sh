#!/usr/bin/env bash
# Jobs across machines on the emulated cluster (scripts/emulated-cluster.sh;
# docs/multi-node.md), label `cluster`. Each case brings up a cluster of its
# own (a unique name, so cases run side by side) and takes it down again.
# Without root the script's message is printed and the case is skipped
# (exit 77).
#
#   cluster_test.sh MESHTRAIN CASE
#     emulation    up/status/down leave nothing behind, a second up after a
#                  crash starts clean; Open MPI sees separate hosts (shared
#                  memory only inside a node) and its TCP traffic crosses the
#                  shaped link
#     dp-tp-zero3  2 nodes x 2 ranks, dp=2 across nodes x tp=2 inside, ZeRO-3:
#                  the final checkpoint equals the threads backend's bit for bit,
#                  also when mpirun maps the ranks to alternating nodes
#     pp           pp=2 across nodes x tp=2 inside: the same; a tp group
#                  across nodes refused, and run with --allow-cross-node-tp
#     node-loss    a node that crashes, and one whose link goes down, end the
#                  job within comm.timeout_s (+ the launcher's grace) and the
#                  launcher names the lost node
#     node-restart with --max-restarts, a crashed node that comes back: the
#                  job resumes on the hostfile and ends bitwise equal to
#                  the uninterrupted run
#     elastic      launch --elastic, a crashed node that stays down: the
#                  job continues on the other node at dp=2 x grad_accum=4
#                  and ends bitwise equal to the uninterrupted dp=4 run
#     hierarchical dp=4 across 2 nodes x 2 ranks with comm.hierarchical = on,
#                  reproducible mode: bitwise the threads backend's (flat)
#                  run; each hierarchical collective sends what docs/math.md
#                  (M.71) says over node0's link
#     plan-link    bench machine --hostfile measures the nodes' link apart
#                  from the shared memory inside a node (both in the
#                  profile), and plan --nodes 2 prices a tp group across
#                  the nodes on the inter-node link, one inside a node on
#                  the intra-node link (the mechanics, not the measured
#                  speeds: bench/cluster-plan.sh compares predicted and
#                  measured steps)
#   Slurm (Debian's slurm-wlm and munge; emulated-cluster.sh slurm up: a
#   slurmd on each of the 2 nodes, in its own namespaces; skipped, exit 77,
#   when the programs are missing):
#     slurm        configs/slurm/train.sbatch submitted with sbatch, dp=2 x
#                  tp=2, ZeRO-3: `meshtrain launch` runs the ranks with
#                  srun --mpi=pmix, placed node by node, and the final
#                  checkpoint equals the threads backend's; -n 2 in the
#                  2 x 2 allocation fills node0 (tp=2 inside it)
#     slurm-restart a rank on node1 killed after the checkpoint of step 2:
#                  srun is run again in the allocation (--max-restarts),
#                  the ranks see MESHTRAIN_RESTART, and the job ends
#                  bitwise equal to the uninterrupted run
#     slurm-node-loss node1 lost mid-job: the launcher names it, probing the
#                  allocation's nodes with srun
#     slurm-elastic  launch --elastic in an allocation that outlives its
#                  nodes (sbatch --no-kill): node1 crashes after step 2 and
#                  stays down; srun runs again on node0 alone at dp=2 x
#                  grad_accum=4 and the job ends bitwise equal to the
#                  uninterrupted dp=4 run (reproducible mode)
set -u  # no pipefail: `... | grep -q` closes pipes early
bin="$(realpath "$1")"
case_name="$2"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cluster="$repo/scripts/emulated-cluster.sh"
agent="$repo/scripts/cluster-rsh.sh"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/cluster-XXXXXX")"
export MESHTRAIN_CLUSTER="mt$$"
down() { "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" down > /dev/null 2>&1; }
trap 'down; rm -rf "$work"' EXIT
fail() { echo "FAIL ($case_name): $*"; exit 1; }

# up N [ARGS...]: the cluster, or exit 77 with the script's own message.
up() {
  local out code
  out="$("$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" up "$@" 2>&1)"
  code=$?
  [ "$code" -eq 77 ] && { echo "SKIP: $out"; exit 77; }
  [ "$code" -eq 0 ] || fail "emulated-cluster.sh up $*: $out"
}
on_node() { "$agent" "$@"; }

# Jobs that lose a node run with comm.timeout_s = 6; their heartbeat waits
# 4 s (not timeout_s / 5 = 1.2 s), as a heartbeat thread starved for more
# than a second by a loaded machine would otherwise end a healthy job.
# The demo model, a few small steps, on a corpus prepared once per case.
demo=("$repo/configs/demo.toml" --set data.path="$work/data" --set training.steps=3 --set training.micro_batch=4
      --set training.eval_every=0 --set training.eval_rows=16 --set checkpoint.every=3 --set metrics.log_every=1)
threads_run() {  # RUN_DIR OVERRIDES...
  local dir="$1"
  shift
  "$bin" train "${demo[@]}" --set metrics.run_dir="$dir" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "the threads-backend run failed"; }
}
cluster_launch() {  # RUN_DIR NP OVERRIDES... (from node0, as on a cluster's first node)
  local dir="$1" np="$2"
  shift 2
  on_node node0 "$bin" launch -n "$np" --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" "${demo[@]}" \
    --set metrics.run_dir="$dir" "$@"
}
# Slurm on the cluster (after up), or exit 77 with the script's own message;
# `down` (on exit) ends its daemons with the nodes' other processes.
slurm_up() {
  local out code
  out="$("$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" slurm up 2>&1)"
  code=$?
  [ "$code" -eq 77 ] && { echo "SKIP: $out"; exit 77; }
  [ "$code" -eq 0 ] || fail "emulated-cluster.sh slurm up: $out"
  export SLURM_CONF="$work/cluster/slurm/slurm.conf"
}
# configs/slurm/train.sbatch on 2 nodes x 2 tasks: its job id; LOG gets the
# launcher's and rank 0's output; sbatch_options (an array, if set) go to sbatch.
submit() {  # LOG ARGS...
  local log="$1"
  shift
  (cd "$work" && MESHTRAIN="$bin" on_node node0 sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 \
     ${sbatch_options[@]+"${sbatch_options[@]}"} --output="$log" "$repo/configs/slurm/train.sbatch" "${demo[@]}" "$@") ||
    fail "sbatch refused the job"
}
job_state() { on_node node0 scontrol show job --oneliner "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_job() {  # ID LOG: until it has ended; fails unless COMPLETED
  local state
  for _ in $(seq 1200); do
    state="$(job_state "$1")"
    case "$state" in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.1 ;; *) break ;; esac
  done
  [ "$state" = COMPLETED ] || { tail -30 "$2"; fail "Slurm job $1 ended $state"; }
}
link_bytes() { ip netns exec "$MESHTRAIN_CLUSTER-node$1" tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}'; }

# Equal final checkpoints: the cluster's run and the threads backend's.
# identical A B NAME WHY: A's final checkpoint equals B's bit for bit
# (`meshtrain ckpt diff`), or the case fails saying WHY.
identical() {
  "$bin" ckpt diff "$1/checkpoints" "$2/checkpoints" > "$work/$3-diff.log" 2>&1 &&
    grep -q IDENTICAL "$work/$3-diff.log" || { cat "$work/$3-diff.log"; fail "$4"; }
}
# saved_step_2 LOG: waits (up to 120 s) until the job's log says it saved step 2.
saved_step_2() {
  local i
  for i in $(seq 1200); do grep -q "^checkpoint step 2 " "$1" 2> /dev/null && break; sleep 0.1; done
  grep -q "^checkpoint step 2 " "$1" || { cat "$1"; fail "the job never saved step 2"; }
}
same_as_threads() {  # NAME OVERRIDES...
  local name="$1"
  shift
  threads_run "$work/$name-threads" "$@"
  local before after
  before=$(link_bytes 0)
  cluster_launch "$work/$name-cluster" 4 "$@" > "$work/$name-cluster.log" 2>&1 ||
    { cat "$work/$name-cluster.log"; fail "the cluster run failed"; }
  after=$(link_bytes 0)
  identical "$work/$name-threads" "$work/$name-cluster" "$name" "the cluster's final checkpoint differs from the threads backend's"
  echo "$name: 2 nodes x 2 ranks, final checkpoint bitwise equal to the threads backend's;" \
       "$((after - before)) bytes left node0 over its link"
  # Something crossed the link: the across-node axis is not local.
  [ $((after - before)) -gt 100000 ] || fail "only $((after - before)) bytes crossed node0's link"
}

case "$case_name" in
  emulation)
    up 2 --link-gbit 1
    [ "$(on_node node1 hostname)" = node1 ] || fail "node1's hostname is '$(on_node node1 hostname)'"
    [ "$(on_node node0 hostname)" = node0 ] || fail "node0's hostname is not node0"
    [ "$(cat "$work/cluster/hostfile")" = $'node0 slots=2\nnode1 slots=2' ] || fail "hostfile: $(cat "$work/cluster/hostfile")"
    on_node node1 ip -4 -o addr show dev eth0 | grep -q "10.200.0.2/24" || fail "node1 has no address on the switch"
    ip netns exec "$MESHTRAIN_CLUSTER-node0" tc qdisc show dev eth0 | grep -q "tbf.*rate 1Gbit" || fail "no 1 Gbit/s tbf"
    "$cluster" --name "$MESHTRAIN_CLUSTER" status | grep -q "^node1: 10.200.0.2/24" || fail "status names no node1"
    # Nothing in the host's own namespace.
    ip -o addr | grep -q "10.200.0" && fail "an address of the cluster in the host's namespace"
    # A crash leaves processes and namespaces; a second up starts clean.
    on_node node1 sleep 300 &
    sleep 0.3
    up 3
    [ "$(ip netns list | grep -c "^$MESHTRAIN_CLUSTER-")" -eq 4 ] || fail "after a second up: $(ip netns list)"
    [ -e "/run/netns/$MESHTRAIN_CLUSTER-node2" ] || fail "the second up made no node2"
    wait
    # Open MPI: ranks on different nodes cannot use shared memory (separate
    # hosts), ranks on one node can; the default run sends TCP over the link.
    out="$(on_node node0 mpirun --allow-run-as-root --hostfile "$work/cluster/hostfile" -np 4 --mca plm_rsh_agent \
           "$agent" hostname 2>&1)"
    # (Open MPI's rsh launcher may warn that setpgid lost its race with the
    # agent's exec: harmless, and not a rank's output.)
    [ "$(echo "$out" | grep -v 'plm:rsh: Warning: setpgid' | sort | tr '\n' ' ')" = "node0 node0 node1 node1 " ] ||
      fail "mpirun's ranks ran on: $out"
    out="$(cluster_launch "$work/vader" 4 --set parallel.dp=2 --set parallel.tp=2 --mpirun-arg=--mca \
           --mpirun-arg=btl --mpirun-arg=self,vader 2>&1)" && fail "shared memory alone reached the other node"
    echo "$out" | grep -q "unable to reach each other" || { echo "$out" | tail -20; fail "no 'unable to reach' from Open MPI"; }
    echo "$out" | grep -q "is on host: node1" || fail "Open MPI did not name node1 as another host"
    before=$(link_bytes 0)
    cluster_launch "$work/local" 2 --set parallel.dp=1 --set parallel.tp=2 --mpirun-arg=--mca --mpirun-arg=btl \
      --mpirun-arg=self,vader > "$work/local.log" 2>&1 || { cat "$work/local.log"; fail "tp=2 inside node0 over shared memory failed"; }
    after=$(link_bytes 0)
    echo "tp=2 on node0 over shared memory alone: $((after - before)) bytes over the link"
    [ $((after - before)) -lt 1000000 ] || fail "a job inside node0 sent $((after - before)) bytes over the link"
    down
    [ -z "$(ip netns list | grep "^$MESHTRAIN_CLUSTER-")" ] || fail "namespaces left after down: $(ip netns list)"
    [ ! -e "/run/meshtrain-cluster/$MESHTRAIN_CLUSTER" ] || fail "UTS namespaces left after down"
    [ ! -e "$work/cluster/hostfile" ] || fail "hostfile left after down"
    echo "emulation: namespaces, hostnames, shaping, separate hosts for Open MPI, a clean down"
    ;;
  dp-tp-zero3)
    up 2
    same_as_threads dp-tp-zero3 --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero_stage=3
    grep -q "^placement: 2 nodes: node0 ranks 0-1, node1 ranks 2-3" "$work/dp-tp-zero3-cluster.log" ||
      fail "the log does not show the ranks' nodes"
    # mpirun --map-by node alternates the nodes (ranks 0 and 2 on node0):
    # numbered node by node, the tp groups are inside the nodes again.
    cluster_launch "$work/by-node" 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero_stage=3 \
      --mpirun-arg=--map-by --mpirun-arg=node > "$work/by-node.log" 2>&1 ||
      { tail -20 "$work/by-node.log"; fail "the run mapped by node failed"; }
    identical "$work/dp-tp-zero3-threads" "$work/by-node" by-node "mapped by node: checkpoints differ"
    echo "dp-tp-zero3: mapped by node, renumbered node by node, bitwise equal too"
    ;;
  pp)
    up 2
    same_as_threads pp --set parallel.pp=2 --set parallel.tp=2 --set parallel.dp=1
    # One slot a node: the tp group would span the nodes. Refused, naming
    # them and the way out; run when allowed.
    printf 'node0 slots=1\nnode1 slots=1\n' > "$work/one-slot"
    on_node node0 "$bin" launch -n 2 --hostfile "$work/one-slot" --rsh-agent "$agent" "${demo[@]}" \
      --set metrics.run_dir="$work/cross" --set parallel.tp=2 --set training.steps=1 > "$work/cross.log" 2>&1 &&
      fail "a tp group across nodes was not refused"
    grep -q "tensor-parallel (tp) group of mesh ranks 0-1 spans nodes (node0: rank 0; node1: rank 1).*--allow-cross-node-tp" \
      "$work/cross.log" || { tail -20 "$work/cross.log"; fail "no refusal naming the nodes"; }
    on_node node0 "$bin" launch -n 2 --hostfile "$work/one-slot" --rsh-agent "$agent" --allow-cross-node-tp \
      "${demo[@]}" --set metrics.run_dir="$work/cross-allowed" --set parallel.tp=2 --set training.steps=1 \
      > "$work/cross-allowed.log" 2>&1 || { tail -20 "$work/cross-allowed.log"; fail "--allow-cross-node-tp did not run"; }
    echo "pp: tp across nodes refused, and run with --allow-cross-node-tp"
    ;;
  node-loss)
    up 2
    timeout_s=6
    loss_run() {  # NAME: a long run from node0; node1 is lost once step 2 is done
      local dir="$work/$1"
      cluster_launch "$dir" 4 --set parallel.dp=2 --set parallel.tp=2 --set training.steps=100000 \
        --set comm.timeout_s=$timeout_s --set comm.heartbeat_timeout_s=4 > "$dir.log" 2>&1 &
      local pid=$! i
      for i in $(seq 600); do grep -q "^step *2/" "$dir.log" 2> /dev/null && break; sleep 0.1; done
      grep -q "^step *2/" "$dir.log" || { cat "$dir.log"; fail "$1: the job never reached step 2"; }
      lost_at=$(date +%s%N)
      "$cluster" --name "$MESHTRAIN_CLUSTER" "$2" node1 || fail "emulated-cluster.sh $2 node1 failed"
      wait "$pid"
      code=$?
      ended_ms=$(( ($(date +%s%N) - lost_at) / 1000000 ))
      [ "$code" -ne 0 ] || fail "$1: the job succeeded without node1"
      grep -q "meshtrain launch: the job failed: .*lost node(s) of .*: node1 (" "$dir.log" ||
        { tail -20 "$dir.log"; fail "$1: the launcher did not name node1"; }
      echo "$1: ended $ended_ms ms after node1 was lost (exit $code): $(grep -o 'lost node(s).*' "$dir.log")"
    }
    loss_run crash kill-node
    [ "$ended_ms" -le $((timeout_s * 1000)) ] || fail "a crashed node ended the job after $ended_ms ms"
    up 2
    loss_run silent cut-link
    # The ranks' timeout, the watchdog's grace (5 s) and the launcher's (5 s).
    [ "$ended_ms" -le $(((timeout_s + 10) * 1000 + 3000)) ] || fail "a silent node ended the job after $ended_ms ms"
    ;;
  node-restart)
    up 2
    # --max-restarts: node1 crashes after the checkpoint of step 2, comes
    # back, and the job resumes on the hostfile; the result is the
    # uninterrupted run's (the threads backend's) bit for bit.
    layout=(--set parallel.dp=2 --set parallel.tp=2 --set training.steps=6 --set checkpoint.every=2)
    threads_run "$work/restart-threads" "${layout[@]}"
    dir="$work/restart"
    on_node node0 "$bin" launch -n 4 --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" --max-restarts 1 \
      "${demo[@]}" --set metrics.run_dir="$dir" "${layout[@]}" --set comm.timeout_s=6 --set comm.heartbeat_timeout_s=4 > "$dir.log" 2>&1 &
    pid=$!
    saved_step_2 "$dir.log"
    "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" kill-node node1
    for i in $(seq 300); do grep -q "waiting up to .* for node1 to answer" "$dir.log" && break; sleep 0.1; done
    grep -q "waiting up to .* for node1 to answer" "$dir.log" || { cat "$dir.log"; fail "the launcher did not wait for node1"; }
    "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" restore-node node1 || fail "restore-node node1 failed"
    wait "$pid" || { tail -30 "$dir.log"; fail "the restarted job failed"; }
    grep -q "restart 1 of 1" "$dir.log" || { tail -30 "$dir.log"; fail "no restart"; }
    grep -q "resumed from .* at step [2-6]" "$dir.log" || { tail -30 "$dir.log"; fail "the restart did not resume"; }
    identical "$work/restart-threads" "$dir" restart "the resumed job's final checkpoint differs from the uninterrupted run"
    echo "node-restart: node1 lost after step 2, back, job resumed: $(grep -o 'resumed from .*' "$dir.log" | head -1)"
    ;;
  elastic)
    up 2
    # launch --elastic: node1 crashes after the checkpoint of step 2 and stays
    # down; the job continues on node0 alone at dp=2, grad_accum=4 (the same
    # global window) and ends bitwise equal to the uninterrupted dp=4 run
    # (reproducible mode).
    layout=(--set parallel.dp=4 --set training.reproducible=true --set training.steps=6 --set checkpoint.every=2)
    threads_run "$work/elastic-threads" "${layout[@]}"
    dir="$work/elastic"
    on_node node0 "$bin" launch -n 4 --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" --elastic \
      "${demo[@]}" --set metrics.run_dir="$dir" "${layout[@]}" --set comm.timeout_s=6 --set comm.heartbeat_timeout_s=4 > "$dir.log" 2>&1 &
    pid=$!
    saved_step_2 "$dir.log"
    "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" kill-node node1
    wait "$pid" || { tail -30 "$dir.log"; fail "the elastic job failed"; }
    grep -q "membership: 4 ranks: dp=4, grad_accum=2 -> 2 ranks: dp=2, grad_accum=4" "$dir.log" ||
      { tail -30 "$dir.log"; fail "no membership change to dp=2"; }
    grep -q "^node0 slots=2$" "$dir/.meshtrain-hosts" || fail "the relaunch did not run on node0 alone"
    identical "$work/elastic-threads" "$dir" elastic "the elastic job's final checkpoint differs from the uninterrupted run"
    echo "elastic: node1 lost after step 2, the job continued on node0: $(grep -o 'membership: .*' "$dir.log" | head -1)"
    ;;
  hierarchical)
    up 2
    repro=(--set parallel.dp=4 --set training.reproducible=true --set training.grad_accum=1)
    same_as_threads hierarchical "${repro[@]}" --set comm.hierarchical=on
    grep -q "^data-parallel group 'dp': hierarchical (2 nodes x 2 ranks)" "$work/hierarchical-cluster.log" ||
      { grep "data-parallel" "$work/hierarchical-cluster.log"; fail "the log does not say the dp group ran hierarchically"; }
    # Bytes over node0's link per hierarchical call: a bench with the
    # hierarchical form beside the flat one, less the same bench without it.
    # (M.71) per rank, times the l = 2 ranks of node0, plus TCP/IP framing.
    bench() {  # OP [--hierarchical]
      on_node node0 mpirun --allow-run-as-root --hostfile "$work/cluster/hostfile" -np 4 --mca plm_rsh_agent "$agent" \
        --mca mpi_yield_when_idle 1 "$bin" bench comm --backend mpi --min-bytes 4M --max-bytes 4M --iters 3 --ops "$@" \
        > "$work/bench.log" 2>&1 || { cat "$work/bench.log"; fail "bench comm $* failed"; }
    }
    calls=17  # bench comm: 64M / 4M timed calls and one warm-up per form
    M=$((4 << 20))
    for op in all_reduce reduce_scatter all_gather; do
      b0=$(link_bytes 0); bench $op; b1=$(link_bytes 0); bench $op --hierarchical; b2=$(link_bytes 0)
      per_call=$(( ((b2 - b1) - (b1 - b0)) / calls ))
      want=$((M / 2))  # l * k (n-1)/n * M/l with n = l = 2: M for an all-reduce (k = 2), M/2 else
      [ "$op" = all_reduce ] && want=$M
      echo "$op 4 MiB hierarchical: $per_call bytes over node0's link per call; (M.71) x 2 ranks: $want"
      # The difference of two runs' counters: their own traffic (launch,
      # acknowledgements, a retransmitted segment) differs by up to a few
      # percent of a call's bytes, so 5% below the formula is allowed, and
      # framing plus that noise reached +12.6% once on a loaded machine; the
      # flat all-gather and reduce-scatter send twice the formula.
      [ "$per_call" -ge $((want * 95 / 100)) ] && [ "$per_call" -le $((want * 115 / 100)) ] ||
        fail "$op: $per_call bytes per call over the link, (M.71) says $want (-5% to +15%: framing, noise)"
    done
    ;;
  slurm)
    up 2
    slurm_up
    layout=(--set parallel.tp=2 --set parallel.zero_stage=3)  # dp: the ranks left (train.sbatch: dp = 0)
    threads_run "$work/slurm-threads" --set parallel.dp=2 "${layout[@]}"
    before=$(link_bytes 0)
    id="$(submit "$work/slurm.log" --set metrics.run_dir="$work/slurm-job" "${layout[@]}")"
    wait_job "$id" "$work/slurm.log"
    after=$(link_bytes 0)
    grep -q "^meshtrain launch: Slurm job $id: 4 rank(s) on node0,node1 with srun --mpi=pmix" "$work/slurm.log" ||
      { cat "$work/slurm.log"; fail "the launcher did not start the ranks with srun"; }
    grep -q "^placement: 2 nodes: node0 ranks 0-1, node1 ranks 2-3" "$work/slurm.log" || fail "no placement line"
    identical "$work/slurm-threads" "$work/slurm-job" slurm "the sbatch job differs from threads"
    [ $((after - before)) -gt 100000 ] || fail "only $((after - before)) bytes crossed node0's link"
    echo "slurm: sbatch job $id, 2 nodes x 2 ranks under srun --mpi=pmix, bitwise equal to the threads backend;" \
         "$((after - before)) bytes left node0 over its link"
    # -n 2 in the 2 x 2 allocation: the ranks fill node0, so tp=2 stays inside it.
    on_node node0 salloc --quiet --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 "$bin" launch -n 2 "${demo[@]}" \
      --set metrics.run_dir="$work/slurm-fill" --set parallel.tp=2 --set training.steps=1 > "$work/fill.log" 2>&1 ||
      { tail -20 "$work/fill.log"; fail "-n 2 with tp=2 in a 2 x 2 allocation failed"; }
    grep -q "Slurm job [0-9]*: 2 rank(s) on node0 with srun" "$work/fill.log" || { cat "$work/fill.log"; fail "-n 2 not on node0"; }
    echo "slurm: -n 2 in a 2 x 2 allocation runs on node0 alone"
    ;;
  slurm-restart)
    up 2
    slurm_up
    layout=(--set parallel.tp=2 --set training.steps=6 --set checkpoint.every=2)
    threads_run "$work/restart-threads" --set parallel.dp=2 "${layout[@]}"
    log="$work/restart.log"
    id="$(submit "$log" --set metrics.run_dir="$work/restart" "${layout[@]}")"
    saved_step_2 "$log"
    # A rank on node1 dies (as a crash or the OOM killer would end it).
    victim="$(ip netns pids "$MESHTRAIN_CLUSTER-node1" | while read -r p; do
                [ "$(cat /proc/"$p"/comm 2> /dev/null)" = meshtrain ] && echo "$p"; done | head -1)"
    [ -n "$victim" ] || fail "no rank on node1"
    kill -KILL "$victim"
    wait_job "$id" "$log"
    grep -q "meshtrain launch: srun exited with code .*; restart 1 of 2 from the latest complete checkpoint" "$log" ||
      { tail -30 "$log"; fail "the launcher did not run srun again"; }
    grep -q "^restart 1 of 2: resumed at step [2-6]" "$log" || { tail -30 "$log"; fail "the ranks did not see MESHTRAIN_RESTART"; }
    identical "$work/restart-threads" "$work/restart" restart "the restarted job differs"
    echo "slurm-restart: $(grep -o '^restart 1 of 2: resumed at step [0-9]*' "$log"), bitwise equal to the uninterrupted run"
    ;;
  slurm-node-loss)
    up 2
    slurm_up
    log="$work/loss.log"
    id="$(submit "$log" --set metrics.run_dir="$work/loss" --set parallel.tp=2 --set training.steps=100000 \
          --set comm.timeout_s=6 --set comm.heartbeat_timeout_s=4 --set comm.max_restarts=0)"
    for _ in $(seq 1200); do grep -q "^step *2/" "$log" 2> /dev/null && break; sleep 0.1; done
    grep -q "^step *2/" "$log" || { cat "$log"; fail "the job never reached step 2"; }
    lost_at=$(date +%s%N)
    "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" kill-node node1 || fail "kill-node node1 failed"
    for _ in $(seq 900); do grep -q "lost node(s) of" "$log" && break; sleep 0.1; done
    ended_ms=$(( ($(date +%s%N) - lost_at) / 1000000 ))
    grep -q "meshtrain launch: the job failed: srun exited with code [0-9]*; lost node(s) of Slurm job $id: node1 (" "$log" ||
      { tail -20 "$log"; fail "the launcher did not name node1"; }
    grep -q "node0 (" "$log" && fail "node0 named lost too: $(grep -o 'lost node(s).*' "$log")"
    echo "slurm-node-loss: named $ended_ms ms after node1 was lost: $(grep -o 'lost node(s).*' "$log")"
    ;;
  slurm-elastic)
    up 2
    slurm_up
    layout=(--set parallel.dp=4 --set training.reproducible=true --set training.steps=6 --set checkpoint.every=2)
    threads_run "$work/elastic-threads" "${layout[@]}"
    log="$work/slurm-elastic.log"
    # sbatch --no-kill: the allocation keeps its other nodes when one fails.
    sbatch_options=(--no-kill)
    id="$(submit "$log" --elastic --set metrics.run_dir="$work/slurm-elastic" "${layout[@]}" \
          --set comm.timeout_s=6 --set comm.heartbeat_timeout_s=4)"
    saved_step_2 "$log"
    "$cluster" --name "$MESHTRAIN_CLUSTER" --dir "$work/cluster" kill-node node1 || fail "kill-node node1 failed"
    # The batch script ends; the job stays COMPLETING until Slurm declares node1 down (SlurmdTimeout).
    for _ in $(seq 1200); do
      case "$(job_state "$id")" in PENDING | CONFIGURING | RUNNING | "") sleep 0.1 ;; *) break ;; esac
    done
    grep -q "^checkpoint step 6 " "$log" || { tail -30 "$log"; fail "the elastic Slurm job did not finish its 6 steps"; }
    grep -q "membership: 4 ranks: dp=4, grad_accum=2 -> 2 ranks: dp=2, grad_accum=4" "$log" ||
      { tail -30 "$log"; fail "no membership change to dp=2"; }
    grep -q "Slurm job $id: 2 rank(s) on node0 with srun" "$log" || { tail -30 "$log"; fail "srun did not run on node0 alone"; }
    identical "$work/elastic-threads" "$work/slurm-elastic" slurm-elastic \
      "the elastic Slurm job's final checkpoint differs from the uninterrupted run"
    echo "slurm-elastic: node1 lost after step 2, srun continued on node0: $(grep -o 'membership: .*' "$log" | head -1)"
    ;;
  plan-link)
    up 2 --link-gbit 1
    profile="$work/cluster.toml"
    on_node node0 "$bin" bench machine --hostfile "$work/cluster/hostfile" --rsh-agent "$agent" --max-bytes 16K \
      --out "$profile" > "$work/bench.log" 2>&1 || { cat "$work/bench.log"; fail "bench machine --hostfile failed"; }
    grep -q '^name = "2 nodes (node0, node1)' "$profile" || { cat "$profile"; fail "the profile names no 2 nodes"; }
    # The namespaces share this machine's cores: a node gets its share.
    grep -q "2 nodes share one machine of $(nproc) cores" "$profile" || { cat "$profile"; fail "no shared machine"; }
    grep -q '^shared_by = 2 ' "$profile" || { cat "$profile"; fail "[link.inter] has no shared_by = 2"; }
    section() { sed -n "/^\[link.$1\]/,/^\$/p" "$profile" | grep -E '^(all_reduce|reduce_scatter|all_gather|send) = '; }
    [ "$(section intra | wc -l)" -eq 4 ] && [ "$(section inter | wc -l)" -eq 4 ] &&
      [ "$(section inter.whole_nodes | wc -l)" -eq 4 ] || { cat "$profile"; fail "not every collective in every link"; }
    [ "$(section intra)" != "$(section inter)" ] || { cat "$profile"; fail "[link.inter] repeats [link.intra]"; }
    # tp=2 on 2 nodes of one rank each: the tp group spans them, marked and
    # priced on the inter-node link; on one node, on the intra-node link. A
    # copy of the profile whose inter-node link is 100 times slower shows
    # which link prices what, whatever the measured speeds.
    slow="$work/slow-inter.toml"
    awk '/^\[link\./ { inter = ($0 ~ /^\[link\.inter[].]/) }
         inter { while (match($0, /bandwidth_gbps = [0-9.]+/)) {
                   v = substr($0, RSTART + 17, RLENGTH - 17) / 100
                   $0 = substr($0, 1, RSTART - 1) "bandwidth_gbps=" v substr($0, RSTART + RLENGTH) } }
         { print }' "$profile" > "$slow"
    tp_time() {  # PROFILE NODES: rank 0's tensor-parallel collectives, and the axes across nodes
      "$bin" plan "${demo[@]}" --layout tp=2 --hardware "$1" --nodes "$2" --json |
        jq -r '"\(.time.ranks[0].tp_comm_s) \(.placement.groups_across_nodes | join(","))"'
    }
    read -r inside inside_axes <<< "$(tp_time "$profile" 1)"
    read -r inside_slow _ <<< "$(tp_time "$slow" 1)"
    read -r across across_axes <<< "$(tp_time "$profile" 2)"
    read -r across_slow _ <<< "$(tp_time "$slow" 2)"
    echo "plan-link: tp=2 collectives inside a node $inside s, across nodes $across s ($across_axes);" \
         "with the inter-node link 100 times slower: $inside_slow s and $across_slow s"
    [ -z "$inside_axes" ] && [ "$across_axes" = tp ] || fail "groups across nodes: '$inside_axes' and '$across_axes'"
    [ "$inside" = "$inside_slow" ] || fail "tp inside a node priced on the inter-node link"
    awk -v a="$across" -v s="$across_slow" 'BEGIN { exit !(s > 10 * a) }' ||
      fail "tp across nodes not priced on the inter-node link ($across s, $across_slow s with it 100 times slower)"
    "$bin" plan "${demo[@]}" --layout tp=2 --hardware "$profile" --nodes 2 | grep -q "tp ACROSS NODES" ||
      fail "the plan does not mark tp across nodes"
    ;;
  *) fail "unknown case" ;;
esac
echo "cluster $case_name: PASS"
