#!/usr/bin/python3
"""Exports the model `make demo` checks first, bundled as tests/data/dense_block.onnx (run once;
the file is committed): the start of a DenseNet (a stem convolution to 128 channels at 28x28,
then one dense layer, which concatenates its inputs, here a list of one, as torchvision's
_DenseLayer does), a 1x1 convolution and a classifier. The single-input Concat of a
[1, 128, 28, 28] tensor is where OpenCV 4.6 leaves its output unwritten (docs/findings.md,
"Single-input Concat leaves its output unwritten", found on densenet121).

Usage: /usr/bin/python3 scripts/make_demo_model.py OUT.onnx
"""
import sys

import torch


class DenseBlockStart(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 128, 3, padding=1),
                                        torch.nn.BatchNorm2d(128), torch.nn.ReLU())
        self.layer1 = torch.nn.Sequential(torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
                                          torch.nn.Conv2d(128, 16, 1))
        self.classifier = torch.nn.Linear(16, 10)

    def forward(self, x):
        features = [self.stem(x)]
        h = self.layer1(torch.cat(features, 1))  # the dense layer's concatenation
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        return torch.log_softmax(self.classifier(h), dim=1)


def main():
    torch.manual_seed(0)
    model = DenseBlockStart().eval()
    x = torch.randn(1, 3, 28, 28)
    torch.onnx.export(model, x, sys.argv[1], opset_version=13, input_names=["image"],
                      output_names=["log_probs"], do_constant_folding=True)


if __name__ == "__main__":
    main()
