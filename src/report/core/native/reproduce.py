#!/usr/bin/env python3
"""FRAMEWORK alone on this reproducer folder (no MetaOp): runs model.onnx on the folder's inputs
and prints, per output, the framework's value, the exact value (MetaOp's float64 reference,
rounded once to the output's dtype) and the error in ULPs at the worst element, with how many
elements are off by more than 4 ULPs or non-finite on one side only. Exit 1 when the framework
still gives, at that element, the value the finding recorded (the finding reproduces), 0 when
it no longer does, 2 when the framework cannot run the model.

Needs numpy and the framework's Python package (PIP); nothing else. Usage:
  python3 reproduce_BINDING.py
"""
import json
import os
import sys

import numpy as np

FRAMEWORK = "%FRAMEWORK%"  # written by MetaOp: onnxruntime, openvino, tvm or opencv
HERE = os.path.dirname(os.path.abspath(__file__))


def run_onnxruntime(path, feeds, names):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return f"onnxruntime {ort.__version__}", session.run(names, feeds)


def run_openvino(path, feeds, names):
    import openvino as ov
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    port = {n: p for p in compiled.inputs for n in p.get_names()}
    result = compiled({port[k]: v for k, v in feeds.items() if k in port})
    by_name = {n: result[p] for p in compiled.outputs for n in p.get_names()}
    return f"openvino {ov.__version__}", [by_name[n] for n in names]


def run_tvm(path, feeds, names):
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    mod = relax.get_pipeline("zero")(from_onnx(onnx.load(path)))
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.require(v, requirements="C")) for v in feeds.values()])
    out = [out] if len(names) == 1 else list(out)
    return f"tvm {tvm.__version__}", [o.numpy() for o in out]


def run_opencv(path, feeds, names):
    import cv2
    net = cv2.dnn.readNetFromONNX(np.fromfile(path, dtype=np.uint8), cv2.dnn.ENGINE_NEW)
    for name, value in feeds.items():
        net.setInput(value, name)
    return f"opencv {cv2.__version__} (new engine)", list(net.forward(names))


def num(v):
    return f"{float(v):.9g}"


def ulp_errors(got, exact):
    """Per element: the error in ULPs of the exact value's dtype; inf for a non-finite value on
    one side only (0 where both are the same non-finite value)."""
    g, e = got.astype(np.float64).ravel(), exact.astype(np.float64).ravel()
    spacing = np.spacing(np.abs(exact).astype(exact.dtype)).astype(np.float64).ravel()
    err = np.abs(g - e) / np.where(spacing > 0, spacing, np.finfo(np.float64).tiny)
    same = (np.isnan(g) & np.isnan(e)) | (g == e)
    err[same] = 0
    err[~same & ~(np.isfinite(g) & np.isfinite(e))] = np.inf
    return err


def main():
    manifest = json.load(open(os.path.join(HERE, "repro.json")))
    feeds = {name: np.load(os.path.join(HERE, f)) for name, f in manifest["feeds"]}
    outputs = manifest["outputs"]
    try:
        version, got = globals()["run_" + FRAMEWORK](os.path.join(HERE, "model.onnx"), feeds,
                                                   [o["name"] for o in outputs])
    except Exception as e:  # the framework refuses the model or fails running it
        print(f"{FRAMEWORK} cannot run model.onnx: {e}")
        return 2
    print(f"{version}: {manifest['op_type']} node '{manifest['node']}' of model.onnx on "
          f"{', '.join(f for _, f in manifest['feeds']) or 'no inputs'}")
    reproduces = False
    for o, value in zip(outputs, got):
        if not o.get("reference"):
            continue
        exact = np.load(os.path.join(HERE, o["reference"]))
        value = np.asarray(value)
        if value.shape != exact.shape:
            print(f"{o['name']}: shape {value.shape}, exact {exact.shape}")
            reproduces = True
            continue
        if not np.issubdtype(exact.dtype, np.floating):
            wrong = np.flatnonzero(value.ravel() != exact.ravel())
            print(f"{o['name']}: {len(wrong)} of {exact.size} elements differ")
            reproduces = reproduces or len(wrong) > 0
            continue
        err = ulp_errors(value, exact)
        i = int(np.argmax(err))
        index = tuple(int(k) for k in np.unravel_index(i, exact.shape)) if exact.ndim else ()
        print(f"{o['name']}{list(index)}: {FRAMEWORK} {num(value.ravel()[i])}, exact "
              f"{num(exact.ravel()[i])}, error {err[i]:.3g} ULPs; {int(np.sum(err > 4))} of "
              f"{exact.size} elements off by more than 4 ULPs, "
              f"{int(np.sum(np.isinf(err)))} non-finite on one side only")
        if o.get("got"):
            recorded = np.load(os.path.join(HERE, o["got"])).ravel()
            recorded_err = ulp_errors(recorded.reshape(exact.shape), exact)
            j = int(np.argmax(recorded_err))
            # Reproduced: the framework gives again the wrong value the finding recorded.
            same = recorded_err[j] > 0 and (value.ravel()[j] == recorded[j] or (
                np.isnan(value.ravel()[j]) and np.isnan(recorded[j])))
            print(f"  the finding recorded {num(recorded[j])} at its worst element; {FRAMEWORK} "
                  f"gives {num(value.ravel()[j])} there: "
                  f"{'reproduced' if same else 'not reproduced'}")
            reproduces = reproduces or bool(same)
    return 1 if reproduces else 0


if __name__ == "__main__":
    sys.exit(main())
