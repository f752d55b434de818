# meshtrain: `make train` trains the demo, `make test` runs the test suite,
# `make bench` runs the benchmarks. Each installs what it needs first.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MESHTRAIN := $(BUILD_DIR)/bin/meshtrain

.PHONY: all deps configure build train test test-fast tsan bench bench-small clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@ninja -C $(BUILD_DIR) -j $(JOBS)

train: build
	$(MESHTRAIN) train configs/demo.toml

# Unit, multi-rank and MPI tests, then the ThreadSanitizer build of the comm tests.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600
	bash scripts/tsan-comm.sh

test-fast: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE "slow|mpi"

bench: build
	bash scripts/run-benchmarks.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) build-tsan
