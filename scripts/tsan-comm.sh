#!/usr/bin/env bash
# ThreadSanitizer run of the communication tests: separate build dir, only
# the comm test target; exits non-zero on any test failure or TSan report.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TSAN_BUILD_DIR:-$root/build-tsan-comm}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHTRAIN_TSAN=ON -DMESHTRAIN_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" -j"${JOBS:-2}" comm_test
# halt_on_error: the first report fails the run; exitcode makes it visible.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
"$build/tests/comm/comm_test" --gtest_brief=1
echo "tsan-comm: clean"
