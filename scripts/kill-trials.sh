#!/usr/bin/env bash
# Kill trials: SIGKILL a training job at a random moment, run the same
# command again (it resumes from its latest complete checkpoint), and
# require the final checkpoint to equal an uninterrupted run's bit for bit
# (`meshtrain ckpt diff`) and metrics.jsonl to hold every step's record and
# the final evaluation once. Layouts: data parallel with ZeRO, tensor and
# sequence parallel, pipeline, context parallel, mixture of experts with
# expert parallelism, bf16, fp16 with loss scaling, asynchronous saves, and
# (with mpirun) an MPI job under `meshtrain launch` with one rank killed.
# Tiny models on a tiny corpus: a trial takes a few seconds.
#
#   scripts/kill-trials.sh [MESHTRAIN] [TRIALS] [SEED]
#       MESHTRAIN  the binary (default build/bin/meshtrain)
#       TRIALS     total trials, shared round robin over the layouts (default 64)
#       SEED       seeds the kill times and kill targets (default 1)
set -uo pipefail
bin="${1:-build/bin/meshtrain}"
trials="${2:-64}"
RANDOM="${3:-1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
steps=12

# shellcheck source=../tests/support/tiny_job.sh
source "$(dirname "$0")/../tests/support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 120
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
steps = $steps
micro_batch = 2
grad_accum = 2
threads = 1
[optimizer]
lr = 1e-3
[checkpoint]
every = 2
[comm]
timeout_s = 60
TOML
"$bin" data prepare --out "$work/data" --format fortune "$work/corpus.txt" > /dev/null || exit 1

# name | backend | overrides
layouts=(
  "dp2-zero1|threads|--set parallel.dp=2 --set parallel.zero_stage=1"
  "tp2-sp|threads|--set parallel.tp=2 --set parallel.sequence_parallel=true"
  "pp2-1f1b|threads|--set parallel.pp=2 --set parallel.dp=2"
  "cp2|threads|--set parallel.cp=2"
  "moe-ep2|threads|--set model.n_experts=4 --set model.experts_top_k=2 --set parallel.dp=2 --set parallel.ep=2"
  "bf16|threads|--set training.precision=bf16 --set parallel.dp=2 --set parallel.zero_stage=2"
  "fp16|threads|--set training.precision=fp16 --set parallel.dp=2"
  "async-zero3|threads|--set checkpoint.async=true --set parallel.dp=2 --set parallel.zero_stage=3"
)
if command -v mpirun > /dev/null; then
  layouts+=("mpi-dp2|mpi|--set parallel.dp=2 --set parallel.zero_stage=2")
fi

# job_command BACKEND RUN_DIR OVERRIDES...: the job's command line, in
# the array `job` (started as a plain command, its pid is the job's own).
job_command() {
  local backend="$1" dir="$2"
  shift 2
  if [ "$backend" = mpi ]; then
    job=("$bin" launch -n 2 --max-restarts 3 --mpirun-arg=--oversubscribe --mpirun-arg=--allow-run-as-root
         "$work/cfg.toml" --set metrics.run_dir="$dir" "$@")
  else
    job=("$bin" train "$work/cfg.toml" --set metrics.run_dir="$dir" "$@")
  fi
}
run() {
  job_command "$@"
  "${job[@]}"
}

# References: the uninterrupted run of each layout, and how long it took.
declare -A ms
for l in "${layouts[@]}"; do
  IFS='|' read -r name backend overrides <<< "$l"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  if ! run "$backend" "$work/ref-$name" $overrides > "$work/ref-$name.log" 2>&1; then
    echo "reference run $name failed:"; tail -20 "$work/ref-$name.log"; exit 1
  fi
  ms[$name]=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "reference $name: ${ms[$name]} ms"
done

bitwise=0 failures=0 interrupted=0 resumed=0
declare -A per_ok per_n
fail() {
  failures=$((failures + 1))
  echo "FAIL trial $1 ($2): $3"
  tail -15 "$work/t$1.log" | sed 's/^/    /'
}
t0=$(date +%s)
for t in $(seq 1 "$trials"); do
  l="${layouts[$(( (t - 1) % ${#layouts[@]} ))]}"
  IFS='|' read -r name backend overrides <<< "$l"
  per_n[$name]=$(( ${per_n[$name]:-0} + 1 ))
  dir="$work/t$t"
  log="$work/t$t.log"
  # A kill time anywhere in the reference run's span, start-up included.
  delay_ms=$(( (RANDOM * 32768 + RANDOM) % (ms[$name] + 1) ))
  # shellcheck disable=SC2086
  job_command "$backend" "$dir" $overrides
  "${job[@]}" > "$log" 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  target=$pid what="the job"
  if [ "$backend" = mpi ]; then
    # One rank of the job (a child of mpirun, the launcher's child); the
    # launcher relaunches mpirun. Before the ranks exist: the launcher.
    mpirun_pid=$(pgrep -P "$pid" | head -1)
    ranks=($( [ -n "$mpirun_pid" ] && pgrep -P "$mpirun_pid"))
    if [ "${#ranks[@]}" -gt 0 ]; then
      target=${ranks[$((RANDOM % ${#ranks[@]}))]} what="one rank"
    fi
  fi
  kill -KILL "$target" 2> /dev/null
  wait "$pid"
  code=$?
  # Killed mid-run: the job died of it (137), or mpirun's job did and the
  # launcher restarted it.
  if [ "$code" -eq 137 ] || grep -q "restart 1 of" "$log"; then
    interrupted=$((interrupted + 1))
    echo "--- trial $t: SIGKILL to $what after ${delay_ms} ms" >> "$log"
  fi
  # Run the same command again until it finishes, as a scheduler would.
  status=1
  for again in 1 2 3; do
    # shellcheck disable=SC2086
    run "$backend" "$dir" $overrides >> "$log" 2>&1 && { status=0; break; }
  done
  if [ "$status" -ne 0 ]; then fail "$t" "$name" "the resumed run failed"; continue; fi
  if ! "$bin" ckpt diff "$work/ref-$name/checkpoints" "$dir/checkpoints" >> "$log" 2>&1; then
    fail "$t" "$name" "the final checkpoint differs from the uninterrupted run"; continue
  fi
  steps_seen="$(grep -v '"event"' "$dir/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2 | sort -n | tr '\n' ' ')"
  if [ "$steps_seen" != "$(seq -s ' ' 1 "$steps") " ]; then
    fail "$t" "$name" "metrics.jsonl holds step records [$steps_seen]"; continue
  fi
  if [ "$(grep -c '"event":"eval"' "$dir/metrics.jsonl")" -ne 1 ]; then
    fail "$t" "$name" "metrics.jsonl does not hold the final evaluation once"; continue
  fi
  # Resumed from a checkpoint rather than started over (the kill came after a commit).
  grep -q "resumed from .* at step [1-9]" "$log" && resumed=$((resumed + 1))
  bitwise=$((bitwise + 1))
  per_ok[$name]=$(( ${per_ok[$name]:-0} + 1 ))
  rm -rf "$dir"
done
for l in "${layouts[@]}"; do
  IFS='|' read -r name _ _ <<< "$l"
  echo "  $name: ${per_ok[$name]:-0} of ${per_n[$name]:-0} bitwise"
done
echo "kill trials: $trials trials ($interrupted killed mid-run, $resumed resumed from a checkpoint), $bitwise" \
     "bitwise equal to the uninterrupted run, $failures failures, $(( $(date +%s) - t0 )) s"
[ "$failures" -eq 0 ]
