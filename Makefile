# Thin wrapper over CMake + Ninja. See README.md.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MODEL ?=
PORT ?= 8000

.PHONY: all deps configure build test bench demo format clean sim

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# All tests except benchmarks and long soak/load runs (labels bench, soak).
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE "bench|soak" --timeout 900

bench: build
	cd $(BUILD_DIR) && ctest -L bench -V

soak: build
	cd $(BUILD_DIR) && ctest -L soak --output-on-failure

demo: build
	@DEEPINFER_BIN="$(abspath $(BUILD_DIR))/bin/deepinfer" bash scripts/demo.sh "$(MODEL)" "$(PORT)"

# Full simulator experiments (docs/simulator.md); reduced smoke versions run inside `make test`
# (sim_test). Results land in $(BUILD_DIR)/sim-out/<experiment>/.
SIM_EXPERIMENTS = exp2_ttl eplb_prefill_ep4 eplb_prefill_ep2 eplb_decode_ep64
sim: build
	@for e in $(SIM_EXPERIMENTS); do \
	  $(BUILD_DIR)/bin/deepinfer sim --config src/sim/experiments/$$e.json \
	    --out $(BUILD_DIR)/sim-out/$$e || exit 1; done
	$(BUILD_DIR)/bin/deepinfer plan | tee $(BUILD_DIR)/sim-out/exp3_plan.txt || true

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
