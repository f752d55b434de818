#!/usr/bin/env bash
# The rsh agent of the emulated cluster (scripts/emulated-cluster.sh): runs
# a command inside a node, as `ssh NODE COMMAND...` would on a real one.
#
#   cluster-rsh.sh NODE COMMAND [ARG...]
#   mpirun --mca plm_rsh_agent scripts/cluster-rsh.sh --hostfile runs/cluster/hostfile ...
#   meshtrain launch --hostfile runs/cluster/hostfile --rsh-agent scripts/cluster-rsh.sh ...
#
# The cluster is MESHTRAIN_CLUSTER (default mtc, the script's default name).
# As ssh does, the words of the command are joined with spaces and run by a
# shell (mpirun sends `VAR=...; export VAR; orted ...` this way); the
# command starts in the caller's directory (one file system for all nodes).
set -euo pipefail
cluster="${MESHTRAIN_CLUSTER:-mtc}"
# ssh options mpirun may pass before the host (none by default; -x turns off
# X11 forwarding in some configurations).
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done
[ $# -ge 2 ] || { echo "usage: cluster-rsh.sh NODE COMMAND [ARG...]" >&2; exit 2; }
node="$1"
shift
net="/run/netns/$cluster-$node"
uts="/run/meshtrain-cluster/$cluster/$node.uts"
if [ ! -e "$net" ] || [ ! -e "$uts" ]; then
  # As ssh reports an unreachable host (exit status 255).
  echo "cluster-rsh.sh: no node '$node' in the emulated cluster '$cluster' (scripts/emulated-cluster.sh up)" >&2
  exit 255
fi
# A node whose link is cut (emulated-cluster.sh cut-link) cannot be reached,
# as ssh cannot reach a machine that stopped answering.
if ! ip netns exec "$cluster-sw" ip link show "v${node#node}" 2> /dev/null | grep -q "state UP"; then
  echo "cluster-rsh.sh: ssh: connect to host $node: no route to host (its link is down)" >&2
  exit 255
fi
# Open MPI's waits yield the core: a node's TCP packets cross its link in
# kernel threads on the node's own cores (the shaped veth), and a rank that
# busy-polls keeps them from running until the next scheduler tick, 4-8 ms
# a message (docs/multi-node.md, "The emulated cluster"). On a real
# machine the network card does that work.
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
# On the node's own cores (emulated-cluster.sh): what the node's processes
# see as their machine.
cpus="$(cat "/run/meshtrain-cluster/$cluster/$node.cpus" 2> /dev/null || true)"
if [ -n "$cpus" ]; then
  # Open MPI would bind its ranks to the machine's socket, all of its cores.
  export OMPI_MCA_hwloc_base_binding_policy="${OMPI_MCA_hwloc_base_binding_policy:-none}"
  exec nsenter --net="$net" --uts="$uts" -- taskset -c "$cpus" /bin/sh -c "$*"
fi
exec nsenter --net="$net" --uts="$uts" -- /bin/sh -c "$*"
