#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bugprone, performance, function size and cognitive complexity, warnings
# as errors) on the sources that are clean, so that they stay clean; `make tidy` runs it on the
# same files at once. Every source, test and benchmark is clean today but those clang 16 cannot
# parse (the torch binding's and bench/reference_vs_torch.cpp: LibTorch 1.13's headers); a new
# file joins a group's list.
# Three groups, one ctest each, so that each stays well within its timeout (their times are in
# tests/CMakeLists.txt):
#   lower (ctest tidy_lower): src/tensor, graph, ops, bindings, engine; tests; bench;
#   upper (ctest tidy_upper): src/analysis, report;
#   cli   (ctest tidy_cli):   src/cli (CLI11 makes each of its files slow to check).
# One file at a time: ctest runs two tests at once on two cores, and a third busy process slows
# the tests beside it (the model export among them, whose timeout it once made it miss).
# Usage: tidy_subset.sh SOURCE_DIR BUILD_DIR GROUP   (BUILD_DIR holds compile_commands.json)
set -eu
SRC=$1 BUILD=$2 GROUP=$3
command -v run-clang-tidy-16 > /dev/null ||
  { echo "tidy: clang-tidy 16 is missing (scripts/install-deps.sh installs it)"; exit 1; }
case $GROUP in
  lower) FILES=(
    src/tensor/dtype.cpp src/tensor/files.cpp src/tensor/heap.cpp src/tensor/npy.cpp
    src/tensor/tensor.cpp src/tensor/tensor_proto.cpp src/tensor/text.cpp src/graph/graph.cpp
    src/graph/onnx_export.cpp src/graph/onnx_import.cpp src/ops/conv.cpp src/ops/danger.cpp
    src/ops/elementwise.cpp src/ops/elementwise_binary.cpp src/ops/elementwise_unary.cpp
    src/ops/error_model.cpp src/ops/index.cpp src/ops/kernel_util.cpp src/ops/linear.cpp
    src/ops/loss.cpp src/ops/norm.cpp src/ops/norm_layer.cpp src/ops/norm_util.cpp
    src/ops/optimizer.cpp src/ops/params.cpp src/ops/pool.cpp src/ops/reduce.cpp
    src/ops/registry.cpp src/ops/resize.cpp src/ops/shape.cpp src/ops/softmax.cpp
    src/ops/vjp_util.cpp src/ops/window.cpp src/bindings/binding.cpp src/bindings/factory.cpp
    src/bindings/phase.cpp src/bindings/fault_injection.cpp src/bindings/isolate.cpp
    src/bindings/isolate_child.cpp src/bindings/isolate_wire.cpp
    src/bindings/isolate_worker.cpp src/bindings/update_kernel.cpp src/bindings/whole_model.cpp
    src/bindings/worker_io.cpp src/bindings/onednn/onednn_binding.cpp
    src/bindings/onednn/onednn_forward.cpp src/bindings/opencv/opencv_binding.cpp
    src/bindings/opencv/opencv_model.cpp src/bindings/ort/ort_binding.cpp
    src/bindings/ort/ort_process.cpp src/bindings/reference/reference_binding.cpp
    src/engine/autodiff.cpp src/engine/executor.cpp src/engine/train.cpp
    tests/binding_tests.cpp tests/danger_tests.cpp tests/diagnose_tests.cpp
    tests/error_model_tests.cpp tests/oracle_tests.cpp tests/registry_tests.cpp
    tests/reliability_tests.cpp tests/unit_tests.cpp bench/isolation_overhead.cpp bench/oracle.cpp
    bench/ort_overhead.cpp
  ) ;;
  upper) FILES=(
    src/analysis/check/binding_check.cpp src/analysis/check/check.cpp
    src/analysis/conform/conform.cpp src/analysis/core/accuracy.cpp src/analysis/core/compare.cpp
    src/analysis/core/finding.cpp src/analysis/core/node_cases.cpp src/analysis/core/onnx_tests.cpp
    src/analysis/core/propagate.cpp src/analysis/core/train_check.cpp
    src/analysis/core/train_setup.cpp src/analysis/diagnose/diagnose.cpp
    src/analysis/diagnose/diagnose_monitor.cpp src/analysis/diagnose/diagnose_repair.cpp
    src/analysis/diagnose/diagnose_rules.cpp src/analysis/diagnose/diagnose_static.cpp
    src/analysis/expose/expose.cpp src/analysis/expose/expose_explain.cpp
    src/analysis/expose/expose_search.cpp src/analysis/expose/expose_verdict.cpp
    src/analysis/probe/probe.cpp src/analysis/train/train_session.cpp
    src/analysis/whole_graph/whole_graph.cpp
    src/report/check/check_report.cpp src/report/core/format.cpp src/report/core/html.cpp
    src/report/core/repro.cpp src/report/core/repro_read.cpp src/report/core/run_diagnosis.cpp
    src/report/diagnose/diagnose_html.cpp src/report/diagnose/diagnose_report.cpp
    src/report/expose/expose_report.cpp src/report/train/train_report.cpp
    src/report/train/train_summary.cpp src/report/whole_graph/whole_graph_report.cpp
  ) ;;
  cli) FILES=(
    src/cli/cmd_check.cpp src/cli/cmd_conform.cpp src/cli/cmd_diagnose.cpp src/cli/cmd_expose.cpp
    src/cli/cmd_ops.cpp src/cli/cmd_probe.cpp src/cli/cmd_repro.cpp src/cli/cmd_run.cpp
    src/cli/cmd_train.cpp src/cli/inputs.cpp src/cli/main.cpp src/cli/ort_options.cpp
    src/cli/plan_options.cpp src/cli/process_options.cpp src/cli/train_options.cpp
  ) ;;
  *) echo "tidy: no group '$GROUP' (lower, upper, cli)"; exit 2 ;;
esac
PATTERN=$(printf '%s|' "${FILES[@]}")
LOG=$BUILD/tidy_$GROUP.log
run-clang-tidy-16 -p "$BUILD" -j 1 -quiet "^$SRC/(${PATTERN%|})\$" > "$LOG" 2>&1 &&
  { echo "tidy ($GROUP): ${#FILES[@]} files clean"; exit 0; }
grep -E "(error|warning):" "$LOG" | grep -v "warnings generated" | head -50
echo "tidy ($GROUP): findings in the files that were clean (full log: $LOG)"
exit 1
