# Quick start on a fresh Debian 12 machine: `make demo`, then `make test`.
BUILD_DIR ?= build
JOBS ?= 2

.PHONY: all deps build demo test test-fast test-sanitize tidy bench bench-all bench-expose fuzz \
        clean format

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The start of a DenseNet (tests/data/dense_block.onnx, scripts/make_demo_model.py) checked op by
# op under the three frameworks: OpenCV 4.6's single-input Concat defect (docs/findings.md) found,
# verified and given a reproducer (exit 1: a finding, which the demo expects; 2 would be an
# error); then the bundled CNN, clean; then a small MLP trained under torch (forward, backward
# and torch's Adam) with every step checked. HTML reports in build/demo.
demo: build
	$(BUILD_DIR)/metaop check tests/data/dense_block.onnx --bind torch,onednn,opencv-4.6 \
	  --samples 2 --report $(BUILD_DIR)/demo/defect; test $$? -le 1
	$(BUILD_DIR)/metaop check tests/data/tiny_cnn.onnx --bind torch,onednn,opencv-4.6 --samples 2 \
	  --report $(BUILD_DIR)/demo/check
	$(BUILD_DIR)/metaop train tests/data/train_mlp.onnx --data tests/data/train_x.npy \
	  --labels tests/data/train_y.npy --loss cross_entropy --optimizer adam --lr 0.01 \
	  --epochs 3 --batch-size 16 --bind torch --check --report $(BUILD_DIR)/demo/train

# Two tests at a time (two cores); tests/CMakeLists.txt keeps their timeouts within CI's budget.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j2

# Everything but the model tests, the slow campaigns (training, probe), the fuzzers and
# tidy_changed: about 2 minutes on two cores.
test-fast: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j2 -LE 'models|slow|fuzz|tidy'

# AddressSanitizer + UndefinedBehaviorSanitizer build (build-sanitize) of what the unit and CLI
# tests run (metaop and the unit tests), and those tests (CMakePresets.json: -O1 -g1, half the
# compile time of -O2 -g); CI runs it after make test (about 12 minutes to build, 5 to test on
# two cores; docs/benchmarks.md).
test-sanitize: deps
	cmake --preset sanitize
	cmake --build --preset sanitize --target metaop metaop_unit_tests metaop_plugin_manifests
	ctest --preset sanitize

# clang-tidy (.clang-tidy) on every .cpp of src, tests and bench in compile_commands.json but
# those that include LibTorch's headers, directly or through the project's (the torch binding's,
# bench/reference_vs_torch.cpp): clang 16 cannot parse LibTorch 1.13's headers against GCC 12's
# library (c10::IValue incomplete in std::vector). tests/fuzz is built apart (make fuzz) and is not
# in BUILD_DIR's compile_commands.json. On success it records the commit (and whether the tree was
# clean) in $(BUILD_DIR)/tidy-passed; ctest tidy_changed checks only what changed since.
# scripts/tidy.py; about 1,300 CPU-seconds under load.
tidy: build
	/usr/bin/python3 scripts/tidy.py all . $(BUILD_DIR) -j $(JOBS)

bench: build
	/usr/bin/python3 tests/models/export_torchvision.py $(BUILD_DIR)/models resnet50
	$(BUILD_DIR)/bench/bench_reference_vs_torch $(BUILD_DIR)/models resnet50 1
	$(BUILD_DIR)/bench/bench_reference_vs_torch $(BUILD_DIR)/models resnet50 2
	$(BUILD_DIR)/bench/bench_binding_overhead $(BUILD_DIR)/models resnet50
	.venv/bin/python bench/torch_overhead.py $(BUILD_DIR)/bench/bench_binding_overhead $(BUILD_DIR)/models
	$(BUILD_DIR)/bench/bench_isolation_overhead $(BUILD_DIR)/models resnet50

# libFuzzer targets (clang, address and undefined-behaviour sanitizers) for the readers of
# untrusted files: the ONNX import with ONNX's checker and shape inference, .npy, TensorProto and
# repro.json; FUZZ_SECONDS each, seeded from the ONNX conformance data (tests/fuzz/).
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
ONNX_TESTDATA ?= /usr/share/libonnx-testdata/data
fuzz: deps
	bash tests/fuzz/ci.sh . $(FUZZ_DIR) $(ONNX_TESTDATA) $(FUZZ_SECONDS)

# Every figure docs/benchmarks.md quotes, regenerated (about two hours): logs and JSON in
# $(BUILD_DIR)/bench-results.
bench-all: build
	bash bench/all.sh $(BUILD_DIR)

# metaop expose on 27 small buggy programs and their fixed twins (about 30 minutes with the
# 60 s budget; EXPOSE_BUDGET=10 for a quicker look). Figures: docs/expose.md.
EXPOSE_BUDGET ?= 60
bench-expose: build
	/usr/bin/python3 bench/expose/run.py $(BUILD_DIR)/metaop $(BUILD_DIR)/bench/expose \
	  --time-limit $(EXPOSE_BUDGET) --jobs 2

format:
	clang-format-16 -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD_DIR)
