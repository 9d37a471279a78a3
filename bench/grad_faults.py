#!/usr/bin/python3
"""Gradient- and update-fault benchmark of `metaop train --check`: on the training test models
(an MLP, a CNN and resnet18 in training mode), every op type's backward gets a sign-flipped or
doubled gradient (grad_sign, grad_scale) at a seeded sample of its nodes, one at a time, under
torch or onednn (alternating; the other when the first has no backward for the op); then
torch's optimizer (SGD with momentum, and Adam) gets each update fault (update_sign,
update_scale, update_nan, half_state, stale_state) on a seeded sample of weights.

Each injection is compared with the same training run without the fault (same seeds, same
plan): when the trained weights are bit-identical, the fault did not change the training at
all (a wrong gradient of the model's input, which reaches no weight) and is "masked". Rates:
detection = the node or weight is a finding of the right phase, of the applied faults;
localization = it is the top finding, of detected; verification = replacing it by the
reference restores the trajectory, of the detected faults that are not masked.

Usage: bench/grad_faults.py METAOP WORK_DIR [--nodes N] [--weights N] [--seed S] [--json OUT]
"""
import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"mlp": ["--batch-size", "16"], "cnn": ["--batch-size", "8"],
          "resnet18_train": ["--batch-size", "8"]}
SKIP = {"Shape", "Constant", "Gather", "Unsqueeze", "Concat", "Reshape", "Flatten", "Identity"}
UPDATE_FAULTS = ["update_sign", "update_scale", "update_nan", "half_state", "stale_state"]
OPTIMIZERS = {"sgd": ["--optimizer", "sgd", "--momentum", "0.9"], "adam": ["--optimizer", "adam"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("work")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--weights", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "models",
                                                 "make_train_models.py"), a.work],
                   check=True, capture_output=True)
    rng = random.Random(a.seed)
    rows, k = [], 0
    for model, extra in MODELS.items():
        path = os.path.join(a.work, model + ".onnx")
        by_type = {}
        for n in onnx.load(path).graph.node:
            if n.op_type not in SKIP:
                by_type.setdefault(n.op_type, []).append(n.name)
        for fault in ["grad_sign", "grad_scale"]:
            for op, names in sorted(by_type.items()):
                for node in rng.sample(names, min(a.nodes, len(names))):
                    first = ["torch", "onednn"][k % 2]
                    k += 1
                    for binding in [first, "onednn" if first == "torch" else "torch"]:
                        r = run(a.metaop, a.work, model, extra, node, op, fault, binding)
                        if r["status"] != "n/a":
                            break
                    rows.append(r)
                    show(r)
    # Update faults in torch's optimizer, on a sample of each model's trainable weights.
    for model, extra in MODELS.items():
        g = onnx.load(os.path.join(a.work, model + ".onnx")).graph
        weights = sorted(i.name for i in g.initializer
                         if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) > 0
                         and "running" not in i.name)
        for opt, opt_args in OPTIMIZERS.items():
            for fault in UPDATE_FAULTS:
                for w in rng.sample(weights, min(a.weights, len(weights))):
                    rows.append(run(a.metaop, a.work, model, extra + opt_args, w, opt, fault,
                                    "torch", "update"))
                    show(rows[-1])
    report(rows, a.json)


def show(r):
    print(f"{r['model']:<15} {r['fault']:<12} {r['op_type']:<20} {r['binding']:<7} "
          f"{r['status']:<9} localized={r.get('localized')} verified={r.get('verified')}",
          flush=True)


def train(metaop, work, model, extra, binding, saved, more=()):
    return subprocess.run([metaop, "train", os.path.join(work, model + ".onnx"), "--data",
                           os.path.join(work, model + "_x.npy"), "--labels",
                           os.path.join(work, model + "_y.npy"), "--loss", "cross_entropy",
                           "--epochs", "1", "--lr", "0.01", "--bind", binding, "--save", saved,
                           *more, *extra], capture_output=True, text=True)


def weights(path):
    return {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


BASELINES = {}


def baseline(metaop, work, model, extra, binding):
    """The trained weights of the run without a fault (cached per model, plan and optimizer)."""
    key = (model, binding, tuple(extra))
    if key not in BASELINES:
        saved = os.path.join(work, f"baseline_{len(BASELINES)}.onnx")
        p = train(metaop, work, model, extra, binding, saved)
        if p.returncode != 0:
            sys.exit(f"fault-free run of {model} under {binding} failed: {p.stderr[-300:]}")
        BASELINES[key] = weights(saved)
    return BASELINES[key]


def run(metaop, work, model, extra, node, op, fault, binding, phase="backward"):
    """One injection at `node` (a weight for phase update; `op` is then the optimizer)."""
    out, saved = os.path.join(work, "f.json"), os.path.join(work, "faulted.onnx")
    for f in (out, saved):
        if os.path.exists(f):
            os.remove(f)
    spec = f"{node}:{fault}@{binding}:{phase}"
    p = train(metaop, work, model, extra, binding, saved,
              ["--check", "--inject", spec, "--json", out, "--repro", os.path.join(work, "repro")])
    row = {"model": model, "node": node, "op_type": op, "fault": fault, "binding": binding,
           "phase": phase}
    applied = [l for l in p.stdout.splitlines() if l.startswith("injected")]
    if not applied or "not applied" in applied[0]:
        row.update(status="n/a", note=applied[0] if applied else "not reached")
        return row
    if p.returncode == 2 or not os.path.exists(out):
        row.update(status="error", note=(p.stderr or p.stdout)[-300:])
        return row
    fs = json.load(open(out))["findings"]
    mine = [f for f in fs if f["node"] == node and f["phase"] == phase]
    row["others"] = [f["node"] for f in fs if f["node"] != node]
    if not mine:
        row["status"] = "missed"
        return row
    row.update(status="detected", localized=fs[0]["node"] == node and fs[0]["phase"] == phase,
               verified=bool(mine[0]["verified"]), verification=mine[0].get("verification", ""))
    # A fault whose run trains bit-identical weights to the fault-free run changed nothing
    # (a wrong gradient of the model's input reaches no weight): masked for verification.
    if os.path.exists(saved):
        base, got = baseline(metaop, work, model, extra, binding), weights(saved)
        row["masked"] = base.keys() == got.keys() and all(
            np.array_equal(base[k], got[k], equal_nan=True) for k in base)
    return row


def report(rows, path):
    for phase in ["backward", "update"]:
        mine = [r for r in rows if r["phase"] == phase]
        if mine:
            print(f"\n{phase} faults")
            report_rows(mine)
    if path:
        json.dump(rows, open(path, "w"), indent=1)


def report_rows(rows):
    eff = [r for r in rows if r["status"] in ("detected", "missed")]
    det = [r for r in eff if r["status"] == "detected"]
    loc = [r for r in det if r["localized"]]
    masked = [r for r in det if r.get("masked")]
    ver = [r for r in det if r["verified"] and not r.get("masked")]
    pct = lambda x, y: f"{100.0 * len(x) / len(y):.1f}% ({len(x)}/{len(y)})" if y else "n/a"
    print(f"injections {len(rows)}: not applicable {sum(r['status'] == 'n/a' for r in rows)}, "
          f"errors {sum(r['status'] == 'error' for r in rows)}")
    print(f"detection    {pct(det, eff)}")
    print(f"localization {pct(loc, det)} of detected")
    print(f"verification {pct(ver, [r for r in det if not r.get('masked')])} of detected faults "
          f"that change the training ({len(masked)} do not: their trained weights are "
          f"bit-identical to the fault-free run's, e.g. a wrong gradient of the model's input, "
          f"which reaches no weight)")
    for r in rows:
        if r["status"] in ("missed", "error") or (r["status"] == "detected" and not r.get("masked")
                                                  and not (r["localized"] and r["verified"])):
            print(f"  {r}")


if __name__ == "__main__":
    main()
