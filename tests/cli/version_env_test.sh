#!/usr/bin/env bash
# Covers src/meshtrain/app/version.cc and kernels/cpu/gemm_choice.cc through
# the real binary (the choice is read once per process): `--version` names
# the f32 GEMM MESHTRAIN_GEMM selects, and a bad value is named, not a crash.
set -euo pipefail
bin="$1"
fail() { echo "version_env_test: $*" >&2; exit 1; }
out=$(MESHTRAIN_GEMM=packed "$bin" --version)
grep -q '^GEMM: packed .* (f32: packed, MESHTRAIN_GEMM chooses' <<<"$out" || fail "packed not named: $out"
out=$(MESHTRAIN_GEMM=onednn "$bin" --version)
grep -q '^GEMM: oneDNN .* (f32: onednn, MESHTRAIN_GEMM chooses' <<<"$out" || fail "onednn not named: $out"
out=$(MESHTRAIN_GEMM=blas "$bin" --version 2>&1) || fail "exit $? on a bad MESHTRAIN_GEMM: $out"
grep -q '^GEMM: error: MESHTRAIN_GEMM=blas is not an f32 GEMM: use packed or onednn' <<<"$out" || fail "bad value not named: $out"
echo "version_env_test: ok"
