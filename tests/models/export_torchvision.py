#!/usr/bin/python3
"""Exports torchvision architectures (random weights) to ONNX with PyTorch's own outputs.

For each architecture: OUT/ARCH/opset13.onnx, OUT/ARCH/opset17.onnx, and three seeded random
inputs input_K.npy with PyTorch's float32 eval-mode outputs torch_K.npy. An architecture whose
files are all present is skipped, so a build tree exports once.

Usage: /usr/bin/python3 export_torchvision.py OUT_DIR [ARCH...]
"""
import os
import sys
import warnings

import numpy as np
import torch
import torchvision

ARCHS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_0", "densenet121",
         "shufflenet_v2_x0_5", "efficientnet_b0", "regnet_y_400mf", "googlenet", "convnext_tiny", "vit_b_16"]
OPSETS = [13, 17]
TORCHSCRIPT = {"resnet18", "resnet50"}  # also saved as TorchScript, for the LibTorch benchmarks
N_INPUTS = 3


def build(arch):
    kwargs = {"weights": None}
    if arch == "googlenet":
        kwargs.update(aux_logits=False, init_weights=False)
    model = getattr(torchvision.models, arch)(**kwargs)
    # With random weights the features reaching the classifier can be ~1e-5 of its bias
    # (googlenet, shufflenet), so the logits would barely depend on the input. Without the
    # classifier's bias they are the projection of the features, and test the whole network.
    # (squeezenet classifies with a convolution and has no Linear.)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if linears:
        torch.nn.init.zeros_(linears[-1].bias)
    if arch == "vit_b_16":
        # The classification head starts at zero, which would make every logit 0.
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    return model.eval()


def export(arch, out_dir):
    d = os.path.join(out_dir, arch)
    files = [f"opset{o}.onnx" for o in OPSETS] + (["torchscript.pt"] if arch in TORCHSCRIPT else []) + [f"input_{k}.npy" for k in range(N_INPUTS)] + \
        [f"torch_{k}.npy" for k in range(N_INPUTS)]
    if all(os.path.exists(os.path.join(d, f)) for f in files):
        print(f"{arch}: already exported")
        return
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = build(arch)
    gen = torch.Generator().manual_seed(1)
    for k in range(N_INPUTS):
        x = torch.randn(1, 3, 224, 224, generator=gen)
        with torch.no_grad():
            y = model(x)
        np.save(os.path.join(d, f"input_{k}.npy"), x.numpy())
        np.save(os.path.join(d, f"torch_{k}.npy"), y.numpy())
    x = torch.randn(1, 3, 224, 224)
    if arch in TORCHSCRIPT:
        with torch.no_grad():
            torch.jit.trace(model, x).save(os.path.join(d, "torchscript.pt"))
    for opset in OPSETS:
        path = os.path.join(d, f"opset{opset}.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, x, path + ".tmp", opset_version=opset, input_names=["image"],
                              output_names=["logits"], do_constant_folding=True)
        os.replace(path + ".tmp", path)
    print(f"{arch}: exported")


def main():
    out_dir = sys.argv[1]
    archs = sys.argv[2:] or ARCHS
    torch.set_num_threads(2)
    for arch in archs:
        export(arch, out_dir)


if __name__ == "__main__":
    main()
