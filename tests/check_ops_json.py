#!/usr/bin/python3
"""`metaop ops --json` is a list of {op, binding, forward, backward, dtypes, error_model, reason};
every binding's claims reach the coverage the project promises, every "no" carries a reason, and
every op has an error model.

Usage: /usr/bin/python3 check_ops_json.py METAOP
"""
import json
import subprocess
import sys

MINIMUM = {"torch": (90, 60), "onednn": (35, 15), "opencv": (45, 0), "reference": (120, 100)}

rows = json.loads(subprocess.run([sys.argv[1], "ops", "--json"], check=True, capture_output=True,
                                 text=True).stdout)
failed, checks = 0, 0
for r in rows:
    checks += 1
    if set(r) != {"op", "binding", "forward", "backward", "dtypes", "error_model", "reason"}:
        print(f"FAIL row with keys {sorted(r)}")
        failed += 1
    if not r.get("error_model"):
        print(f"FAIL {r['op']}: no error model")
        failed += 1
    if not r["forward"] and not r["reason"]:
        print(f"FAIL {r['binding']} {r['op']}: unsupported without a reason")
        failed += 1
for b, (fwd, bwd) in MINIMUM.items():
    f = sum(r["forward"] for r in rows if r["binding"] == b)
    g = sum(r["backward"] for r in rows if r["binding"] == b)
    checks += 1
    ok = f >= fwd and g >= bwd
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {b}: forward {f} ops (at least {fwd}), backward {g} ops (at least {bwd})")
print(f"{checks - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
