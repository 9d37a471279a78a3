#!/usr/bin/python3
"""Exports the tiny CNN bundled as tests/data/tiny_cnn.onnx (run once; the file is committed).

Usage: /usr/bin/python3 scripts/make_tiny_cnn.py OUT.onnx
"""
import sys

import torch


class TinyCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1, groups=2), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1))
        self.classifier = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return torch.log_softmax(self.classifier(x), dim=1)


def main():
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.randn(1, 3, 16, 16)
    torch.onnx.export(model, x, sys.argv[1], opset_version=13, input_names=["image"],
                      output_names=["log_probs"])


if __name__ == "__main__":
    main()
