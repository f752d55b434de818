#!/usr/bin/env bash
# SIGTERM or SIGINT to `meshtrain launch` stops the job it supervises the
# way a signal to a training process does: the ranks finish their step,
# save a checkpoint and exit, launch exits with 128 + the signal without
# restarting the job, and no mpirun or rank is left running.
#   launch_signal_test.sh MESHTRAIN TERM|INT
set -uo pipefail
bin="$1"
sig="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=../support/tiny_job.sh
source "$(dirname "$0")/../support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 100
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
steps = 1000000
micro_batch = 2
[parallel]
dp = 2
[metrics]
run_dir = "$work/run"
log_every = 1
TOML

: > "$work/log"
"$bin" launch -n 2 --max-restarts 2 --mpirun-arg=--oversubscribe --mpirun-arg=--allow-run-as-root \
  "$work/cfg.toml" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q "step  *3/" "$work/log" && break
  sleep 0.1
done
grep -q "step  *3/" "$work/log" || { echo "the job did not start:"; cat "$work/log"; kill -KILL "$pid"; exit 1; }
kill -"$sig" "$pid"
wait "$pid"
code=$?
fail() {
  echo "FAIL: $1"
  tail -30 "$work/log"
  # This job's processes only (its unique config path), so none outlives the test.
  for p in $(pgrep -f "$work/cfg.toml"); do kill -KILL "$p" 2> /dev/null; done
  exit 1
}
want=$((128 + $(kill -l "$sig")))
[ "$code" -eq "$want" ] || fail "launch exited with $code, expected $want"
grep -aq "stopped by SIG$sig after step" "$work/log" || fail "the job did not stop after its step"
grep -aq "restart 1 of" "$work/log" && fail "the stopped job was restarted"
"$bin" ckpt verify "$work/run/checkpoints" > /dev/null || fail "no complete checkpoint of the stop"
sleep 1
if pgrep -f "$work/cfg.toml" > /dev/null; then
  pgrep -af "$work/cfg.toml"
  fail "processes of the job still run after launch exited"
fi
echo "launch_signal_test: PASS (SIG$sig)"
