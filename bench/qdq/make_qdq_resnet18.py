"""A QDQ-quantized resnet18 for `metaop run` and `metaop check`: the opset-17 export of
build/models/resnet18 (tests/models/export_torchvision.py) quantized by ONNX Runtime's
quantization tool (static, QDQ format, uint8 activations, int8 per-channel weights, calibrated on
the three bundled inputs), and ONNX Runtime's own outputs of the quantized model for each input.

Runs under the project's Python environment (onnxruntime's quantization tool is in the PyPI
package): .venv/bin/python bench/qdq/make_qdq_resnet18.py build/models/resnet18 OUT_DIR
writes OUT_DIR/resnet18_qdq.onnx and OUT_DIR/ort_K.npy.
"""

import os
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: make_qdq_resnet18.py MODELS/resnet18 OUT_DIR\n")
        return 2
    src_dir, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    src = os.path.join(src_dir, "opset17.onnx")
    xs = [np.load(os.path.join(src_dir, f"input_{k}.npy")) for k in range(3)]
    name = onnx.load(src, load_external_data=False).graph.input[0].name

    class Inputs(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: x} for x in xs])

        def get_next(self):
            return next(self.it, None)

    pre = os.path.join(out, "resnet18_pre.onnx")
    quant_pre_process(src, pre)
    model = os.path.join(out, "resnet18_qdq.onnx")
    quantize_static(pre, model, Inputs(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    os.remove(pre)
    ops = Counter(n.op_type for n in onnx.load(model).graph.node)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for k, x in enumerate(xs):
        np.save(os.path.join(out, f"ort_{k}.npy"), session.run(None, {name: x})[0])
    print(f"{model}: {sum(ops.values())} nodes ({dict(ops)}); onnxruntime {ort.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
