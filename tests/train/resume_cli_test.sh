#!/usr/bin/env bash
# Exact resume across a process restart, through the CLI:
#   A: train 4 steps (checkpoint every 2)
#   B: the same 4-step run stopped after step 2 (training.stop_at), then
#      started again: it resumes from B's latest and finishes
# then `meshtrain ckpt diff` must find A and B identical (every parameter and
# Adam moment bit for bit, the step and the data cursor), and generate must
# run from the result. Under mpirun, the threads backend's run of the same
# job must match the MPI run too.
#   resume_cli_test.sh MESHTRAIN [NP]     (NP > 0: under mpirun -np NP, MPI backend)
set -euo pipefail
bin="$1"
np="${2:-0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A small corpus of its own.
# shellcheck source=../support/tiny_job.sh
source "$(dirname "$0")/../support/tiny_job.sh"
tiny_corpus "$work/corpus.txt" 200
tiny_config "$work/cfg.toml" "$work" <<TOML
[training]
micro_batch = 4
[optimizer]
lr = 1e-3
[checkpoint]
every = 2
[parallel]
dp = 2
zero_stage = 2
TOML

run() {
  if [ "$np" -gt 0 ]; then
    mpirun -np "$np" --oversubscribe --allow-run-as-root "$bin" train "$work/cfg.toml" --set comm.backend=mpi "$@"
  else
    "$bin" train "$work/cfg.toml" "$@"
  fi
}

run --set training.steps=4 --set metrics.run_dir="$work/a" > "$work/a.log"
run --set training.steps=4 --set training.stop_at=2 --set metrics.run_dir="$work/b" > "$work/b1.log"
run --set training.steps=4 --set metrics.run_dir="$work/b" > "$work/b2.log"
# The same layout on the same backend replays bitwise (MPI recommends that a
# reduction repeat its result for the same arguments in the same order), and
# says so; the diff below checks it.
claim="bitwise replay"
grep -q "resumed from .*step-00000002 at step 2 | $claim" "$work/b2.log" || {
  echo "second run did not resume with the claim '$claim':"; cat "$work/b2.log"; exit 1; }
"$bin" ckpt diff "$work/a/checkpoints" "$work/b/checkpoints"
if [ "$np" -gt 0 ]; then
  # The same job on the threads backend gives the same result: with 2 ranks
  # every sum is a + b whatever the backend, so the states are bitwise equal.
  "$bin" train "$work/cfg.toml" --set training.steps=4 --set metrics.run_dir="$work/t" > "$work/t.log"
  "$bin" ckpt diff "$work/a/checkpoints" "$work/t/checkpoints"
fi
"$bin" generate --from "$work/b/checkpoints" --prompt "document" --tokens 20 --seed 3 > "$work/gen.txt"

# Deployment round trip: export to safetensors, start new runs from it
# (directly, and through an imported checkpoint); weights only, step 0.
if [ "$np" -eq 0 ]; then
  "$bin" ckpt export "$work/b/checkpoints" --out "$work/model.safetensors"
  "$bin" ckpt import "$work/model.safetensors" --out "$work/imported"
  "$bin" train "$work/cfg.toml" --set training.steps=1 --set metrics.run_dir="$work/c" \
    --set checkpoint.init_from="$work/model.safetensors" > "$work/c.log"
  grep -q "initialized weights from $work/model.safetensors" "$work/c.log"
  grep -q "step     1/1" "$work/c.log"
  "$bin" train "$work/cfg.toml" --set training.steps=1 --set metrics.run_dir="$work/d" \
    --set checkpoint.init_from="$work/imported" > "$work/d.log"
  grep -q "initialized from checkpoint" "$work/d.log"
  # Same weights, same first batch: the same first loss.
  test "$(grep -o 'loss [0-9.]*' "$work/c.log" | head -1)" = "$(grep -o 'loss [0-9.]*' "$work/d.log" | head -1)"
  # Other text under the same data.path, with as many documents: the resume
  # names the change by the shards' digests instead of claiming a replay.
  run --set training.steps=4 --set training.stop_at=2 --set metrics.run_dir="$work/e" > "$work/e1.log"
  for i in $(seq 1 200); do
    echo "other document $i: a slow green turtle walks under the sleepy cat $((i * 5 % 11)) times."
    echo "%"
  done > "$work/corpus2.txt"
  "$bin" data prepare --overwrite --out "$work/data" --format fortune --seed 1 "$work/corpus2.txt" > /dev/null
  run --set training.steps=4 --set metrics.run_dir="$work/e" > "$work/e2.log"
  grep -q "training data: data.path = '$work/data' holds other text" "$work/e2.log" || {
    echo "the resume on other text did not name it:"; cat "$work/e2.log"; exit 1; }
  if grep -q "| bitwise replay" "$work/e2.log"; then echo "claimed a replay on other text"; exit 1; fi
fi
test -s "$work/gen.txt"
echo "resume_cli_test: PASS (np=$np)"
