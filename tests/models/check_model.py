#!/usr/bin/python3
"""Runs one exported torchvision architecture with `metaop run` (float64 reference) at each
opset and input, and compares its logits with PyTorch's own float32 outputs.

The error is normwise: max|metaop - torch| / max|torch| over the logits; it must stay below
1e-4 (float32 accumulation in PyTorch is the expected source of difference).

Usage: /usr/bin/python3 check_model.py METAOP MODELS_DIR ARCH
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

TOL = 1e-4


def main():
    metaop, models, arch = sys.argv[1:4]
    d = os.path.join(models, arch)
    worst, failures, runs = 0.0, 0, 0
    for opset in (13, 17):
        model = os.path.join(d, f"opset{opset}.onnx")
        for k in range(3):
            with tempfile.TemporaryDirectory() as out:
                r = subprocess.run([metaop, "run", model, "--input", os.path.join(d, f"input_{k}.npy"),
                                    "--out", out], capture_output=True, text=True)
                runs += 1
                if r.returncode != 0:
                    print(f"FAIL {arch} opset {opset} input {k}: exit {r.returncode}: {r.stderr.strip()}")
                    failures += 1
                    continue
                got = np.load(os.path.join(out, "logits.npy")).astype(np.float64)
            want = np.load(os.path.join(d, f"torch_{k}.npy")).astype(np.float64)
            if got.shape != want.shape:
                print(f"FAIL {arch} opset {opset} input {k}: shape {got.shape}, torch {want.shape}")
                failures += 1
                continue
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            worst = max(worst, err)
            status = "ok  " if err < TOL else "FAIL"
            failures += err >= TOL
            print(f"{status} {arch} opset {opset} input {k}: normwise relative error {err:.3e}")
    # Guard against a degenerate comparison: the logits must depend on the input.
    ref = [np.load(os.path.join(d, f"torch_{k}.npy")).astype(np.float64) for k in range(3)]
    spread = max(float(np.max(np.abs(r - ref[0]))) for r in ref[1:]) / float(np.max(np.abs(ref[0])))
    if not spread > 1e-3:
        print(f"FAIL {arch}: PyTorch's logits barely depend on the input (spread {spread:.3e}); "
              "the comparison would not test the network")
        failures += 1
    print(f"{arch}: worst error {worst:.3e} (tolerance {TOL:g}), input spread {spread:.3e}")
    print(f"{runs - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
