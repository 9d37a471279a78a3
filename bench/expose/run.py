#!/usr/bin/python3
"""The `metaop expose` benchmark: every program of programs.py from its typical input, under the
gradient strategy (with and without constant starting points), GRIST's plain schedule and
random search on the same time budget, and every fixed twin under the gradient strategy on that
budget too. Each exposing input is replayed in PyTorch itself (eager, float32) on the buggy
program, which must give a non-finite output, and on the fixed twin, which must not.

Usage: run.py METAOP OUT_DIR [--time-limit S] [--jobs N] [--only NAME,...] [--extra 'ARGS']
Prints a Markdown table and the summary; writes OUT_DIR/results.json.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from programs import PROGRAMS  # noqa: E402

STRATEGIES = [("gradient", []), ("gradient-nc", ["--no-constant-starts"]), ("grist", []),
              ("random", [])]


EXTRA = []  # --extra: more `metaop expose` arguments for every run (e.g. --no-binding-distances)


def expose(metaop, model, entry, strategy, extra, limit, work, tag):
    out = os.path.join(work, tag)
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, "result.json")
    args = [metaop, "expose", model, "--clip", "{},{}".format(*entry["clip"]),
            "--strategy", strategy, "--time-limit", str(limit), "--iterations", "1000000000",
            "--json", json_path, "--out", os.path.join(out, "points"), "--stop-at-first"] + extra + EXTRA
    for name, path in entry["inputs"].items():
        args += ["--input", f"{name}={path}"]
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode == 2:
        sys.exit(f"{tag}: metaop expose failed: {p.stderr.strip()}")
    with open(json_path) as f:
        doc = json.load(f)
    hits = [t for t in doc["targets"] if t["exposed"]]
    named = [t for t in hits if t["first_nonfinite"]["op_type"] in entry["expect"]]
    first = min(named, key=lambda t: t["seconds"]) if named else None
    return {"rc": p.returncode, "wall": wall, "steps": doc["iterations"],
            "exposed": first is not None, "other_exposures": len(hits) - len(named),
            "seconds": first["seconds"] if first else None,
            "first_nonfinite": first["first_nonfinite"] if first else None,
            "explanation": first["explanation"] if first else None,
            "found_by": first.get("found_by") if first else None,
            "input_files": first["input_files"] if first else []}


def replay_in_torch(program, files):
    """The buggy program's and the fixed twin's outputs on the exposing input, in PyTorch."""
    buggy, fixed = program.build()
    by_name = {os.path.basename(f)[:-4]: f for f in files if f.endswith(".npy")}
    args = tuple(torch.from_numpy(np.load(by_name[name])) for name in program.inputs)
    with torch.no_grad():
        return (bool(torch.isfinite(buggy(*args)).all()),
                bool(torch.isfinite(fixed(*args)).all()))


def fmt_time(r, limit):
    return f"{r['seconds']:.3f}" if r["exposed"] else f"> {limit:g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("out")
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--jobs", type=int, default=1, help="parallel runs of the fixed twins")
    ap.add_argument("--only", default="")
    ap.add_argument("--extra", default="",
                    help="more metaop expose arguments for every run, space-separated")
    a = ap.parse_args()
    EXTRA.extend(a.extra.split())
    metaop, work = os.path.abspath(a.metaop), os.path.abspath(a.out)
    only = [n for n in a.only.split(",") if n]
    models = os.path.join(work, "models")
    subprocess.run([sys.executable, os.path.join(HERE, "export.py"), models, *only], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(models, "manifest.json")) as f:
        manifest = json.load(f)
    programs = {p.name: p for p in PROGRAMS}
    limit = a.time_limit
    rows = []
    for entry in manifest:
        name = entry["name"]
        row = {"name": name, "pattern": entry["pattern"], "expect": entry["expect"]}
        for tag, extra in STRATEGIES:
            strategy = tag.split("-")[0]
            row[tag] = expose(metaop, entry["model"], entry, strategy, extra, limit, work,
                              f"{name}/{tag}")
            r = row[tag]
            print(f"{name:<20} {tag:<12} {'exposed' if r['exposed'] else 'NOT exposed':<12} "
                  f"{fmt_time(r, limit):>9} s  {r['found_by'] or ''}", file=sys.stderr)
        g = row["gradient"]
        row["torch_buggy_finite"], row["torch_fixed_finite"] = (
            replay_in_torch(programs[name], g["input_files"]) if g["exposed"] else (None, None))
        rows.append(row)
    # The fixed twins: the gradient strategy on the same budget must expose nothing.
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        twins = list(pool.map(lambda e: expose(metaop, e["fixed"], e, "gradient", [], limit, work,
                                               f"{e['name']}/fixed"), manifest))
    for row, twin in zip(rows, twins):
        row["fixed"] = {"rc": twin["rc"], "wall": twin["wall"], "steps": twin["steps"]}
        print(f"{row['name']:<20} fixed        exit {twin['rc']} after {twin['steps']} steps",
              file=sys.stderr)

    # Report.
    n = len(rows)
    ours = [r["gradient"] for r in rows]
    times = [r["seconds"] for r in ours if r["exposed"]]

    def speedups(tag, ours):
        out = []
        for r in rows:
            if not r[ours]["exposed"]:
                continue
            t = r[tag]["seconds"] if r[tag]["exposed"] else limit
            out.append(t / max(r[ours]["seconds"], 1e-6))
        return out

    def summary(tag):
        found = sum(r[tag]["exposed"] for r in rows)
        text = f"{found}/{n} exposed; speed-up"
        for ours, what in (("gradient", "of the gradient strategy"),
                           ("gradient-nc", "without constant starts")):
            s = speedups(tag, ours)
            text += (f" {what}: median {statistics.median(s):.1f}x, geometric mean "
                     f"{statistics.geometric_mean(s):.1f}x, lowest {min(s):.2f}x;")
        return text + f" (a baseline that misses counts as the {limit:g} s budget)"

    false_exposures = sum(r["fixed"]["rc"] != 0 for r in rows)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"# metaop expose benchmark, {date.today()}, {cpu}, time budget {limit:g} s per run\n")
    print("| program | bug | gradient [s] | found by | no constant starts [s] | GRIST plain [s] "
          "| random [s] | first non-finite node | PyTorch replay | twin |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["gradient"]
        node = f"{g['first_nonfinite']['node']} ({g['first_nonfinite']['op_type']})" \
            if g["exposed"] else "-"
        replay = "-" if not g["exposed"] else (
            ("NaN/INF" if not r["torch_buggy_finite"] else "finite (!)") + " / twin " +
            ("finite" if r["torch_fixed_finite"] else "NaN/INF (!)"))
        print(f"| {r['name']} | {r['pattern']} | {fmt_time(g, limit)} | {g['found_by'] or '-'} | "
              f"{fmt_time(r['gradient-nc'], limit)} | {fmt_time(r['grist'], limit)} | "
              f"{fmt_time(r['random'], limit)} | {node} | {replay} | exit {r['fixed']['rc']} |")
    print()
    print(f"- gradient: {sum(r['exposed'] for r in ours)}/{n} exposed, naming the vulnerable node; "
          f"time to expose: median {statistics.median(times) if times else float('nan'):.3f} s, "
          f"worst {max(times) if times else float('nan'):.3f} s (from the start of the search; "
          f"each run also pays about 0.5 s of LibTorch start-up)")
    print(f"- fixed twins: {false_exposures} false exposures out of {n}")
    replayed = [r for r in rows if r["gradient"]["exposed"]]
    print(f"- PyTorch replay of the exposing inputs: "
          f"{sum(not r['torch_buggy_finite'] for r in replayed)}/{len(replayed)} non-finite in "
          f"the buggy program, {sum(r['torch_fixed_finite'] for r in replayed)}/{len(replayed)} "
          f"finite in the fixed twin")
    nc = [r["gradient-nc"] for r in rows]
    nct = [r["seconds"] for r in nc if r["exposed"]]
    print(f"- gradient without constant starting points: {sum(r['exposed'] for r in nc)}/{n} "
          f"exposed, median {statistics.median(nct) if nct else float('nan'):.3f} s, worst "
          f"{max(nct) if nct else float('nan'):.3f} s")
    print(f"- GRIST's plain schedule: {summary('grist')}")
    print(f"- random search: {summary('random')}")
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump({"date": str(date.today()), "cpu": cpu, "time_limit": limit, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
