#!/usr/bin/env bash
# Fuzz smoke test: builds the libFuzzer targets for the checkpoint manifest
# and safetensors parsers with clang (ASan + UBSan) in their own build
# directory and runs each for a short time from the committed seed corpus.
# Exits non-zero on a crash. Needs: clang, libclang-rt-14-dev (libFuzzer,
# sanitizer runtimes), nlohmann-json3-dev, libssl-dev, cmake, ninja-build.
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-20}"
build="${MESHTRAIN_FUZZ_BUILD:-$root/build-fuzz}"

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz-smoke: clang++ not found; skipping (install clang and libclang-rt-14-dev)"
  exit 0
fi

# The fuzz folder is a standalone CMake project as well, so this build
# compiles only the parsers and a few core files.
CC=clang CXX=clang++ cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" fuzz_manifest fuzz_safetensors

status=0
for target in manifest safetensors; do
  work="$(mktemp -d)"
  cp "$root/fuzz/corpus/$target"/* "$work/"
  echo "fuzz-smoke: fuzz_$target for ${seconds}s"
  if ! (cd "$build" && "./fuzz_$target" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>"$build/fuzz_$target.log"); then
    echo "fuzz-smoke: fuzz_$target FAILED; see $build/fuzz_$target.log and crash-* files in $build" >&2
    tail -40 "$build/fuzz_$target.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/fuzz_$target.log" | tail -2 || true
  fi
  rm -rf "$work"
done
exit $status
