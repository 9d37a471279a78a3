#!/usr/bin/python3
"""Seed corpora for the fuzz targets, from the ONNX conformance data (libonnx-testdata): its
models for fuzz_onnx, its TensorProto files for fuzz_tensor_proto and the same tensors saved as
.npy for fuzz_npy; repro.json files of each phase for fuzz_repro.

Usage: make_seeds.py OUT_DIR TESTDATA_DIR
"""
import hashlib
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

OUT, TESTDATA = sys.argv[1], sys.argv[2]
LIMIT = 256 * 1024  # bytes per seed: small inputs keep the fuzzers fast
seen = set()


def put(target, data):
    if len(data) > LIMIT:
        return False
    h = hashlib.sha1(data).hexdigest()
    if (target, h) in seen:
        return False
    seen.add((target, h))
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, h), "wb") as f:
        f.write(data)
    return True


counts = {}
for suite in ("node", "simple", "pytorch-operator"):
    root = os.path.join(TESTDATA, suite)
    if not os.path.isdir(root):
        continue
    for test in sorted(os.listdir(root)):
        folder = os.path.join(root, test)
        model = os.path.join(folder, "model.onnx")
        if os.path.isfile(model):
            counts["onnx"] = counts.get("onnx", 0) + put("onnx", open(model, "rb").read())
        for ds in sorted(os.listdir(folder)):
            dsp = os.path.join(folder, ds)
            if not ds.startswith("test_data_set") or not os.path.isdir(dsp):
                continue
            for pb in sorted(os.listdir(dsp)):
                data = open(os.path.join(dsp, pb), "rb").read()
                counts["pb"] = counts.get("pb", 0) + put("tensor_proto", data)
                try:
                    t = onnx.TensorProto()
                    t.ParseFromString(data)
                    a = numpy_helper.to_array(t)
                except Exception:
                    continue
                if a.dtype.kind in "fiub" and a.dtype.itemsize <= 8 and a.dtype.byteorder != ">":
                    from io import BytesIO
                    buf = BytesIO()
                    np.save(buf, a)
                    counts["npy"] = counts.get("npy", 0) + put("npy", buf.getvalue())

# repro.json of each phase, as check, probe and train write them.
base = {"schema": "metaop-repro/1", "kind": "accuracy", "binding": "torch", "node": "conv1",
        "op_type": "Conv", "model": "m.onnx", "detail": "y[0]: ...", "inject": []}
docs = [
    dict(base, phase="forward", files={"inputs": ["input_0_x.npy", None], "got": ["torch_0_y.npy"]}),
    dict(base, phase="backward", files={"inputs": ["inputs_0_x.npy"], "outputs": ["outputs_0_y.npy"],
                                         "output_grads": ["output_grads_0_y.npy"],
                                         "got": ["got_0_x.npy"]}),
    dict(base, phase="update", node="w", step=3, bfloat16=["inputs_0_weight.npy"],
         optimizer={"kind": "adam", "lr": 0.001, "momentum": 0, "nesterov": False,
                    "weight_decay": 0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
         files={"inputs": ["inputs_0_weight.npy", "inputs_1_grad.npy"], "got": ["got_0.npy"]}),
    dict(base, phase="forward", inject=["Conv:bias@torch"], files={"inputs": ["sub/x.npy"]}),
    dict(base, phase="forward", files={"inputs": ["../x.npy", "/etc/passwd", "out.bin"]}),
]
for d in docs:
    counts["repro"] = counts.get("repro", 0) + put("repro", json.dumps(d, indent=1).encode())
print("seeds: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
