"""Two small recurrent models for `metaop run` and `metaop check`: a 2-layer bidirectional LSTM
and GRU (8 inputs, 16 hidden, batch first) with a linear head, exported by PyTorch's
TorchScript-based exporter at opset 17, with PyTorch's own outputs on a seeded input.

Runs under the project's Python environment (PyTorch 2.15):
  .venv/bin/python bench/rnn/export_rnn_models.py OUT_DIR
writes OUT_DIR/{lstm,gru}.onnx, OUT_DIR/x.npy and OUT_DIR/torch_{lstm,gru}.npy.
"""

import os
import sys
import warnings

import numpy as np
import torch


class Net(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        cell = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        self.rnn = cell(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: export_rnn_models.py OUT_DIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(3, 12, 8)
    np.save(os.path.join(out, "x.npy"), x.numpy())
    for kind in ("lstm", "gru"):
        model = Net(kind).eval()
        with torch.no_grad():
            np.save(os.path.join(out, f"torch_{kind}.npy"), model(x).numpy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on batch_first RNNs
            torch.onnx.export(model, (x,), os.path.join(out, f"{kind}.onnx"), opset_version=17,
                              dynamo=False, input_names=["x"], output_names=["logits"])
    print(f"{out}: lstm.onnx, gru.onnx; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
