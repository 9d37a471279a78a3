#!/usr/bin/python3
"""The layering rules of docs/design.md, checked on the sources (the build runs this before it
compiles anything, so a violation fails the build):

  1. includes point down only: a file of layer L includes headers of layer L or below, in the
     order tensor < graph < ops < bindings < engine < analysis < report < cli < python;
  2. framework headers stay in their binding's folder: ATen / torch / c10 in src/bindings/torch,
     opencv2 in src/bindings/opencv, oneDNN in src/bindings/onednn, ONNX's protobuf headers in
     src/graph and src/tensor (the model and tensor readers), CLI11 in src/cli, pybind11 in
     src/python;
  3. a header that includes framework headers is included only from its own folder;
  4. capabilities stay apart: src/analysis and src/report hold a `core` folder and one folder per
     capability; a file of analysis/X (X not core) includes headers of analysis/X and
     analysis/core only, a file of report/X those of report/X and report/core (and any of
     analysis, the layer below), and a core file no capability's of its own layer.

Usage: check_layers.py SRC_DIR [--stamp FILE]     exit 1 naming each file:line that breaks a rule
       check_layers.py SRC_DIR --self-test          plants violations in a copy and expects each
                                                    to be caught
"""
import pathlib
import re
import shutil
import sys
import tempfile

LAYERS = ["tensor", "graph", "ops", "bindings", "engine", "analysis", "report", "cli", "python"]
FRAMEWORKS = {  # include prefix -> folders (relative to src) allowed to include it
    "ATen/": ["bindings/torch"], "torch/": ["bindings/torch"], "c10/": ["bindings/torch"],
    "opencv2/": ["bindings/opencv"], "oneapi/": ["bindings/onednn"], "dnnl": ["bindings/onednn"],
    "onnx/": ["graph", "tensor"], "CLI/": ["cli"], "pybind11/": ["python"],
}
CAPABILITY_LAYERS = ["analysis", "report"]  # a core folder and one folder per capability
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def folder_allows(rel, folders):
    return any(str(rel).startswith(f + "/") for f in folders)


def check(src):
    src = pathlib.Path(src)
    files = sorted(p for p in src.rglob("*") if p.suffix in (".h", ".cpp"))
    includes = {}
    for p in files:
        rel = p.relative_to(src)
        found = []
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                found.append((n, m.group(1), m.group(2)))
        includes[rel] = found
    # Headers that include framework headers, and the folders that may include them.
    framework_headers = {}
    for rel, found in includes.items():
        if rel.suffix == ".h":
            for _, kind, name in found:
                for prefix, folders in FRAMEWORKS.items():
                    if kind == "<" and name.startswith(prefix):
                        framework_headers[str(rel)] = folders
    problems = []
    for rel, found in includes.items():
        layer = rel.parts[0]
        if layer not in LAYERS:
            continue
        if layer in CAPABILITY_LAYERS and len(rel.parts) < 3:
            problems.append(f"src/{rel}:1: {layer} files lie in {layer}/core or a capability's "
                            f"folder")
        for n, kind, name in found:
            where = f"src/{rel}:{n}"
            if kind == '"':
                target = name.split("/")[0]
                if target in LAYERS and LAYERS.index(target) > LAYERS.index(layer):
                    problems.append(f"{where}: {layer} includes \"{name}\" of the layer above "
                                    f"({target})")
                if (target == layer and layer in CAPABILITY_LAYERS and len(rel.parts) > 2
                        and name.count("/") >= 2):
                    mine, theirs = rel.parts[1], name.split("/")[1]
                    if mine == "core" and theirs != "core":
                        problems.append(f"{where}: {layer}/core includes \"{name}\" of the "
                                        f"capability {layer}/{theirs} (core is below every "
                                        f"capability)")
                    elif theirs not in ("core", mine):
                        problems.append(f"{where}: {layer}/{mine} includes \"{name}\" of another "
                                        f"capability ({layer}/{theirs}); share it through "
                                        f"{layer}/core")
                if name in framework_headers and not folder_allows(rel, framework_headers[name]):
                    problems.append(f"{where}: includes \"{name}\", which brings framework "
                                    f"headers outside {', '.join(framework_headers[name])}")
            else:
                for prefix, folders in FRAMEWORKS.items():
                    if name.startswith(prefix) and not folder_allows(rel, folders):
                        problems.append(f"{where}: framework header <{name}> outside "
                                        f"src/{' or src/'.join(folders)}")
    return problems


def self_test(src):
    plants = [("ops/pool.cpp", "#include <ATen/ATen.h>"),
              ("ops/pool.cpp", '#include "analysis/check/check.h"'),
              ("analysis/diagnose/diagnose.cpp", '#include "analysis/train/train_session.h"'),
              ("analysis/train/train_session.h", '#include "analysis/diagnose/diagnose.h"'),
              ("analysis/core/accuracy.cpp", '#include "analysis/check/check.h"'),
              ("report/train/train_summary.cpp", '#include "report/diagnose/diagnose_report.h"'),
              ("report/core/repro.cpp", '#include "report/check/check_report.h"'),
              ("tensor/tensor.cpp", '#include "graph/graph.h"'),
              ("engine/executor.cpp", '#include "bindings/torch/aten_convert.h"'),
              ("analysis/probe/probe.cpp", "#include <opencv2/core.hpp>")]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for file, line in plants:
            copy = pathlib.Path(tmp) / "src"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(src, copy)
            target = copy / file
            target.write_text(line + "\n" + target.read_text())
            caught = [p for p in check(copy) if p.startswith(f"src/{file}:1:")]
            print(f"{'ok  ' if caught else 'FAIL'} {line} in src/{file}: "
                  f"{caught[0] if caught else 'not caught'}")
            failed += not caught
    clean = check(src)
    print(f"{'ok  ' if not clean else 'FAIL'} the sources themselves: {len(clean)} problem(s)")
    return 1 if failed or clean else 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if "--self-test" in sys.argv:
        sys.exit(self_test(sys.argv[1]))
    problems = check(sys.argv[1])
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layering of docs/design.md",
              file=sys.stderr)
        sys.exit(1)
    if "--stamp" in sys.argv:
        pathlib.Path(sys.argv[sys.argv.index("--stamp") + 1]).write_text("ok\n")


if __name__ == "__main__":
    main()
