"""OpenVINO's DynamicQuantizeLinear against the ONNX text evaluated in float32 with NumPy, on the
input of ONNX's own node test `test_dynamicquantizelinear`: the text's y_scale is
(max(x, 0) - min(x, 0)) / 255, a float32 division; OpenVINO's differs by one unit in the last
place there, and one element of y by one quantization step.

Runs under the project's Python environment (OpenVINO 2026.4, onnx, NumPy):
  .venv/bin/python bench/quantized/openvino_dynamic_quantize.py
"""
import numpy as np
import onnx
import openvino as ov
from onnx import TensorProto, helper


def onnx_text(x):
    """The ONNX text's formulas in float32 (NumPy rounds each float32 operation once)."""
    lo = np.minimum(np.float32(0), x.min())
    hi = np.maximum(np.float32(0), x.max())
    scale = np.float32((hi - lo) / np.float32(255))
    zero = np.clip(np.rint(np.float32(0) - lo / scale), 0, 255)
    y = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.uint8)
    return y, scale, np.uint8(zero)


def main():
    x = np.array([0, 2, -3, -2.5, 1.34, 0.5], np.float32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [6]),
         helper.make_tensor_value_info("y_scale", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("y_zero_point", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    path = "/tmp/openvino_dynamic_quantize.onnx"
    onnx.save(model, path)
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({"x": x})
    y, scale, zero = (got[compiled.output(k)] for k in range(3))
    want_y, want_scale, want_zero = onnx_text(x)
    print(f"openvino {ov.__version__}")
    print(f"y_scale: openvino {float(scale):.9g}, ONNX text in float32 {float(want_scale):.9g}, "
          f"exact (max - min) / 255 = {5.0 / 255:.12g}")
    print(f"y_zero_point: openvino {int(zero)}, ONNX text {int(want_zero)}")
    print(f"y: openvino {y.tolist()}, ONNX text {want_y.tolist()} (ONNX's test data: "
          "[153, 255, 0, 26, 221, 179])")
    return 0 if np.array_equal(y, want_y) and float(scale) == float(want_scale) else 1


if __name__ == "__main__":
    raise SystemExit(main())
