#!/usr/bin/python3
"""`metaop probe` over every op and the framework bindings must report exactly the findings listed
in known_probe_findings.txt: each (binding, op, kind, class) with the same worst case (node test and
edge-value pattern), a score within its bound and no more failing cases than listed. A new
finding fails (a regression, or a new defect to describe in docs/findings.md), and so do a
listed one that got worse, moved to another case, or stopped appearing (fixed upstream, or the
probe lost its eye for it).

A line may hold on one kind of CPU only (cpu:FLAG, cpu:!FLAG: with or without that feature of
/proc/cpuinfo), where a framework dispatches to other kernels.

Usage: probe_regression.py METAOP WORK_DIR [--bind B1,B2]
  --bind: probe these bindings only, against their lines of the list (default: torch, onednn and
  opencv-4.6, the probe's default).
"""
import json
from collections import Counter
import math
import os
import subprocess
import sys

METAOP, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
BIND = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[3] == "--bind" else None
DEFAULT = ["torch", "onednn", "opencv-4.6"]
CLASSES = ["defect", "float32-limit", "convention", "untriaged"]
os.makedirs(WORK, exist_ok=True)


def cpu_flags():
    """The CPU's feature flags, as /proc/cpuinfo names them (avx2, avx512f, avx512_bf16 ...)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


FLAGS = cpu_flags()
known, errors = {}, []
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_probe_findings.txt")
with open(path) as f:
    for n, line in enumerate(f, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        # An optional last field cpu:FLAG or cpu:!FLAG: the line holds only on CPUs with (without)
        # that feature, where the framework's kernels differ.
        cpu = parts.pop() if len(parts) == 9 and parts[-1].startswith("cpu:") else None
        if len(parts) != 8 or cpu in ("cpu:", "cpu:!"):
            errors.append(f"known_probe_findings.txt:{n}: '{line}' is not "
                          "'BINDING OP KIND CLASS TEST PATTERN BOUND CASES [cpu:[!]FLAG]'")
            continue
        if cpu and (cpu[4:].lstrip("!") in FLAGS) == cpu.startswith("cpu:!"):
            continue  # for another kind of CPU
        b, op, kind, cls, test, pattern, bound, cases = parts
        if cls not in CLASSES:
            errors.append(f"known_probe_findings.txt:{n}: class '{cls}' is not one of "
                          f"{', '.join(CLASSES)}")
        try:
            entry = {"test": test, "pattern": pattern, "bound": float(bound), "cases": int(cases),
                     "line": n}
        except ValueError:
            errors.append(f"known_probe_findings.txt:{n}: bound or cases not a number: '{line}'")
            continue
        if (b, op, kind, cls) in known:
            errors.append(f"known_probe_findings.txt:{n}: listed twice")
        if b in (BIND or DEFAULT):
            known[(b, op, kind, cls)] = entry

# Every listed op is a meta operator (or an optimizer setting of the update probe).
registered = {r["op"] for r in json.loads(subprocess.run(
    [METAOP, "ops", "--json"], check=True, capture_output=True, text=True).stdout)}
for (b, op, kind, cls), e in known.items():
    if op not in registered and not op.startswith("update:"):
        errors.append(f"known_probe_findings.txt:{e['line']}: {op} is not a meta operator")

out = os.path.join(WORK, "probe.json")
p = subprocess.run([METAOP, "probe", "--json", out, "--out", os.path.join(WORK, "repro")] +
                   (["--bind", ",".join(BIND)] if BIND else []),
                   capture_output=True, text=True)
if p.returncode not in (0, 1):
    print(p.stdout + p.stderr)
    sys.exit(1)
doc = json.load(open(out))
found = {(f["binding"], f["op_type"], f["kind"], f.get("class", "none")): f
         for f in doc["findings"]}
failures = list(errors)
tally = Counter(f.get("class", f["kind"]) for f in doc["findings"])
if doc.get("classes") != dict(tally):
    failures.append(f"the JSON's classes {doc.get('classes')} do not tally its findings "
                    f"{dict(tally)}")
for k in sorted(set(found) - set(known)):
    f = found[k]
    failures.append(f"new finding {' '.join(k)}: {f['test']} / {f['pattern']}, score "
                    f"{f['score']}, {f['cases']} cases: {f['detail']}")
for k in sorted(set(known) - set(found)):
    failures.append(f"listed finding no longer reported (line {known[k]['line']}): {' '.join(k)}")
for k in sorted(set(known) & set(found)):
    e, f = known[k], found[k]
    score = float(f["score"])
    where = f"{' '.join(k)} (line {e['line']})"
    if f["test"].replace(" ", "_") != e["test"] or f["pattern"] != e["pattern"]:
        failures.append(f"{where}: worst case moved from {e['test']} / {e['pattern']} to "
                        f"{f['test']} / {f['pattern']}: {f['detail']}")
    if not score <= e["bound"]:
        failures.append(f"{where}: score {score:.3g} above its bound {e['bound']:.3g}: "
                        f"{f['detail']}")
    if f["cases"] > e["cases"]:
        failures.append(f"{where}: {f['cases']} failing cases, more than the {e['cases']} listed")
for line in failures:
    print("FAIL " + line)
print(f"probe: {doc['cases']} cases, {len(found)} findings, {len(known)} listed")
print(f"{len(found) + len(set(known) - set(found)) - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
