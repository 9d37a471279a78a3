# Run by the project's .venv/bin/python: OpenCV 5's GridSample with mode bicubic on ONNX's own
# node test test_gridsample_bicubic (Debian's libonnx-testdata, opset 16), with cv2 alone,
# against the expected output ONNX ships, and ONNX Runtime on the same model for comparison.
import glob
import os

import cv2
import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

d = "/usr/share/libonnx-testdata/data/node/test_gridsample_bicubic"
inputs = [numpy_helper.to_array(onnx.load_tensor(f))
          for f in sorted(glob.glob(os.path.join(d, "test_data_set_0", "input_*.pb")))]
expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "test_data_set_0", "output_0.pb")))
model = onnx.load(os.path.join(d, "model.onnx"))
names = [i.name for i in model.graph.input]
net = cv2.dnn.readNetFromONNX(os.path.join(d, "model.onnx"), cv2.dnn.ENGINE_NEW)
for name, value in zip(names, inputs):
    net.setInput(value, name)
got = net.forward()
session = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
ort_out = session.run(None, dict(zip(names, inputs)))[0]
np.set_printoptions(precision=4, suppress=True)
print("ONNX expects", expected.ravel())
print("OpenCV", cv2.__version__, "  ", got.ravel())
print("ONNX Runtime", ort.__version__, ort_out.ravel())
