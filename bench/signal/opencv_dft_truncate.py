# Run by the project's .venv/bin/python, under valgrind: OpenCV 5's DFT (opset 17, axis 1,
# inverse) of a [4, 6, 2] complex signal truncated to dft_length 4, with cv2 alone. OpenCV writes
# past the end of a heap block here (valgrind: "Invalid write of size 8 ... 0 bytes after a block
# of size 104"), which later aborts the process in free() or crashes it, depending on the heap's
# layout:
#   valgrind .venv/bin/python bench/signal/opencv_dft_truncate.py
import os
import tempfile

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

x = np.random.default_rng(0).uniform(-2, 2, (4, 6, 2)).astype(np.float32)
node = helper.make_node("DFT", ["x", "n"], ["y"], axis=1, inverse=1)
graph = helper.make_graph(
    [node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6, 2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4, 2])],
    initializer=[numpy_helper.from_array(np.array(4, np.int64), "n")])
path = os.path.join(tempfile.mkdtemp(), "dft_truncate.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
net = cv2.dnn.readNetFromONNX(path, cv2.dnn.ENGINE_NEW)
net.setInput(x, "x")
y = net.forward()
c = x[..., 0].astype(np.float64) + 1j * x[..., 1]
exact = np.fft.ifft(c[:, :4], axis=1)
print("OpenCV", cv2.__version__, "DFT truncated to 4 of 6: shape", y.shape,
      "max |OpenCV - exact| %.2g" % np.abs(y - np.stack([exact.real, exact.imag], -1)).max())
