#!/usr/bin/python3
"""The check reports in a real browser (Debian's chromium, headless): a report with planted
defects, the one `make demo` writes first (a real OpenCV 4.6 defect), a clean one and a
whole-graph discrepancy under ONNX Runtime. Each page is loaded, its
DOM after the scripts ran is read back and checked (one graph element per node, the planted
node coloured as a defect and linked to its section, a node's hover text, the findings table's
rows, the whole-graph verdicts), the browser's console must hold no error, and a screenshot is
kept next to the report (WORK/NAME/screenshot.png).

Usage: report_browser.py METAOP DATA_DIR WORK_DIR
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

finish()
