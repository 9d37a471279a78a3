#!/usr/bin/env python3
"""OpenVINO's RoiAlign in max mode starts its maximum at 0: on an image of constant -1 every output
is 0, although every bilinear sample of such an image is -1 (and ONNX's reference evaluator, which
takes per sample the largest weighted corner w_k * v_k, gives small negative values).

Needs only openvino, onnx and numpy (the project's virtual environment has them):
  .venv/bin/python bench/detection/openvino_roialign_max.py
Prints OpenVINO's output, ONNX's reference evaluator's and the max of the interpolated samples.
"""
import numpy as np
import onnx.helper as h
import openvino as ov
from onnx.reference import ReferenceEvaluator

X = -np.ones((1, 1, 4, 4), np.float32)
R = np.array([[0.3, 0.2, 3.4, 3.7]], np.float32)  # x1, y1, x2, y2
B = np.array([0], np.int64)
node = h.make_node("RoiAlign", ["X", "R", "B"], ["Y"], mode="max", output_height=2, output_width=2,
                   sampling_ratio=2, spatial_scale=1.0, coordinate_transformation_mode="half_pixel")
graph = h.make_graph([node], "roialign_max",
                     [h.make_tensor_value_info("X", 1, X.shape), h.make_tensor_value_info("R", 1, R.shape),
                      h.make_tensor_value_info("B", 7, B.shape)],
                     [h.make_tensor_value_info("Y", 1, None)])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 16)], ir_version=8)

core = ov.Core()
compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
got = compiled({"X": X, "R": R, "B": B})[compiled.outputs[0]]
ref = ReferenceEvaluator(model).run(None, {"X": X, "R": R, "B": B})[0]
print(f"OpenVINO {ov.__version__}: {got.ravel()}")
print(f"ONNX reference evaluator (largest weighted corner per sample): {ref.ravel()}")
print("max of the interpolated samples (every sample of a constant -1 image is -1): [-1. -1. -1. -1.]")
