#!/usr/bin/python3
"""Cost of the diagnosis monitors: the same training run with `metaop train --diagnose` and
without, alternated in one scripted run (machines are shared and noisy), on the training test
models (an MLP, a CNN, resnet18 in training mode at 64x64) under --bind torch. Reports per
model the median time of a training step (forward, backward, update and, with --diagnose, the
monitors: `step_seconds` in the JSON) and of the whole process, their ratios, and the share of
the --diagnose run's step time spent in the monitors (timed inside the process, so the least
noisy of the three).

Usage: /usr/bin/python3 bench/diagnose/overhead.py METAOP WORK_DIR [--repeats N] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = {  # model: training flags (enough steps that a step's median is steady)
    "mlp": ["--loss", "cross_entropy", "--epochs", "20", "--batch-size", "16", "--lr", "0.1"],
    "cnn": ["--loss", "cross_entropy", "--epochs", "10", "--batch-size", "8", "--lr", "0.05"],
    "resnet18_train": ["--loss", "cross_entropy", "--epochs", "2", "--batch-size", "4",
                       "--lr", "0.01", "--momentum", "0.9"],
}


def run(metaop, work, model, flags, diagnose):
    out = os.path.join(work, f"{model}_{'d' if diagnose else 'p'}.json")
    t0 = time.perf_counter()
    p = subprocess.run([metaop, "train", os.path.join(work, model + ".onnx"),
                        "--data", os.path.join(work, model + "_x.npy"),
                        "--labels", os.path.join(work, model + "_y.npy"), "--bind", "torch",
                        *flags, "--json", out] + (["--diagnose"] if diagnose else []),
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"{model}: metaop failed:\n{p.stdout}{p.stderr}")
    doc = json.load(open(out))
    return statistics.median(doc["step_seconds"]), wall, doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("work")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "tests", "models",
                                                 "make_train_models.py"), a.work],
                   check=True, capture_output=True)
    rows = []
    print(f"{'model':<16} {'step (plain)':>13} {'step (--diagnose)':>18} {'ratio':>6} "
          f"{'process (plain)':>16} {'process (--diagnose)':>21} {'ratio':>6} "
          f"{'monitors':>9}  steps")
    for model, flags in RUNS.items():
        plain, diag, wall_p, wall_d, share = [], [], [], [], []
        for _ in range(a.repeats):  # alternated, so that load on the machine hits both alike
            s, w, _ = run(a.metaop, a.work, model, flags, False)
            plain.append(s)
            wall_p.append(w)
            s, w, doc = run(a.metaop, a.work, model, flags, True)
            diag.append(s)
            wall_d.append(w)
            share.append(doc["diagnosis"]["monitor_seconds"] / sum(doc["step_seconds"]))
        steps = len(doc["losses"])
        healthy = doc.get("diagnosis", {}).get("healthy")
        r = {"model": model, "steps": steps, "step_plain": statistics.median(plain),
             "step_diagnose": statistics.median(diag), "process_plain": statistics.median(wall_p),
             "process_diagnose": statistics.median(wall_d), "healthy": healthy,
             "monitor_share": statistics.median(share)}
        r["step_ratio"] = r["step_diagnose"] / r["step_plain"]
        r["process_ratio"] = r["process_diagnose"] / r["process_plain"]
        rows.append(r)
        print(f"{model:<16} {r['step_plain'] * 1e3:>10.2f} ms {r['step_diagnose'] * 1e3:>15.2f} ms "
              f"{r['step_ratio']:>6.3f} {r['process_plain']:>14.2f} s {r['process_diagnose']:>19.2f} s "
              f"{r['process_ratio']:>6.3f} {100 * r['monitor_share']:>8.1f}%  {steps} "
              f"(healthy: {healthy})", flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
