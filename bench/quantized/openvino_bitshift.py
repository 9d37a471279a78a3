"""OpenVINO's BitShift (LEFT) on uint8 against the ONNX text: the bits move left, and those
shifted past the 8 bits are lost (NumPy's left_shift of uint8, which ONNX's reference uses);
OpenVINO gives 255 wherever the shifted value passes 255.

Runs under the project's Python environment (OpenVINO 2026.4, onnx, NumPy):
  .venv/bin/python bench/quantized/openvino_bitshift.py
"""
import numpy as np
import onnx
import openvino as ov
from onnx import TensorProto, helper


def main():
    x = np.array([255, 1, 128, 37, 200, 3], np.uint8)
    s = np.array([0, 7, 1, 3, 9, 8], np.uint8)
    node = helper.make_node("BitShift", ["x", "s"], ["y"], direction="LEFT")
    graph = helper.make_graph(
        [node], "bitshift",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [6]),
         helper.make_tensor_value_info("s", TensorProto.UINT8, [6])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    path = "/tmp/openvino_bitshift.onnx"
    onnx.save(model, path)
    compiled = ov.Core().compile_model(path, "CPU")
    got = compiled({"x": x, "s": s})[compiled.output(0)]
    want = np.left_shift(x.astype(np.uint64), s.astype(np.uint64)).astype(np.uint8)
    print(f"openvino {ov.__version__}")
    print(f"x << s: openvino {got.tolist()}, the bits moved (NumPy) {want.tolist()}")
    return 0 if np.array_equal(got, want) else 1


if __name__ == "__main__":
    raise SystemExit(main())
