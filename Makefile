# Thin wrapper over CMake + Ninja. See README.md.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MODEL ?=
PORT ?= 8000

.PHONY: all deps configure build test bench demo format clean

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

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
