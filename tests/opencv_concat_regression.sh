#!/usr/bin/env bash
# Regression test of a finding (docs/findings.md): OpenCV 4.6 runs a single-input Concat of a
# [1, 128, 28, 28] tensor without writing its output, which then holds whatever that memory held
# (zeros here). Found on densenet121 under --bind opencv-4.6. Fails once OpenCV gets it right.
# Usage: opencv_concat_regression.sh METAOP WORK_DIR
set -eu
METAOP=$1 WORK=$2
mkdir -p "$WORK"
/usr/bin/python3 - "$WORK" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
d = sys.argv[1]
shape = [1, 128, 28, 28]
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
g = helper.make_graph([helper.make_node("Concat", ["x"], ["y"], axis=1, name="concat")], "concat1", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{d}/concat1.onnx")
np.save(f"{d}/x.npy", np.random.default_rng(0).standard_normal(shape).astype(np.float32))
PY
"$METAOP" run "$WORK/concat1.onnx" --input "$WORK/x.npy" --bind opencv-4.6 --out "$WORK/opencv" > "$WORK/opencv.log"
grep -q "ran 1 nodes on opencv-4.6" "$WORK/opencv.log"
/usr/bin/python3 - "$WORK" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
x, y = np.load(f"{d}/x.npy"), np.load(f"{d}/opencv/y.npy")
wrong = int((x != y).sum())
print(f"opencv single-input Concat: {wrong} of {x.size} elements differ from the input")
print(f"{1 if wrong else 0} passed, {0 if wrong else 1} failed")
sys.exit(0 if wrong else 1)
PY
