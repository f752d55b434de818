#!/usr/bin/env bash
# The training progress of the real binary: plain lines through a pipe, a
# live status line (carriage returns, ETA, MFU) on a pseudo-terminal
# (util-linux `script` provides one).
set -euo pipefail
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export XDG_CACHE_HOME="$dir/cache"
source "$(dirname "$0")/tiny_run.sh"
tiny_config "$dir"
"$bin" train "$dir/tiny.toml" --set metrics.run_dir="$dir/pipe" | cat > "$dir/pipe.log"
if grep -q $'\r' "$dir/pipe.log"; then echo "FAIL: carriage return in piped output"; exit 1; fi
grep -q "step    30/30" "$dir/pipe.log" || { echo "FAIL: no log lines through the pipe"; cat "$dir/pipe.log"; exit 1; }
TERM=xterm script -qec "$bin train $dir/tiny.toml --set metrics.run_dir=$dir/tty" /dev/null > "$dir/tty.log"
grep -q $'\rstep [0-9]*/30 | loss .* tok/s | MFU .*% | ETA ' "$dir/tty.log" || {
  echo "FAIL: no live status line on the terminal"; cat -A "$dir/tty.log" | head -20; exit 1; }
grep -q "step    30/30" "$dir/tty.log" || { echo "FAIL: log lines missing on the terminal"; exit 1; }
echo "progress: plain through a pipe, live on a terminal"
