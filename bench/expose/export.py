#!/usr/bin/python3
"""Exports every program of programs.py and its fixed twin to ONNX (opset 17) with a typical
input, into OUT_DIR, and writes OUT_DIR/manifest.json for run.py. Checks first that the typical
input gives finite outputs in PyTorch for both.

Usage: export.py OUT_DIR [NAME...]
"""
import io
import json
import os
import sys
import warnings

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from programs import PROGRAMS, SEED  # noqa: E402

warnings.filterwarnings("ignore")


def export(module, args, names, path):
    f = io.BytesIO()
    torch.onnx.export(module, args, f, opset_version=17, input_names=names,
                      output_names=["out"], do_constant_folding=True)
    model = onnx.load_from_string(f.getvalue())
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    out = os.path.abspath(sys.argv[1])
    only = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)
    manifest = []
    for p in PROGRAMS:
        if only and p.name not in only:
            continue
        buggy, fixed = p.build()
        rng = np.random.default_rng(SEED)
        typical = {name: sample(rng) for name, (shape, sample) in p.inputs.items()}
        args = tuple(torch.from_numpy(v) for v in typical.values())
        with torch.no_grad():
            for which, m in (("buggy", buggy), ("fixed", fixed)):
                y = m(*args)
                if not torch.isfinite(y).all():
                    sys.exit(f"{p.name}: the typical input gives a non-finite {which} output")
        names = list(p.inputs)
        files = {}
        for name, v in typical.items():
            files[name] = os.path.join(out, f"{p.name}.{name}.npy")
            np.save(files[name], v)
        export(buggy, args, names, os.path.join(out, p.name + ".onnx"))
        export(fixed, args, names, os.path.join(out, p.name + "_fixed.onnx"))
        manifest.append({"name": p.name, "pattern": p.pattern, "source": p.source,
                         "model": os.path.join(out, p.name + ".onnx"),
                         "fixed": os.path.join(out, p.name + "_fixed.onnx"),
                         "inputs": files, "clip": list(p.clip), "expect": sorted(p.expect)})
        print(f"exported {p.name}")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
