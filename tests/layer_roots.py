#!/usr/bin/python3
"""The layers' include roots (CMakeLists.txt, metaop_layer): with the compile command the build uses
for a source of each layer, a header of the layer itself compiles and a header of the layer above
does not; a framework's headers compile in their binding's library only; in analysis and report a
capability's library sees its own folder and core but no other capability's, and core none.

Usage: layer_roots.py BUILD_DIR     (BUILD_DIR holds compile_commands.json)
"""
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile

# layer: (a source of the layer's library, a header of the layer)
LAYERS = {
    "tensor": ("src/tensor/dtype.cpp", "tensor/dtype.h"),
    "graph": ("src/graph/graph.cpp", "graph/graph.h"),
    "ops": ("src/ops/params.cpp", "ops/registry.h"),
    "bindings": ("src/bindings/binding.cpp", "bindings/binding.h"),
    "engine": ("src/engine/autodiff.cpp", "engine/executor.h"),
    "analysis": ("src/analysis/core/compare.cpp", "analysis/core/compare.h"),
    "report": ("src/report/core/html.cpp", "report/core/html.h"),
    "cli": ("src/cli/main.cpp", "cli/commands.h"),
}
# (a source, a framework header, whether it must compile there). The headers Debian installs in
# /usr/include itself (ATen, c10, oneDNN, CLI11, ONNX) compile anywhere: scripts/check_layers.py,
# run before every build, keeps them in their folders.
FRAMEWORKS = [
    ("src/bindings/opencv/opencv_binding.cpp", "<opencv2/core.hpp>", True),
    ("src/bindings/binding.cpp", "<opencv2/core.hpp>", False),
    ("src/ops/params.cpp", "<opencv2/core.hpp>", False),
    ("src/tensor/tensor.cpp", "<Eigen/Core>", True),
    ("src/ops/params.cpp", "<Eigen/Core>", False),
    ("src/bindings/torch/torch_binding.cpp", "<torch/version.h>", True),
    ("src/analysis/core/compare.cpp", "<torch/version.h>", False),
]
# (a source, a header of its layer, whether it must compile there): the capability folders.
CAPABILITIES = [
    ("src/analysis/check/check.cpp", '"analysis/core/accuracy.h"', True),
    ("src/analysis/diagnose/diagnose.cpp", '"analysis/train/train_session.h"', False),
    ("src/analysis/train/train_session.cpp", '"analysis/diagnose/diagnose.h"', False),
    ("src/analysis/core/accuracy.cpp", '"analysis/check/check.h"', False),
    ("src/report/train/train_summary.cpp", '"analysis/diagnose/diagnose.h"', True),
    ("src/report/train/train_summary.cpp", '"report/diagnose/diagnose_report.h"', False),
    ("src/report/core/repro.cpp", '"report/check/check_report.h"', False),
]


def compiles(commands, source, include, tmp):
    entry = commands.get(source)
    if entry is None:
        sys.exit(f"layer_roots: {source} is not in compile_commands.json")
    probe = pathlib.Path(tmp) / "probe.cpp"
    probe.write_text(f"#include {include}\n")
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = True
            continue
        if a.endswith(source):
            continue
        out.append(a)
    run = subprocess.run(out + ["-fsyntax-only", str(probe)], cwd=entry["directory"],
                         capture_output=True, text=True)
    return run.returncode == 0, run.stderr.strip().splitlines()[:1]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = pathlib.Path(sys.argv[1])
    commands = {}
    for e in json.loads((build / "compile_commands.json").read_text()):
        path = pathlib.Path(e["file"])
        if "src" in path.parts:
            i = len(path.parts) - 1 - path.parts[::-1].index("src")
            commands["/".join(path.parts[i:])] = e
    names = list(LAYERS)
    cases = []
    for i, layer in enumerate(names):
        source, own = LAYERS[layer]
        cases.append((source, f'"{own}"', True))
        if i + 1 < len(names):
            cases.append((source, f'"{LAYERS[names[i + 1]][1]}"', False))
    cases += FRAMEWORKS + CAPABILITIES
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for source, include, expect in cases:
            ok, first = compiles(commands, source, include, tmp)
            good = ok == expect
            failed += not good
            what = "compiles" if ok else "does not compile"
            print(f"{'ok  ' if good else 'FAIL'} #include {include} with {source}'s flags: {what}"
                  + ("" if ok else f" ({first[0] if first else ''})"))
    print(f"layer_roots: {len(cases) - failed} of {len(cases)} as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
