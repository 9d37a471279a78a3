#!/usr/bin/python3
"""Writes the small bad-input fixtures under tests/data (run once; the files are committed)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"

# A valid ONNX model whose ops MetaOp does not implement (RandomNormalLike twice,
# RandomUniformLike once).
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 3])
u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3, 3])
nodes = [helper.make_node("RandomNormalLike", ["x"], ["d1"], name="normal_a"),
         helper.make_node("RandomNormalLike", ["x"], ["d2"], name="normal_b"),
         helper.make_node("Add", ["d1", "d2"], ["y"], name="add"),
         helper.make_node("RandomUniformLike", ["x"], ["u"], name="noise")]
g = helper.make_graph(nodes, "unsupported_ops", [x], [y, u])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, os.path.join(out, "unsupported_ops.onnx"))

rng = np.random.default_rng(0)
np.save(os.path.join(out, "image_wrong_shape.npy"), rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
np.save(os.path.join(out, "image_wrong_dtype.npy"), rng.standard_normal((1, 3, 16, 16)))
np.save(os.path.join(out, "image_ok.npy"), rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
