#!/usr/bin/env bash
# Training progress under mpirun. Open MPI gives every rank a
# pseudo-terminal for its output, even when mpirun's own output goes to a
# file: a redirected `mpirun ... > log` must hold plain log lines only (no
# carriage return, no escape), while mpirun on a terminal (util-linux
# `script` provides one) shows the live status line, and `--progress plain`
# turns it off there too.
set -euo pipefail
bin="$1"
mpiexec="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export XDG_CACHE_HOME="$dir/cache"
source "$(dirname "$0")/tiny_run.sh"
tiny_config "$dir" $'[comm]\nbackend = "mpi"'
mpirun=("$mpiexec" -np 1 --allow-run-as-root)

"${mpirun[@]}" "$bin" train "$dir/tiny.toml" --set metrics.run_dir="$dir/file" > "$dir/file.log" 2>&1
if grep -q $'\r' "$dir/file.log" || grep -q $'\x1b' "$dir/file.log"; then
  echo "FAIL: status-line escapes in a redirected mpirun log"; cat -A "$dir/file.log" | head -20; exit 1
fi
grep -q "step    30/30" "$dir/file.log" || { echo "FAIL: no log lines in the redirected log"; cat "$dir/file.log"; exit 1; }

TERM=xterm script -qec "${mpirun[*]} $bin train $dir/tiny.toml --set metrics.run_dir=$dir/tty" /dev/null > "$dir/tty.log"
grep -q $'\rstep [0-9]*/30 | loss .* tok/s | MFU .*% | ETA ' "$dir/tty.log" || {
  echo "FAIL: no live status line with mpirun on a terminal"; cat -A "$dir/tty.log" | head -20; exit 1; }

TERM=xterm script -qec "${mpirun[*]} $bin --progress plain train $dir/tiny.toml --set metrics.run_dir=$dir/plain" \
  /dev/null > "$dir/plain.log"
if grep -q $'\rstep' "$dir/plain.log"; then
  echo "FAIL: --progress plain still drew a live line"; cat -A "$dir/plain.log" | head -20; exit 1
fi
grep -q "step    30/30" "$dir/plain.log" || { echo "FAIL: log lines missing with --progress plain"; exit 1; }
echo "progress under mpirun: plain into a file, live on a terminal, plain when asked"
