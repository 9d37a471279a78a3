#!/usr/bin/python3
"""`metaop probe` over every op and the three framework bindings must report exactly the findings
listed in known_probe_findings.txt (binding, op, kind): a new one fails (a regression, or a new
defect to describe in docs/findings.md), and so does a listed one that stops appearing (fixed
upstream, or the probe lost its eye for it).

Usage: probe_regression.py METAOP WORK_DIR [--bind B1,B2]
  --bind: probe these bindings only, against their lines of the list.
"""
import json
import os
import subprocess
import sys

METAOP, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
BIND = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[3] == "--bind" else None
os.makedirs(WORK, exist_ok=True)
known, optional = set(), set()
with open(os.path.join(os.path.dirname(__file__), "known_probe_findings.txt")) as f:
    for line in f:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if BIND is None or parts[0] in BIND:
            (optional if parts[-1] == "?" else known).add(tuple(parts[:3]))
out = os.path.join(WORK, "probe.json")
p = subprocess.run([METAOP, "probe", "--json", out, "--out", os.path.join(WORK, "repro")] +
                   (["--bind", ",".join(BIND)] if BIND else []),
                   capture_output=True, text=True)
if p.returncode not in (0, 1):
    print(p.stdout + p.stderr)
    sys.exit(1)
doc = json.load(open(out))
found = {(f["binding"], f["op_type"], f["kind"]): f for f in doc["findings"]}
new = sorted(set(found) - known - optional)
gone = sorted(known - set(found))
for k in new:
    print(f"FAIL new finding {' '.join(k)}: {found[k]['test']} / {found[k]['pattern']}: "
          f"{found[k]['detail']}")
for k in gone:
    print(f"FAIL listed finding no longer reported: {' '.join(k)}")
print(f"probe: {doc['cases']} cases, {len(found)} findings, {len(known)} expected; "
      f"{len(new) + len(gone)} failed")
sys.exit(1 if new or gone else 0)
