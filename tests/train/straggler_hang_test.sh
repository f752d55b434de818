#!/usr/bin/env bash
# Stragglers and hangs through the CLI (docs/comm.md, "Stragglers and hangs"):
#   1. rank 1 slowed at every forward fault point (forward@1:delay) is named
#      in metrics.jsonl as the straggler, and on the log;
#   2. rank 1 hung at its first forward of step 3 (forward@1#9:hang: 4 forward
#      points a step, under either backend: the step the pre-run memory check
#      records on the meta device reaches no fault point) ends the job
#      through the heartbeat
#      (comm.heartbeat_timeout_s = 2) long before the collective timeout
#      (comm.timeout_s = 60): exit code 124, a message naming rank 1, its
#      host, step 3 and the phase, no collective timeout; the checkpoints of
#      steps 1 and 2 stay complete and their metrics records are there.
#   straggler_hang_test.sh MESHTRAIN threads
#   straggler_hang_test.sh MESHTRAIN mpi MPIRUN
set -uo pipefail
bin="$1"
mode="$2"
mpirun="${3:-mpirun}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=../support/tiny_job.sh
source "$(dirname "$0")/../support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 100
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
steps = 6
micro_batch = 2
[parallel]
dp = 2
[checkpoint]
every = 1
[comm]
timeout_s = 60
heartbeat_timeout_s = 2
TOML
"$bin" data prepare --out "$work/data" --format fortune "$work/corpus.txt" > /dev/null || exit 1

fail() {
  echo "FAIL ($mode): $1"
  tail -30 "$work/log"
  # This job's processes only (its unique config path), so none outlives the test.
  for p in $(pgrep -f "$work/cfg.toml"); do kill -KILL "$p" 2> /dev/null; done
  exit 1
}

# job RUN_DIR: one training job of two ranks, in the background ($! its pid).
job() {
  if [ "$mode" = mpi ]; then
    "$mpirun" -np 2 --oversubscribe --allow-run-as-root -x MESHTRAIN_FAULT "$bin" train "$work/cfg.toml" \
      --set comm.backend=mpi --set metrics.run_dir="$1" > "$work/log" 2>&1 &
  else
    "$bin" train "$work/cfg.toml" --set metrics.run_dir="$1" > "$work/log" 2>&1 &
  fi
}

# 1. A straggler.
export MESHTRAIN_FAULT="forward@1:delay=0.05"
job "$work/slow"
wait $! || fail "the job with a slow rank failed"
grep -aq "warning: rank 1 (host .*) is a straggler" "$work/log" || fail "no straggler line on the log"
named=$(grep -c '"straggler":\[{[^]]*"rank":1' "$work/slow/metrics.jsonl")
[ "$named" -eq 4 ] || fail "rank 1 named in $named step records, expected 4 (steps 3 to 6)"
grep -q '"straggler":\[{[^]]*"rank":0' "$work/slow/metrics.jsonl" && fail "rank 0 was named"
slowest=$(grep -c '"slowest":1' "$work/slow/metrics.jsonl")
[ "$slowest" -eq 6 ] || fail "rank 1 the slowest in $slowest of 6 step records"

# 2. A hang.
hit=9
export MESHTRAIN_FAULT="forward@1#$hit:hang"
job "$work/hung"
pid=$!
hung_at=""
for _ in $(seq 1 600); do
  if [ -z "$hung_at" ] && grep -aq "fault injection: forward at rank 1 (hit $hit): hang" "$work/log"; then
    hung_at=$(date +%s.%N)
  fi
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.05
done
kill -0 "$pid" 2> /dev/null && fail "the job still runs 30 s after it started"
wait "$pid"
code=$?
ended_at=$(date +%s.%N)
[ -n "$hung_at" ] || fail "rank 1 never hung"
after=$(echo "$ended_at - $hung_at" | bc)
echo "straggler_hang_test ($mode): the job ended ${after} s after rank 1 hung (heartbeat 2 s, collective timeout 60 s)"
[ "$code" -eq 124 ] || fail "exit code $code, expected 124"
grep -aq "heartbeat: rank 1 (host [^)]*) is hung: no progress for [0-9.]* s outside any collective (comm.heartbeat_timeout_s = 2); last at step 3, forward" "$work/log" ||
  fail "no heartbeat message naming rank 1, its host, step 3 and forward"
grep -aq "timed out" "$work/log" && fail "a collective timed out: the heartbeat did not end the job first"
[ "$(echo "$after < 10" | bc)" -eq 1 ] || fail "the job ended ${after} s after the hang, expected < 10 s"
"$bin" ckpt verify "$work/hung/checkpoints" > /dev/null || fail "the checkpoints before the hang are not complete"
[ -d "$work/hung/checkpoints/step-00000002" ] && [ ! -e "$work/hung/checkpoints/step-00000003" ] ||
  fail "the checkpoint of step 2 is not the last one"
[ "$(grep -c '"loss"' "$work/hung/metrics.jsonl")" -eq 2 ] || fail "the metrics of steps 1 and 2 are not both there"
sleep 0.5
pgrep -f "$work/cfg.toml" > /dev/null && fail "processes of the job still run"
echo "straggler_hang_test: PASS ($mode)"
