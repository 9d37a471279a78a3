#!/usr/bin/python3
"""Every kind of report in a real browser (Debian's chromium, headless). Check reports: one with
planted defects, the one `make demo` writes first (a real OpenCV 4.6 defect), a clean one and a
whole-graph discrepancy under ONNX Runtime; then a `train --check` report with a planted
backward fault, a `diagnose` report and an `expose` report. Each page is loaded, its DOM after
the scripts ran is read back and checked (one graph element per node, the node at fault coloured
and linked to its section, hover text on nodes and chart points, the findings table's rows, the
whole-graph verdicts, epoch marks), the browser's console must hold no error, and a screenshot is
kept next to the report (WORK/NAME/screenshot.png).

Usage: /usr/bin/python3 report_browser.py METAOP DATA_DIR WORK_DIR   (Debian's python3: its
torch 1.13 exports the training setups of bench/diagnose/make_setups.py)
"""
import json
import os
import re
import shutil
import subprocess
import sys

from testlib import check, finish

METAOP, DATA, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
MODEL = os.path.join(DATA, "tiny_cnn.onnx")
NODES = 9  # tiny_cnn's nodes
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def report(name, *args):
    return report_of(MODEL, name, *args)


def report_of(model, name, *args):
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    p = subprocess.run([METAOP, "check", model, *args, "--report", out, "--json",
                        os.path.join(out, "check.json"), "--repro", os.path.join(out, "repro")],
                       capture_output=True, text=True)
    check(p.returncode in (0, 1), f"{name}: metaop check exits 0 or 1 ({p.returncode}: "
                                  f"{p.stderr[-300:]})")
    return out, json.load(open(os.path.join(out, "check.json")))


def browse(folder):
    """The DOM after load and the browser's console lines; a screenshot beside the page."""
    url = "file://" + os.path.join(folder, "index.html")
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + os.path.join(WORK, "profile"), "--enable-logging=stderr",
            "--v=0", "--virtual-time-budget=3000"]
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    shot = os.path.join(folder, "screenshot.png")
    subprocess.run(base + ["--window-size=1280,1600", "--screenshot=" + shot, url],
                   capture_output=True, text=True, timeout=120)
    check(os.path.exists(shot) and os.path.getsize(shot) > 10000, f"{folder}: screenshot kept")
    console = [l for l in dom.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    return dom.stdout, console


def titles(dom, element):
    """The hover texts of the SVG elements of one kind (circle, rect, path) in the DOM."""
    return re.findall(r"<%s [^>]*><title>(.*?)</title>" % element, dom, re.S)


def node_group(dom, k):
    """The SVG group of node K (Graphviz writes <g id="node-K" class="node">...</g>)."""
    m = re.search(r'<g id="node-%d" class="node">(.*?)</g>\s*(?=<g id=|</g>)' % k, dom, re.S)
    return m.group(1) if m else ""


if CHROMIUM is None:
    check(False, "chromium is installed (scripts/install-deps.sh installs it)")
    finish()


# Planted defects: a bias in the second convolution under torch, NaN in a Relu under OpenCV.
folder, doc = report("defects", "--bind", "torch,opencv-4.6", "--inject",
                     "/features/features.4/Conv:bias@torch", "--inject", "Relu:nan@opencv-4.6")
dom, console = browse(folder)
check(not console, f"defects: no console errors ({console[:3]})")
ids = re.findall(r'<g id="node-(\d+)" class="node"', dom)
check(sorted(map(int, ids)) == list(range(NODES)), f"defects: one graph element per node ({ids})")
names = [n["name"] for n in doc["nodes"]]
conv = names.index("/features/features.4/Conv")
g = node_group(dom, conv)
check("#f28b82" in g, "defects: the planted Conv is filled as a defect")
check('href="#finding-' in g, "defects: the planted Conv links to its section")
check("torch" in g and "score" in g, "defects: the Conv's hover text gives its scores")
section = re.search(r'href="#(finding-\d+)"', g)
check(section is not None and f'id="{section.group(1)}"' in dom,
      "defects: the section the node links to is on the page")
rows = dom.count('class="finding-row"')
numerical = [f for f in doc["findings"] if f["kind"] != "unsupported"]
check(rows == len(numerical) and rows > 0, f"defects: a table row per finding ({rows})")
first = dom.index('class="finding-row"')
check("defect" in dom[first:first + 300], "defects: defects come first in the table")
check("As printed" in dom and "finding(s)" in dom, "defects: the console summary is on the page")
points = titles(dom, "circle")
check(any(t.startswith("/features/features.4/Conv (Conv) under torch: local score") for t in points),
      "defects: the local-score chart has a point per node, named on hover")
relu = next((f for f in doc["findings"] if f["op_type"] == "Relu"), None)
section = dom[dom.index('id="finding-'):] if 'id="finding-' in dom else ""
check(relu is not None and "error against input value" in section and
      any(re.match(r"\S+ = -?[0-9.e+-]+: reference .*, opencv-4.6 nan, score inf", t)
          for t in titles(dom, "path")),
      "defects: the Relu's section plots its error against the input value, NaN at the top")
explorer = json.load(open(os.path.join(folder, "model_explorer.json")))["results"]
check(len(explorer) == NODES, f"defects: Model Explorer's node data has every node ({len(explorer)})")
check(explorer.get("/features/features.4/Conv_output_0", {}).get("bgColor") == "#f28b82",
      "defects: Model Explorer's node data colours the planted Conv as a defect")

# The model `make demo` checks first: OpenCV 4.6's single-input Concat defect, on the graph.
folder, doc = report_of(os.path.join(DATA, "dense_block.onnx"), "demo", "--bind", "opencv-4.6")
dom, console = browse(folder)
check(not console, f"demo: no console errors ({console[:3]})")
names = [n["name"] for n in doc["nodes"]]
check(any(f["node"] == "/Concat" and f["class"] == "defect" and f["verified"]
          for f in doc["findings"]), "demo: the Concat defect found and verified")
check("#f28b82" in node_group(dom, names.index("/Concat")),
      "demo: the Concat is filled as a defect on the graph")

# A clean report: every node drawn, no finding rows.
folder, doc = report("clean", "--bind", "torch")
dom, console = browse(folder)
check(not console, f"clean: no console errors ({console[:3]})")
check(len(re.findall(r'<g id="node-\d+" class="node"', dom)) == NODES,
      "clean: one graph element per node")
check('class="finding-row"' not in dom and "Every kernel is within its error model" in dom,
      "clean: no findings")

# A whole-graph discrepancy under ONNX Runtime (a planted fusion fault): its verdict on the page.
folder, doc = report("whole", "--bind", "ort", "--whole-graph", "--inject-fusion",
                     "Conv+Relu:scale@ort")
dom, console = browse(folder)
check(not console, f"whole: no console errors ({console[:3]})")
check('id="whole-graph"' in dom and "discrepancy" in dom and "whole-graph verdict(s) not ok"
      in dom, "whole: the whole-graph discrepancy is on the page, and beside the verdict")
window = doc["whole_graph"]["verdicts"][0].get("reduction", {}).get("window", [])
names = [n["name"] for n in doc["nodes"]]
check(window and all("#f28b82" in node_group(dom, names.index(n)) and "whole-graph" in
                     node_group(dom, names.index(n)) for n in window),
      f"whole: the reduced model's nodes are marked on the graph ({window})")
check(doc.get("whole_graph") is not None, "whole: the JSON has the verdicts")

# The training commands' reports on setups of the diagnose benchmark (Debian's torch exports them).
SETUPS_DIR = os.path.join(WORK, "setups")
subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "bench", "diagnose",
                                             "make_setups.py"), SETUPS_DIR,
                "framework_grad_sign_gemm", "init_zero_layer"], check=True, capture_output=True)
SETUPS = {s["name"]: s for s in json.load(open(os.path.join(SETUPS_DIR, "setups.json")))}


def training_report(command, name, *extra):
    s = SETUPS[name]
    out = os.path.join(WORK, command)
    shutil.rmtree(out, ignore_errors=True)
    model = os.path.join(SETUPS_DIR, s["model"] + ".onnx")
    p = subprocess.run([METAOP, command, model, "--data",
                        os.path.join(SETUPS_DIR, s["data"] + "_x.npy"), "--labels",
                        os.path.join(SETUPS_DIR, s["data"] + "_y.npy"), "--loss", s["loss"],
                        *s["args"], *extra, "--report", out, "--json", out + ".json"],
                       capture_output=True, text=True)
    check(p.returncode == 1, f"{command} {name}: exits 1 ({p.returncode}: {p.stderr[-300:]})")
    doc = json.load(open(out + ".json")) if os.path.exists(out + ".json") else {}
    import onnx  # Debian's onnx 1.12 reads the exported setups
    return out, doc, [n.name for n in onnx.load(model).graph.node]


def marked(dom, names, node, color, href):
    g = node_group(dom, names.index(node)) if node in names else ""
    return color in g and f'href="#{href}' in g


# train --check with a planted sign flip in a Gemm's backward under torch.
folder, doc, names = training_report("train", "framework_grad_sign_gemm", "--check")
dom, console = browse(folder)
check(not console, f"train: no console errors ({console[:3]})")
check(len(re.findall(r'<g id="node-\d+" class="node"', dom)) == len(names),
      f"train: one graph element per node ({len(names)})")
bad = [f for f in doc.get("findings", []) if f["phase"] == "backward"]
check(bad and marked(dom, names, bad[0]["node"], "#f28b82", "train-finding-"),
      f"train: the Gemm with the planted backward fault is red and linked to its finding "
      f"({[f['node'] for f in bad]})")
check("epoch 2" in dom and any(t.startswith("step 1\n") for t in titles(dom, "rect")),
      "train: the loss chart marks epochs and names each step's loss on hover")
points = titles(dom, "circle") + titles(dom, "path")
check(any(bad and t.startswith(bad[0]["node"] + " (Gemm): backward score") for t in points),
      "train: the per-node chart names the Gemm's backward score on hover")
check(any(": update score" in t for t in titles(dom, "rect")),
      "train: a bar per weight's update score, named on hover")

# diagnose: a zero-initialized layer (dead ReLUs, vanishing gradients); its place on the graph.
folder, doc, names = training_report("diagnose", "init_zero_layer", "--no-repair")
dom, console = browse(folder)
check(not console, f"diagnose: no console errors ({console[:3]})")
check(len(re.findall(r'<g id="node-\d+" class="node"', dom)) == len(names),
      f"diagnose: one graph element per node ({len(names)})")
first = (doc.get("diagnoses") or [{}])[0]
check(marked(dom, names, first.get("node", ""), "#f28b82", "diagnosis-1") and
      'id="diagnosis-1"' in dom, f"diagnose: the diagnosis's place is red and linked to its row "
                                 f"({first.get('node')})")
check("epoch 2" in dom and "Dead ReLU units" in dom and "trivial predictor" in dom and
      any("\n" in t and t.startswith("step ") for t in titles(dom, "rect")),
      "diagnose: loss with epochs and the trivial predictor's loss, dead units; values on hover")

# expose: log(softmax(x W)) reaches log(0); the exposed target first, on the graph and the table.
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(0)
W = (rng.uniform(-1, 1, (8, 4)) * 2.5).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["z"], name="/fc/MatMul"),
     helper.make_node("Softmax", ["z"], ["p"], name="/Softmax", axis=-1),
     helper.make_node("Log", ["p"], ["y"], name="/Log")], "log_softmax",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    [numpy_helper.from_array(W, "W")])
model = os.path.join(WORK, "log_softmax.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
x = os.path.join(WORK, "x.npy")
np.save(x, rng.uniform(-0.5, 0.5, (2, 8)).astype(np.float32))
folder = os.path.join(WORK, "expose")
shutil.rmtree(folder, ignore_errors=True)
p = subprocess.run([METAOP, "expose", model, "--input", x, "--clip", "-10,10", "--iterations",
                    "400", "--time-limit", "30", "--report", folder, "--out",
                    os.path.join(WORK, "expose_out")], capture_output=True, text=True)
check(p.returncode == 1, f"expose: exits 1 ({p.returncode}: {p.stderr[-300:]})")
dom, console = browse(folder)
check(not console, f"expose: no console errors ({console[:3]})")
check(len(re.findall(r'<g id="node-\d+" class="node"', dom)) == 3,
      "expose: one graph element per node")
check(marked(dom, ["/fc/MatMul", "/Softmax", "/Log"], "/Log", "#f28b82", "target-"),
      "expose: the exposed Log is red and linked to its row")
rows = re.findall(r'<tr id="target-\d+" class="target-row">(.*?)</tr>', dom, re.S)
status = [re.findall(r"<td[^>]*>(.*?)</td>", r)[3] for r in rows]
check(len(rows) == 4 and status[:2] == ["exposed", "exposed"] and "exposed" not in status[2:],
      f"expose: exposed targets first in the table ({status})")

finish()
