"""A small log-power spectrogram model for `metaop run` and `metaop check`: torch.stft (a Hann
window of 64 samples, hop 16, one-sided) on a batch of 1-second 8 kHz signals, the power, a
linear projection onto 32 bands and log(power + 1e-6), exported by PyTorch's TorchScript-based
exporter at opset 17 (an STFT node), with PyTorch's own outputs on seeded signals.

Runs under the project's Python environment (PyTorch 2.15):
  .venv/bin/python bench/signal/export_spectrogram.py OUT_DIR
writes OUT_DIR/spectrogram.onnx, OUT_DIR/x.npy and OUT_DIR/torch.npy.
"""

import os
import sys
import warnings

import numpy as np
import torch


class Spectrogram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(64))
        self.bands = torch.nn.Linear(33, 32, bias=False)

    def forward(self, x):
        spec = torch.stft(x, n_fft=64, hop_length=16, window=self.window, center=False,
                          onesided=True, return_complex=False)
        power = spec[..., 0] ** 2 + spec[..., 1] ** 2  # [batch, bins, frames]
        return torch.log(self.bands(power.transpose(1, 2)) + 1e-6)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: export_spectrogram.py OUT_DIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    t = torch.arange(8000) / 8000.0
    x = torch.stack([torch.sin(2 * torch.pi * 440 * t) + 0.1 * torch.randn(8000),
                     torch.sin(2 * torch.pi * 1000 * t) * torch.exp(-3 * t)])
    model = Spectrogram().eval()
    warnings.simplefilter("ignore")  # return_complex=False is deprecated; the exporter needs it
    with torch.no_grad():
        model.bands.weight.uniform_(0, 1)
        np.save(os.path.join(out, "torch.npy"), model(x).numpy())
    np.save(os.path.join(out, "x.npy"), x.numpy())
    torch.onnx.export(model, (x,), os.path.join(out, "spectrogram.onnx"), opset_version=17,
                      dynamo=False, input_names=["x"], output_names=["logpower"])
    print(f"{out}: spectrogram.onnx; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
