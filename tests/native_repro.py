#!/usr/bin/python3
"""Framework-native reproducers (docs/check.md, "Reproducers without MetaOp"): for each binding
whose framework runs model.onnx from Python, `metaop probe` on an op where that framework has a
known defect writes reproduce_BINDING.py beside the reproducer; the script, run by a Python that
has only numpy and the framework (the project's environment, with no MetaOp variable, path or
module), prints the framework's value, the exact one and the error in ULPs, and exits 1 because
the finding reproduces. A folder whose recorded value no longer matches exits 0.

Usage: native_repro.py METAOP VENV_PYTHON WORK_DIR   (Debian's python3; the scripts run under
VENV_PYTHON, the project's virtual environment)
"""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np

from testlib import check, finish

METAOP, VENV_PYTHON, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# One probed op per binding with a defect listed in tests/known_probe_findings.txt or
# docs/findings.md (the probe of one op takes seconds; TVM compiles each case).
CASES = [("ort", "Sigmoid", "onnxruntime"), ("openvino", "Erf", "openvino"),
         ("tvm", "Tanh", "tvm"), ("opencv", "Tanh", "opencv")]

for binding, op, framework in CASES:
    out = os.path.join(WORK, binding)
    p = subprocess.run([METAOP, "probe", "--op", op, "--bind", binding, "--out", out],
                       capture_output=True, text=True)
    folders = sorted(glob.glob(os.path.join(out, f"{binding}_accuracy_{op}_*")))
    check(p.returncode == 1 and folders, f"probe --op {op} --bind {binding}: an accuracy finding",
          p.stdout[-2000:] + p.stderr[-2000:])
    if not folders:
        continue
    folder = folders[0]
    script = os.path.join(folder, f"reproduce_{binding}.py")
    check(os.path.exists(script), f"{binding}: reproduce_{binding}.py written")
    readme = open(os.path.join(folder, "README.txt")).read()
    check(f"python3 reproduce_{binding}.py" in readme, f"{binding}: the README says how to run it")
    # Only the framework: a clean environment, run from elsewhere, MetaOp's tree out of reach.
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    r = subprocess.run([VENV_PYTHON, script], capture_output=True, text=True, env=env, cwd=WORK)
    check(r.returncode == 1 and f"{framework} " in r.stdout and "ULPs" in r.stdout and
          "reproduced" in r.stdout, f"{binding}: the script reproduces it (exit 1)",
          r.stdout + r.stderr)
    # The same folder with the recorded output replaced by the exact one: not reproduced, exit 0.
    got = glob.glob(os.path.join(folder, f"{binding}_0_*.npy"))
    ref = glob.glob(os.path.join(folder, "reference_0_*.npy"))
    if got and ref:
        np.save(got[0], np.load(ref[0]))
        r = subprocess.run([VENV_PYTHON, script], capture_output=True, text=True, env=env,
                           cwd=WORK)
        check(r.returncode == 0 and "not reproduced" in r.stdout,
              f"{binding}: a recorded value the framework no longer gives: exit 0",
              r.stdout + r.stderr)

finish()
