#!/usr/bin/env python3
"""Resize-18 with antialias=1, downsampling a 9 x 8 image to 5 x 3: OpenVINO and OpenCV 5 give the
result without antialiasing (the attribute is ignored), where ONNX Runtime and ONNX's reference
evaluator stretch the kernel by 1 / scale.

Needs onnx, numpy, onnxruntime, openvino and opencv-python-headless (the project's virtual
environment has them):
  .venv/bin/python bench/resize/antialias_ignored.py
Prints, per framework and mode, the largest difference from the reference evaluator with
antialias=1 and with antialias=0.
"""
import cv2
import numpy as np
import onnx.helper as h
import onnxruntime as ort
import openvino as ov
from onnx.reference import ReferenceEvaluator

rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, (1, 2, 9, 8)).astype(np.float32)
SIZES = np.array([1, 2, 5, 3], np.int64)


def model(mode, antialias):
    node = h.make_node("Resize", ["X", "", "", "sizes"], ["Y"], mode=mode, antialias=antialias)
    graph = h.make_graph([node], "resize", [h.make_tensor_value_info("X", 1, X.shape)],
                         [h.make_tensor_value_info("Y", 1, SIZES.tolist())],
                         [h.make_tensor("sizes", 7, [4], SIZES.tolist())])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=8)


def run_ort(m):
    return ort.InferenceSession(m.SerializeToString()).run(None, {"X": X})[0]


def run_openvino(m):
    core = ov.Core()
    c = core.compile_model(core.read_model(m.SerializeToString(), b""), "CPU")
    return c({"X": X})[c.outputs[0]]


def run_opencv(m):
    net = cv2.dnn.readNetFromONNX(np.frombuffer(m.SerializeToString(), np.uint8), cv2.dnn.ENGINE_NEW)
    net.setInput(X, "X")
    return net.forward()


print(f"onnxruntime {ort.__version__}, openvino {ov.__version__}, opencv {cv2.__version__}")
for mode in ("linear", "cubic"):
    with_aa = ReferenceEvaluator(model(mode, 1)).run(None, {"X": X})[0]
    without = ReferenceEvaluator(model(mode, 0)).run(None, {"X": X})[0]
    for name, run in (("onnxruntime", run_ort), ("openvino", run_openvino), ("opencv", run_opencv)):
        y = run(model(mode, 1))
        print(f"{mode:6} {name:11}: max |y - antialiased| {np.abs(y - with_aa).max():.3g}, "
              f"max |y - not antialiased| {np.abs(y - without).max():.3g}")
