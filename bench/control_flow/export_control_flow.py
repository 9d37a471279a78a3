"""A model with data-dependent control flow for `metaop run` and `metaop check`: a small
recurrent refinement whose number of steps depends on the input (a Loop with a trip count and a
condition, each step a Linear and tanh) and a head that depends on the sign of the result (an
If), scripted with TorchScript and exported by PyTorch's TorchScript-based exporter at opset 17,
with PyTorch's own output on three seeded inputs that take different paths.

Runs under the project's Python environment (PyTorch 2.15):
  .venv/bin/python bench/control_flow/export_control_flow.py OUT_DIR
writes OUT_DIR/refine.onnx, OUT_DIR/x{0,1,2}.npy and OUT_DIR/torch_x{0,1,2}.npy.
"""

import os
import sys
import warnings

import numpy as np
import torch


class Refine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = torch.nn.Linear(8, 8)
        self.pos = torch.nn.Linear(8, 3)
        self.neg = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = x
        # As many steps as the input's scale asks for (at most 8), and fewer when h settles.
        steps = int(torch.clamp(x.abs().sum() * 2.0, 1.0, 8.0))
        for _ in range(steps):
            nxt = torch.tanh(self.step(h)) + 0.5 * h
            if (nxt - h).abs().max() < 0.05:
                h = nxt
                break
            h = nxt
        if h.sum() > 0:
            return self.pos(h)
        return torch.relu(self.neg(h)) - 1.0


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: export_control_flow.py OUT_DIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = torch.jit.script(Refine().eval())
    xs = [torch.randn(1, 8) * s for s in (0.05, 0.3, 1.0)]
    for k, x in enumerate(xs):
        np.save(os.path.join(out, f"x{k}.npy"), x.numpy())
        with torch.no_grad():
            np.save(os.path.join(out, f"torch_x{k}.npy"), model(x).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on scripted control flow
        torch.onnx.export(model, (xs[0],), os.path.join(out, "refine.onnx"), opset_version=17,
                          dynamo=False, input_names=["x"], output_names=["y"])
    print(f"{out}: refine.onnx; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
