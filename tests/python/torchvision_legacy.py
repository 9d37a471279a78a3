#!/usr/bin/python3
"""Run by test_torch.py with Debian's python3 (PyTorch 1.13, torchvision 0.14; the package from
PYTHONPATH): torchvision's resnet18 (random weights) exported with the legacy exporter, checked
under the torch-1.13 binding with a bias planted in layer2.0.conv1; prints the planted finding
as JSON on its last line."""
import json

import torch
import torchvision

import metaop.torch

torch.manual_seed(0)
model = torchvision.models.resnet18().eval()
x = torch.rand(1, 3, 64, 64)
r = metaop.torch.check(model, (x,), bind="torch-1.13", exporter="legacy", no_verify=False,
                       inject=["/layer2/layer2.0/conv1/Conv:bias@torch-1.13"])
planted = [f for f in r.findings if f.node == "/layer2/layer2.0/conv1/Conv"]
assert planted, r.log
f = planted[0]
print(json.dumps({"node": f.node, "module": f.module, "cls": f.cls, "score": f.score}))
