#!/usr/bin/python3
"""End-to-end tests of the ONNX Runtime bindings (ort from PyPI, ort-1.30 and ort-wasm from
npm) and of whole-graph mode: coverage in `metaop ops`, `run --bind ort` against the reference
at every --ort-opt level, `check --bind ort` clean, two versions in one check (present / fixed),
a crash and a hang of ONNX Runtime (in the Python and the Node.js worker) as findings with the
run going on, whole-graph mode quiet on a clean model, a planted whole-graph defect found, localized to
its window within the run budget, its level found and its reduced model reproducing it, bad
usage.

Usage: ort_cli.py METAOP DATA_DIR WORK_DIR
"""
import json
import math
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from testlib import check, finish

METAOP, DATA, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
os.makedirs(WORK, exist_ok=True)
TINY = os.path.join(DATA, "tiny_cnn.onnx")


def metaop(*args, cwd=WORK, env=None):
    p = subprocess.run([METAOP, *args], cwd=cwd, capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout + p.stderr


# 1. Coverage: both bindings in `metaop ops --json`, every op with a claim or a reason.
rc, out = metaop("ops", "--json")
rows = json.loads(out)
for b in ("ort", "ort-1.30", "ort-wasm"):
    mine = [r for r in rows if r["binding"] == b]
    fwd = sum(r["forward"] for r in mine)
    check(fwd >= 120, f"{b} claims the forward of at least 120 ops (claims {fwd})")
    check(all(r["forward"] or r["reason"] for r in mine), f"{b}: every op claimed or explained")

# 2. run --bind ort (and ort-wasm) agrees with the reference at every optimization level.
x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
np.save(os.path.join(WORK, "x.npy"), x)
rc, out = metaop("run", TINY, "--input", "x.npy", "--out", "ref")
ref = np.load(os.path.join(WORK, "ref", "log_probs.npy")).astype(np.float64)
for b in ("ort", "ort-1.30", "ort-wasm"):
    for level in ("disabled", "basic", "extended", "all"):
        rc, out = metaop("run", TINY, "--input", "x.npy", "--bind", b, "--ort-opt", level, "--out",
                         f"{b}-{level}")
        ok = rc == 0 and "ran 9 nodes on " + b in out
        got = np.load(os.path.join(WORK, f"{b}-{level}", "log_probs.npy")) if ok else ref + 1
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        check(ok and err < 1e-5, f"run --bind {b} --ort-opt {level}: 9 nodes on {b}, "
              f"error {err:.2e} < 1e-5", out)

# 3. check --bind ort on the clean model: exit 0, every node on ort, local scores below 1.
rc, out = metaop("check", TINY, "--bind", "ort,ort-wasm", "--samples", "2", "--json", "clean.json")
check(rc == 0, f"check --bind ort,ort-wasm on tiny_cnn exits 0 (got {rc})", out)
doc = json.load(open(os.path.join(WORK, "clean.json")))
runs = [r for r in doc["runs"] if r["binding"] in ("ort", "ort-wasm")]
check(len(runs) == 4 and all(n["ran_on"] == r["binding"] and n["local"]["score"] < 1
                             for r in runs for n in r["nodes"]),
      "every node ran on ort / ort-wasm with a local score below 1")

# 3b. Two versions of ONNX Runtime in one check (ort-1.30 from npm, ort from PyPI): a fault
#     planted in 1.30 only is "fixed" in the newer one, one planted in both is "present".
for inject, verdict in ((["--inject", "Relu:bias@ort-1.30"], "fixed"),
                        (["--inject", "Relu:bias@ort-1.30", "--inject", "Relu:bias@ort"],
                         "present")):
    rc, out = metaop("check", TINY, "--bind", "ort,ort-1.30", *inject, "--json", "versions.json")
    doc = json.load(open(os.path.join(WORK, "versions.json")))
    relu = [f for f in doc["findings"] if f["op_type"] == "Relu" and f["binding"] == "ort-1.30"]
    got = [f.get("across_versions", {}).get("verdict") for f in relu]
    check(rc == 1 and relu and all(v == verdict for v in got),
          f"check --bind ort,ort-1.30 {' '.join(inject)}: ort-1.30's Relu findings say "
          f"'{verdict}' (got {got})", out)
    if verdict == "fixed":
        check("across versions: fixed in ort (1.31" in out,
              "the console names the version that fixed it", out)

# 4. A crash and a hang of ONNX Runtime (a test worker that dies or loops on a marked value):
#    findings of their own kind at the right node, the worker restarted, the run complete.
# (Neg turns the marker into a value that no longer triggers the fault downstream.)
neg = helper.make_node("Neg", ["x"], ["n"], name="neg")
relu = helper.make_node("Relu", ["n"], ["r"], name="relu")
tanh = helper.make_node("Tanh", ["r"], ["y"], name="tanh")
g = helper.make_graph([neg, relu, tanh], "chain",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
chain = os.path.join(WORK, "chain.onnx")
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), chain)
# The Python worker (ort, PyPI) and the Node.js one (ort-1.30, npm), each with a test double.
for b, fault_env in (("ort", {"METAOP_ADAPTER_ORT": os.path.join(DATA, "ort_fault_adapter.py")}),
                     ("ort-1.30", {"METAOP_ORT_WORKER": os.path.join(DATA, "ort_fault_worker.js")})):
    for marker, kind in ((1234.5, "crash"), (4321.5, "hang")):
        v = np.array([[0.5, -1, marker], [2, -3, 0.25]], dtype=np.float32)
        np.save(os.path.join(WORK, f"{kind}.npy"), v)
        rc, out = metaop("check", chain, "--bind", b, "--input", f"{kind}.npy", "--kernel-timeout",
                         "3", "--json", f"{kind}.json", "--repro", f"repro-{kind}-{b}", env=fault_env)
        doc = json.load(open(os.path.join(WORK, f"{kind}.json")))
        bad = [f for f in doc["findings"] if f["kind"] == kind]
        check(rc == 1 and len(bad) == 1 and bad[0]["node"] == "neg",
              f"{b}: a {kind} of ONNX Runtime at 'neg' is a '{kind}' finding (exit {rc})", out)
        run = [r for r in doc["runs"] if r["binding"] == b][0]
        check([n["ran_on"] for n in run["nodes"]] == ["reference", b, b],
              f"{b}: after the {kind}, the worker restarts and runs the other nodes",
              str([n["ran_on"] for n in run["nodes"]]))

# 4b. A framework that fails on the whole model (an exception, not a crash of its process): a
#     whole-graph 'crash' verdict that says it threw, and the check goes on to its end.
v = np.array([[0.5, -1, 5555.5], [2, -3, 0.25]], dtype=np.float32)
np.save(os.path.join(WORK, "fails.npy"), v)
rc, out = metaop("check", chain, "--bind", "ort", "--input", "fails.npy", "--whole-graph",
                 "--no-verify", "--json", "fails.json",
                 env={"METAOP_ADAPTER_ORT": os.path.join(DATA, "ort_fault_adapter.py")})
doc = json.load(open(os.path.join(WORK, "fails.json")))
wg = doc.get("whole_graph", {}).get("verdicts", [])
check(rc == 1 and any(w.get("status") == "crash" and "planted failure" in w.get("detail", "")
                      for w in wg),
      f"a whole model that fails in ONNX Runtime is a whole-graph crash verdict (exit {rc})",
      out + json.dumps(wg)[:400])

# 5. Whole-graph mode on the clean model: quiet, every framework ran it whole (OpenCV 5 and 4.6).
rc, out = metaop("check", TINY, "--bind", "ort,opencv,opencv-4.6", "--whole-graph", "--json",
                 "whole.json")
doc = json.load(open(os.path.join(WORK, "whole.json")))
verdicts = doc["whole_graph"]["verdicts"]
check(rc == 0 and [v["status"] for v in verdicts] == ["ok", "ok", "ok"],
      f"check --whole-graph --bind ort,opencv,opencv-4.6 on tiny_cnn is quiet (exit {rc})", out)

# 6. A planted whole-graph defect (a wrong Conv+Relu fusion, only in whole-model runs at the
#    fusing levels): found, localized to the pair within ceil(log2 N) + 4 framework runs, the
#    level that introduces it named, and the reduced model reproducing it from its files.
for b, level in (("ort", "extended"), ("opencv-4.6", "fusion")):
    spec = f"/features/features.4/Conv+Relu:scale@{b}"
    rc, out = metaop("check", TINY, "--bind", b, "--whole-graph", "--inject-fusion", spec,
                     "--json", f"planted-{b}.json", "--repro", f"repro-{b}")
    doc = json.load(open(os.path.join(WORK, f"planted-{b}.json")))
    v = doc["whole_graph"]["verdicts"][0]
    red = v.get("reduction", {})
    check(rc == 1 and v["status"] == "discrepancy", f"{b}: the planted fusion defect is found", out)
    check(red.get("window") == ["/features/features.4/Conv", "/features/features.6/Relu"],
          f"{b}: reduced to the Conv -> Relu pair", str(red.get("window")))
    runs = red.get("prefix_runs", 99) + red.get("window_runs", 99)
    budget = math.ceil(math.log2(9)) + 4
    check(runs <= budget and red.get("budget") == budget,
          f"{b}: localized in {runs} framework runs (budget {budget})")
    check(red.get("level") == level, f"{b}: introduced at level '{red.get('level')}' ({level})")
    check(red.get("verified") is True, f"{b}: the reduced model read back reproduces it",
          red.get("verification", ""))
    # The reproducer's own command shows it; without the planted fault the same model is clean.
    repro = os.path.join(WORK, red["repro"])
    readme = open(os.path.join(repro, "README.txt")).read()
    cmd = shlex.split(re.search(r"^  metaop (check .*)$", readme, re.M).group(1))
    rc, out = metaop(*cmd, cwd=repro)
    check(rc == 1 and "discrepancy" in out, f"{b}: the reproducer's command exits 1", out)
    clean = [a for i, a in enumerate(cmd) if a != "--inject-fusion" and
             (i == 0 or cmd[i - 1] != "--inject-fusion")]
    rc, out = metaop(*clean, cwd=repro)
    check(rc == 0, f"{b}: the reduced model without the planted fault is clean", out)

# 6b. A planted refusal: ONNX Runtime refuses the model at the levels that fuse Conv and Relu and
#     runs it at "disabled". A defect ("refused"), localized like a discrepancy: to the pair, the
#     level that first refuses it named, the reduced model refused again from its files.
rc, out = metaop("check", TINY, "--bind", "ort", "--whole-graph", "--inject-fusion",
                 "/features/features.4/Conv+Relu:refuse@ort", "--json", "refused.json",
                 "--repro", "repro-refused")
v = json.load(open(os.path.join(WORK, "refused.json")))["whole_graph"]["verdicts"][0]
red = v.get("reduction", {})
check(rc == 1 and v["status"] == "refused" and v.get("runs_at") == "disabled",
      f"a model refused at 'all' that runs at 'disabled' is a refused verdict (exit {rc})",
      out + json.dumps(v)[:600])
check(red.get("window") == ["/features/features.4/Conv", "/features/features.6/Relu"] and
      red.get("level") == "extended" and red.get("verified") is True,
      f"the refusal is reduced to the Conv -> Relu pair, first at 'extended', and verified",
      json.dumps(red)[:1500])
if red.get("repro"):
    repro = os.path.join(WORK, red["repro"])
    readme = open(os.path.join(repro, "README.txt")).read()
    cmd = shlex.split(re.search(r"^  metaop (check .*)$", readme, re.M).group(1))
    rc, out = metaop(*cmd, cwd=repro)
    check(rc == 1 and "refused" in out and "refuses the model whole" in readme,
          "the refusal's reproducer command exits 1", out + readme)

# 7. Bad usage: one line, exit 2.
for args, what in [(["run", TINY, "--random-inputs", "--bind", "ort", "--ort-opt", "max"],
                    "--ort-opt max"),
                   (["check", TINY, "--bind", "torch", "--whole-graph"], "--whole-graph --bind torch"),
                   (["check", TINY, "--bind", "ort", "--whole-graph", "--inject-fusion", "Conv"],
                    "--inject-fusion Conv")]:
    rc, out = metaop(*args)
    check(rc == 2 and len(out.strip().splitlines()) == 1, f"{what}: exit 2 with one line", out)
rc, out = metaop("run", TINY, "--random-inputs", "--bind", "ort-1.30",
                 env={"METAOP_NODE_MODULES": os.path.join(WORK, "nowhere")})
check(rc == 2 and "install-deps" in out, "a missing npm package: exit 2 naming install-deps", out)
rc, out = metaop("run", TINY, "--random-inputs", "--bind", "ort",
                 env={"METAOP_PYTHON": os.path.join(WORK, "nowhere", "python")})
check(rc == 2 and "install-deps" in out and len(out.strip().splitlines()) == 1,
      "a missing Python environment: exit 2 naming install-deps, one line", out)
finish()
