#!/usr/bin/env bash
# A Slurm cluster of its own on the emulated cluster (scripts/emulated-cluster.sh;
# docs/multi-node.md, "Slurm"): munge and slurmctld on node0 and a slurmd on
# every node of its hostfile, each in that node's network and UTS
# namespaces, with Debian's slurm-wlm and munge. Everything it makes lives
# under DIR/slurm: the config (DIR/slurm/slurm.conf), munge's key and
# socket, the controller's state, each node's spool and temporary
# directory, the logs and the pid files; the machine's own /etc/slurm,
# /etc/munge and daemons are not touched.
#
#   emulated-slurm.sh [--name NAME] [--dir DIR] up      (after emulated-cluster.sh --name NAME --dir DIR up N)
#   emulated-slurm.sh [--name NAME] [--dir DIR] down
#   SLURM_CONF=DIR/slurm/slurm.conf MESHTRAIN_CLUSTER=NAME scripts/cluster-rsh.sh node0 sbatch ...
#
# NAME and DIR are the emulated cluster's (default mtc and runs/cluster of
# this checkout); NAME is the Slurm cluster's name too. Every daemon listens
# inside its node's network namespace, so the default ports (6817, 6818) of
# clusters of different names do not collide. `up` runs `down` first;
# `down` cancels the jobs, stops the daemons it started (by their pid files)
# and removes DIR; processes left in the nodes go with
# `emulated-cluster.sh down`.
#
# Exit status 77 (and a message on stderr) when the Slurm or munge programs
# are missing or this process is not root: the tests report it as a skip.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name=mtc
cluster_dir="$(dirname "$here")/runs/cluster"
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --dir) cluster_dir="$2"; shift 2 ;;
    *) break ;;
  esac
done
hostfile="$cluster_dir/hostfile"
dir="$cluster_dir/slurm"
cmd="${1:-}"
readonly kSkip=77
die() { echo "emulated-slurm: $*" >&2; exit 1; }
[[ "$name" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "--name '$name': letters, digits, '_', '.', '-' (at most 40)"
export MESHTRAIN_CLUSTER="$name" SLURM_CONF="$dir/slurm.conf"
on() { "$here/cluster-rsh.sh" "$@"; }

require_tools() {
  local tool missing=()
  for tool in munged mungekey slurmctld slurmd sbatch srun sinfo scontrol; do
    command -v "$tool" > /dev/null || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "emulated-slurm: ${missing[*]} not found: install Debian's slurm-wlm and munge" \
         "(scripts/install-deps.sh)" >&2
    exit "$kSkip"
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "emulated-slurm: the daemons run as root inside the emulated cluster's nodes: run as root" >&2
    exit "$kSkip"
  fi
}

nodes() { awk '{print $1}' "$hostfile" 2> /dev/null || true; }

# SIGTERM to the daemon of pid file $1 if it still runs $2 (a node's kill-node
# may have ended it, and its pid been reused), SIGKILL after 5 s.
stop() {
  local pid
  pid="$(cat "$1" 2> /dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "$2" ] || return 0
  kill -TERM "$pid" 2> /dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2> /dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2> /dev/null || true
}

down() {
  if [ -f "$dir/slurm.conf" ]; then
    timeout 5 "$here/cluster-rsh.sh" node0 scancel --quiet --user=root > /dev/null 2>&1 || true
    local f
    for f in "$dir"/run/slurmd-*.pid; do stop "$f" slurmd; done
    stop "$dir/run/slurmctld.pid" slurmctld
    stop "$dir/run/munged.pid" munged
  fi
  rm -rf "$dir"
}

# The config: node0 the controller, every node of the hostfile a compute
# node with as many CPUs as its slots.
write_config() {
  local node i=0 slots
  cat > "$dir/slurm.conf" << EOF
# Written by scripts/emulated-slurm.sh for the emulated cluster '$name'.
ClusterName=$name
SlurmctldHost=node0(10.200.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# Each node its own: Slurm's PMIx plugin makes its per-step directories here,
# and the nodes share one file system.
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# The nodes share this machine's cores: each takes the CPUs written here.
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
# Seconds between the SIGTERM and the SIGKILL that end a step (default 30):
# when a rank dies, srun ends the others this way.
KillWait=5
EOF
  for node in $(nodes); do
    slots="$(awk -v n="$node" '$1 == n { for (i = 2; i <= NF; ++i) if ($i ~ /^slots=/) print substr($i, 7) }' \
             "$hostfile")"
    echo "NodeName=$node NodeAddr=10.200.0.$((i + 1)) CPUs=${slots:-1} State=UNKNOWN" >> "$dir/slurm.conf"
    mkdir -p "$dir/spool/$node" "$dir/tmp/$node"
    i=$((i + 1))
  done
  echo "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$dir/slurm.conf"
}

up() {
  require_tools
  [ -e "/run/netns/$name-node0" ] && [ -f "$hostfile" ] ||
    die "no emulated cluster '$name' with its hostfile $hostfile (scripts/emulated-cluster.sh --name $name" \
        "--dir $cluster_dir up N)"
  down
  mkdir -p "$dir"/{munge,state,spool,tmp,run,log}
  # munged refuses a socket directory others cannot enter, and a key others can read.
  chmod 755 "$dir" "$dir/munge"
  mkdir -m 700 "$dir/munge/key"
  mungekey --create --keyfile="$dir/munge/key/munge.key"
  write_config
  on node0 munged --force --origin=10.200.0.1 --key-file="$dir/munge/key/munge.key" --socket="$dir/munge/socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/key/seed" ||
    die "munged did not start: $(tail -3 "$dir/log/munged.log" 2> /dev/null)"
  on node0 slurmctld -f "$dir/slurm.conf" || die "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.log")"
  local node count
  for node in $(nodes); do
    on "$node" slurmd -f "$dir/slurm.conf" -N "$node" ||
      die "slurmd on $node did not start: $(tail -3 "$dir/log/slurmd-$node.log")"
  done
  count="$(nodes | wc -l)"
  for _ in $(seq 300); do
    [ "$(on node0 sinfo --noheader --states=idle --format=%D 2> /dev/null)" = "$count" ] && break
    sleep 0.1
  done
  [ "$(on node0 sinfo --noheader --states=idle --format=%D 2> /dev/null)" = "$count" ] ||
    die "the $count node(s) did not become idle within 30 s: $(on node0 sinfo 2>&1 | tail -3); logs in $dir/log"
  echo "emulated Slurm cluster '$name': $count node(s), controller on node0, SLURM_CONF=$dir/slurm.conf"
}

case "$cmd" in
  up) up ;;
  down) down; echo "emulated Slurm cluster '$name': down" ;;
  *) die "usage: emulated-slurm.sh [--name NAME] [--dir DIR] up | down" ;;
esac
