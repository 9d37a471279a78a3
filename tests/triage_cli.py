#!/usr/bin/python3
"""End-to-end triage (docs/check.md, "Triage"): a kernel planted to compute an op's definition
as the ONNX text writes it, in float32 (`--inject OP:naive_f32`), is a `float32-limit` finding
that does not fail the run (unless --fail-on-float32-limit); a kernel worse than that is a
`defect` that does. The class and its basis are in the console and the JSON.

Usage: triage_cli.py METAOP WORK_DIR   (Debian's python3: onnx 1.12 and numpy)
"""
import glob
import json
from collections import Counter
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from testlib import check, finish

METAOP, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
os.makedirs(WORK, exist_ok=True)


def one_node(op, name, attrs=None, out_shape=None, in_shape=(1, 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      list(in_shape) if out_shape is None else out_shape)
    node = helper.make_node(op, ["x"], ["y"], name=name, **(attrs or {}))
    model = helper.make_model(helper.make_graph([node], name, [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(WORK, name + ".onnx")
    onnx.save(model, path)
    return path


def inputs(name, values):
    path = os.path.join(WORK, name + ".npy")
    np.save(path, np.array([values], dtype=np.float32))
    return path


def check_run(model, x, spec, tag, *extra):
    out = os.path.join(WORK, tag + ".json")
    p = subprocess.run([METAOP, "check", model, "--bind", "torch", "--input", x, "--inject", spec,
                        "--no-verify", "--json", out, *extra], capture_output=True, text=True)
    doc = json.load(open(out)) if os.path.exists(out) else {"findings": [], "classes": {}}
    tally = Counter(f.get("class", f["kind"]) for f in doc["findings"])
    check(doc.get("classes") == dict(tally),
          f"{tag}: the JSON's classes {doc.get('classes')} tally its findings", json.dumps(doc))
    fs = [f for f in doc["findings"] if f["kind"] != "unsupported"]
    return p.returncode, p.stdout + p.stderr, fs


# 1. ReduceL2 of values near 1e20: the float32 sum of squares overflows although the norm is
#    5e20. The definition computed as written is a float32 limit, named as such; exit 0.
l2 = one_node("ReduceL2", "l2", {"keepdims": 0}, [])
huge = inputs("huge", [3e20, -4e20, 1e19, 2e19])
rc, out, fs = check_run(l2, huge, "ReduceL2:naive_f32@torch", "l2_naive")
check(len(fs) == 1 and fs[0]["kind"] == "nonfinite" and fs[0].get("class") == "float32-limit",
      "ReduceL2 naive in float32 on 1e20s: one nonfinite finding, class float32-limit", out)
check(rc == 0, f"a float32-limit alone exits 0 (got {rc})", out)
check("sqrt(sum(x * x)) in float32" in fs[0].get("class_basis", "") if fs else False,
      "the basis names the formula", json.dumps(fs))
check("class float32-limit: " in out and "scaling by the largest |x|" in out,
      "the console prints the class and the better algorithm", out)
rc, out, fs = check_run(l2, huge, "ReduceL2:naive_f32@torch", "l2_naive_strict",
                        "--fail-on-float32-limit")
check(rc == 1, f"--fail-on-float32-limit: exit 1 (got {rc})", out)

# 2. A kernel worse than the definition in float32: NaN on ordinary inputs is a defect; exit 1.
small = inputs("small", [3, -4, 1, 2])
rc, out, fs = check_run(l2, small, "ReduceL2:nan@torch", "l2_nan")
check(len(fs) == 1 and fs[0].get("class") == "defect", "ReduceL2 NaN on 3, -4, 1, 2: a defect",
      out)
check(rc == 1, f"a defect exits 1 (got {rc})", out)

# 3. Softplus as written, log(exp(x) + 1), overflows above 88.72 (exact: x).
sp = one_node("Softplus", "softplus")
rc, out, fs = check_run(sp, inputs("sp", [1, 50, 100, -3]), "Softplus:naive_f32@torch",
                        "sp_naive")
check(len(fs) == 1 and fs[0].get("class") == "float32-limit" and
      "log1p" in fs[0].get("class_basis", ""),
      "Softplus naive at x = 100: float32-limit, log1p named", out)

# 4. naive_f32 applies only to ops with a float32 twin (Add's definition is one rounding).
p = subprocess.run([METAOP, "ops", "--faults", "--json"], capture_output=True, text=True)
cat = {f["fault"]: f for f in json.loads(p.stdout)}
ops = set(cat.get("naive_f32", {}).get("ops") or [])
check({"ReduceL2", "Softplus", "LayerNormalization", "MatMul"} <= ops and "Add" not in ops,
      "ops --faults: naive_f32 applies to the ops with a float32 twin", str(sorted(ops)))

# 5. Minimized inputs (metaop repro --minimize): Softplus naive in float32 over a [4, 8] input
#    whose one value 97.3 carries the float32 limit shrinks to that one element (made 100), still a
#    float32-limit (the planted fault applies again, from repro.json's inject); under the
#    reference it is not reproduced and nothing is written.
values = np.linspace(-2, 2, 32).reshape(4, 8).astype(np.float32)
values[2, 5] = 97.3
big = os.path.join(WORK, "sp_big.npy")
np.save(big, values)
sp48 = one_node("Softplus", "softplus48", in_shape=(4, 8))
repro_root = os.path.join(WORK, "sp_repro")
sp_json = os.path.join(WORK, "sp_big.json")
p = subprocess.run([METAOP, "check", sp48, "--bind", "torch", "--input", big, "--inject",
                    "Softplus:naive_f32@torch", "--json", sp_json, "--repro", repro_root,
                    "--minimize"],
                   capture_output=True, text=True)
out = p.stdout + p.stderr
fs = json.load(open(sp_json))["findings"] if os.path.exists(sp_json) else []
folder = fs[0].get("repro") if len(fs) == 1 else None
check(folder and os.path.isdir(folder), "Softplus naive over [4, 8]: one finding, a reproducer",
      out)
small = fs[0].get("minimized") if len(fs) == 1 else None
check(small and os.path.isdir(small) and "minimized: " in out,
      "check --minimize: the finding's minimized reproducer, in the JSON and on the console", out)
if small:
    m = json.load(open(os.path.join(small, "repro.json")))
    check(np.load(os.path.join(small, m["files"]["inputs"][0])).size == 1,
          "check --minimize: one input element", json.dumps(m)[:1000])
if folder:
    small_root = os.path.join(WORK, "sp_min")
    p = subprocess.run([METAOP, "repro", folder, "--minimize", small_root], capture_output=True,
                       text=True)
    small = glob.glob(os.path.join(small_root, "*", "repro.json"))
    check(p.returncode == 1 and len(small) == 1, "repro --minimize: exit 1, one folder written",
          p.stdout + p.stderr)
    if small:
        d = os.path.dirname(small[0])
        m = json.load(open(small[0]))
        x = np.load(os.path.join(d, m["files"]["inputs"][0]))
        # 97.3 with one significant digit, 1e2, is still above log(FLT_MAX) = 88.72.
        check(x.size == 1 and float(x.ravel()[0]) == 100,
              f"minimized to one element, 100 (got {x.ravel().tolist()})", p.stdout)
        check(m.get("class") == "float32-limit" and m.get("kind") == "nonfinite",
              "the minimized finding keeps its kind and class", json.dumps(m)[:2000])
        check("32 input element(s) to 1" in p.stdout, "the console says how much went", p.stdout)
        r = subprocess.run([METAOP, "repro", d], capture_output=True, text=True)
        check(r.returncode == 1, "metaop repro on the minimized folder: reproduced (exit 1)",
              r.stdout + r.stderr)
    none_root = os.path.join(WORK, "sp_none")
    p = subprocess.run([METAOP, "repro", folder, "--minimize", none_root, "--bind", "reference"],
                       capture_output=True, text=True)
    check(p.returncode == 0 and "not reproduced" in p.stdout and not os.path.exists(none_root),
          "repro --minimize under the reference: not reproduced, exit 0, nothing written",
          p.stdout + p.stderr)

finish()
