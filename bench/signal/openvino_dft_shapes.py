# Run by the project's .venv/bin/python: OpenVINO's DFT on the current onnx package's node tests
# test_dft_rfft and test_dft_irfft (a one-sided spectrum of a real signal, and its inverse), with
# openvino alone, against the shapes and values ONNX expects. Argument: the folder that
# scripts/onnx_node_tests.py wrote (build/tests/onnx-node-current).
import glob, os, sys

import numpy as np
import onnx
import openvino as ov
from onnx import numpy_helper

core = ov.Core()
for test in ("test_dft_rfft", "test_dft_irfft"):
    folder = os.path.join(sys.argv[1], test)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    inputs = [numpy_helper.to_array(onnx.load_tensor(f))
              for f in sorted(glob.glob(os.path.join(folder, "test_data_set_0", "input_*.pb")))]
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, "test_data_set_0", "output_0.pb")))
    # dft_length and axis as constants, as exporters write them (OpenVINO's frontend needs them so)
    for i, a in list(zip(model.graph.input, inputs))[1:]:
        model.graph.initializer.append(numpy_helper.from_array(a, i.name))
    del model.graph.input[1:]
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    feeds = {model.graph.input[0].name: inputs[0]}
    got = compiled(feeds)[compiled.output(0)]
    values = np.abs(got.reshape(-1) - expected.reshape(-1)).max() if got.size == expected.size else float("nan")
    print(f"{test}: input {inputs[0].shape}, ONNX expects {expected.shape}, OpenVINO gives {got.shape} "
          f"(values, flattened: max difference {values:.2g})")
