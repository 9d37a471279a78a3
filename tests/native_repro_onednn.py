#!/usr/bin/python3
"""oneDNN's framework-native reproducer (docs/check.md, "Reproducers without MetaOp"): for one op
of every family the program writes (element-wise, binary, softmax, pooling, reduction, matmul,
Gemm, convolution), `metaop probe --bind onednn` writes reproduce_onednn.cpp beside the
reproducer; built with the README's command against that oneDNN alone and run with no MetaOp
variable or path, it gives the binding's values (the same count of elements off by more than 4
ULPs as the finding recorded, the recorded value at the worst element) and exits 1. With the
recorded outputs replaced by the exact ones it exits 0. The same program compiles against
oneDNN 2.6 (Debian's) for the onednn-2.6 binding, whose API differs (operation descriptors,
pooling_v2, softmax_v2, output scales).

Usage: native_repro_onednn.py METAOP WORK_DIR ONEDNN3_PREFIX   (Debian's python3 with numpy; a
C++17 compiler as `c++`; ONEDNN3_PREFIX holds oneDNN 3's include/ and lib/)
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from testlib import check, current_onednn, finish

METAOP, WORK, PREFIX3 = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

ONEDNN = current_onednn(METAOP)  # the sanitize build has only onednn-2.6
CASES = {"onednn": ["Log", "Greater", "LogSoftmax", "MaxPool", "ReduceL2", "Gemm", "MatMul", "Conv"],
         "onednn-2.6": ["LogSoftmax", "MaxPool", "Gemm"]}
PREFIX = {"onednn": PREFIX3, "onednn-2.6": "/usr"}
ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def ulps(got, exact):
    """The error in float32 ULPs per element, as the program computes it."""
    g, e = got.astype(np.float64).ravel(), exact.astype(np.float64).ravel()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a = np.abs(exact.astype(np.float32)).ravel()
        step = np.where(a == np.finfo(np.float32).max, a - np.nextafter(a, np.float32(0)),
                        np.nextafter(a, np.float32(np.inf)) - a).astype(np.float64)
        err = np.abs(g - e) / step
    same = (g == e) | (np.isnan(g) & np.isnan(e))
    err[same] = 0
    err[~same & ~(np.isfinite(g) & np.isfinite(e))] = np.inf
    return err


def run(folder):
    r = subprocess.run(["./reproduce_onednn"], capture_output=True, text=True, env=ENV, cwd=folder)
    return r.returncode, r.stdout + r.stderr


for binding in [b for b in CASES if b == "onednn-2.6" or b == ONEDNN]:
    for op in CASES[binding]:
        out = os.path.join(WORK, binding, op)
        p = subprocess.run([METAOP, "probe", "--op", op, "--bind", binding, "--out", out],
                           capture_output=True, text=True)
        folders = sorted(f for f in glob.glob(os.path.join(out, f"{binding}_*_{op}_*"))
                         if os.path.exists(os.path.join(f, "reproduce_onednn.cpp")))
        check(folders, f"{binding} {op}: a reproducer with reproduce_onednn.cpp",
              p.stdout[-2000:] + p.stderr[-2000:])
        if not folders:
            continue
        folder = folders[0]
        readme = open(os.path.join(folder, "README.txt")).read()
        build = [line.strip() for line in readme.splitlines() if "c++ -std=c++17" in line]
        check(len(build) == 1 and "-ldnnl" in build[0],
              f"{binding} {op}: the README says how to build and run it", readme[-1500:])
        report = open(os.path.join(folder, "report.md")).read()
        check(build and build[0] in report and WORK not in report,
              f"{binding} {op}: report.md has the command and no path of this machine",
              report[-1500:])
        if not build:
            continue
        b = subprocess.run(["bash", "-c", build[0].split(" && ")[0]], capture_output=True,
                           text=True, cwd=folder, env=dict(ENV, DNNL=PREFIX[binding]))
        check(b.returncode == 0, f"{binding} {op}: reproduce_onednn.cpp compiles against "
              f"{PREFIX[binding] if binding == 'onednn-2.6' else 'oneDNN 3'}",
              b.stdout[-3000:] + b.stderr[-3000:])
        if b.returncode != 0:
            continue
        code, text = run(folder)
        m = json.load(open(os.path.join(folder, "repro.json")))
        o = m["outputs"][0]
        exact = np.load(os.path.join(folder, o["reference"]))
        recorded = np.load(os.path.join(folder, o["got"]))
        off = (int(np.sum(ulps(recorded, exact) > 4)) if exact.dtype == np.float32
               else int(np.sum(recorded.ravel() != exact.ravel())))
        counted = re.search(r"ULPs; (\d+) of (\d+) elements off by more than 4 ULPs", text)
        check(code == 1 and "reproduced" in text and "not reproduced" not in text and
              counted and int(counted.group(1)) == off and int(counted.group(2)) == exact.size,
              f"{binding} {op}: oneDNN alone gives the binding's values ({off} of {exact.size} "
              f"off), exit 1", text)
        # The recorded outputs replaced by the exact ones: nothing left to reproduce, exit 0.
        np.save(os.path.join(folder, o["got"]), exact)
        code, text = run(folder)
        check(code == 0 and "not reproduced" in text,
              f"{binding} {op}: a recorded value oneDNN no longer gives: exit 0", text)

finish()
