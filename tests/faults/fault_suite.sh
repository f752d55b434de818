#!/usr/bin/env bash
# Fault-injection suite (docs/math.md, "Rule: failure is a group event"; a
# restart resumes exactly). Each trial makes one rank die at a seeded random fault
# point -- in forward, in backward, on its way into a collective, while
# writing a checkpoint, at a step of the commit, or after a step's metrics
# records -- lets the job restart from its latest complete checkpoint, and
# requires the final checkpoint to be bitwise equal (`meshtrain ckpt diff`)
# to an uninterrupted run of the same steps, and metrics.jsonl to hold every
# step's record and the final evaluation exactly once. Then, per variant,
# kills in the window between a checkpoint's commit and the next step
# (`latest` repointed, retention) check that no record of a committed step
# is lost. A trial has a wall-clock bound; the counts are printed.
#
#   fault_suite.sh MESHTRAIN threads TRIALS SEED
#       in-process restarts (--max-restarts) for thrown rank failures, and
#       relaunches by this script for a killed process; plus SIGTERM stops.
#   fault_suite.sh MESHTRAIN mpi TRIALS SEED
#       `meshtrain launch -n 2 --max-restarts 3` (relaunches mpirun).
set -uo pipefail
bin="$1"
mode="$2"
trials="$3"
RANDOM="$4"  # seeds bash's generator: the same trials every run
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
trial_timeout=120

# shellcheck source=../support/tiny_job.sh
source "$(dirname "$0")/../support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 150

# Variants: sync ZeRO-2, async ZeRO-1, sync ZeRO-3 (dp = 2 everywhere).
variant_sets=("--set parallel.zero_stage=2"
              "--set parallel.zero_stage=1 --set checkpoint.async=true"
              "--set parallel.zero_stage=3")
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
steps = 6
micro_batch = 4
[optimizer]
lr = 1e-3
[checkpoint]
every = 2
[parallel]
dp = 2
[comm]
timeout_s = 60
TOML

# train VARIANT RUN_DIR [args...]: one training job, threads or mpirun.
train() {
  local v="$1" dir="$2"
  shift 2
  # shellcheck disable=SC2086
  if [ "$mode" = mpi ]; then
    timeout "$trial_timeout" "$bin" launch -n 2 --mpirun-arg=--oversubscribe --mpirun-arg=--allow-run-as-root "$@" \
      "$work/cfg.toml" ${variant_sets[$v]} --set metrics.run_dir="$dir"
  else
    timeout "$trial_timeout" "$bin" train "$work/cfg.toml" ${variant_sets[$v]} --set metrics.run_dir="$dir" "$@"
  fi
}

# References and, per variant, how often each kind of fault point is reached.
"$bin" data prepare --out "$work/data" --format fortune "$work/corpus.txt" > /dev/null || exit 1
declare -A count
for v in 0 1 2; do
  if ! MESHTRAIN_FAULT=count train "$v" "$work/ref$v" > "$work/ref$v.log" 2>&1; then
    echo "reference run of variant $v failed:"; cat "$work/ref$v.log"; exit 1
  fi
  # One line per process: site@rank=count items.
  items="$(grep -h "meshtrain fault points:" "$work/ref$v.log" | tr ' ' '\n' | grep '@')"
  for group in forward backward collective save commit metrics; do
    for rank in 0 1; do
      n=0
      for c in $(echo "$items" | grep -E "^$group[.@]" | grep "@$rank=" | cut -d= -f2); do n=$((n + c)); done
      count[$v,$group,$rank]=$n
    done
    [ $((count[$v,$group,0] + count[$v,$group,1])) -gt 0 ] || {
      echo "variant $v reaches no '$group' fault point:"; cat "$work/ref$v.log"; exit 1; }
  done
done

groups=(forward backward collective save commit metrics)
failures=0 fired=0 restarts=0 relaunches=0 stops=0
fail() {
  failures=$((failures + 1))
  echo "FAIL trial $1 ($2): $3"
  sed 's/^/    /' "$work/t$1.log" | tail -20
}
# The commit/metrics window: a kill right after `latest` names a step, or
# in its retention, before the job goes on (every variant, two commits each).
window=()
for v in 0 1 2; do
  window+=("$v commit.latest@0#1:kill" "$v commit.retention@0#2:kill")
done
total=$((trials + ${#window[@]}))
for t in $(seq 1 "$total"); do
  if [ "$t" -le "$trials" ]; then
    v=$((RANDOM % 3))
    group="${groups[$((RANDOM % ${#groups[@]}))]}"
    rank=$((RANDOM % 2))
    [ "${count[$v,$group,$rank]}" -gt 0 ] || rank=$((1 - rank))  # commit points run on rank 0 only
    hit=$((1 + RANDOM % count[$v,$group,$rank]))
    action=throw
    if [ "$mode" = threads ]; then
      r=$((RANDOM % 10))
      [ "$r" -ge 7 ] && action=kill   # the whole process dies: this script relaunches it
      [ "$r" -eq 9 ] && action=term   # a scheduler's SIGTERM: stop, save, exit 143; run again
    else
      [ $((RANDOM % 2)) -eq 0 ] && action=kill
    fi
    fault="$group@$rank#$hit:$action"
  else
    read -r v fault <<< "${window[$((t - trials - 1))]}"
    group="${fault%%@*}"
    action=kill
  fi
  dir="$work/t$t"
  log="$work/t$t.log"
  : > "$log"
  MESHTRAIN_FAULT="$fault" train "$v" "$dir" --max-restarts 3 >> "$log" 2>&1
  status=$?
  for again in 1 2 3; do  # a killed or stopped process is started again, as a scheduler would
    [ "$status" -eq 0 ] && break
    [ "$status" -eq 124 ] && break
    if [ "$action" = term ] && [ "$status" -eq 143 ]; then stops=$((stops + 1)); else relaunches=$((relaunches + 1)); fi
    train "$v" "$dir" --max-restarts 3 >> "$log" 2>&1
    status=$?
  done
  grep -q "meshtrain fault injection: $group" "$log" && fired=$((fired + 1))
  restarts=$((restarts + $(grep -c "restart [0-9]* of 3 from the latest" "$log")))
  if [ "$status" -eq 124 ]; then fail "$t" "$fault, variant $v" "timed out after ${trial_timeout}s"; continue; fi
  if [ "$status" -ne 0 ]; then fail "$t" "$fault, variant $v" "exit code $status"; continue; fi
  if ! grep -q "meshtrain fault injection: $group" "$log"; then fail "$t" "$fault, variant $v" "the fault never fired"; continue; fi
  if ! "$bin" ckpt diff "$work/ref$v/checkpoints" "$dir/checkpoints" > "$work/diff$t.txt" 2>&1; then
    cat "$work/diff$t.txt" >> "$log"
    fail "$t" "$fault, variant $v" "final checkpoint differs from the uninterrupted run"
    continue
  fi
  # Metrics hold each step once, even after replays, and lose none.
  steps="$(grep -v '"event"' "$dir/metrics.jsonl" | grep -o '"step":[0-9]*' | sort | uniq -d | head -1)"
  if [ -n "$steps" ]; then fail "$t" "$fault, variant $v" "metrics.jsonl repeats $steps"; continue; fi
  steps="$(grep -v '"event"' "$dir/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2 | sort -n | tr '\n' ' ')"
  if [ "$steps" != "1 2 3 4 5 6 " ]; then
    fail "$t" "$fault, variant $v" "metrics.jsonl holds step records [$steps], not steps 1 to 6 once each"; continue
  fi
  evals="$(grep -c '"event":"eval"' "$dir/metrics.jsonl")"
  if [ "$evals" -ne 1 ]; then fail "$t" "$fault, variant $v" "metrics.jsonl holds $evals eval records, not 1"; continue; fi
  rm -rf "$dir"
done
echo "fault suite ($mode): $total trials ($trials random, ${#window[@]} in the commit/metrics window)," \
     "$fired faults fired, $failures failures ($restarts restarts, $relaunches relaunches, $stops SIGTERM stops)"
[ "$failures" -eq 0 ] && [ "$fired" -eq "$total" ]
