# Slurm on the emulated cluster (docs/multi-node.md, "Slurm"): sourced by
# scripts/emulated-cluster.sh for its `slurm up` and `slurm down` commands.
#
#   emulated-cluster.sh [--name NAME] [--dir DIR] up 2
#   emulated-cluster.sh [--name NAME] [--dir DIR] slurm up
#   SLURM_CONF=DIR/slurm/slurm.conf MESHTRAIN_CLUSTER=NAME scripts/cluster-rsh.sh node0 sbatch ...
#   emulated-cluster.sh [--name NAME] [--dir DIR] slurm down   (`down` stops it too)
#
# `slurm up` starts munge and slurmctld on node0 and a slurmd on every node of
# the hostfile, each in that node's network and UTS namespaces, with
# Debian's slurm-wlm and munge. Everything it makes lives under DIR/slurm:
# the config (slurm.conf), munge's key and socket, the controller's state,
# each node's spool and temporary directory, the logs and the pid files;
# the machine's own /etc/slurm, /etc/munge and daemons are not touched. The
# Slurm cluster is named NAME. Every daemon listens inside its node's
# network namespace, so the default ports (6817, 6818) of clusters of
# different names do not collide. `slurm up` runs `slurm down` first;
# `slurm down` cancels the jobs, stops the daemons it started (by their pid
# files) and removes DIR/slurm.
#
# Exit status 77 (and a message on stderr) when the Slurm or munge programs
# are missing: the tests report it as a skip.
#
# Uses the caller's name, dir (the cluster's directory), here and die().

slurm_dir="$dir/slurm"
hostfile="$dir/hostfile"
export SLURM_CONF="$slurm_dir/slurm.conf"
on_node() { MESHTRAIN_CLUSTER="$name" "$here/cluster-rsh.sh" "$@"; }

require_tools() {
  local tool missing=()
  for tool in munged mungekey slurmctld slurmd sbatch srun sinfo scontrol; do
    command -v "$tool" > /dev/null || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "emulated-cluster: ${missing[*]} not found: install Debian's slurm-wlm and munge" \
         "(scripts/install-deps.sh)" >&2
    exit "$kSkip"
  fi
}

slurm_nodes() { awk '{print $1}' "$hostfile" 2> /dev/null || true; }

# SIGTERM to the daemon of pid file $1 if it still runs $2 (a node's kill-node
# may have ended it, and its pid been reused), SIGKILL after 5 s.
stop_daemon() {
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

slurm_down() {
  if [ -f "$slurm_dir/slurm.conf" ]; then
    MESHTRAIN_CLUSTER="$name" timeout 5 "$here/cluster-rsh.sh" node0 scancel --quiet --user=root > /dev/null 2>&1 || true
    local f
    for f in "$slurm_dir"/run/slurmd-*.pid; do stop_daemon "$f" slurmd; done
    stop_daemon "$slurm_dir/run/slurmctld.pid" slurmctld
    stop_daemon "$slurm_dir/run/munged.pid" munged
  fi
  rm -rf "$slurm_dir"
}

# The config: node0 the controller, every node of the hostfile a compute
# node with as many CPUs as its slots.
write_config() {
  local node i=0 slots
  cat > "$slurm_dir/slurm.conf" << EOF
# Written by scripts/emulated-slurm.sh for the emulated cluster '$name'.
ClusterName=$name
SlurmctldHost=node0(10.200.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$slurm_dir/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$slurm_dir/state
SlurmdSpoolDir=$slurm_dir/spool/%n
# Each node its own: Slurm's PMIx plugin makes its per-step directories here,
# and the nodes share one file system.
TmpFS=$slurm_dir/tmp/%n
SlurmctldPidFile=$slurm_dir/run/slurmctld.pid
SlurmdPidFile=$slurm_dir/run/slurmd-%n.pid
SlurmctldLogFile=$slurm_dir/log/slurmctld.log
SlurmdLogFile=$slurm_dir/log/slurmd-%n.log
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
# Job ids of their own: Open MPI names its shared-memory files after the host
# and the job (/dev/shm/vader_segment.node0.*), and emulated clusters running
# side by side share /dev/shm and the host names node0, node1, ...
FirstJobId=$(( (RANDOM * 32768 + RANDOM) % 60000000 + 100 ))
ReturnToService=2
# Seconds between the SIGTERM and the SIGKILL that end a step (default 30):
# when a rank dies, srun ends the others this way.
KillWait=5
EOF
  for node in $(slurm_nodes); do
    slots="$(awk -v n="$node" '$1 == n { for (i = 2; i <= NF; ++i) if ($i ~ /^slots=/) print substr($i, 7) }' \
             "$hostfile")"
    echo "NodeName=$node NodeAddr=10.200.0.$((i + 1)) CPUs=${slots:-1} State=UNKNOWN" >> "$slurm_dir/slurm.conf"
    mkdir -p "$slurm_dir/spool/$node" "$slurm_dir/tmp/$node"
    i=$((i + 1))
  done
  echo "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$slurm_dir/slurm.conf"
}

slurm_up() {
  require_tools
  [ -e "/run/netns/$name-node0" ] && [ -f "$hostfile" ] ||
    die "no emulated cluster '$name' with its hostfile $hostfile (emulated-cluster.sh --name $name --dir $dir up N)"
  slurm_down
  mkdir -p "$slurm_dir"/{munge,state,spool,tmp,run,log}
  # munged refuses a socket directory others cannot enter, and a key others can read.
  chmod 755 "$slurm_dir" "$slurm_dir/munge"
  mkdir -m 700 "$slurm_dir/munge/key"
  mungekey --create --keyfile="$slurm_dir/munge/key/munge.key"
  write_config
  on_node node0 munged --force --origin=10.200.0.1 --key-file="$slurm_dir/munge/key/munge.key" \
    --socket="$slurm_dir/munge/socket" --pid-file="$slurm_dir/run/munged.pid" --log-file="$slurm_dir/log/munged.log" \
    --seed-file="$slurm_dir/munge/key/seed" ||
    die "munged did not start: $(tail -3 "$slurm_dir/log/munged.log" 2> /dev/null)"
  on_node node0 slurmctld -f "$slurm_dir/slurm.conf" ||
    die "slurmctld did not start: $(tail -3 "$slurm_dir/log/slurmctld.log")"
  local node count
  for node in $(slurm_nodes); do
    on_node "$node" slurmd -f "$slurm_dir/slurm.conf" -N "$node" ||
      die "slurmd on $node did not start: $(tail -3 "$slurm_dir/log/slurmd-$node.log")"
  done
  count="$(slurm_nodes | wc -l)"
  for _ in $(seq 300); do
    [ "$(on_node node0 sinfo --noheader --states=idle --format=%D 2> /dev/null)" = "$count" ] && break
    sleep 0.1
  done
  [ "$(on_node node0 sinfo --noheader --states=idle --format=%D 2> /dev/null)" = "$count" ] ||
    die "the $count node(s) did not become idle within 30 s: $(on_node node0 sinfo 2>&1 | tail -3);" \
        "logs in $slurm_dir/log"
  echo "emulated Slurm cluster '$name': $count node(s), controller on node0, SLURM_CONF=$slurm_dir/slurm.conf"
}

slurm() {
  case "${1:-}" in
    up) slurm_up ;;
    down) slurm_down; echo "emulated Slurm cluster '$name': down" ;;
    *) die "usage: emulated-cluster.sh [--name NAME] [--dir DIR] slurm up | down" ;;
  esac
}
