#!/bin/bash
# Whole-graph mode over the torchvision models under the ONNX-import bindings: for each model,
# `metaop check --whole-graph` (one sample, input_0, no verification by replacement) and its
# verdict per binding, with the times the check reports and the wall time of the whole command.
#
# Usage: bench/whole_graph_bindings.sh METAOP MODELS_DIR [BINDINGS]
#   MODELS_DIR as written by tests/models/export_torchvision.py; BINDINGS defaults to
#   openvino,tvm,ort. Prints one block per model.
set -u
METAOP=$1
MODELS=$2
BIND=${3:-openvino,tvm,ort}
for dir in "$MODELS"/*/; do
  arch=$(basename "$dir")
  [ -f "$dir/opset17.onnx" ] || continue
  start=$(date +%s.%N)
  out=$("$METAOP" check "$dir/opset17.onnx" --input "$dir/input_0.npy" --bind "$BIND" \
    --whole-graph --no-verify 2>&1)
  rc=$?
  end=$(date +%s.%N)
  echo "== $arch (exit $rc, $(echo "$end - $start" | bc) s wall)"
  echo "$out" | sed -n '/^whole-graph mode/,$p' | grep -E '^  [a-z]' || echo "$out" | tail -3
done
