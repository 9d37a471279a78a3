#!/usr/bin/python3
"""End-to-end tests of `metaop train`: an MLP and a small CNN train under the reference, torch
and onednn plans, the loss falls in each and the three agree over the first steps; SGD (momentum,
nesterov, weight decay), Adam and AdamW follow PyTorch's own optimizers step by step (full
batch, same initial weights), on the reference's rule and on torch::optim; injected forward,
backward and update faults are found at their node or weight and phase, and their reproducers
reproduce them; --save writes a model that runs; bad usage exits 2.

Usage: train_cli.py METAOP WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

from testlib import check, finish

METAOP, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.dirname(os.path.abspath(__file__))
os.makedirs(WORK, exist_ok=True)
subprocess.run([sys.executable, os.path.join(HERE, "models", "make_train_models.py"), WORK],
               check=True, capture_output=True)


def train(model, *args):
    out = os.path.join(WORK, "t.json")
    p = subprocess.run([METAOP, "train", os.path.join(WORK, model + ".onnx"),
                        "--data", os.path.join(WORK, model + "_x.npy"),
                        "--labels", os.path.join(WORK, model + "_y.npy"),
                        "--json", out, *args], capture_output=True, text=True)
    if p.returncode != 0:
        return p.returncode, p.stdout + p.stderr, []
    return 0, p.stdout, json.load(open(out))["losses"]


# 1. Both models learn under every plan, and the plans agree over the first steps.
for model, args in [("mlp", ["--loss", "cross_entropy", "--epochs", "3", "--batch-size", "16",
                             "--lr", "0.1"]),
                    ("cnn", ["--loss", "cross_entropy", "--epochs", "4", "--batch-size", "8",
                             "--lr", "0.05", "--momentum", "0.9"])]:
    runs = {}
    for b in ["reference", "torch", "onednn"]:
        rc, out, losses = train(model, *args, "--bind", b)
        check(rc == 0, f"{model} trains under {b}", out)
        runs[b] = losses
        if losses:
            per_epoch = len(losses) // int(args[args.index("--epochs") + 1])
            last = sum(losses[-per_epoch:]) / per_epoch
            check(last < 0.5 * losses[0], f"{model} {b}: loss falls ({losses[0]:.4g} -> {last:.4g})")
    if all(runs.values()):
        worst = max(abs(runs[b][i] - runs["reference"][i]) / abs(runs["reference"][i])
                    for b in ["torch", "onednn"] for i in range(5))
        check(worst < 1e-5, f"{model}: torch and onednn losses agree with the reference over the "
              f"first 5 steps (worst relative difference {worst:.2e})")

# Dropout in training mode: every plan draws the same mask (the reference's, seeded per step).
runs = {}
for b in ["reference", "torch", "onednn"]:
    rc, out, runs[b] = train("mlp_dropout", "--loss", "cross_entropy", "--epochs", "2",
                             "--batch-size", "16", "--lr", "0.1", "--bind", b)
    check(rc == 0, f"mlp with training-mode Dropout trains under {b}", out)
if all(runs.values()):
    worst = max(abs(runs[b][i] - runs["reference"][i]) / abs(runs["reference"][i])
                for b in ["torch", "onednn"] for i in range(5))
    check(worst < 1e-5, f"mlp_dropout: the plans share the dropout mask (worst {worst:.1e})")
    check(runs["reference"] != train("mlp", "--loss", "cross_entropy", "--epochs", "2",
                                     "--batch-size", "16", "--lr", "0.1")[2],
          "dropout changes the trajectory (the mask is applied)")

# 2. Optimizers against PyTorch's, full batch, from the same initial weights (the export's).
x = torch.from_numpy(np.load(os.path.join(WORK, "mlp_x.npy")))
y = torch.from_numpy(np.load(os.path.join(WORK, "mlp_y.npy")))


def torch_losses(make_optimizer, steps, make_scheduler=None, train_only=None):
    """The MLP's full-batch losses under a torch.optim optimizer, from the export's weights;
    a scheduler stepped after each step (a full batch is an epoch); `train_only`: the index of
    the only Linear trained (the other frozen)."""
    torch.manual_seed(0)  # as make_train_models.py: the same initial weights
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = make_optimizer(mlp.parameters() if train_only is None else
                         mlp[train_only].parameters())
    sched = make_scheduler(opt) if make_scheduler else None
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(mlp(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        if sched:
            sched.step()
    return losses


for name, flags, make in [
        ("sgd momentum nesterov wd", ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9",
                                      "--nesterov", "--weight-decay", "0.01"],
         lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
        ("adam wd", ["--optimizer", "adam", "--lr", "0.01", "--weight-decay", "0.01"],
         lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01)),
        ("adamw", ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1"],
         lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1))]:
    expected = torch_losses(make, 6)
    # The reference's float64 rule (--bind reference) and torch::optim's kernels (--bind torch,
    # whose update runs on torch's optimizer) with the update of every weight checked.
    for bind in ["reference", "torch"]:
        rc, out, losses = train("mlp", "--loss", "cross_entropy", "--epochs", "6", "--batch-size",
                                str(len(y)), "--bind", bind, "--check", *flags)
        doc = json.load(open(os.path.join(WORK, "t.json"))) if rc == 0 else {}
        updated = set(doc.get("update_bindings", {}).values())
        scores = doc.get("update_scores", {})
        worst = max((abs(a - b) / abs(b) for a, b in zip(losses, expected)), default=1.0)
        check(rc == 0 and len(losses) == 6 and worst < 1e-5 and updated == {bind} and
              (bind == "reference" or (len(scores) == 4 and 0 < max(scores.values()) <= 1)),
              f"{name} on {bind}'s update: losses follow PyTorch's optimizer (worst relative "
              f"difference {worst:.2e}; update scores {scores})",
              f"{out}\nmetaop {losses}\ntorch  {expected}")

# 3. resnet18 in training mode: forward, backward and SGD steps under each binding, every node's
#    forward and backward within its error model (--check), the same losses; the running
#    statistics move (they are written back and saved).
runs = {}
for b in ["reference", "torch", "onednn"]:
    saved = os.path.join(WORK, f"r18_{b}.onnx")
    rc, out, losses = train("resnet18_train", "--loss", "cross_entropy", "--batch-size", "8",
                            "--lr", "0.01", "--momentum", "0.9", "--bind", b, "--check",
                            "--save", saved, "--report", os.path.join(WORK, f"report_{b}"))
    check(rc == 0 and "0 finding(s)" in out and len(losses) == 2,
          f"resnet18 (training mode) steps under {b} with every node checked", out)
    runs[b] = losses
if all(runs.values()):
    worst = max(abs(runs[b][i] - runs["reference"][i]) / runs["reference"][i]
                for b in ["torch", "onednn"] for i in range(2))
    check(worst < 1e-3, f"resnet18: losses agree across bindings (worst {worst:.1e})")
html = open(os.path.join(WORK, "report_torch", "index.html")).read()
# Time and memory per node, forward and backward (from the last run, under onednn).
prof = json.load(open(os.path.join(WORK, "t.json"))).get("node_profile", [])
HEAP = os.environ.get("METAOP_HEAP_ACCOUNTING", "1") != "0"  # off in the sanitizer build
check(len(prof) > 50 and all(p["forward_seconds"] > 0 and (p["forward_peak"] > 0 or not HEAP)
                             for p in prof)
      and sum(p["backward_seconds"] > 0 and (p["backward_peak"] > 0 or not HEAP)
              for p in prof) > 50,
      f"per-node forward/backward time and heap peak in the JSON ({len(prof)} nodes)")
check(html.count("<svg") == 4 and "id='metaop-graph'" in html and "<script src" not in html
      and "Loss per step" in html and "Updates" in html and "Time and memory per node" in html,
      "train --report: the model's graph, loss curve, per-node error and update plots, time and "
      "memory, nothing fetched")
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

stats = {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(WORK, "r18_torch.onnx")).graph.initializer}
check(not np.allclose(stats["bn1.running_mean"], 0), "running statistics were updated and saved")

# 4. Injected gradient faults: localized to the node and the backward phase.
for spec, node in [("/layer2/layer2.0/conv1/Conv:grad_sign@torch:backward", "/layer2/layer2.0/conv1/Conv"),
                   ("/layer1/layer1.1/relu_1/Relu:grad_scale@torch:backward", "/layer1/layer1.1/relu_1/Relu"),
                   ("/layer3/layer3.0/conv2/Conv:grad_sign@onednn:backward", "/layer3/layer3.0/conv2/Conv")]:
    binding = spec.split("@")[1].split(":")[0]
    out = os.path.join(WORK, "t.json")
    p = subprocess.run([METAOP, "train", os.path.join(WORK, "resnet18_train.onnx"),
                        "--data", os.path.join(WORK, "resnet18_train_x.npy"),
                        "--labels", os.path.join(WORK, "resnet18_train_y.npy"),
                        "--loss", "cross_entropy", "--batch-size", "8", "--epochs", "1",
                        "--bind", binding, "--check", "--inject", spec, "--json", out,
                        "--repro", os.path.join(WORK, "repro")],
                       capture_output=True, text=True)
    fs = json.load(open(out))["findings"] if os.path.exists(out) else []
    top = fs[0] if fs else {}
    check(p.returncode == 1 and top.get("node") == node and top.get("phase") == "backward"
          and len(fs) == 1, f"{spec}: found at the node, backward phase, nothing else ({fs[:2]})",
          p.stdout + p.stderr)
    # Conv's VJP has a float32 twin, Relu's is rounded once: a flipped or doubled gradient is
    # worse than either, a defect.
    check(top.get("class") == "defect" and "float32" in top.get("class_basis", ""),
          f"{spec}: triaged as a defect against the VJP in float32 ({top.get('class')}: "
          f"{top.get('class_basis')})")

# 4b. Injected update faults in torch's optimizer: found at the weight, update phase, verified,
#     classed defect; each reproducer reproduces it (exit 1) and is clean on the reference (exit
#     0). half_state: Adam's second moment in float16 underflows (g^2 < 6e-8).
for fault in ["update_sign", "update_scale", "half_state", "stale_state", "update_nan"]:
    spec = f"0.weight:{fault}@torch:update"
    repro_root = os.path.join(WORK, "repro_" + fault)
    rc, out, _ = train("cnn", "--loss", "cross_entropy", "--epochs", "1", "--batch-size", "8",
                       "--optimizer", "adam", "--lr", "0.01", "--bind", "torch", "--check",
                       "--inject", spec, "--repro", repro_root)
    fs = json.load(open(os.path.join(WORK, "t.json")))["findings"] if rc == 1 else []
    top = fs[0] if fs else {}
    check(rc == 1 and top.get("node") == "0.weight" and top.get("phase") == "update" and
          top.get("binding") == "torch" and top.get("verified") and top.get("repro"),
          f"{spec}: found at the weight, update phase, verified ({top.get('detail')}; "
          f"{top.get('verification')})", out)
    # Triaged against Adam's documented algorithm in float32, which none of the faults follows
    # (stale_state keeps no state at all: a defect of form).
    basis = top.get("class_basis", "")
    check(top.get("class") == "defect" and
          ("differs in form" in basis if fault == "stale_state" else "in float32" in basis),
          f"{spec}: class defect ({top.get('class')}: {top.get('class_basis')})", out)
    if top.get("repro"):
        again = subprocess.run([METAOP, "repro", top["repro"]], capture_output=True, text=True)
        clean = subprocess.run([METAOP, "repro", top["repro"], "--bind", "reference"],
                               capture_output=True, text=True)
        check(again.returncode == 1 and "reproduced" in again.stdout and clean.returncode == 0,
              f"{spec}: the reproducer reproduces it, and the reference is clean on it",
              again.stdout + again.stderr + clean.stdout + clean.stderr)

# 4c. A crash planted in torch's optimizer, in its worker process (a one-off child under
#     --isolation none): a crash finding at the weight, update phase, and training goes on to its
#     last step, the weight's steps that crashed made on the reference.
args = ["--loss", "cross_entropy", "--epochs", "1", "--batch-size", "8", "--optimizer", "adam",
        "--lr", "0.01", "--bind", "torch"]
rc, out, clean = train("cnn", *args)
for extra in [[], ["--isolation", "none"]]:
    rc, out, _ = train("cnn", *args, "--check", "--inject", "0.weight:segv@torch:update", *extra)
    doc = json.load(open(os.path.join(WORK, "t.json"))) if rc == 1 else {}
    fs = doc.get("findings", [])
    top = fs[0] if fs else {}
    check(rc == 1 and top.get("node") == "0.weight" and top.get("phase") == "update" and
          top.get("kind") == "crash" and "Segmentation fault" in top.get("detail", "") and
          len(fs) == 1 and len(doc.get("losses", [])) == len(clean) > 0,
          f"segv in torch's optimizer {' '.join(extra)}: a crash finding at the weight, update "
          f"phase, and all {len(clean)} steps run ({top.get('detail')})", out)

# 4d. Forward and backward reproducers of training findings.
for spec, phase in [("Conv:bias@torch", "forward"), ("Relu:grad_scale@onednn:backward", "backward")]:
    binding = spec.split("@")[1].split(":")[0]
    rc, out, _ = train("cnn", "--loss", "cross_entropy", "--epochs", "1", "--batch-size", "8",
                       "--bind", binding, "--check", "--inject", spec, "--repro",
                       os.path.join(WORK, "repro_" + phase))
    fs = json.load(open(os.path.join(WORK, "t.json")))["findings"] if rc == 1 else []
    top = fs[0] if fs else {}
    ok = rc == 1 and top.get("phase") == phase and top.get("repro")
    if ok:
        again = subprocess.run([METAOP, "repro", top["repro"]], capture_output=True, text=True)
        clean = subprocess.run([METAOP, "repro", top["repro"], "--bind", "reference"],
                               capture_output=True, text=True)
        ok = again.returncode == 1 and clean.returncode == 0
        out += again.stdout + again.stderr + clean.stdout + clean.stderr
    check(ok, f"{spec}: a {phase} reproducer that reproduces ({top.get('node')})", out)

# 5. --compare: the same training under several bindings, per-step divergence and where the
#    values part.
out = os.path.join(WORK, "cmp.json")
p = subprocess.run([METAOP, "train", os.path.join(WORK, "mlp.onnx"), "--data",
                    os.path.join(WORK, "mlp_x.npy"), "--labels", os.path.join(WORK, "mlp_y.npy"),
                    "--loss", "cross_entropy", "--batch-size", "16", "--compare",
                    "reference,torch,onednn", "--json", out], capture_output=True, text=True)
doc = json.load(open(out)) if os.path.exists(out) else {}
check(p.returncode == 0 and set(doc.get("losses", {})) == {"reference", "torch", "onednn"} and
      all(d < 1e-4 for d in doc.get("weight_drift", {}).values()) and
      all(len(v) == len(doc["losses"]["reference"])
          for v in doc.get("weight_drift_per_step", {"x": []}).values()),
      f"--compare trains under each plan and reports the divergence ({doc.get('weight_drift')})",
      p.stdout + p.stderr)

# 2b. Learning-rate schedules (stepped after each epoch, the optimizer's state kept) and frozen
#     layers, against torch.optim's schedulers and an optimizer over the unfrozen layer only.
adam = lambda p: torch.optim.Adam(p, lr=0.05)  # noqa: E731
sgd = lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.9)  # noqa: E731
for name, flags, make, sched, only in [
        ("adam, StepLR(2, 0.5)", ["--optimizer", "adam", "--lr", "0.05", "--lr-schedule",
                                  "step:2:0.5"], adam,
         lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5), None),
        ("sgd momentum, ExponentialLR(0.7)", ["--optimizer", "sgd", "--lr", "0.2", "--momentum",
                                              "0.9", "--lr-schedule", "exp:0.7"], sgd,
         lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.7), None),
        ("adam, CosineAnnealingLR(6)", ["--optimizer", "adam", "--lr", "0.05", "--lr-schedule",
                                        "cosine"], adam,
         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 6), None),
        ("adam, the first layer frozen", ["--optimizer", "adam", "--lr", "0.05", "--freeze",
                                          "0.weight,0.bias"], adam, None, 2)]:
    expected = torch_losses(make, 6, sched, only)
    for bind in ["reference", "torch"]:
        rc, out, losses = train("mlp", "--loss", "cross_entropy", "--epochs", "6", "--batch-size",
                                str(len(y)), "--bind", bind, *flags)
        doc = json.load(open(os.path.join(WORK, "t.json"))) if rc == 0 else {}
        worst = max((abs(a - b) / abs(b) for a, b in zip(losses, expected)), default=1.0)
        frozen_ok = only is None or (doc.get("frozen") == ["0.bias", "0.weight"] and
                                     "0.weight" not in doc.get("trainable", []))
        check(rc == 0 and len(losses) == 6 and worst < 1e-5 and frozen_ok,
              f"{name} on {bind}: losses follow PyTorch's (worst relative difference "
              f"{worst:.2e})", f"{out}\nmetaop {losses}\ntorch  {expected}")

# 6. --save and --hparams.
hp = os.path.join(WORK, "hp.json")
json.dump({"optimizer": "sgd", "lr": 0.1, "epochs": 2, "batch_size": 16}, open(hp, "w"))
saved = os.path.join(WORK, "mlp_trained.onnx")
rc, out, losses = train("mlp", "--loss", "cross_entropy", "--hparams", hp, "--save", saved)
check(rc == 0 and len(losses) == 12, f"--hparams sets epochs and batch size ({len(losses)} steps)", out)
p = subprocess.run([METAOP, "run", saved, "--random-inputs"], capture_output=True, text=True)
check(p.returncode == 0 and "logits" in p.stdout, "the saved model runs", p.stdout + p.stderr)
# Every key of --hparams (Adam's betas and eps too), a flag on the command line winning.
# (beta2 0.99 instead of 0.6 would change the losses by 5% within 5 steps.)
json.dump({"optimizer": "adam", "lr": 0.05, "beta1": 0.5, "beta2": 0.99, "eps": 0.01,
           "epochs": 5, "batch_size": len(y)}, open(hp, "w"))
rc, out, losses = train("mlp", "--loss", "cross_entropy", "--hparams", hp, "--beta2", "0.6")
expected = torch_losses(lambda p: torch.optim.Adam(p, lr=0.05, betas=(0.5, 0.6), eps=0.01), 5)
worst = max((abs(a - b) / abs(b) for a, b in zip(losses, expected)), default=1.0)
check(rc == 0 and len(losses) == 5 and worst < 1e-5,
      f"--hparams with Adam's betas and eps, --beta2 winning (worst {worst:.2e})", out)

# 7. Bad usage: exit 2 naming the culprit.
for args, needle in [(["--loss", "hinge"], "hinge"),
                     (["--loss", "mse"], "labels are int64"),
                     (["--loss", "cross_entropy", "--optimizer", "lion"], "lion"),
                     (["--loss", "cross_entropy", "--batch-size", "0"], "--batch-size"),
                     (["--loss", "cross_entropy", "--bind-update", "onednn"], "onednn"),
                     (["--loss", "cross_entropy", "--bind-update", "nosuch=torch"], "nosuch"),
                     (["--loss", "cross_entropy", "--inject", "nosuch:half_state@torch:update"],
                      "nosuch"),
                     (["--loss", "cross_entropy", "--inject", "Gemm:half_state@torch"], "update"),
                     (["--loss", "cross_entropy", "--inject", "0.weight:half_state@torch:update",
                       "--inject", "Gemm:update_sign@torch:update"], "already has"),
                     (["--loss", "cross_entropy", "--optimizer", "sgd", "--nesterov"],
                      "--nesterov"),
                     (["--loss", "cross_entropy", "--optimizer", "adam", "--beta2", "1.5"],
                      "beta2"),
                     (["--loss", "cross_entropy", "--check-every", "0"], "--check-every"),
                     (["--loss", "cross_entropy", "--lr-schedule", "step:0:0.1"],
                      "--lr-schedule step:0:0.1"),
                     (["--loss", "cross_entropy", "--lr-schedule", "linear"], "linear"),
                     (["--loss", "cross_entropy", "--freeze", "nosuch"], "--freeze nosuch"),
                     (["--loss", "cross_entropy", "--freeze", "Gemm"], "--freeze leaves")]:
    rc, out, _ = train("mlp", *args)
    check(rc == 2 and needle in out, f"train {' '.join(args)}: exit 2 naming '{needle}'", out)

finish()
