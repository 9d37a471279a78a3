#!/usr/bin/python3
"""Framework-native reproducers (docs/check.md, "Reproducers without MetaOp"): for each binding
whose framework runs model.onnx from Python (and PyTorch eager), `metaop probe` on an op where
that framework has a known defect writes reproduce_BINDING.py and report.md beside the
reproducer, and a minimized reproducer (probe --minimize); the script, run by a Python that
has only numpy and the framework (the project's environment, with no MetaOp variable, path or
module), prints the framework's value, the exact one and the error in ULPs, and exits 1 because
the finding reproduces. A folder whose recorded value no longer matches exits 0. The npm builds
of ONNX Runtime (ort-1.30, ort-wasm) get reproduce_BINDING.js, run by Node.js with only the npm
package (NODE_PATH naming NODE_MODULES).

Usage: native_repro.py METAOP VENV_PYTHON WORK_DIR NODE_MODULES   (Debian's python3; the Python
scripts run under VENV_PYTHON, the project's virtual environment)
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from testlib import check, finish

METAOP, VENV_PYTHON, WORK, NODE_MODULES = (os.path.abspath(a) for a in sys.argv[1:5])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# One probed op per binding with a defect listed in tests/known_probe_findings.txt or
# docs/findings.md (the probe of one op takes seconds; TVM compiles each case).
CASES = [("ort", "Sigmoid", "onnxruntime"), ("openvino", "Erf", "openvino"),
         ("tvm", "Tanh", "tvm"), ("opencv", "Tanh", "opencv"),
         ("torch", "TopK", "torch"),  # PyTorch eager: the order of equal values (+0 and -0)
         ("ort-1.30", "Sigmoid", "onnxruntime"), ("ort-wasm", "Sigmoid", "onnxruntime")]
# The level a finding was made at is recorded and used by the script and `metaop repro`.
LEVEL = {"ort": ["--ort-opt", "basic"]}
# Minimized too (probe --minimize), but for TVM, which compiles each candidate for seconds.
MINIMIZE = {"ort", "openvino", "opencv", "torch"}
# Only the framework: a clean environment, run from elsewhere, MetaOp's tree out of reach.
ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def command(script):
    """The script's interpreter and environment: the project's Python, or Node.js with the npm
    packages (what `npm install` beside the script would give)."""
    if script.endswith(".js"):
        return ["node", script], dict(ENV, NODE_PATH=NODE_MODULES)
    return [VENV_PYTHON, script], ENV


def reproduces(script, framework):
    argv, env = command(script)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=WORK)
    ok = (r.returncode == 1 and f"{framework} " in r.stdout and "ULPs" in r.stdout and
          "reproduced" in r.stdout)
    return ok, r.stdout + r.stderr

for binding, op, framework in CASES:
    out = os.path.join(WORK, binding)
    json_file = os.path.join(WORK, binding + ".json")
    p = subprocess.run([METAOP, "probe", "--op", op, "--bind", binding, "--out", out, "--json",
                        json_file] + (["--minimize"] if binding in MINIMIZE else []) +
                       LEVEL.get(binding, []), capture_output=True, text=True)
    folders = sorted(glob.glob(os.path.join(out, f"{binding}_accuracy_{op}_*")))
    check(p.returncode == 1 and folders, f"probe --op {op} --bind {binding}: an accuracy finding",
          p.stdout[-2000:] + p.stderr[-2000:])
    if not folders:
        continue
    folder = folders[0]
    node = binding.startswith("ort-")
    script_name = f"reproduce_{binding}.{'js' if node else 'py'}"
    run_line = f"{'node' if node else 'python3'} {script_name}"
    script = os.path.join(folder, script_name)
    check(os.path.exists(script), f"{binding}: {script_name} written")
    readme = open(os.path.join(folder, "README.txt")).read()
    check(run_line in readme, f"{binding}: the README says how to run it")
    if binding in LEVEL:
        option, level = LEVEL[binding]
        recorded = json.load(open(os.path.join(folder, "repro.json"))).get("level")
        check(recorded == {"option": option, "value": level} and
              any(line.strip().startswith("metaop check") and f"{option} {level}" in line
                  for line in readme.splitlines()),
              f"{binding}: repro.json and the README's commands record {option} {level}",
              json.dumps(recorded) + readme[-1500:])
        r = subprocess.run([METAOP, "repro", folder], capture_output=True, text=True)
        check(r.returncode == 1, f"{binding}: metaop repro replays it at {option} {level}",
              r.stdout[-1500:] + r.stderr[-1500:])
    ok, text = reproduces(script, framework)
    check(ok, f"{binding}: the script reproduces it (exit 1)", text)
    # report.md, for the framework's tracker: the framework's values against the exact ones,
    # the class, and no path of this machine.
    report = open(os.path.join(folder, "report.md")).read()
    title = report.splitlines()[0]
    check(title.startswith(f"# {framework} ") and "exact" in title and "ULPs" in report and
          "**Class: defect.**" in report and run_line in report and
          "```\nopset " in report, f"{binding}: report.md: {title}", report[:3000])
    check(WORK not in report and os.path.dirname(METAOP) not in report,
          f"{binding}: report.md names no path of this machine", report[:3000])
    if binding in MINIMIZE:
        # The minimized folder: a few input elements, the same class, and its own script, which
        # reproduces it with the framework alone.
        doc = json.load(open(json_file))
        small = [f.get("minimized") for f in doc["findings"] if f.get("repro") == folder]
        small = small[0] if small and small[0] else None
        check(small and os.path.isdir(small), f"{binding}: probe --minimize wrote a folder",
              p.stdout[-2000:] + p.stderr[-2000:])
        if small:
            m = json.load(open(os.path.join(small, "repro.json")))
            xs = [x for x in (np.load(os.path.join(small, f)) for _, f in m["feeds"])
                  if np.issubdtype(x.dtype, np.floating)]
            size = sum(x.size for x in xs)
            nonzero = sum(int(np.count_nonzero(x)) for x in xs)
            big = json.load(open(os.path.join(folder, "repro.json")))
            # One value carries each of these findings; a kernel whose wrong path is its vector
            # body needs a whole vector around it (OpenCV's Tanh: 8 floats, 7 of them 0).
            check(nonzero <= 1 and size <= 16 and m.get("class") == big.get("class"),
                  f"{binding}: minimized to {size} element(s), {nonzero} not 0, class "
                  f"{m.get('class')} kept", json.dumps(m)[:2000])
            ok, text = reproduces(os.path.join(small, script_name), framework)
            check(ok, f"{binding}: the minimized folder's script reproduces it (exit 1)", text)
    # The folder with the recorded outputs replaced by the exact ones: not reproduced, exit 0.
    got = sorted(glob.glob(os.path.join(folder, f"{binding}_[0-9]_*.npy")))
    ref = sorted(glob.glob(os.path.join(folder, "reference_[0-9]_*.npy")))
    if got and len(got) == len(ref):
        for g, r in zip(got, ref):
            np.save(g, np.load(r))
        argv, env = command(script)
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=WORK)
        check(r.returncode == 0 and "not reproduced" in r.stdout,
              f"{binding}: a recorded value the framework no longer gives: exit 0",
              r.stdout + r.stderr)

# A minimization keeps the failure at the worst element, not only the kind and class: OpenVINO's
# RoiAlign defect on the `edges` pattern (inf where the exact value is finite) once came out as
# the pattern's one NaN pixel (NaN for an exact 0). It must stay an inf on finite inputs.
out = os.path.join(WORK, "roialign")
json_file = os.path.join(WORK, "roialign.json")
p = subprocess.run([METAOP, "probe", "--op", "RoiAlign", "--bind", "openvino", "--minimize",
                    "--out", out, "--json", json_file], capture_output=True, text=True)
doc = json.load(open(json_file)) if os.path.exists(json_file) else {"findings": []}
small = [f.get("minimized") for f in doc["findings"]
         if f.get("class") == "defect" and f.get("minimized")]
check(p.returncode == 1 and small, "RoiAlign under openvino: a minimized defect",
      p.stdout[-2000:] + p.stderr[-2000:])
if small:
    m = json.load(open(os.path.join(small[0], "repro.json")))
    xs = [np.load(os.path.join(small[0], f)) for _, f in m["feeds"]]
    title = open(os.path.join(small[0], "report.md")).read().splitlines()[0]
    ok, text = reproduces(os.path.join(small[0], "reproduce_openvino.py"), "openvino")
    check(all(np.isfinite(x).all() for x in xs if np.issubdtype(x.dtype, np.floating)) and
          " gives inf " in title and ok,
          "RoiAlign under openvino: minimized to finite inputs, still inf, and the script "
          "reproduces it", title + "\n" + text)

finish()
