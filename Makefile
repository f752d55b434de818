# meshtrain: `make train` trains the demo, `make test` runs the test suite,
# `make bench` runs the benchmarks. Each installs what it needs first.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MESHTRAIN := $(BUILD_DIR)/bin/meshtrain

.PHONY: all deps configure build train test test-fast kill-trials tsan bench bench-small bench-shared-cores clean

all: build

deps:
	@BUILD_DIR=$(BUILD_DIR) bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@ninja -C $(BUILD_DIR) -j $(JOBS)

# Trains (resuming from runs/demo/checkpoints when present), then samples.
train: build
	$(MESHTRAIN) train configs/demo.toml
	$(MESHTRAIN) generate --from runs/demo/checkpoints --prompt "The " --tokens 200 --temperature 0.8 --top-k 40 --seed 1
	$(MESHTRAIN) generate --from runs/demo/checkpoints --prompt "Q: " --tokens 200 --temperature 0.8 --top-k 40 --seed 2

# The ThreadSanitizer build of the comm tests and a short libFuzzer run of
# the checkpoint parsers, then every unit, multi-rank and MPI test (ctest
# last, so its summary closes the output).
test: build
	bash scripts/tsan-comm.sh
	bash scripts/fuzz-smoke.sh 15
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-fast: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE "slow|mpi"

# Random SIGKILLs of training jobs over nine layouts, each resumed run
# compared bit for bit with an uninterrupted one (about a minute; not in `test`).
kill-trials: build
	bash scripts/kill-trials.sh $(MESHTRAIN) 72

bench: build
	bash scripts/run-benchmarks.sh $(BUILD_DIR)

# The demo's step alone and next to 1, 2, 4 busy processes, against its fair
# share, with PyTorch under the same load (docs/performance.md, "Shared cores").
bench-shared-cores: build
	bash bench/shared-cores.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) build-tsan
