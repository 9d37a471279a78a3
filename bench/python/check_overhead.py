#!/usr/bin/env python3
"""metaop.check against `metaop check` for the same check of one model, side by side.

Each round runs the command line (a fresh process: wall time) and then, in a fresh Python process,
metaop.check with the same options (the call's own time, measured inside, and the process's wall
time with the interpreter's start and the import). The Python API always writes JSON and the HTML
report (CheckResult.write_report), so the command line is given --json and --report too.

Usage (the project's Python environment, the package from the build tree):
  PYTHONPATH=build/python .venv/bin/python bench/python/check_overhead.py build/metaop MODEL
      [--bind torch] [--rounds 5]
Prints one line per run and the medians; the ratio API/CLI is what docs/benchmarks.md quotes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CALL = r"""
import json, sys, time
t0 = time.perf_counter()
import metaop
t1 = time.perf_counter()
r = metaop.check(sys.argv[1], bind=sys.argv[2], progress=False)
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "call": t2 - t1, "findings": len(r.findings)}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("model")
    ap.add_argument("--bind", default="torch")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    cli, api_call, api_wall = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for k in range(a.rounds):
            t = time.perf_counter()
            subprocess.run([a.metaop, "check", a.model, "--bind", a.bind, "--json",
                            os.path.join(work, "c.json"), "--report", os.path.join(work, "r"),
                            "--repro", os.path.join(work, "repro")],
                           check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cli.append(time.perf_counter() - t)
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", CALL, a.model, a.bind], check=True,
                               capture_output=True, text=True)
            api_wall.append(time.perf_counter() - t)
            inner = json.loads(p.stdout.strip().splitlines()[-1])
            api_call.append(inner["call"])
            print(f"round {k + 1}: cli {cli[-1]:.2f} s  api call {inner['call']:.2f} s "
                  f"(process {api_wall[-1]:.2f} s, import {inner['import']:.2f} s)", flush=True)
    c, ac, aw = (statistics.median(x) for x in (cli, api_call, api_wall))
    print(f"median: cli {c:.2f} s, metaop.check call {ac:.2f} s ({ac / c:.3f}x), "
          f"python process {aw:.2f} s ({aw / c:.3f}x)")


if __name__ == "__main__":
    main()
