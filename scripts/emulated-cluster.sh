#!/usr/bin/env bash
# An emulated cluster on this machine (docs/multi-node.md): N nodes, each a
# network namespace with its own UTS namespace (hostname node0..nodeN-1)
# and one address on a switch, the inter-node links shaped with tc (tbf: the
# kernel here has no netem). Ranks started on one node meet over shared
# memory; between nodes Open MPI sees separate hosts and uses TCP over the
# shaped links. scripts/cluster-rsh.sh runs a command inside a node (the rsh
# agent for mpirun).
#
#   emulated-cluster.sh up N [--link-gbit G] [--slots S]   (default 10 Gbit/s, 2 slots a node)
#   emulated-cluster.sh down
#   emulated-cluster.sh status
#   emulated-cluster.sh kill-node NODE    cut NODE's link, kill its processes, remove it (a crash)
#   emulated-cluster.sh cut-link NODE     take NODE's link down, nothing else (it stops answering)
#   emulated-cluster.sh restore-node NODE bring back a node kill-node removed (rebooted, empty)
#   emulated-cluster.sh slurm up|down     a Slurm of its own on the nodes (scripts/emulated-slurm.sh)
#
# Options before the command: --name NAME (default mtc; clusters of different
# names coexist, so parallel tests do not collide) and --dir DIR (where the
# hostfile goes; default runs/cluster of this checkout).
#
# A node's processes run on cores of their own (cluster-rsh.sh starts them
# under taskset): N nodes split this machine's cores in N contiguous blocks,
# or share them one core a node, round robin, when nodes outnumber cores. A
# node then has a real machine's core count, its ranks see it (their
# affinity), and one node's idle time (a pipeline bubble) does not speed up
# another node's work.
#
# Everything it makes: the network namespaces NAME-node<i> and NAME-sw (the
# switch: a bridge and one veth per node, no address), the bind-mounted UTS
# namespaces and each node's core list under /run/meshtrain-cluster/NAME,
# and DIR/hostfile. The host's own network namespace gets no address, link
# or route. `down` kills every process left in the nodes and removes all of
# it; `up` runs `down` first, so a second `up` after a crash starts clean.
#
# Exit status 77 (and a message on stderr) when this process lacks
# CAP_NET_ADMIN or CAP_SYS_ADMIN: the cluster tests report it as a skip.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name=mtc
dir="$(dirname "$here")/runs/cluster"
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) break ;;
  esac
done
cmd="${1:-}"
shift || true
state="/run/meshtrain-cluster/$name"
subnet=10.200.0
readonly kSkip=77

die() { echo "emulated-cluster: $*" >&2; exit 1; }

[[ "$name" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "--name '$name': letters, digits, '_', '.', '-' (at most 40)"

# CAP_NET_ADMIN (12) for namespaces, links and tc; CAP_SYS_ADMIN (21) for
# the UTS namespaces and their bind mounts.
require_capabilities() {
  local eff
  eff=$((16#$(awk '/^CapEff:/ {print $2}' /proc/self/status)))
  if (( !(eff >> 12 & 1) || !(eff >> 21 & 1) )); then
    echo "emulated-cluster: needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root) to make network and UTS" \
         "namespaces; this process has neither or only one of them" >&2
    exit "$kSkip"
  fi
  for tool in ip tc nsenter unshare taskset; do
    command -v "$tool" > /dev/null || die "'$tool' not found (Debian packages iproute2 and util-linux)"
  done
}

nodes_of() { ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^${name//./\\.}-(node[0-9]+|sw)$" || true; }

# SIGKILL to every process inside the network namespace $1.
kill_processes_in() {
  local pids
  pids="$(ip netns pids "$1" 2> /dev/null || true)"
  # shellcheck disable=SC2086
  if [ -n "$pids" ]; then kill -KILL $pids 2> /dev/null || true; fi
}

# Every process inside one of this cluster's namespaces, killed; then the
# namespaces, their links and the UTS bind mounts removed.
down() {
  local ns
  for ns in $(nodes_of); do kill_processes_in "$ns"; done
  for ns in $(nodes_of); do
    for _ in $(seq 50); do
      [ -z "$(ip netns pids "$ns" 2> /dev/null)" ] && break
      sleep 0.1
    done
    ip netns del "$ns" 2> /dev/null || true
  done
  if [ -d "$state" ]; then
    local f
    for f in "$state"/*.uts; do
      [ -e "$f" ] || continue
      umount "$f" 2> /dev/null || true
    done
    rm -rf "$state"
  fi
  rm -f "$dir/hostfile" "$dir/cluster.env"
  rm -rf "$dir/slurm"  # `slurm up`'s files; its daemons were processes in the nodes
}

# tbf on the node's side of its link (its egress toward the switch) and on
# the switch's side (its ingress): G Gbit/s each way. The bucket holds
# 4 ms of traffic (at least 64 KiB) so TCP bursts pass at the rate; the
# peak rate (1% above it, over 64 KiB packets: tbf splits larger ones)
# keeps a full bucket from sending faster than the wire, as a real link
# never does: a tensor-parallel all-reduce sent after a pause would cross
# at once instead of at G.
shape() {
  local ns="$1" dev="$2" gbit="$3" burst peak
  burst=$(awk -v g="$gbit" 'BEGIN { b = g * 1e9 / 8 * 0.004; if (b < 65536) b = 65536; printf "%d", b }')
  peak=$(awk -v g="$gbit" 'BEGIN { printf "%dkbit", g * 1.01e6 }')
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "${gbit}gbit" burst "$burst" latency 50ms \
    peakrate "$peak" mtu 65536
}

# node_cpus I N: the cores node I of N runs on, as a taskset list.
node_cpus() {
  local i="$1" n="$2" cpus=() range lo hi c
  for range in $(grep '^Cpus_allowed_list:' /proc/self/status | awk '{print $2}' | tr ',' ' '); do
    lo="${range%-*}"
    hi="${range#*-}"
    for ((c = lo; c <= hi; ++c)); do cpus+=("$c"); done
  done
  local k="${#cpus[@]}"
  if [ "$n" -gt "$k" ]; then
    echo "${cpus[$((i % k))]}"
  else
    local first=$((i * k / n)) last=$(((i + 1) * k / n - 1))
    echo "${cpus[*]:$first:$((last - first + 1))}" | tr ' ' ','
  fi
}

# make_node I GBIT N: node I's namespaces, address, shaped link and cores.
make_node() {
  local i="$1" gbit="$2" n="$3" ns="$name-node$1" sw="$name-sw"
  ip netns add "$ns"
  ip netns exec "$sw" ip link add "v$i" type veth peer name eth0 netns "$ns"
  ip netns exec "$sw" ip link set "v$i" master br0 up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$subnet.$((i + 1))/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  shape "$ns" eth0 "$gbit"
  shape "$sw" "v$i" "$gbit"
  node_cpus "$i" "$n" > "$state/node$i.cpus"
  touch "$state/node$i.uts"
  unshare --uts="$state/node$i.uts" hostname "node$i"
}

up() {
  local n="" gbit=10 slots=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --link-gbit) gbit="$2"; shift 2 ;;
      --slots) slots="$2"; shift 2 ;;
      *) [ -z "$n" ] || die "unexpected argument '$1'"; n="$1"; shift ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: N nodes, 1 to 200 (got '${n}')"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots S: ranks a node holds, at least 1 (got '$slots')"
  awk -v g="$gbit" 'BEGIN { exit !(g + 0 > 0 && g + 0 <= 400) }' ||
    die "--link-gbit G: the link rate in Gbit/s, above 0 and at most 400 (got '$gbit')"
  require_capabilities
  down  # whatever a crashed cluster of this name left
  mkdir -p "$state" "$dir"
  local sw="$name-sw" i ns
  ip netns add "$sw"
  ip netns exec "$sw" ip link add br0 type bridge
  ip netns exec "$sw" ip link set br0 up
  : > "$dir/hostfile.tmp"
  for ((i = 0; i < n; ++i)); do
    make_node "$i" "$gbit" "$n"
    echo "node$i slots=$slots" >> "$dir/hostfile.tmp"
  done
  mv "$dir/hostfile.tmp" "$dir/hostfile"
  # For cluster-rsh.sh and the tests: which cluster, where its files are.
  printf 'MESHTRAIN_CLUSTER=%s\nnodes=%d\nlink_gbit=%s\n' "$name" "$n" "$gbit" > "$dir/cluster.env"
  echo "emulated cluster '$name': $n nodes x $slots slots, links ${gbit} Gbit/s, hostfile $dir/hostfile"
}

status() {
  local found=0 ns
  for ns in $(nodes_of); do
    found=1
    case "$ns" in
      *-sw) continue ;;
    esac
    local node="${ns##*-}" addr sent procs
    addr="$(ip netns exec "$ns" ip -4 -o addr show dev eth0 2> /dev/null | awk '{print $4}')"
    sent="$(ip netns exec "$ns" tc -s qdisc show dev eth0 2> /dev/null | awk '/Sent/ {print $2; exit}')"
    procs="$(ip netns pids "$ns" | wc -l)"
    echo "$node: $addr, $procs process(es), ${sent:-0} bytes sent over its link"
  done
  [ "$found" = 1 ] || { echo "emulated cluster '$name': down"; return 3; }
}

kill_node() {
  local node="${1:-}" ns
  [[ "$node" =~ ^node[0-9]+$ ]] || die "kill-node NODE: a node name such as node1 (got '${node}')"
  ns="$name-$node"
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no node '$node' in cluster '$name'"
  # The link first, so no peer hears a reset: as when a machine loses power.
  ip netns exec "$name-sw" ip link del "v${node#node}" 2> /dev/null || true
  kill_processes_in "$ns"
  ip netns del "$ns" 2> /dev/null || true
  umount "$state/$node.uts" 2> /dev/null || true
  rm -f "$state/$node.uts"
}

# A node lost with kill-node comes back (rebooted or replaced), empty.
restore_node() {
  local node="${1:-}" gbit
  [[ "$node" =~ ^node[0-9]+$ ]] || die "restore-node NODE: a node name such as node1 (got '${node}')"
  [ -e "/run/netns/$name-sw" ] || die "no cluster '$name' (emulated-cluster.sh up)"
  [ ! -e "/run/netns/$name-$node" ] || die "node '$node' of cluster '$name' is up"
  grep -q "^$node " "$dir/hostfile" 2> /dev/null || die "'$node' is not in $dir/hostfile"
  gbit="$(sed -n 's/^link_gbit=//p' "$dir/cluster.env")"
  make_node "${node#node}" "${gbit:-10}" "$(sed -n 's/^nodes=//p' "$dir/cluster.env")"
}

cut_link() {
  local node="${1:-}"
  [[ "$node" =~ ^node[0-9]+$ ]] || die "cut-link NODE: a node name such as node1 (got '${node}')"
  ip netns exec "$name-sw" ip link set "v${node#node}" down 2> /dev/null || die "no node '$node' in cluster '$name'"
}

case "$cmd" in
  up) up "$@" ;;
  down) require_capabilities; down; echo "emulated cluster '$name': down" ;;
  status) status ;;
  kill-node) require_capabilities; kill_node "$@" ;;
  cut-link) require_capabilities; cut_link "$@" ;;
  restore-node) require_capabilities; restore_node "$@" ;;
  slurm) require_capabilities; source "$here/emulated-slurm.sh"; slurm "$@" ;;
  *) die "usage: emulated-cluster.sh [--name NAME] [--dir DIR] up N [--link-gbit G] [--slots S] | down | status | kill-node NODE | cut-link NODE | restore-node NODE | slurm up|down" ;;
esac
