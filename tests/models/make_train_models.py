#!/usr/bin/python3
"""Small models and data for the training tests: an MLP and a CNN (random init, dynamic batch),
exported at opset 13, with a seeded 3-class problem each.

Usage: /usr/bin/python3 make_train_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
rng = np.random.default_rng(0)


def export(model, example, name):
    model.eval()
    torch.onnx.export(model, example, os.path.join(out, name + ".onnx"), opset_version=13,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})


# MLP on 8 features: three Gaussian blobs.
centers = rng.standard_normal((3, 8)) * 2
y = rng.integers(0, 3, 96)
x = (centers[y] + rng.standard_normal((96, 8))).astype(np.float32)
np.save(os.path.join(out, "mlp_x.npy"), x)
np.save(os.path.join(out, "mlp_y.npy"), y.astype(np.int64))
mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
export(mlp, torch.zeros(2, 8), "mlp")

# The same MLP with Dropout, exported in training mode (the mask is drawn at every step).
torch.manual_seed(0)
mlp_do = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.25),
                             torch.nn.Linear(16, 3)).train()
torch.onnx.export(mlp_do, torch.zeros(2, 8), os.path.join(out, "mlp_dropout.onnx"),
                  opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, input_names=["x"], output_names=["logits"],
                  dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
for suffix in ["x", "y"]:
    np.save(os.path.join(out, f"mlp_dropout_{suffix}.npy"), np.load(os.path.join(out, f"mlp_{suffix}.npy")))

# CNN on 1x8x8 images: the class is which third of the image holds a bright bar.
y = rng.integers(0, 3, 48)
x = rng.standard_normal((48, 1, 8, 8)).astype(np.float32) * 0.3
for i, c in enumerate(y):
    x[i, 0, :, 1 + 2 * c: 3 + 2 * c] += 2.0
np.save(os.path.join(out, "cnn_x.npy"), x)
np.save(os.path.join(out, "cnn_y.npy"), y.astype(np.int64))
cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(64, 3))
export(cnn, torch.zeros(2, 1, 8, 8), "cnn")
# resnet18 in training mode (BatchNormalization with batch statistics and running-stat outputs),
# 10 classes, 64x64 images so that the float64 reference stays quick.
import warnings  # noqa: E402

import torchvision  # noqa: E402

warnings.filterwarnings("ignore")
torch.manual_seed(0)
r18 = torchvision.models.resnet18(weights=None, num_classes=10).train()
torch.onnx.export(r18, torch.zeros(4, 3, 64, 64), os.path.join(out, "resnet18_train.onnx"),
                  opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, input_names=["x"], output_names=["logits"],
                  dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
np.save(os.path.join(out, "resnet18_train_x.npy"),
        rng.standard_normal((16, 3, 64, 64)).astype(np.float32))
np.save(os.path.join(out, "resnet18_train_y.npy"), rng.integers(0, 10, 16).astype(np.int64))
print(f"wrote mlp, cnn and resnet18_train models and data into {out}")
