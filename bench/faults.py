#!/usr/bin/python3
"""Fault-injection benchmark of `metaop check` (detection, localization, verification).

For each model, every applicable (op type, fault) pair is injected on a seeded sample of the
nodes of that type (moving on to another node when the fault has no effect at one), one node at
a time, under one framework binding (torch and onednn in turn; a node the binding lacks runs on
the reference, so the binding that has it is used). Each injection is one row:
  - n/a:       the fault does not apply to that node (e.g. swap on a [1, 1000] output);
  - masked:    the fault left the kernel's result bit-identical (the check reports how many
               elements it changed), e.g. dropping a bias that is all zeros;
  - detected:  the injected node is among the defect findings for that binding;
  - within:    not detected, and the faulted kernel's local score against the reference on the
               same inputs (the check's JSON) is at most 1: the fault changed the result by less
               than a correct float32 kernel may differ -- no oracle should flag it;
  - missed:    not detected although its local score exceeds 1 (a hole in the check);
  - crash / error: the check itself died or refused the run.
Rates: detection = detected / (detected + within + missed), the faults that changed the result;
localization = the injected node is the top-ranked defect finding, of detected; verification =
its finding is verified by replacement, of detected.

Usage: bench/faults.py METAOP MODELS_DIR [--models a,b] [--nodes N] [--seed S] [--json OUT]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import onnx

# The forward faults to plant, each with the ops it applies to (None: any op), read from the
# binary (`metaop ops --faults --json`: the ops name their op-specific faults in their blocks).
GENERIC = ["bias", "nan", "swap"]


def fault_catalog(metaop):
    """The generic faults first, then the op-specific ones, in the catalog's order."""
    out = subprocess.run([metaop, "ops", "--faults", "--json"], check=True, capture_output=True,
                         text=True).stdout
    catalog = [f for f in json.loads(out) if f["phase"] == "forward"]
    faults = {name: None for name in GENERIC}
    for f in catalog:
        # naive_f32 plants a kernel no worse than the op's definition in float32: not a defect
        # to detect (tests/triage_cli.py checks that it is classed float32-limit).
        if f["ops"] is not None and f["fault"] != "naive_f32":
            faults[f["fault"]] = set(f["ops"])
    return faults


# Ops whose outputs are not floating point or that compute nothing (shape bookkeeping): the
# generic faults (bias, nan, swap) are not meaningful there.
SKIP_GENERIC = {"Shape", "Constant", "ConstantOfShape", "Gather", "Unsqueeze", "Squeeze", "Concat",
                "Reshape", "Identity", "Flatten", "Cast", "Range", "Equal", "Where", "Expand",
                "Slice", "Transpose", "Split"}
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_0",
          "densenet121", "shufflenet_v2_x0_5", "efficientnet_b0", "regnet_y_400mf", "googlenet",
          "convnext_tiny", "vit_b_16"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("models_dir")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--nodes", type=int, default=1, help="nodes sampled per (op type, fault)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    faults = fault_catalog(a.metaop)
    work = tempfile.mkdtemp(prefix="metaop-faults-")
    rows = []
    t0 = time.time()
    for model in a.models.split(","):
        path = os.path.join(a.models_dir, model, "opset17.onnx")
        graph = onnx.load(path, load_external_data=False).graph
        by_type = {}
        for n in graph.node:
            by_type.setdefault(n.op_type, []).append(n.name)
        k = 0
        for fault, ops in faults.items():
            for op_type, names in sorted(by_type.items()):
                if ops is None and op_type in SKIP_GENERIC:
                    continue
                if ops is not None and op_type not in ops:
                    continue
                # Nodes in seeded random order until --nodes injections took effect (a fault
                # can be masked at a node, e.g. dropping an all-zero bias) or 3 more were tried.
                candidates = rng.sample(names, len(names))
                effective = tried = 0
                for node in candidates:
                    if effective >= a.nodes or tried >= a.nodes + 3:
                        break
                    binding = ["torch", "onednn"][k % 2]
                    k += 1
                    tried += 1
                    rows.append(run_one(a.metaop, path, model, node, op_type, fault, binding, work))
                    r = rows[-1]
                    effective += r["status"] in ("detected", "within", "missed")
                    print(f"[{time.time() - t0:6.0f}s] {model:<18} {fault:<9} {op_type:<18} "
                          f"{binding:<7} {r['status']:<10} {r.get('note', '')[:60]}", flush=True)
    report(rows, a.json)


def run_one(metaop, path, model, node, op_type, fault, binding, work):
    out = os.path.join(work, "f.json")
    if os.path.exists(out):
        os.remove(out)  # never read a previous case's report
    spec = f"{node}:{fault}@{binding}"
    row = {"model": model, "node": node, "op_type": op_type, "fault": fault, "binding": binding}
    bindings = binding
    p = subprocess.run([metaop, "check", path, "--bind", bindings, "--inject", spec, "--json", out,
                        "--repro", os.path.join(work, "repro")], capture_output=True, text=True)
    if p.returncode == 2:
        row.update(status="error", note=(p.stderr or p.stdout).strip()[-200:])
        return row
    if p.returncode not in (0, 1) or not os.path.exists(out):
        row.update(status="crash", note=f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}")
        return row
    doc = json.load(open(out))
    note = doc.get("injected", {}).get(f"{binding}/{node}")
    ran_on = [n["ran_on"] for r in doc["runs"] if r["binding"] == binding for n in r["nodes"]
              if n["node"] == node]
    if not note and ran_on and ran_on[0] == "reference":
        # The binding lacks this node's op: inject into the other binding instead.
        other = "onednn" if binding == "torch" else "torch"
        if not row.get("retried"):
            r = run_one(metaop, path, model, node, op_type, fault, other, work)
            r["retried"] = True
            return r
    row["note"] = note or "not reached"
    defects = [f for f in doc["findings"] if f["kind"] not in ("unsupported",) and
               f["binding"] == binding]
    mine = [f for f in defects if f["node"] == node]
    m = re.search(r"changed (\d+) elements", note or "")
    # The faulted kernel's worst local score against the reference on its own inputs.
    local = [float(n["local"]["score"]) for r in doc["runs"] if r["binding"] == binding
             for n in r["nodes"] if n["node"] == node and "local" in n]
    row["local_score"] = max(local) if local else None
    if note is None or note.startswith("not applied"):
        row["status"] = "n/a"
    elif m and int(m.group(1)) == 0:
        row["status"] = "masked"
    elif not mine:
        row["status"] = "within" if local and max(local) <= 1 else "missed"
    else:
        row["status"] = "detected"
        row["localized"] = defects[0]["node"] == node
        row["verified"] = bool(mine[0]["verified"])
        row["score"] = mine[0]["score"]
        row["verification"] = mine[0]["verification"]
    row["false"] = [f["node"] for f in defects if f["node"] != node]
    return row


def report(rows, json_path):
    eff = [r for r in rows if r["status"] in ("detected", "within", "missed")]
    det = [r for r in eff if r["status"] == "detected"]
    loc = [r for r in det if r.get("localized")]
    ver = [r for r in det if r.get("verified")]
    count = lambda s: sum(r["status"] == s for r in rows)
    pct = lambda a, b: f"{100.0 * len(a) / len(b):.1f}% ({len(a)}/{len(b)})" if b else "n/a"
    print()
    print(f"injections: {len(rows)}; not applicable {count('n/a')}, masked (result unchanged) "
          f"{count('masked')}, crashes {count('crash')}, errors {count('error')}")
    print(f"faults that changed the kernel's result: {len(eff)}; of them within the error model "
          f"(local score <= 1): {count('within')}; missed although over it: {count('missed')}")
    print(f"detection    {pct(det, eff)} of the faults that changed the result")
    print(f"localization {pct(loc, det)} of detected")
    print(f"verification {pct(ver, det)} of detected")
    for r in eff:
        if r["status"] != "detected" or not r.get("localized") or not r.get("verified"):
            print(f"  {r['model']} {r['node']} {r['fault']}@{r['binding']}: {r['status']}"
                  f" local score {r.get('local_score')} localized={r.get('localized')}"
                  f" verified={r.get('verified')} {r['note'][:90]}"
                  f" {r.get('verification', '')[:90]} others={r['false'][:3]}")
    for r in rows:
        if r["status"] in ("error", "crash"):
            print(f"  {r['status']} {r['model']} {r['node']} {r['fault']}: {r['note']}")
    if json_path:
        json.dump(rows, open(json_path, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
