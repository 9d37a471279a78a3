# Run by the project's .venv/bin/python: writes stft_complex.onnx (STFT of a complex signal with
# a window, opset 17, onesided 0), its input as raw float32 (stft_signal.bin) and the expected
# output computed in float64 (stft_expected.bin) into the folder given, for
# ort_1_30_stft_complex.js to run with onnxruntime-node alone.
import os, sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(0)
signal = rng.uniform(-1, 1, (1, 20, 2)).astype(np.float32)
window = rng.uniform(0, 1, 6).astype(np.float32)
step, frame = 5, 6
node = helper.make_node("STFT", ["signal", "step", "window", "length"], ["y"], onesided=0)
graph = helper.make_graph(
    [node], "stft", [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [1, 20, 2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 2])],
    initializer=[numpy_helper.from_array(np.array(step, np.int64), "step"),
                 numpy_helper.from_array(window, "window"),
                 numpy_helper.from_array(np.array(frame, np.int64), "length")])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
          os.path.join(out, "stft_complex.onnx"))
x = signal[0, :, 0].astype(np.float64) + 1j * signal[0, :, 1].astype(np.float64)
frames = [np.fft.fft(x[f * step:f * step + frame] * window.astype(np.float64)) for f in range(3)]
expected = np.stack([np.stack([f.real, f.imag], -1) for f in frames])[None].astype(np.float32)
signal.tofile(os.path.join(out, "stft_signal.bin"))
expected.tofile(os.path.join(out, "stft_expected.bin"))
