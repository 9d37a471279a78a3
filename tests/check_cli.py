#!/usr/bin/python3
"""End-to-end tests of `metaop check`: exit codes, the JSON schema, crash findings that leave the
rest of the report intact, injected faults localized and verified, reproducers that reproduce,
the HTML report, the genuine OpenCV Concat defect as a regression, and bad usage.

Usage: check_cli.py METAOP DATA_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from testlib import check, current_onednn, finish

METAOP, DATA, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
os.makedirs(WORK, exist_ok=True)
TINY = os.path.join(DATA, "tiny_cnn.onnx")
ONEDNN = current_onednn(METAOP)


def metaop(*args, cwd=WORK):
    p = subprocess.run([METAOP, *args], cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def findings(path):
    with open(path) as f:
        return json.load(f)["findings"]


def save_model(nodes, inputs, outputs, name, opset=13):
    g = helper.make_graph(nodes, name, inputs, outputs)
    path = os.path.join(WORK, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


# 1. A clean model: exit 0, every node scored, the documented top-level keys.
rc, out = metaop("check", TINY, "--bind", f"torch,{ONEDNN}", "--samples", "2", "--json", "clean.json")
check(rc == 0, f"clean tiny_cnn exits 0 (got {rc})", out)
with open(os.path.join(WORK, "clean.json")) as f:
    doc = json.load(f)
check(set(["findings", "runs", "nodes", "bindings", "model"]) <= set(doc), "JSON top-level keys")
runs = [r for r in doc["runs"] if r["binding"] == "torch"]
check(len(runs) == 2 and all(len(r["nodes"]) == 9 for r in runs), "two torch runs of 9 nodes")
check(all("local" in n and n["local"]["score"] < 1 for r in runs for n in r["nodes"]),
      "every torch node has a local score below 1")
check(all(f["kind"] == "unsupported" for f in doc["findings"]), "only 'unsupported' findings")
# Memory per node: the peak covers at least the outputs the kernel allocated (not in the
# sanitizer build, which has no heap accounting).
HEAP = os.environ.get("METAOP_HEAP_ACCOUNTING", "1") != "0"
check(not HEAP or all(n["heap_peak"] >= n["output_bytes"] > 0 and n["heap_peak"] >= n["heap_delta"]
                      for r in runs for n in r["nodes"]),
      "every torch node's heap peak covers its outputs and what it kept",
      str([(n["node"], n["output_bytes"], n["heap_delta"], n["heap_peak"]) for n in runs[0]["nodes"]]))

# 2. Injected faults: the injected node is the top finding, verified, with a reproducer that
#    reproduces the finding on the one-node model (with the same --inject).
for spec, kind in [("/features/features.4/Conv:bias@torch", "accuracy"),
                   (f"/features/features.4/Conv:half_acc@{ONEDNN}", "accuracy"),
                   ("/features/features.6/Relu:nan@torch", "nonfinite"),
                   ("/features/features.3/MaxPool:offbyone@torch", "accuracy")]:
    node, fault_binding = spec.split(":")[0], spec.split("@")[1]
    rc, out = metaop("check", TINY, "--bind", f"torch,{ONEDNN}", "--inject", spec, "--json",
                     "inject.json", "--repro", "repro")
    fs = [f for f in findings(os.path.join(WORK, "inject.json")) if f["kind"] != "unsupported"]
    top = fs[0] if fs else {}
    check(rc == 1, f"{spec}: exit 1 (got {rc})")
    check(top.get("node") == node and top.get("binding") == fault_binding and
          top.get("kind") == kind, f"{spec}: top finding is the injected node ({top})")
    check(top.get("verified") is True, f"{spec}: verified ({top.get('verification')})")
    check(len(fs) == 1, f"{spec}: no other defect reported ({[f['node'] for f in fs]})")
    repro = top.get("repro") or ""
    check(os.path.isfile(os.path.join(WORK, repro, "model.onnx")), f"{spec}: reproducer written")
    if repro:
        args = []
        for name in sorted(os.listdir(os.path.join(WORK, repro))):
            if name.startswith("input_"):
                model_input = onnx.load(os.path.join(WORK, repro, "model.onnx")).graph.input[0].name
                args += ["--input", f"{model_input}={os.path.join(WORK, repro, name)}"]
        rc2, out2 = metaop("check", os.path.join(WORK, repro, "model.onnx"), *args, "--bind",
                           fault_binding, "--inject", spec, "--no-verify")
        check(rc2 == 1 and kind in out2, f"{spec}: the reproducer reproduces (exit {rc2})", out2)
        # metaop repro judges the same folder from its repro.json (the --inject it records).
        rc3, out3 = metaop("repro", os.path.join(WORK, repro))
        rc4, out4 = metaop("repro", os.path.join(WORK, repro), "--bind", "reference")
        check(rc3 == 1 and "reproduced" in out3 and rc4 == 0,
              f"{spec}: metaop repro reproduces it, and the reference is clean on it",
              out3 + out4)

# 3. A kernel that aborts (OpenCV's Dropout with a mask output crashes only now and then,
#    docs/findings.md, so the abort is injected) yields a crash finding, and the other nodes
#    are still checked under every binding. OpenCV 4.6's binding declines a Dropout whose mask is
#    used (OpenCV never writes it), and says so.
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])
mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [3, 4, 5])
crash = save_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                    helper.make_node("Dropout", ["r"], ["d", "mask"], name="dropout"),
                    helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid")],
                   [x], [y, mask], "dropout_mask")
rc, out = metaop("check", crash, "--bind", "opencv-4.6,torch", "--inject", "relu:abort@torch",
                 "--json", "crash.json")
fs = findings(os.path.join(WORK, "crash.json"))
crashes = [f for f in fs if f["kind"] == "crash"]
check(rc == 1, f"crashing kernel: exit 1 (got {rc})", out)
check(len(crashes) == 1 and crashes[0]["node"] == "relu" and crashes[0]["binding"] == "torch",
      f"crash finding for relu under torch ({crashes})")
if crashes and crashes[0].get("repro"):
    rc2, out2 = metaop("repro", os.path.join(WORK, crashes[0]["repro"]))
    check(rc2 == 1 and "crashed" in out2, "metaop repro reproduces the crash", out2)
check(any(f["node"] == "dropout" and f["binding"] == "opencv-4.6" and f["kind"] == "unsupported"
          and "mask output unwritten" in f["detail"] for f in fs),
      "OpenCV 4.6's Dropout with a mask: declined, naming the defect",
      json.dumps([f for f in fs if f["node"] == "dropout"]))
with open(os.path.join(WORK, "crash.json")) as f:
    doc = json.load(f)
opencv_nodes = [n for r in doc["runs"] if r["binding"] == "opencv-4.6" for n in r["nodes"]]
check([n["node"] for n in opencv_nodes] == ["relu", "dropout", "sigmoid"] and
      opencv_nodes[2]["ran_on"] == "opencv-4.6" and "local" in opencv_nodes[2],
      "the nodes after the crash still ran and were scored under opencv-4.6")
torch_nodes = [n for r in doc["runs"] if r["binding"] == "torch" for n in r["nodes"]]
check(torch_nodes[0].get("crash") and all("local" in n for n in torch_nodes[1:]),
      "under torch, relu crashed and the nodes after it were scored")

# 4. Genuine defect kept as a regression: OpenCV 4.6's single-input Concat leaves its output
#    unwritten (docs/findings.md). Found, verified, reproducer written. Fails once fixed.
shape = [1, 128, 28, 28]
concat = save_model([helper.make_node("Concat", ["x"], ["c"], axis=1, name="concat"),
                     helper.make_node("Relu", ["c"], ["y"], name="relu")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], "concat1")
rc, out = metaop("check", concat, "--bind", "opencv-4.6", "--json", "concat.json", "--report",
                 "rep")
fs = [f for f in findings(os.path.join(WORK, "concat.json")) if f["kind"] != "unsupported"]
check(rc == 1 and fs and fs[0]["node"] == "concat" and fs[0]["kind"] == "accuracy" and
      fs[0]["verified"], f"opencv-4.6 single-input Concat defect found and verified ({fs[:1]})")
html = open(os.path.join(WORK, "rep", "index.html")).read()
check("<svg" in html and "concat" in html and "<script src" not in html and "<link" not in html
      and "http://" not in html.replace("http://www.w3.org/", "") and "https://" not in html,
      "HTML report: inline SVG, the finding, nothing fetched (scripts inline)")

# 5. Bad usage and input: exit 2 with a message naming the culprit.
for args, needle in [(["--bind", "tensorflow"], "tensorflow"),
                     (["--inject", "Conv:wobble"], "wobble"),
                     (["--inject", "Conv"], "OPTYPE_OR_NODE:FAULT"),
                     (["--samples", "0"], "--samples"),
                     (["--bound", "loose"], "loose")]:
    rc, out = metaop("check", TINY, *args)
    check(rc == 2 and needle in out, f"check {' '.join(args)}: exit 2 naming '{needle}' ({rc}: {out.strip()})")
rc, out = metaop("check", os.path.join(WORK, "missing.onnx"))
check(rc == 2 and "missing.onnx" in out, f"missing model: exit 2 ({out.strip()})")

# An older opset in a newer IR version (as current exporters and onnx.helper write it, IR 11 at
# opset 13): the linked ONNX 1.12's checker refuses IR 9 and later; the current onnx package of
# the project's Python environment checks it instead.
m = onnx.load(save_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], "ir11"))
m.ir_version = 11
onnx.save(m, os.path.join(WORK, "ir11.onnx"))
rc, out = metaop("check", os.path.join(WORK, "ir11.onnx"), "--bind", "torch")
check(rc == 0 and "checker" not in out, f"IR 11 at opset 13: checked and run, exit 0 ({rc}: "
      f"{out.strip()[-300:]})")

finish()
