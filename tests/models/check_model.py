#!/usr/bin/python3
"""Runs one exported torchvision architecture with `metaop run` at each opset and input:
with the float64 reference, compared with PyTorch's own float32 logits, and with each framework
binding given (--bind B, nodes it lacks falling back to the reference), compared with the
reference.

The error is normwise: max|a - b| / max|b| over the logits; it must stay below 1e-5. That bound
is documented in docs/error-models.md ("Whole models"): correct float32 executions of these
twelve models differ from the float64 reference by at most 2.2e-6 (every binding, every input),
while the error models' per-node tolerances propagated end to end (`metaop run --propagate`)
allow 1e-4 to 1e-3, too loose to judge a whole model by.

The comparison tests the network only if the logits depend on the input: the largest change of
a logit across the three inputs, relative to the spread (max - min) of the first input's logits,
must be at least 100 times the tolerance.

Usage: /usr/bin/python3 check_model.py METAOP MODELS_DIR ARCH [BINDING[:N]...]
  BINDING:N runs that binding on the first N (opset, input) pairs only (opset 17 first).
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

TOL = 1e-5


def run(metaop, model, x, bind):
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([metaop, "run", model, "--input", x, "--out", out, "--bind", bind],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"exit {r.returncode}: {r.stderr.strip()}"
        return np.load(os.path.join(out, "logits.npy")).astype(np.float64), r.stdout


def normwise(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def main():
    metaop, models, arch = sys.argv[1:4]
    bindings = {}
    for spec in sys.argv[4:]:
        name, _, n = spec.partition(":")
        bindings[name] = int(n) if n else 6
    d = os.path.join(models, arch)
    worst = {"reference vs torch": 0.0}
    worst.update({f"{b} vs reference": 0.0 for b in bindings})
    failures, checks = 0, 0

    def record(what, err, label):
        nonlocal failures, checks
        checks += 1
        worst[what] = max(worst[what], err)
        ok = err < TOL
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label} {what}: normwise relative error {err:.3e}")

    pair = 0
    for opset in (17, 13):
        model = os.path.join(d, f"opset{opset}.onnx")
        for k in range(3):
            pair += 1
            label = f"{arch} opset {opset} input {k}"
            x = os.path.join(d, f"input_{k}.npy")
            ref, log = run(metaop, model, x, "reference")
            if ref is None:
                print(f"FAIL {label}: reference {log}")
                failures += 1
                continue
            want = np.load(os.path.join(d, f"torch_{k}.npy")).astype(np.float64)
            if ref.shape != want.shape:
                print(f"FAIL {label}: shape {ref.shape}, torch {want.shape}")
                failures += 1
                continue
            record("reference vs torch", normwise(ref, want), label)
            for b, limit in bindings.items():
                if pair > limit:
                    continue
                got, log = run(metaop, model, x, b)
                if got is None:
                    print(f"FAIL {label} --bind {b}: {log}")
                    failures += 1
                    continue
                if k == 0 and pair == 1:
                    for line in log.splitlines():
                        if re.match(r"(ran |  fell back)", line):
                            print(f"     {label} --bind {b}: {line.strip()}")
                record(f"{b} vs reference", normwise(got, ref), label)
    # Guard against a degenerate comparison: the logits must depend on the input, by much more
    # than the tolerance, relative to their own spread.
    ref = [np.load(os.path.join(d, f"torch_{k}.npy")).astype(np.float64) for k in range(3)]
    spread = max(float(np.max(np.abs(r - ref[0]))) for r in ref[1:]) / float(np.ptp(ref[0]))
    if not spread > 100 * TOL:
        print(f"FAIL {arch}: PyTorch's logits barely depend on the input (largest change "
              f"{spread:.3e} of their spread, want > {100 * TOL:g}); the comparison would not "
              "test the network")
        failures += 1
    for what, w in worst.items():
        print(f"{arch}: worst {what} {w:.3e} (tolerance {TOL:g})")
    print(f"{arch}: input dependence {spread:.3e} of the logits' spread")
    print(f"{checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
