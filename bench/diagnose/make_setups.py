#!/usr/bin/python3
"""Faulty training setups and their fixed twins for `metaop diagnose` (bench/diagnose/run.py and
tests/diagnose_cli.py). Small PyTorch models exported in training mode with seeded small data
sets (tabular blobs, a binary problem, a regression, 8x8 images, sequences flattened); each setup
plants one fault -- a hyperparameter, an initialization, an activation, the data, the loss, or a
framework kernel (with --inject) -- and names where it is; its twin is the same setup with the
fault fixed, which trains.

Writes OUT_DIR/NAME.onnx, the data (.npy) and OUT_DIR/setups.json: per setup the metaop
arguments of the faulty run and of the twin, the symptom kinds it is expected to show and the
expected diagnosis (category and place, with node names read from the exported model).

With --variant N (N > 0) every setup is drawn anew: other data and initial weights (seeds),
hidden widths x0.5-1.5, fault magnitudes x0.5-2, learning rates x0.5-2, epochs 8-12 and batch
sizes x0.5-2 (the same for a setup and its twin) -- held-out variations of the benchmark for
checking that the diagnosis rules were not fitted to variant 0.

Usage: /usr/bin/python3 make_setups.py OUT_DIR [--variant N] [NAME...]   (no NAME: every setup)
"""
import json
import os
import sys
import warnings

import numpy as np
import onnx
import torch
from torch import nn

warnings.filterwarnings("ignore")
OUT = sys.argv[1]
ARGS = sys.argv[2:]
VARIANT = 0
if ARGS[:1] == ["--variant"]:
    VARIANT, ARGS = int(ARGS[1]), ARGS[2:]
ONLY = set(ARGS)
os.makedirs(OUT, exist_ok=True)
vr = np.random.default_rng(1000 + VARIANT)  # draws of the variant


def vary(options, base):
    """`base` for variant 0, else a draw from `options`."""
    return base if VARIANT == 0 else options[int(vr.integers(len(options)))]


def mag(k):
    """A fault's magnitude (a weight or data scale, a bias), varied x0.5-2."""
    return k * vary([0.5, 1.0, 2.0], 1.0)


# ---- data sets -------------------------------------------------------------------------------
def blobs(n=192, features=8, classes=3, seed=1):
    r = np.random.default_rng(seed + 100 * VARIANT)
    centers = r.standard_normal((classes, features)) * 1.5
    y = r.integers(0, classes, n)
    x = centers[y] + r.standard_normal((n, features))
    return x.astype(np.float32), y.astype(np.int64)


def binary(n=192, features=6, seed=2):
    r = np.random.default_rng(seed + 100 * VARIANT)
    x = r.standard_normal((n, features))
    w = r.standard_normal(features)
    y = (x @ w + 0.3 * r.standard_normal(n) > 0).astype(np.float32)[:, None]
    return x.astype(np.float32), y


def regression(n=192, features=8, seed=3):
    r = np.random.default_rng(seed + 100 * VARIANT)
    x = r.standard_normal((n, features))
    w = r.standard_normal((features, 1))
    y = np.tanh(x @ w / 2) + 0.05 * r.standard_normal((n, 1))
    return x.astype(np.float32), y.astype(np.float32)


def images(n=96, seed=4):
    """1x8x8 images; the class is which third of the image holds a bright bar."""
    r = np.random.default_rng(seed + 100 * VARIANT)
    y = r.integers(0, 3, n)
    x = r.standard_normal((n, 1, 8, 8)) * 0.3
    for i, c in enumerate(y):
        x[i, 0, :, 1 + 2 * c:3 + 2 * c] += 2.0
    return x.astype(np.float32), y.astype(np.int64)


def sequences(n=192, length=24, seed=5):
    """Noisy sine waves of three frequencies, flattened: the class is the frequency."""
    r = np.random.default_rng(seed + 100 * VARIANT)
    y = r.integers(0, 3, n)
    t = np.arange(length)
    phase = r.uniform(0, 2 * np.pi, n)
    x = np.sin(2 * np.pi * (y[:, None] + 1) * t[None, :] / length + phase[:, None])
    x = x + 0.3 * r.standard_normal((n, length))
    return x.astype(np.float32), y.astype(np.int64)


def rings(n=384, seed=6):
    """Three concentric rings in the plane (the class is the ring) and two noise features: no
    line separates them."""
    r = np.random.default_rng(seed + 100 * VARIANT)
    y = r.integers(0, 3, n)
    radius = y + r.uniform(0.15, 0.85, n)
    angle = r.uniform(0, 2 * np.pi, n)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1) / 1.5
    x = np.concatenate([x, 0.5 * r.standard_normal((n, 2))], 1)
    return x.astype(np.float32), y.astype(np.int64)


def standardized(x):
    axes = (0,) + tuple(range(2, x.ndim))
    return ((x - x.mean(axis=axes, keepdims=True)) / x.std(axis=axes, keepdims=True)).astype(np.float32)


# ---- models ----------------------------------------------------------------------------------
def mlp(sizes, act=nn.ReLU, last=None, seed=0):
    torch.manual_seed(seed + 7 * VARIANT)
    width = vary([0.5, 1.0, 1.5], 1.0)
    sizes = [sizes[0]] + [max(4, int(h * width)) for h in sizes[1:-1]] + [sizes[-1]]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    if last is not None:
        layers.append(last)
    return nn.Sequential(*layers)


def he(model):
    """He (Kaiming) initialization of every Linear and Conv, biases zero: what deep ReLU
    networks need to keep the signal's scale."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def cnn(batchnorm=False, seed=0):
    torch.manual_seed(seed + 7 * VARIANT)
    layers = [nn.Conv2d(1, 4, 3, padding=1)]
    if batchnorm:
        layers.append(nn.BatchNorm2d(4))
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3)]
    return nn.Sequential(*layers)


def export(model, example, name):
    path = os.path.join(OUT, name + ".onnx")
    model.train()
    torch.onnx.export(model, example, path, opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=["out"],
                      dynamic_axes={"x": {0: "batch"}, "out": {0: "batch"}})
    return path


def node_reading(path, initializer):
    """The name of the node that reads an initializer (a layer's weight)."""
    for n in onnx.load(path).graph.node:
        if initializer in n.input:
            return n.name
    raise SystemExit(f"{path}: no node reads {initializer}")


def nodes_of(path, op):
    return [n.name for n in onnx.load(path).graph.node if n.op_type == op]


def save(name, x, y):
    np.save(os.path.join(OUT, name + "_x.npy"), x)
    np.save(os.path.join(OUT, name + "_y.npy"), y)


SETUPS = []


def setup(name, model, example, x, y, loss, args, twin_args, expect, symptoms,
          twin_model=None, twin_x=None, twin_y=None, inject=(), static=False):
    """One faulty setup and its twin (the same unless a twin model or data is given); `static`:
    the fault is one of the graph or data (a loss that does not fit the output, labels out of
    range), a fault whatever the training shows."""
    args = args if "--batch-size" in args else args + ["--batch-size", "32"]
    if "--batch-size" not in twin_args["args"]:
        twin_args["args"] = twin_args["args"] + ["--batch-size", "32"]
    # The variant's epochs, batch size and learning-rate factor, alike for the setup and its twin.
    epochs, batch, lr = vary([8, 10, 12], None), vary([0.5, 1.0, 2.0], 1.0), vary([0.5, 1.0, 2.0], 1.0)

    def varied(a):
        a = list(a)
        for i in range(len(a) - 1):
            if a[i] == "--epochs" and epochs:
                a[i + 1] = str(epochs)
            elif a[i] == "--batch-size" and 8 <= int(a[i + 1]) < len(x):
                # (a batch below 8 or of the whole data set is a fault of its own: kept)
                a[i + 1] = str(max(8, int(int(a[i + 1]) * batch)))
            elif a[i] == "--lr":
                a[i + 1] = f"{float(a[i + 1]) * lr:g}"
        return a
    args, twin_args["args"] = varied(args), varied(twin_args["args"])
    if ONLY and name not in ONLY:
        return
    path = export(model, example, name)
    save(name, x, y)
    twin = {"model": name, "data": name}
    if twin_model is not None:
        export(twin_model, example, name + "_twin")
        twin["model"] = name + "_twin"
    if twin_x is not None or twin_y is not None:
        save(name + "_twin", twin_x if twin_x is not None else x,
             twin_y if twin_y is not None else y)
        twin["data"] = name + "_twin"
    e = dict(expect)
    if "weight" in e:
        e["node"] = node_reading(path, e["weight"])
    if "op" in e:
        e["node"] = nodes_of(path, e.pop("op"))[e.pop("index", 0)]
    SETUPS.append({"name": name, "model": name, "data": name, "loss": loss,
                   "args": args + [a for i in inject for a in ("--inject", i(path) if callable(i) else i)],
                   "twin": dict(twin, loss=twin_args.pop("loss", loss), args=twin_args["args"]),
                   "expect": e, "symptoms": symptoms, "static": static})


BASE = ["--epochs", "10", "--bind", "torch"]
SGD = ["--optimizer", "sgd"]

# ---- hyperparameters -------------------------------------------------------------------------
x, y = blobs()
setup("lr_high_sgd_mlp", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "20"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"},
      ["exploding_loss", "nonfinite_loss"])
xi, yi = images()
setup("lr_high_adam_cnn", cnn(), torch.zeros(2, 1, 8, 8), xi, yi, "cross_entropy",
      BASE + ["--optimizer", "adam", "--lr", "3", "--batch-size", "16"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01", "--batch-size", "16"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"}, ["exploding_loss"])
xs, ys = sequences()
setup("lr_high_momentum_seq", mlp([24, 32, 3]), torch.zeros(2, 24), xs, ys, "cross_entropy",
      BASE + SGD + ["--lr", "8", "--momentum", "0.9"],
      {"args": BASE + SGD + ["--lr", "0.05", "--momentum", "0.9"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"}, ["exploding_loss"])
setup("lr_high_batchnorm_cnn", cnn(batchnorm=True), torch.zeros(2, 1, 8, 8), xi, yi,
      "cross_entropy", BASE + SGD + ["--lr", "40", "--batch-size", "16"],
      {"args": BASE + SGD + ["--lr", "0.1", "--batch-size", "16"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"}, ["exploding_loss"])
setup("lr_low_sgd_mlp", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "1e-5"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"},
      ["slow_convergence"])
xr, yr = regression()
setup("lr_low_adam_regression", mlp([8, 16, 1]), torch.zeros(2, 8), xr, yr, "mse",
      BASE + ["--optimizer", "adam", "--lr", "1e-6"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "hyperparameter", "hyperparameter": "learning_rate"}, ["slow_convergence"])

# ---- initialization --------------------------------------------------------------------------
m = mlp([8, 32, 32, 32, 3])
with torch.no_grad():
    m[2].weight.mul_(mag(1000))
setup("init_large_mlp", m, torch.zeros(2, 8), x, y, "cross_entropy", BASE + SGD + ["--lr", "0.1"],
      {"args": BASE + SGD + ["--lr", "0.1"]}, {"category": "initialization", "weight": "2.weight"},
      ["exploding_loss"], twin_model=mlp([8, 32, 32, 32, 3]))
m = mlp([8, 32, 32, 3])
with torch.no_grad():
    m[4].weight.mul_(mag(1000))
setup("init_large_output_layer", m, torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "4.weight"}, ["exploding_gradient"],
      twin_model=mlp([8, 32, 32, 3]))
m = mlp([8, 32, 32, 3])
with torch.no_grad():
    m[0].weight.zero_()
    m[0].bias.zero_()
setup("init_zero_layer", m, torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "0.weight"}, ["dead_relu"],
      twin_model=mlp([8, 32, 32, 3]))
m = mlp([8, 32, 32, 3])
with torch.no_grad():
    m[0].bias.fill_(mag(-10.0))
setup("init_negative_bias_relu", m, torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "0.weight"}, ["dead_relu"],
      twin_model=mlp([8, 32, 32, 3]))
m = mlp([8, 32, 32, 3], act=nn.Tanh)
with torch.no_grad():
    m[0].weight.mul_(mag(30))
setup("init_large_tanh", m, torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "0.weight"}, ["saturation"],
      twin_model=mlp([8, 32, 32, 3], act=nn.Tanh))
m = cnn()
with torch.no_grad():
    m[0].bias.fill_(mag(-3.0))
setup("init_negative_bias_conv", m, torch.zeros(2, 1, 8, 8), xi, yi, "cross_entropy",
      BASE + SGD + ["--lr", "0.05", "--batch-size", "16"],
      {"args": BASE + SGD + ["--lr", "0.05", "--batch-size", "16"]},
      {"category": "initialization", "weight": "0.weight"}, ["dead_relu"], twin_model=cnn())

# ---- activations -----------------------------------------------------------------------------
setup("deep_sigmoid_mlp", mlp([8] + [32] * 8 + [3], act=nn.Sigmoid), torch.zeros(2, 8), x, y,
      "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "activation", "op": "Sigmoid"}, ["vanishing_gradient"],
      twin_model=he(mlp([8] + [32] * 8 + [3], act=nn.ReLU)))
setup("deep_sigmoid_sequences", mlp([24] + [24] * 10 + [3], act=nn.Sigmoid), torch.zeros(2, 24),
      xs, ys, "cross_entropy", BASE + SGD + ["--lr", "0.05", "--momentum", "0.9"],
      {"args": BASE + SGD + ["--lr", "0.05", "--momentum", "0.9"]},
      {"category": "activation", "op": "Sigmoid"}, ["vanishing_gradient"],
      twin_model=he(mlp([24] + [24] * 10 + [3], act=nn.ReLU)))
# Targets in (-1, 1) behind a ReLU: the negative ones are out of the output's reach.
setup("relu_on_regression_output", mlp([8, 16, 1], last=nn.ReLU()), torch.zeros(2, 8), xr, yr,
      "mse", BASE + SGD + ["--lr", "0.05"], {"args": BASE + SGD + ["--lr", "0.05"]},
      {"category": "architecture", "op": "Relu", "index": 1}, [], twin_model=mlp([8, 16, 1]), static=True)

# ---- architecture ----------------------------------------------------------------------------
# Logits squeezed into [0, 1] by a Sigmoid under cross_entropy: no class can get a probability
# near 1.
setup("arch_sigmoid_logits", mlp([8, 16, 3], last=nn.Sigmoid()), torch.zeros(2, 8), x, y,
      "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "architecture", "op": "Sigmoid"}, [], twin_model=mlp([8, 16, 3]), static=True)
# Logits at or above 0 (a Relu) under bce_with_logits: every label 0 costs at least ln 2.
xb, yb = binary()
setup("arch_relu_logits_bce", mlp([6, 16, 1], last=nn.ReLU()), torch.zeros(2, 6), xb, yb,
      "bce_with_logits", BASE + SGD + ["--lr", "0.5"], {"args": BASE + SGD + ["--lr", "0.5"]},
      {"category": "architecture", "op": "Relu", "index": 1}, [], twin_model=mlp([6, 16, 1]),
      static=True)
# Three layers without a nonlinearity between them (the activations forgotten) on rings that no
# line separates: an affine model, at chance level.
xg, yg = rings()
setup("arch_no_nonlinearity", mlp([4, 32, 32, 3], act=nn.Identity), torch.zeros(2, 4), xg, yg,
      "cross_entropy", BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "architecture", "op": "Gemm"}, ["chance_level"],
      twin_model=mlp([4, 32, 32, 3]))
# ---- data ------------------------------------------------------------------------------------
xu = x.copy()
xu[:, :3] = xu[:, :3] * mag(1000) + mag(500)
setup("data_unscaled_tabular", mlp([8, 16, 3]), torch.zeros(2, 8), xu, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "data", "input": "x"}, ["exploding_loss"], twin_x=standardized(xu))
xp = np.clip((xi + 1) * 100, 0, 255).round().astype(np.float32)
setup("data_raw_pixels_cnn", cnn(), torch.zeros(2, 1, 8, 8), xp, yi, "cross_entropy",
      BASE + SGD + ["--lr", "0.05", "--batch-size", "16"],
      {"args": BASE + SGD + ["--lr", "0.05", "--batch-size", "16"]},
      {"category": "data", "input": "x"}, ["exploding_loss"], twin_x=standardized(xp))
setup("data_unscaled_sigmoid", mlp([8, 32, 3], act=nn.Sigmoid), torch.zeros(2, 8), x * mag(200), y,
      "cross_entropy", BASE + SGD + ["--lr", "0.5"], {"args": BASE + SGD + ["--lr", "0.5"]},
      {"category": "data", "input": "x"}, ["saturation"], twin_x=standardized(x))
setup("data_offset_sequences", mlp([24, 32, 3]), torch.zeros(2, 24), xs + mag(2000), ys,
      "cross_entropy", BASE + SGD + ["--lr", "0.05"], {"args": BASE + SGD + ["--lr", "0.05"]},
      {"category": "data", "input": "x"}, ["exploding_loss"], twin_x=standardized(xs))
setup("data_labels_from_one", mlp([8, 16, 3]), torch.zeros(2, 8), x, y + 1, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "data", "input": "labels"}, [], twin_y=y, static=True)

# ---- loss ------------------------------------------------------------------------------------
setup("loss_double_softmax", mlp([8, 16, 3], last=nn.Softmax(dim=1)), torch.zeros(2, 8), x, y,
      "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "loss", "op": "Softmax"}, [], twin_model=mlp([8, 16, 3]), static=True)
xb, yb = binary()
setup("loss_bce_on_logits", mlp([6, 16, 1]), torch.zeros(2, 6), xb, yb, "bce",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"],
                                     "loss": "bce_with_logits"},
      {"category": "loss"}, ["nonfinite_loss"], static=True)
setup("loss_sigmoid_then_bce_with_logits", mlp([6, 16, 1], last=nn.Sigmoid()), torch.zeros(2, 6),
      xb, yb, "bce_with_logits", BASE + SGD + ["--lr", "0.5"],
      {"args": BASE + SGD + ["--lr", "0.5"]},
      {"category": "loss", "op": "Sigmoid"}, [], twin_model=mlp([6, 16, 1]), static=True)
setup("loss_nll_on_logits", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "nll",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "loss"}, [], twin_model=mlp([8, 16, 3], last=nn.LogSoftmax(dim=1)), static=True)
setup("loss_nll_on_softmax", mlp([8, 16, 3], last=nn.Softmax(dim=1)), torch.zeros(2, 8), x, y,
      "nll", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "loss", "op": "Softmax"}, [],
      twin_model=mlp([8, 16, 3], last=nn.LogSoftmax(dim=1)), static=True)

# ---- framework (faults planted in torch's kernels) -------------------------------------------
setup("framework_nan_relu", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "framework", "op": "Relu", "binding": "torch"}, ["nonfinite_activation"],
      inject=[lambda p: nodes_of(p, "Relu")[0] + ":nan@torch"])
setup("framework_update_nan", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "framework", "weight": "2.weight", "binding": "torch", "place": "weight"},
      ["nonfinite_loss"], inject=["2.weight:update_nan@torch:update"])
setup("framework_nan_conv", cnn(), torch.zeros(2, 1, 8, 8), xi, yi, "cross_entropy",
      BASE + SGD + ["--lr", "0.05", "--momentum", "0.9", "--batch-size", "16"],
      {"args": BASE + SGD + ["--lr", "0.05", "--momentum", "0.9", "--batch-size", "16"]},
      {"category": "framework", "op": "Conv", "binding": "torch"}, ["nonfinite_activation"],
      inject=[lambda p: nodes_of(p, "Conv")[0] + ":nan@torch"])
setup("framework_update_sign_seq", mlp([24, 32, 3]), torch.zeros(2, 24), xs, ys,
      "cross_entropy", BASE + SGD + ["--lr", "0.05"], {"args": BASE + SGD + ["--lr", "0.05"]},
      {"category": "framework", "weight": "2.weight", "binding": "torch", "place": "weight"}, [],
      inject=["2.weight:update_sign@torch:update"])

# ---- faults that leave no NaN and no textbook symptom: the loss stays at or above what
# predicting the label frequencies (or the targets' mean) gives -------------------------------
# Labels sorted apart from their inputs: nothing in x predicts them.
setup("data_labels_sorted", mlp([8, 16, 3]), torch.zeros(2, 8), x, np.sort(y), "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "data", "input": "labels", "repairable": False}, ["chance_level"], twin_y=y)
# A loader that repeats the first batch's inputs (labels still the data set's): 8 distinct
# inputs carry every label.
setup("data_inputs_repeated", mlp([8, 16, 3]), torch.zeros(2, 8), np.tile(x[:8], (len(x) // 8, 1)),
      y, "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "data", "input": "x", "repairable": False}, ["chance_level"], twin_x=x,
      static=True)
# A transform that erases the inputs (every sample all zeros).
setup("data_inputs_erased", mlp([8, 16, 3]), torch.zeros(2, 8), np.zeros_like(x), y,
      "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "data", "input": "x", "repairable": False}, ["chance_level"], twin_x=x,
      static=True)
# Weight decay 5, a typo for 5e-4: the weights are pulled to zero, the loss sits at ln(classes).
setup("hp_weight_decay_typo", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1", "--weight-decay", f"{mag(5):g}"],
      {"args": BASE + SGD + ["--lr", "0.1", "--weight-decay", "5e-4"]},
      {"category": "hyperparameter", "hyperparameter": "weight_decay"}, ["chance_level"])
# Regression targets in the hundreds of thousands under MSE.
setup("data_target_scale", mlp([8, 16, 1]), torch.zeros(2, 8), xr,
      (yr * mag(1e5) + 3e5).astype(np.float32), "mse",
      BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "data", "input": "labels"}, [], twin_y=yr)
# Momentum above 1 (PyTorch accepts it): the steps grow without bound.
setup("hp_momentum_above_one", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.05", "--momentum", "1.1"],
      {"args": BASE + SGD + ["--lr", "0.05", "--momentum", "0.9"]},
      {"category": "hyperparameter", "hyperparameter": "momentum"}, ["exploding_loss"])
# SGD momentum 0.99: the effective step is 100 x the learning rate, and the loss swings from one
# epoch to the next without exploding.
setup("hp_momentum_oscillating", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.3", "--momentum", "0.99"],
      {"args": BASE + SGD + ["--lr", "0.05", "--momentum", "0.9"]},
      {"category": "hyperparameter", "hyperparameter": "momentum"}, ["oscillating_loss"])
# A flipped gradient sign in one Gemm's backward: the layers before it climb the loss.
setup("framework_grad_sign_gemm", mlp([8, 32, 32, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "framework", "op": "Gemm", "index": 2, "binding": "torch"}, ["chance_level"],
      inject=[lambda p: nodes_of(p, "Gemm")[2] + ":grad_sign@torch:backward"])
# A flipped Adam update for one weight.
setup("framework_update_sign_adam", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "framework", "weight": "2.weight", "binding": "torch", "place": "weight"},
      ["chance_level"], inject=["2.weight:update_sign@torch:update"])
# A StepLR stepped every epoch with the step size meant for 30 (the rate is 1e-4 of its start
# by the fifth epoch): the rings are not learned before the steps stop moving the weights.
setup("hp_lr_schedule_too_fast", mlp([4, 32, 32, 3]), torch.zeros(2, 4), xg, yg,
      "cross_entropy", BASE + ["--optimizer", "adam", "--lr", "0.01", "--lr-schedule", "step:1:0.1"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01", "--lr-schedule", "step:5:0.5"]},
      {"category": "hyperparameter", "hyperparameter": "lr_schedule"}, ["chance_level"])
# Fine-tuning's frozen layers on a network that was never trained: the hidden layers stay random
# and only the last layer learns.
setup("hp_frozen_hidden_layers", mlp([4, 32, 32, 3]), torch.zeros(2, 4), xg, yg, "cross_entropy",
      BASE + ["--optimizer", "adam", "--lr", "0.01", "--freeze", "0.weight,0.bias,2.weight,2.bias"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "hyperparameter", "hyperparameter": "freeze"}, ["chance_level"])
# Batches of one sample at a learning rate that suits batches of 32: every step follows one
# sample's gradient and the loss swings and spikes.
setup("hp_batch_size_one", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.3", "--batch-size", "1"],
      {"args": BASE + SGD + ["--lr", "0.3", "--batch-size", "32"]},
      {"category": "hyperparameter", "hyperparameter": "batch_size"}, ["oscillating_loss"])
# The whole data set as one batch: ten epochs make ten updates, and the loss is still near
# chance level when the run ends.
setup("hp_full_batch", mlp([8, 16, 3]), torch.zeros(2, 8), x, y, "cross_entropy",
      BASE + SGD + ["--lr", "0.01", "--batch-size", str(len(x))],
      {"args": BASE + SGD + ["--lr", "0.01", "--batch-size", "8"]},
      {"category": "hyperparameter", "hyperparameter": "batch_size"}, ["chance_level"])

# A hidden layer of one or two units between 8 features and 6 classes: the loss falls, only to
# a level far above what a layer as wide as the output reaches; no monitor symptom shows it.
x6, y6 = blobs(classes=6, seed=11)


def narrow(width, seed=0):
    torch.manual_seed(seed + 7 * VARIANT)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 6))


setup("arch_narrow_layer", narrow(vary([1, 2], 1)), torch.zeros(2, 8), x6, y6, "cross_entropy",
      BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "architecture", "op": "Gemm"}, [], twin_model=narrow(16))

# Every weight of the hidden layers set to one constant: each layer's units start identical and
# the next layer weighs them alike, so every unit gets the same gradient and they stay identical
# (the layer computes one feature). A static fault.
def constant_init(model, value):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, value)
                nn.init.zeros_(m.bias)
    return model


setup("init_constant_weights", constant_init(mlp([8, 32, 32, 3]), mag(0.05)), torch.zeros(2, 8),
      x, y, "cross_entropy", BASE + SGD + ["--lr", "0.1"], {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "0.weight"}, [], twin_model=mlp([8, 32, 32, 3]),
      static=True)


# A Dropout that drops most of its hidden units at every step: the loss stays near chance with
# no monitor symptom saying why.
def dropped(ratio, seed=0):
    torch.manual_seed(seed + 7 * VARIANT)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(ratio), nn.Linear(32, 3))


setup("hp_dropout_too_high", dropped(vary([0.9, 0.95, 0.97], 0.95)), torch.zeros(2, 8), x, y,
      "cross_entropy", BASE + ["--optimizer", "adam", "--lr", "0.01"],
      {"args": BASE + ["--optimizer", "adam", "--lr", "0.01"]},
      {"category": "hyperparameter", "hyperparameter": "dropout"}, [],
      twin_model=dropped(0.2))

# Two faults at once: the constant weights, and inputs 300x off scale. Neither repair alone
# trains (re-initialized, the raw inputs make the steps diverge; standardized, the units are
# still identical); the two together do.
setup("two_constant_weights_raw_inputs", constant_init(mlp([8, 32, 32, 3]), mag(0.05)),
      torch.zeros(2, 8), x * mag(300), y, "cross_entropy", BASE + SGD + ["--lr", "0.1"],
      {"args": BASE + SGD + ["--lr", "0.1"]},
      {"category": "initialization", "weight": "0.weight"}, [], twin_model=mlp([8, 32, 32, 3]),
      twin_x=x, static=True)

# Seven ReLU layers each drawn at gain 3 (std 3 / sqrt(fan_in): under the per-layer bound of 4,
# twice He's 1.41): the gains compound, and the first loss is tens of times the trivial
# predictor's.
def deep_relu(gain=None, seed=0):
    torch.manual_seed(seed + 7 * VARIANT)
    layers = []
    for i in range(7):
        lin = nn.Linear(8 if i == 0 else 24, 24)
        if gain is None:
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
        else:
            nn.init.normal_(lin.weight, 0, gain / np.sqrt(lin.in_features))
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(24, 3))


setup("init_compounding_deep_relu", deep_relu(vary([2.5, 3.0, 3.5], 3.0)), torch.zeros(2, 8), x, y,
      "cross_entropy", BASE + SGD + ["--lr", "0.05"], {"args": BASE + SGD + ["--lr", "0.05"]},
      {"category": "initialization", "weight": "0.weight"}, ["exploding_loss"],
      twin_model=deep_relu())

with open(os.path.join(OUT, "setups.json"), "w") as f:
    json.dump(SETUPS, f, indent=1)
print(f"wrote {len(SETUPS)} setups into {OUT}")
