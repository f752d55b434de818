#!/usr/bin/env bash
# Elastic membership through the CLI (docs/comm.md, "Elastic membership"), in
# reproducible mode, every final checkpoint compared with an uninterrupted
# dp=4 run by `meshtrain ckpt diff` (identical bits):
#   threads:
#     shrink  rank 3 dies in step 3 (backward@3#9:throw, 4 backward points a
#             step): the job continues at dp=2, grad_accum=2 from the
#             checkpoint of step 2; a membership record in metrics.jsonl
#     live    rank 3 dies in step 6, the last checkpoint at step 4: the live
#             ranks' state of step 5 becomes its checkpoint (no step lost);
#             under ZeRO-3 it is incomplete and the job resumes from step 4
#     grow    the capacity file says 2 at the start and 4 after step 3: the
#             job starts at dp=2 and grows back to dp=4 at a step boundary
#     change  the same, with rank 1 failing in the membership change itself
#             (elastic.change@1:throw): the restart continues on what is left
#     floor   comm.min_ranks = 4: a lost rank ends the job naming the floor,
#             its checkpoints kept
#   mpi (`meshtrain launch --elastic`):
#     grow    as above, mpirun relaunched at -np 4 after the save
#     change  a rank killed in the change (elastic.change@1:kill): the
#             launcher restarts it at the capacity file's 4 ranks
#   elastic_test.sh MESHTRAIN threads|mpi [MPIRUN]
set -uo pipefail
bin="$1"
mode="$2"
mpirun="${3:-mpirun}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=../support/tiny_job.sh
source "$(dirname "$0")/../support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 200
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
steps = 8
micro_batch = 2
reproducible = true
threads = 1
[parallel]
dp = 4
[checkpoint]
every = 2
[metrics]
log_every = 1
TOML
"$bin" data prepare --out "$work/data" --format fortune "$work/corpus.txt" > /dev/null || exit 1

fail() {
  echo "FAIL ($mode, $case_name): $1"
  tail -30 "$work/$case_name.log"
  for p in $(pgrep -f "$work/cfg.toml"); do kill -KILL "$p" 2> /dev/null; done
  exit 1
}

# run CASE [ARGS...]: the job in the background ($! its pid), its log in $work/CASE.log.
run() {
  local dir="$work/$1"
  shift
  mkdir -p "$dir"
  if [ "$mode" = mpi ]; then
    "$bin" launch -n 4 --elastic --mpirun "$mpirun" --mpirun-arg=--oversubscribe "$@" "$work/cfg.toml" \
      --set metrics.run_dir="$dir" > "$work/$case_name.log" 2>&1 &
  else
    "$bin" train --elastic "$work/cfg.toml" --set metrics.run_dir="$dir" "$@" > "$work/$case_name.log" 2>&1 &
  fi
}
same_as_reference() {
  "$bin" ckpt diff "$work/reference/checkpoints" "$work/$case_name/checkpoints" > "$work/$case_name.diff" 2>&1 ||
    { cat "$work/$case_name.diff"; fail "the final checkpoint differs from the uninterrupted run's"; }
  grep -q IDENTICAL "$work/$case_name.diff" || fail "ckpt diff did not say IDENTICAL"
}
logged() { grep -qF -- "$1" "$work/$case_name.log" || fail "the log lacks: $1"; }
# grow_at_step_3 [FAULT]: the capacity file says 2 now and 4 once step 3 is
# recorded; rank 0 waits 0.3 s after each step's records (a fault point's
# delay) so that the change lands while the job runs.
grow_at_step_3() {
  echo 2 > "$work/$case_name/capacity"
  MESHTRAIN_FAULT="metrics.written@0:delay=0.3${1:+;$1}" run "$case_name"
  local pid=$! i
  for i in $(seq 600); do
    grep -q '"step":3' "$work/$case_name/metrics.jsonl" 2> /dev/null && break
    sleep 0.1
  done
  echo 4 > "$work/$case_name/capacity"
  wait $pid || fail "the job failed"
}

case_name=reference
"$bin" train "$work/cfg.toml" --set metrics.run_dir="$work/reference" > "$work/reference.log" 2>&1 ||
  fail "the uninterrupted run failed"

if [ "$mode" = threads ]; then
  case_name=shrink
  MESHTRAIN_FAULT="backward@3#9:throw" run shrink
  wait $! || fail "the job failed"
  logged "membership: 4 ranks: dp=4, grad_accum=1 -> 2 ranks: dp=2, grad_accum=2 at step 2"
  logged "ready again in"
  grep '"event":"membership"' "$work/shrink/metrics.jsonl" | grep '"dp":2' | grep '"recovery_s":' |
    grep -q '"resumed_step":2' ||
    fail "no membership record at dp=2 in metrics.jsonl"
  same_as_reference

  # Rank 3 dies in step 6 with the last checkpoint at step 4: the three
  # live ranks' state of step 5 is complete (ZeRO-0 replicas) and becomes
  # its checkpoint, no step lost; under ZeRO-3 rank 3's shards are gone and
  # the job resumes from step 4.
  case_name=live
  MESHTRAIN_FAULT="backward@3#21:throw" run live --set checkpoint.every=4
  wait $! || fail "the job failed"
  logged "the state of step 5 from 3 live rank(s) committed"
  logged "-> 2 ranks: dp=2, grad_accum=2 at step 5, 0 step(s) lost"
  [ -z "$(ls -A "$work/live/checkpoints" | grep '^\.live')" ] || fail "live-state directories were left behind"
  same_as_reference
  case_name=live-zero3
  MESHTRAIN_FAULT="backward@3#21:throw" run live-zero3 --set checkpoint.every=4 --set parallel.zero_stage=3
  wait $! || fail "the job failed"
  logged "the live ranks' state is not complete"
  logged "-> 2 ranks: dp=2, grad_accum=2 at step 4, 1 step(s) lost"
  same_as_reference

  case_name=grow
  mkdir -p "$work/grow"
  grow_at_step_3
  logged "membership: 4 ranks: dp=4, grad_accum=1 -> 2 ranks: dp=2, grad_accum=2 at step 0"
  logged "-> 4 ranks: dp=4, grad_accum=1 at step"
  [ "$(grep -c '"event":"membership"' "$work/grow/metrics.jsonl")" = 2 ] || fail "expected two membership records"
  same_as_reference

  case_name=change
  mkdir -p "$work/change"
  grow_at_step_3 "elastic.change@1:throw"
  logged "injected fault at elastic.change on rank 1"
  logged "2 ranks: dp=2, grad_accum=2 -> 1 rank: dp=1, grad_accum=4"
  logged "1 rank: dp=1, grad_accum=4 -> 4 ranks: dp=4, grad_accum=1"
  same_as_reference

  case_name=floor
  MESHTRAIN_FAULT="backward@3#9:throw" run floor --min-ranks 4
  wait $! && fail "the job continued below comm.min_ranks"
  logged "with at least comm.min_ranks = 4 ranks: the job stops here"
  "$bin" ckpt diff "$work/floor/checkpoints" "$work/floor/checkpoints" > /dev/null 2>&1 ||
    fail "the checkpoints before the failure are not readable"
else
  case_name=grow
  mkdir -p "$work/grow"
  grow_at_step_3
  logged "meshtrain launch: membership: 2 ranks: dp=2, grad_accum=2 -> 4 ranks: dp=4, grad_accum=1"
  same_as_reference

  case_name=change
  mkdir -p "$work/change"
  grow_at_step_3 "elastic.change@1:kill"
  logged "restart 1 of 3"
  logged "-> 4 ranks: dp=4, grad_accum=1"
  same_as_reference
fi
echo "elastic ($mode): all cases passed"
