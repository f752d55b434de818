#!/usr/bin/env bash
# Installs llama.cpp for the GGUF interoperability test (ctest -L interop):
# the npm package node-llama-cpp, pinned, with its prebuilt Linux x64 CPU
# binaries only (about 80 MiB; the GPU variants are left out), into
# PREFIX/node_modules. Idempotent. Without npm (or off x86-64) it says so
# and the test skips itself; in CI a failed install is an error.
# Usage: install-llama-cpp.sh [PREFIX]   (default: build/interop)
set -euo pipefail
version=3.21.1
prefix=${1:-build/interop}

if [ -f "$prefix/node_modules/node-llama-cpp/package.json" ] &&
   grep -q "\"version\": \"$version\"" "$prefix/node_modules/node-llama-cpp/package.json" &&
   [ -d "$prefix/node_modules/@node-llama-cpp/linux-x64" ]; then
  exit 0
fi
if ! command -v npm >/dev/null || [ "$(uname -m)" != x86_64 ]; then
  echo "install-llama-cpp: no npm or not x86-64; the llama.cpp check (ctest -L interop) will be skipped"
  exit 0
fi
echo "install-llama-cpp: node-llama-cpp@$version into $prefix"
mkdir -p "$prefix"
if ! (cd "$prefix" && npm install --silent --no-audit --no-fund --omit=optional --ignore-scripts -E \
        "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >/dev/null); then
  echo "install-llama-cpp: npm install failed; the llama.cpp check (ctest -L interop) cannot run"
  if [ "${CI:-}" = true ]; then exit 1; fi
fi
