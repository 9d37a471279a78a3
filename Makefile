# Quick start on a fresh Debian 12 machine: `make demo`, then `make test`.
BUILD_DIR ?= build
JOBS ?= 2

.PHONY: all deps build demo test bench clean format

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	$(BUILD_DIR)/metaop run tests/data/tiny_cnn.onnx --random-inputs --seed 1 --out $(BUILD_DIR)/demo-out

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j1

bench: build
	/usr/bin/python3 tests/models/export_torchvision.py $(BUILD_DIR)/models resnet50
	$(BUILD_DIR)/bench/bench_reference_vs_torch $(BUILD_DIR)/models resnet50 1
	$(BUILD_DIR)/bench/bench_reference_vs_torch $(BUILD_DIR)/models resnet50 2

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD_DIR)
