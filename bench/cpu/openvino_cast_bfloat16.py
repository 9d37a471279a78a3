"""OpenVINO's Cast from float32 to bfloat16 against the ONNX text, which rounds to the nearest
bfloat16 (ties to even): on CPUs without AVX-512 it truncates (0.470703125 becomes 0.46875).
Prints the CPU's SIMD flags, OpenVINO's values and the nearest bfloat16s (as float32 bits); exits
1 where they differ.

Runs under the project's Python environment (OpenVINO 2026.4, onnx, NumPy):
  .venv/bin/python bench/cpu/openvino_cast_bfloat16.py
"""
import os
import tempfile

import numpy as np
import onnx
import openvino as ov
from onnx import TensorProto, helper


def nearest_bfloat16(x):
    """x (float32) rounded to bfloat16, ties to even, as float32."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def simd_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return sorted(f for f in line.split(":", 1)[1].split()
                              if f.startswith(("avx", "amx")))
    return []


def main():
    x = np.array([0.4706, 1.00390625, 2.2652078e30, -3.1416, 0.1, 65504.0], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)
    graph = helper.make_graph(
        [node], "cast_bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cast_bf16.onnx")
        onnx.save(model, path)
        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        request.infer({"x": x})
        # The bfloat16 output's 16 bits, widened to float32 bits.
        bits = np.frombuffer(request.get_output_tensor(0).data.tobytes(), np.uint16)
        got = (bits.astype(np.uint32) << 16).view(np.float32)
    want = nearest_bfloat16(x)
    print(f"openvino {ov.__version__}; CPU flags: {' '.join(simd_flags())}")
    for v, g, w in zip(x, got, want):
        print(f"x = {v:.9g}: openvino {g:.9g}, nearest bfloat16 {w:.9g}"
              f"{'' if g == w else '  <- differs'}")
    return 0 if np.array_equal(got, want) else 1


if __name__ == "__main__":
    raise SystemExit(main())
