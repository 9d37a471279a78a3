# Run by the project's .venv/bin/python: OpenCV 5's Attention (opset 23) with softcap and a mask,
# with cv2 alone. The ONNX text (since onnx/onnx#7867, an in-place fix of opsets 23 and 24)
# applies softcap to the scaled scores, then adds the mask; the other order makes a boolean
# mask's -inf -softcap, so masked keys get weight. Writes its models to a temporary folder.
import os, tempfile

import cv2
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(0)
B, H, S, D = 1, 2, 3, 4
q, k, v = (rng.uniform(-1, 1, (B, H, S, D)).astype(np.float32) for _ in range(3))
mask = rng.uniform(-1, 1, (S, S)).astype(np.float32)
cap = 2.0
node = h.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], softcap=cap)
g = h.make_graph([node], "g", [h.make_tensor_value_info(n, T.FLOAT, list(a.shape)) for n, a in zip("QKVM", (q, k, v, mask))],
                 [h.make_tensor_value_info("Y", T.FLOAT, [B, H, S, D])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 23)], ir_version=10), os.path.join(tmp, "cv_att.onnx"))
net = cv2.dnn.readNetFromONNX(os.path.join(tmp, "cv_att.onnx"))
for n, a in zip("QKVM", (q, k, v, mask)): net.setInput(a, n)
got = net.forward()
def att(order):
    s = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)) / np.sqrt(D)
    s = cap * np.tanh(s / cap) + mask if order == "spec" else cap * np.tanh((s + mask) / cap)
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    return p @ v
for order in ("spec", "mask first"):
    print(f"{order}: max |OpenCV - attention| = {np.abs(got - att(order)).max():.3g}")

# A lower-triangular boolean mask with softcap: row i may only weigh keys j <= i.
B, H, S, D = 1, 1, 4, 4
q, k = (rng.uniform(-1, 1, (B, H, S, D)).astype(np.float32) for _ in range(2))
v = np.eye(S, dtype=np.float32).reshape(1, 1, S, S)  # Y = the attention weights
m = np.tril(np.ones((S, S), bool))
node = h.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], softcap=2.0)
g = h.make_graph([node], "g", [h.make_tensor_value_info(n, T.FLOAT, list(a.shape)) for n, a in zip("QKV", (q, k, v))] + [h.make_tensor_value_info("M", T.BOOL, [S, S])],
                 [h.make_tensor_value_info("Y", T.FLOAT, [B, H, S, S])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 23)], ir_version=10), os.path.join(tmp, "cv_att_bool.onnx"))
net = cv2.dnn.readNetFromONNX(os.path.join(tmp, "cv_att_bool.onnx"))
for n, a in zip("QKV", (q, k, v)): net.setInput(a, n)
net.setInput(m, "M")
print("OpenCV's attention weights with a causal boolean mask and softcap 2:")
print(np.array2string(net.forward()[0, 0], precision=3))
