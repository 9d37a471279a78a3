#!/usr/bin/env python3
"""The torch binding's per-node overhead on current PyTorch: `run --bind torch` node by node
against PyTorch's own run of the whole model, side by side, 1 intra-op thread.

The whole model is the TorchScript module tests/models/export_torchvision.py saved with the same
weights (torchscript.pt, traced by Debian's torch 1.13, which PyTorch 2 still loads and runs on
its ATen kernels), run by the PyTorch of the interpreter that runs this script. Node by node is
bench_binding_overhead's node-only mode, a subprocess per round (its warm-up run is not timed).
Rounds alternate the two, so that both see the same load.

Usage (the project's virtual environment, whose torch is the one the `torch` binding runs):
  .venv/bin/python bench/torch_overhead.py build/bench/bench_binding_overhead build/models
      [--arch resnet50] [--rounds 5] [--bind torch]
"""
import argparse
import os
import re
import statistics
import subprocess
import time
import warnings

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", help="build/bench/bench_binding_overhead")
    ap.add_argument("models", help="build/models")
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bind", default="torch")
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*torch.jit.load.*is deprecated")
    base = os.path.join(a.models, a.arch)
    module = torch.jit.load(os.path.join(base, "torchscript.pt")).eval()
    x = torch.from_numpy(np.load(os.path.join(base, "input_0.npy")))
    expected = np.load(os.path.join(base, "torch_0.npy"))
    with torch.no_grad():
        first = time.perf_counter()
        y = module(x)
        first = time.perf_counter() - first
    diff = float(np.linalg.norm(y.numpy() - expected) / np.linalg.norm(expected))
    whole, nodes, head = [], [], ""
    for k in range(a.rounds):
        with torch.no_grad():
            t = time.perf_counter()
            module(x)
            whole.append(time.perf_counter() - t)
        p = subprocess.run([a.bench, a.models, a.arch, "1", a.bind], check=True,
                           capture_output=True, text=True)
        m = re.search(r"^nodes_ms ([0-9.]+) on_binding (\d+) nodes (\d+)$", p.stdout, re.M)
        if not m:
            raise SystemExit(f"torch_overhead: no timing in {a.bench}'s output:\n{p.stdout}{p.stderr}")
        nodes.append(float(m.group(1)) / 1e3)
        head = p.stdout.splitlines()[0]
        print(f"round {k + 1}: PyTorch whole model {1e3 * whole[-1]:.1f} ms, node by node "
              f"{1e3 * nodes[-1]:.1f} ms", flush=True)
    w, n = statistics.median(whole), statistics.median(nodes)
    print(re.sub(r", median of 1:$", f", median of {a.rounds} rounds:", head))
    print(f"  PyTorch {torch.__version__} whole model (TorchScript)  {1e3 * w:8.1f} ms   "
          f"(first run: {1e3 * first:.1f} ms; normwise against the export's output {diff:.2e})")
    print(f"  metaop run --bind {a.bind} (node by node)  {1e3 * n:8.1f} ms")
    print(f"  ratio node by node / whole model      {n / w:8.2f}x  (goal: within 2x)")


if __name__ == "__main__":
    main()
