#!/usr/bin/python3
"""Framework bindings as plugins (src/bindings/plugin.h), end to end: metaop links no framework
and loads none for a reference run or a rejected file; plugins' manifests are written once and
again when a plugin changes; METAOP_PLUGIN_PATH puts a plugin in front of the bundled one; a
file that is no plugin is named in the error of the binding it does not provide; a planted
framework library loaded into MetaOp's process for a reference run would be caught; two
LibTorches (torch, torch-1.13) in one run, each in its own worker, and refused in one process;
--onednn-isa chooses oneDNN's kernels, and reproducers carry it.

Usage: plugins_cli.py METAOP PLUGIN_DIR DATA_DIR WORK_DIR
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from testlib import check, current_onednn, finish  # noqa: E402

METAOP, PLUGINS, DATA, WORK = sys.argv[1:5]
ONEDNN = current_onednn(METAOP)
WORK = pathlib.Path(WORK)
shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
FRAMEWORK_LIBS = re.compile(r"lib(torch|c10|opencv_|dnnl|onnxruntime)")


def run(args, env=None, debug_files=False):
    e = dict(os.environ)
    e.pop("METAOP_PLUGIN_PATH", None)
    if env:
        e.update(env)
    if debug_files:
        e["LD_DEBUG"] = "files"
    return subprocess.run([METAOP] + args, capture_output=True, text=True, env=e, timeout=300)


def loaded_libraries(stderr):
    return sorted(set(re.findall(r"file=(\S+)", stderr)))


# metaop itself links no framework.
ldd = subprocess.run(["ldd", METAOP], capture_output=True, text=True).stdout
linked = [l.split()[0] for l in ldd.splitlines() if FRAMEWORK_LIBS.search(l)]
check(not linked, "ldd metaop names no framework library", "\n".join(linked))

# A reference run and a rejected empty file load no framework library (the manifests exist by
# now or are written by a child process, never by metaop's own).
run(["ops"])  # manifests written if missing
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "reference", "--random-inputs"],
        debug_files=True)
libs = loaded_libraries(r.stderr)
check(r.returncode == 0, "run --bind reference on tiny_cnn.onnx: exit 0", r.stdout + r.stderr[-2000:])
check(not [l for l in libs if FRAMEWORK_LIBS.search(l)],
      "run --bind reference loads no framework library", "\n".join(libs))
empty = WORK / "empty.onnx"
empty.write_bytes(b"")
r = run(["run", str(empty), "--bind", "reference"], debug_files=True)
check(r.returncode == 2 and "empty file" in r.stderr, "an empty file is rejected: exit 2",
      r.stderr[-2000:])
check(not [l for l in loaded_libraries(r.stderr) if FRAMEWORK_LIBS.search(l)],
      "rejecting an empty file loads no framework library")

# The check above would see a framework library: the torch binding in process loads LibTorch.
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "torch", "--isolation", "none",
         "--random-inputs"], debug_files=True)
check(r.returncode == 0 and any("libtorch" in l or "libc10" in l for l in loaded_libraries(r.stderr)),
      "--bind torch --isolation none loads LibTorch into metaop's process (the check can fail)",
      r.stderr[-1500:])

# Isolated (the default), LibTorch is loaded in the worker only: the loader's lines for it come
# from another process than metaop's first one.
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "torch", "--random-inputs"], debug_files=True)
by_pid = re.findall(r"^\s*(\d+):\s+file=(\S+)", r.stderr, re.M)
main_pid = by_pid[0][0] if by_pid else None
torch_pids = {pid for pid, f in by_pid if "libtorch" in f or "libc10" in f}
check(r.returncode == 0 and torch_pids and main_pid not in torch_pids,
      "--bind torch (isolated) loads LibTorch in its worker, not in metaop's process",
      f"main {main_pid}, LibTorch in {sorted(torch_pids)}")

# Two LibTorches in one run: torch (the current release, from the Python environment's wheel)
# and torch-1.13 (Debian's), each in its own worker, each loading its own libtorch_cpu; the
# JSON names each binding's version. libtorch_cuda is never loaded (the plugin links only what
# the CPU kernels need).
both = WORK / "both.json"
r = run(["check", f"{DATA}/tiny_cnn.onnx", "--bind", "torch,torch-1.13", "--samples", "1",
         "--json", str(both)], debug_files=True)
by_pid = re.findall(r"^\s*(\d+):\s+file=(\S+)", r.stderr, re.M)
main_pid = by_pid[0][0] if by_pid else None
cpu_libs = {}  # pid -> the libtorch_cpu it loaded (libtorch_cpu.so, libtorch_cpu.so.1.13)
for pid, f in by_pid:
    if "libtorch_cpu" in f:
        cpu_libs.setdefault(pid, set()).add(os.path.basename(f))
runs = json.loads(both.read_text())["runs"] if both.exists() else []
versions = {run["binding"]: run.get("binding_version") for run in runs}
check(r.returncode in (0, 1) and {"torch", "torch-1.13"} <= set(versions),
      "check --bind torch,torch-1.13: both bindings ran", r.stdout + r.stderr[-1500:])
check(versions.get("torch", "").startswith("2.") and versions.get("torch-1.13", "").startswith("1.13"),
      "the JSON names each binding's version (torch 2.x, torch-1.13 1.13.x)", str(versions))
all_cpu = set().union(*cpu_libs.values()) if cpu_libs else set()
check(len(cpu_libs) >= 2 and main_pid not in cpu_libs and len(all_cpu) == 2 and
      all(len(v) == 1 for v in cpu_libs.values()),
      "each LibTorch is loaded in a worker of its own, never two in one process",
      f"main {main_pid}, libtorch_cpu per process {cpu_libs}")
check(not [f for _, f in by_pid if "libtorch_cuda" in f or "libc10_cuda" in f],
      "no process loads libtorch_cuda or libc10_cuda")

# In one process they cannot be: --isolation none with both is refused before anything runs.
r = run(["check", f"{DATA}/tiny_cnn.onnx", "--bind", "torch,torch-1.13", "--isolation", "none",
         "--samples", "1"])
check(r.returncode == 2 and "'torch'" in r.stderr and "'torch-1.13'" in r.stderr and
      "--isolation none" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "--bind torch,torch-1.13 --isolation none: refused in one line naming both", r.stderr)
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "torch", "--bind-op", "Relu=torch-1.13",
         "--isolation", "none", "--random-inputs"])
check(r.returncode == 2 and "'torch-1.13'" in r.stderr and "--isolation none" in r.stderr and
      len(r.stderr.strip().splitlines()) == 1,
      "--bind torch --bind-op Relu=torch-1.13 --isolation none: refused the same way", r.stderr)

# A plugin put first by METAOP_PLUGIN_PATH is the one used: its manifest is written beside it.
mine = WORK / "mine"
mine.mkdir()
shutil.copy2(pathlib.Path(PLUGINS) / f"metaop-{ONEDNN}.so", mine / f"metaop-{ONEDNN}.so")
env = {"METAOP_PLUGIN_PATH": str(mine)}
r = run(["ops", "--where", "Conv"], env=env)
check(r.returncode == 0 and "onednn" in r.stdout, "ops --where Conv with METAOP_PLUGIN_PATH",
      r.stdout + r.stderr)
manifest = mine / f"metaop-{ONEDNN}.so.json"
check(manifest.exists(), "the plugin's manifest is written beside it")
first = manifest.stat().st_mtime_ns if manifest.exists() else 0
r = run(["ops"], env=env)
check(manifest.exists() and manifest.stat().st_mtime_ns == first,
      "a fresh manifest is read, not written again")
# A changed plugin gets a new manifest.
os.utime(mine / f"metaop-{ONEDNN}.so", ns=(first + 10**9, first + 10**9))
r = run(["ops"], env=env)
check(manifest.exists() and manifest.stat().st_mtime_ns != first,
      "a changed plugin's manifest is written again")
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", ONEDNN, "--random-inputs"], env=env)
check(r.returncode == 0 and ONEDNN in r.stdout, f"run --bind {ONEDNN} from METAOP_PLUGIN_PATH",
      r.stdout + r.stderr)

# A file that is no plugin: named with the reason in the error of a binding nobody provides.
bad = WORK / "bad"
bad.mkdir()
(bad / "metaop-broken.so").write_bytes(b"not a shared library")
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "broken", "--random-inputs"],
        env={"METAOP_PLUGIN_PATH": str(bad)})
check(r.returncode == 2 and "unknown binding 'broken'" in r.stderr and
      "metaop-broken.so" in r.stderr and "cannot be loaded" in r.stderr,
      "a broken plugin is named in the unknown-binding error", r.stderr)
check(len(r.stderr.strip().splitlines()) == 1, "that error is one line", r.stderr)
r = run(["run", f"{DATA}/tiny_cnn.onnx", "--bind", "torch", "--random-inputs"],
        env={"METAOP_PLUGIN_PATH": str(bad)})
check(r.returncode == 0, "the bundled plugins still work beside a broken one", r.stderr)

# --onednn-isa (bindings/dispatch.h): oneDNN's kernels chosen by ONEDNN_MAX_CPU_ISA. LogSoftmax of
# tiny_cnn.onnx is within the error model on the CPU's own kernels and a defect on the SSE4.1
# ones (19 ulp; the same bits in oneDNN 2.6 and 3.13); the reproducer records the variable,
# `metaop repro` sets it again, and without it the finding is not reproduced.
def check_json(name, *extra):
    out = WORK / f"{name}.json"
    r = run(["check", f"{DATA}/tiny_cnn.onnx", "--bind", ONEDNN, "--samples", "2", "--json",
             str(out), "--repro", str(WORK / name), *extra])
    doc = json.loads(out.read_text()) if out.exists() else {"findings": []}
    return r, [f for f in doc["findings"] if f["op_type"] == "LogSoftmax"]


r, fs = check_json("isa_default")
check(r.returncode == 0 and not fs, f"{ONEDNN}'s own kernels: no LogSoftmax finding",
      r.stdout + r.stderr)
r, fs = check_json("isa_sse41", "--onednn-isa", "sse41")
check(r.returncode == 1 and len(fs) == 1 and fs[0].get("class") == "defect",
      "--onednn-isa sse41: LogSoftmax is a defect", r.stdout + r.stderr)
if fs and fs[0].get("repro"):
    folder = pathlib.Path(fs[0]["repro"])
    manifest = json.loads((folder / "repro.json").read_text())
    check(manifest.get("environment") == {"ONEDNN_MAX_CPU_ISA": "SSE41"},
          "repro.json records ONEDNN_MAX_CPU_ISA=SSE41", json.dumps(manifest)[:1500])
    check("--onednn-isa sse41" in (folder / "README.txt").read_text(),
          "the README's commands carry --onednn-isa sse41")
    r = run(["repro", str(folder)])
    check(r.returncode == 1 and r.stdout.startswith("reproduced"),
          "metaop repro sets it again: reproduced", r.stdout + r.stderr)
    del manifest["environment"]
    (folder / "repro.json").write_text(json.dumps(manifest))
    r = run(["repro", str(folder)])
    check(r.returncode == 0 and r.stdout.startswith("not reproduced"),
          "without it: not reproduced", r.stdout + r.stderr)
    manifest["environment"] = {"LD_PRELOAD": "x.so"}
    (folder / "repro.json").write_text(json.dumps(manifest))
    r = run(["repro", str(folder)])
    check(r.returncode == 2 and "LD_PRELOAD" in r.stderr, "another variable is refused: exit 2",
          r.stdout + r.stderr)
r = run(["check", f"{DATA}/tiny_cnn.onnx", "--bind", ONEDNN, "--onednn-isa", "sse3"])
check(r.returncode == 2 and "--onednn-isa" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "--onednn-isa sse3: one line, exit 2", r.stderr)

finish()
