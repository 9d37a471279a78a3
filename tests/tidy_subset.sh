#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bugprone, performance, function size and cognitive complexity, warnings
# as errors) on the sources that are clean today, so that they stay clean; `make tidy` runs it on
# every source (not all clean yet; CONTRIBUTING.md, "Code habits"). A file joins the list once it
# is clean.
# One file at a time: ctest runs two tests at once on two cores, and a third busy process slows
# the tests beside it (the model export among them, whose timeout it once made it miss).
# Usage: tidy_subset.sh SOURCE_DIR BUILD_DIR   (BUILD_DIR holds compile_commands.json)
set -eu
SRC=$1 BUILD=$2
command -v run-clang-tidy-16 > /dev/null ||
  { echo "tidy: clang-tidy 16 is missing (scripts/install-deps.sh installs it)"; exit 1; }
FILES=(
  src/tensor/dtype.cpp src/tensor/files.cpp src/tensor/heap.cpp src/tensor/npy.cpp
  src/tensor/tensor.cpp src/tensor/tensor_proto.cpp src/tensor/text.cpp
  src/graph/graph.cpp src/graph/onnx_export.cpp src/graph/onnx_import.cpp
  src/ops/conv.cpp src/ops/danger.cpp src/ops/elementwise.cpp src/ops/elementwise_binary.cpp
  src/ops/elementwise_unary.cpp src/ops/error_model.cpp src/ops/index.cpp src/ops/kernel_util.cpp
  src/ops/linear.cpp src/ops/loss.cpp src/ops/norm.cpp src/ops/norm_layer.cpp src/ops/norm_util.cpp
  src/ops/optimizer.cpp src/ops/params.cpp src/ops/pool.cpp src/ops/reduce.cpp src/ops/registry.cpp
  src/ops/resize.cpp src/ops/shape.cpp src/ops/softmax.cpp src/ops/vjp_util.cpp src/ops/window.cpp
  src/bindings/binding.cpp src/bindings/factory.cpp src/bindings/fault_injection.cpp
  src/bindings/phase.cpp src/bindings/isolate.cpp src/bindings/isolate_wire.cpp
  src/bindings/isolate_worker.cpp src/bindings/update_kernel.cpp src/bindings/whole_model.cpp
  src/bindings/worker_io.cpp
  src/bindings/onednn/onednn_binding.cpp src/bindings/onednn/onednn_forward.cpp
  src/bindings/opencv/opencv_binding.cpp src/bindings/opencv/opencv_model.cpp
  src/bindings/ort/ort_binding.cpp src/bindings/ort/ort_process.cpp
  src/bindings/reference/reference_binding.cpp
  src/engine/autodiff.cpp src/engine/executor.cpp src/engine/train.cpp
  src/analysis/finding.cpp src/report/repro.cpp src/report/repro_read.cpp
  src/cli/main.cpp
)
PATTERN=$(printf '%s|' "${FILES[@]}")
run-clang-tidy-16 -p "$BUILD" -j 1 -quiet "^$SRC/(${PATTERN%|})\$" > "$BUILD/tidy_subset.log" 2>&1 &&
  { echo "tidy: ${#FILES[@]} files clean"; exit 0; }
grep -E "(error|warning):" "$BUILD/tidy_subset.log" | grep -v "warnings generated" | head -50
echo "tidy: findings in the files that were clean (full log: $BUILD/tidy_subset.log)"
exit 1
