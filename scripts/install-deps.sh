#!/usr/bin/env bash
# Installs every Debian package meshtrain needs, then llama.cpp for the GGUF
# interoperability test (install-llama-cpp.sh). Idempotent: does nothing when
# all packages are present, runs `apt-get update` at most once otherwise.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev                 # GEMM (runtime ISA dispatch, fp32 + bf16)
  libtomlplusplus-dev         # TOML configs
  nlohmann-json3-dev          # manifests, metrics
  libssl-dev                  # SHA-256 digests
  openmpi-bin libopenmpi-dev  # multi-process backend
  iproute2                    # the emulated cluster (scripts/emulated-cluster.sh): ip, tc
  slurm-wlm slurmctld slurmd slurm-client munge  # Slurm launch (scripts/emulated-slurm.sh starts daemons of its own)
  fortunes fortunes-min       # demo corpus
  clang libclang-rt-14-dev    # libFuzzer targets of the checkpoint parsers
  libcli11-dev                # command line: subcommands, help, typed options
  libsentencepiece-dev        # subword tokenizer (BPE, unigram)
  libxml2-dev libpng-dev      # report tests: parse the page, read the screenshot
  chromium                    # report browser test (headless rendering)
  perl-doc                    # configs/subword.toml corpus (with the fortunes)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# llama.cpp for the GGUF interoperability test, into the build directory.
llama_cpp() { bash "$(dirname "$0")/install-llama-cpp.sh" "${BUILD_DIR:-build}/interop"; }

if [ ${#missing[@]} -eq 0 ]; then
  llama_cpp
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# No package starts a daemon while installing (munge's would run as the
# machine's, and a container has no systemd to manage it): a policy-rc.d
# that denies every start, for the install only, unless the machine has its
# own (Docker images do). The cluster tests start munge and Slurm daemons
# of their own (scripts/emulated-slurm.sh).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# scripts/install-deps.sh: no daemon starts while it installs\nexit 101\n' | $SUDO tee "$policy" > /dev/null
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
llama_cpp
