#!/usr/bin/env python3
"""metaop.torch.watch's cost per training step against a plain PyTorch step, side by side.

For each model (an MLP and a small CNN) and batch size: the same training loop (forward, loss,
backward, SGD step) timed plain, watched sampling every step, and watched sampling every 10th
step; the rounds alternate plain and watched so that the machine's load falls on both. Prints
the median time per step and the ratio watched / plain.

Usage (the project's Python environment, the package from the build tree):
  PYTHONPATH=build/python .venv/bin/python bench/python/watch_overhead.py [--steps 200]
      [--rounds 5]
"""
import argparse
import statistics
import time

import torch

import metaop.torch


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(64, 10))


def loop(model, x, y, steps, every):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lf = torch.nn.CrossEntropyLoss()
    w = metaop.torch.watch(model, opt, loss_fn=lf, every=every).attach() if every else None
    t = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = lf(model(x), y)
        loss.backward()
        if w:
            w.observe(loss)
        opt.step()
    if w:
        w.report()  # the last judgement is part of the cost
        w.close()
    return (time.perf_counter() - t) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cases = [("mlp 64-256-256-10, batch 64", mlp, (64, 64)),
             ("mlp 64-256-256-10, batch 512", mlp, (512, 64)),
             ("cnn 2 conv, 32x32, batch 32", cnn, (32, 3, 32, 32))]
    for name, make, shape in cases:
        torch.manual_seed(0)
        x = torch.randn(*shape)
        y = torch.randint(0, 10, (shape[0],))
        times = {0: [], 1: [], 10: []}
        loop(make(), x, y, 20, 0)  # warm-up
        for _ in range(a.rounds):
            for every in (0, 1, 10):
                torch.manual_seed(0)
                times[every].append(loop(make(), x, y, a.steps, every))
        plain = statistics.median(times[0])
        line = f"{name}: plain {plain * 1e3:.3f} ms/step"
        for every in (1, 10):
            m = statistics.median(times[every])
            line += f"; every {every}: {m * 1e3:.3f} ms ({m / plain:.2f}x)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
