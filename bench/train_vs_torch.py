#!/usr/bin/python3
"""One training step of resnet18 (batch 8, 224x224, training mode, SGD with momentum) under
`metaop train --bind torch` next to PyTorch's own training step of the same architecture, one
thread each, alternated in one scripted run; prints the ratio of the median step times.
The step time of metaop excludes process start-up and model loading (it is measured inside
`metaop train` and written to its JSON); the checked variant (--check) is reported too.

Usage: bench/train_vs_torch.py METAOP WORK_DIR [STEPS]
"""
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
import torchvision

warnings.filterwarnings("ignore")
METAOP, WORK = sys.argv[1], sys.argv[2]
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
os.makedirs(WORK, exist_ok=True)
torch.set_num_threads(1)
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None).train()
path = os.path.join(WORK, "resnet18_train224.onnx")
if not os.path.exists(path):
    torch.onnx.export(model, torch.zeros(8, 3, 224, 224), path, opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
rng = np.random.default_rng(0)
x = rng.standard_normal((8 * STEPS, 3, 224, 224)).astype(np.float32)
y = rng.integers(0, 1000, 8 * STEPS).astype(np.int64)
np.save(os.path.join(WORK, "x.npy"), x)
np.save(os.path.join(WORK, "y.npy"), y)


def metaop(extra):
    out = os.path.join(WORK, "train.json")
    subprocess.run([METAOP, "train", path, "--data", os.path.join(WORK, "x.npy"), "--labels",
                    os.path.join(WORK, "y.npy"), "--loss", "cross_entropy", "--batch-size", "8",
                    "--lr", "0.01", "--momentum", "0.9", "--bind", "torch", "--threads", "1",
                    "--json", out, *extra], check=True, capture_output=True)
    return json.load(open(out))["step_seconds"]


def pytorch():
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for s in range(STEPS):
        xb, yb = torch.from_numpy(x[8 * s:8 * s + 8]), torch.from_numpy(y[8 * s:8 * s + 8])
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


ours, theirs, checked = [], [], []
for _ in range(2):  # alternate, so both see the same machine load
    ours += metaop([])
    theirs += pytorch()
checked += metaop(["--check"])
med = lambda v: sorted(v)[len(v) // 2]
print(f"resnet18 batch 8, 224x224, one thread, median over {len(ours)} steps:")
print(f"  PyTorch training step            : {med(theirs):8.3f} s")
print(f"  metaop train --bind torch        : {med(ours):8.3f} s   ratio {med(ours) / med(theirs):.2f}x (goal: under 2x)")
print(f"  metaop train --bind torch --check: {med(checked):8.3f} s   ratio {med(checked) / med(theirs):.2f}x")
