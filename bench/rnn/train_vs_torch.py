"""MetaOp's recurrent VJPs (backpropagation through time) against PyTorch's autograd, on a whole
model: the 2-layer bidirectional LSTM and GRU of export_rnn_models.py, exported at opset 17 with
a batch of 16 and without constant folding (so the exporter's Concat, Reshape and Split of
PyTorch's weights into ONNX's W, R and B stay in the graph), then trained 6 full-batch SGD steps
by PyTorch (float32 autograd) and by `metaop train` on the reference (float64 VJPs of every
node), from the same weights on the same data. The linear head is frozen in both: every change
of the loss comes from the recurrent layers' gradients, so a wrong gradient of any LSTM or GRU
input moves MetaOp's losses away from PyTorch's after the first step.

Runs under the project's Python environment (PyTorch 2.15):
  .venv/bin/python bench/rnn/train_vs_torch.py build/metaop OUT_DIR
prints each step's losses and the largest relative difference; exit status 1 when it is over
1e-4.
"""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_rnn_models import Net  # noqa: E402

STEPS, LR, SAMPLES = 6, 0.5, 16


def torch_losses(model, x, y):
    for p in model.head.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: train_vs_torch.py METAOP OUT_DIR\n")
        return 2
    metaop, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    x = torch.randn(SAMPLES, 12, 8)
    y = torch.randint(0, 5, (SAMPLES,))
    np.save(os.path.join(out, "train_x.npy"), x.numpy())
    np.save(os.path.join(out, "train_y.npy"), y.numpy())
    worst = 0.0
    for kind in ("lstm", "gru"):
        model = Net(kind)
        path = os.path.join(out, f"train_{kind}.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on batch_first RNNs
            torch.onnx.export(model, (x,), path, opset_version=17, dynamo=False,
                              input_names=["x"], output_names=["logits"],
                              do_constant_folding=False)
        theirs = torch_losses(model, x, y)
        report = os.path.join(out, f"train_{kind}.json")
        subprocess.run([metaop, "train", path, "--data", os.path.join(out, "train_x.npy"),
                        "--labels", os.path.join(out, "train_y.npy"), "--loss", "cross_entropy",
                        "--lr", str(LR), "--epochs", str(STEPS), "--batch-size", str(SAMPLES),
                        "--freeze", "head.weight,head.bias", "--json", report], check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            ours = json.load(f)["losses"]
        if len(ours) != STEPS:
            print(f"{kind}: metaop train made {len(ours)} steps, not {STEPS}")
            return 1
        rel = [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]
        worst = max(worst, max(rel))
        print(f"{kind}: torch {' '.join(f'{v:.7f}' for v in theirs)}")
        print(f"{kind}: metaop {' '.join(f'{v:.7f}' for v in ours)}")
        print(f"{kind}: largest relative difference {max(rel):.2e}")
    print(f"torch {torch.__version__}; worst {worst:.2e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
