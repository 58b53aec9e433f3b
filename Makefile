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
# On a CPU with AVX-512 the model, engine and e2e tests run a second time with the AVX2 kernels
# (DEEPINFER_FORCE_ISA=avx2), so a developer on either kind of machine catches both numerics;
# elsewhere that pass is skipped and costs nothing.
# The gtest binaries of that pass (soak / bench binaries excluded); e2e tests by label.
ISA_PASS_BINARIES = src/model/model_checkpoint_test src/model/llama_test src/model/deepseek_v4_test \
  src/model/deepseek_v41_test src/engine/engine_sampler_test src/engine/engine_test \
  src/engine/engine_model_test src/engine/engine_kv_tiers_test \
  src/engine/engine_prefix_cache_model_test src/engine/engine_prefix_cache_stress_test \
  src/engine/engine_llm_test src/engine/engine_grammar_test
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE "bench|soak" --timeout 900
	@if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  echo "make test: AVX-512 CPU: model, engine and e2e tests again with DEEPINFER_FORCE_ISA=avx2"; \
	  cd $(BUILD_DIR) && for b in $(ISA_PASS_BINARIES); do \
	    if [ -x $$b ]; then DEEPINFER_FORCE_ISA=avx2 ./$$b --gtest_brief=1 || exit 1; fi; done && \
	  DEEPINFER_FORCE_ISA=avx2 ctest --output-on-failure -L e2e -LE "bench|soak" --timeout 900; \
	else echo "make test: no AVX-512 on this CPU: the forced-AVX2 pass is skipped"; fi

bench: build
	cd $(BUILD_DIR) && ctest -L bench -V

soak: build
	cd $(BUILD_DIR) && ctest -L soak --output-on-failure

demo: build
	@DEEPINFER_BIN="$(abspath $(BUILD_DIR))/bin/deepinfer" bash scripts/demo.sh "$(MODEL)" "$(PORT)"

# Full simulator experiments (docs/simulator.md); reduced smoke versions run inside `make test`
# (sim_test). Results land in $(BUILD_DIR)/sim-out/<experiment>/.
SIM_EXPERIMENTS = exp1_cluster exp2_ttl eplb_prefill_ep4 eplb_prefill_ep2 eplb_decode_ep64
sim: build
	@for e in $(SIM_EXPERIMENTS); do \
	  $(BUILD_DIR)/bin/deepinfer sim --config src/sim/experiments/$$e.json \
	    --out $(BUILD_DIR)/sim-out/$$e || exit 1; done
	$(BUILD_DIR)/bin/deepinfer sim --exp2-checks --config src/sim/experiments/exp2_ttl.json \
	  --out $(BUILD_DIR)/sim-out/exp2_checks; echo $$? > $(BUILD_DIR)/sim-out/exp2_checks.rc
	$(BUILD_DIR)/bin/deepinfer plan | tee $(BUILD_DIR)/sim-out/exp3_plan.txt || true
	bash src/sim/plot_experiments.sh $(BUILD_DIR)/sim-out
	@test "$$(cat $(BUILD_DIR)/sim-out/exp2_checks.rc)" = 0 || { echo "make sim: an EXP-2 check \
	  failed (see $(BUILD_DIR)/sim-out/exp2_checks/exp2_checks.csv)"; exit 1; }

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
