#!/usr/bin/python3
"""Benchmark of `metaop diagnose` on the faulty training setups of make_setups.py and their
fixed twins: per setup whether the fault is detected (the run is not healthy), localized (the
top-ranked diagnosis has the planted category and place), repaired (that diagnosis's fix
verified by retraining), and whether the twin stays quiet (`healthy`); then the totals, next to
DeepLocalize's published figures (40 faulty programs: 34 detected, 21 localized). Each setup is
also marked when its fault leaves the loss unharmed or its twin does not train (varied setups,
--variant, can draw those), and the totals are given over those with both as well.

Usage: /usr/bin/python3 bench/diagnose/run.py METAOP WORK_DIR [--only NAME,...] [--variant N]
                                               [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def matches(d, e):
    """Whether diagnosis d names the expected category and place e."""
    if d.get("category") != e["category"]:
        return False
    c = e["category"]
    if c == "hyperparameter":
        return d.get("hyperparameter") == e["hyperparameter"]
    if c == "initialization":
        return d.get("node") == e["node"]
    if c in ("activation", "architecture"):
        return d.get("node") == e["node"]
    if c == "data":
        return d.get("input") == e["input"]
    if c == "loss":
        return "node" not in e or d.get("node") == e["node"]
    if c == "framework":
        where = d.get("weight") if e.get("place") == "weight" else d.get("node")
        want = e["weight"] if e.get("place") == "weight" else e["node"]
        return where == want and d.get("binding") == e["binding"]
    return False


def quarter(losses, which):
    """Mean of the first (which=0) or last (which=-1) quarter of the losses."""
    q = max(1, len(losses) // 4)
    part = losses[:q] if which == 0 else losses[-q:]
    return sum(part) / len(part)


def diagnose(metaop, work, model, data, loss, args, out, extra=()):
    t0 = time.time()
    p = subprocess.run([metaop, "diagnose", os.path.join(work, model + ".onnx"),
                        "--data", os.path.join(work, data + "_x.npy"),
                        "--labels", os.path.join(work, data + "_y.npy"),
                        "--loss", loss, *args, "--json", out, *extra],
                       capture_output=True, text=True)
    seconds = time.time() - t0
    doc = json.load(open(out)) if p.returncode in (0, 1) and os.path.exists(out) else None
    return p, doc, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metaop")
    ap.add_argument("work")
    ap.add_argument("--only", default="")
    ap.add_argument("--variant", type=int, default=0,
                    help="held-out variations of the setups (make_setups.py --variant)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    only = [n for n in a.only.split(",") if n]
    subprocess.run([sys.executable, os.path.join(HERE, "make_setups.py"), a.work,
                    "--variant", str(a.variant), *only], check=True)
    setups = json.load(open(os.path.join(a.work, "setups.json")))
    rows = []
    for s in setups:
        out = os.path.join(a.work, s["name"] + ".json")
        p, doc, sec = diagnose(a.metaop, a.work, s["model"], s["data"], s["loss"], s["args"], out)
        tw = s["twin"]
        tout = os.path.join(a.work, s["name"] + "_twin.json")
        tp, tdoc, tsec = diagnose(a.metaop, a.work, tw["model"], tw["data"], tw["loss"],
                                  tw["args"], tout)
        ds = doc["diagnoses"] if doc else []
        top = ds[0] if ds else {}
        right = [d for d in ds if matches(d, s["expect"])]
        r = {"name": s["name"], "category": s["expect"]["category"],
             "detected": bool(doc) and not doc["healthy"],
             "localized": bool(top) and matches(top, s["expect"]),
             "repaired": bool(right) and right[0].get("fix_verified", False),
             # Labels that do not follow from the inputs have no mechanical repair.
             "repairable": s["expect"].get("repairable", True),
             # Repairs called verified whose loss ends at the trivial predictor's level (0.8x):
             # none may be.
             "hollow_repairs": sum(1 for x in (doc or {}).get("repairs", []) if x["verified"] and
                                   x.get("trivial_loss") and
                                   x["loss_last_quarter"] >= 0.8 * x["trivial_loss"]),
             "kinds": sorted({x["kind"] for x in doc["symptoms"]}) if doc else [],
             "top": (f"{top.get('category')} {top.get('place')}" if top else "-"),
             "twin_healthy": bool(tdoc) and tdoc["healthy"],
             "twin_kinds": sorted({x["kind"] for x in tdoc["symptoms"]}) if tdoc else [],
             "twin_top": (f"{tdoc['diagnoses'][0]['category']} {tdoc['diagnoses'][0]['place']}"
                          if tdoc and tdoc["diagnoses"] else "-"),
             "seconds": round(sec, 2), "twin_seconds": round(tsec, 2)}
        if not doc:
            r["error"] = (p.stdout + p.stderr)[-400:]
        if not tdoc:
            r["twin_error"] = (tp.stdout + tp.stderr)[-400:]
        # Whether the fault takes effect on the loss (a static fault always counts; else the loss
        # turns non-finite, spikes above 3x its first value, or ends above 1.5x the twin's + 0.05)
        # and whether the twin trains (its loss ends below 0.8x where it started): varied setups
        # (--variant) can draw a fault too mild to harm or a twin too slow to train. Both are
        # reported; the totals are given over all setups and over those with both.
        fl, tl = (doc or {}).get("losses", []), (tdoc or {}).get("losses", [])
        finite = lambda ls: [v for v in ls if isinstance(v, float)]  # noqa: E731
        twin_trains = bool(tl) and len(finite(tl)) == len(tl) and \
            quarter(tl, -1) < 0.8 * quarter(tl, 0)
        effective = bool(s.get("static")) or (bool(fl) and (
            len(finite(fl)) < len(fl) or max(finite(fl)) > 3 * fl[0] or
            (twin_trains and quarter(fl, -1) > 1.5 * quarter(tl, -1) + 0.05)))
        r["valid"] = bool(effective and twin_trains)
        if not r["valid"]:
            r["note"] = "; ".join(([] if effective else ["the fault has no effect on the loss"]) +
                                  ([] if twin_trains else ["the twin does not train"]))
        rows.append(r)
        mark = lambda b: "yes" if b else "NO"  # noqa: E731
        print(f"{s['name']:<34} {r['category']:<15} detected {mark(r['detected']):<3} "
              f"localized {mark(r['localized']):<3} repaired {mark(r['repaired']):<3} "
              f"twin {'healthy' if r['twin_healthy'] else 'ALARM ' + ','.join(r['twin_kinds'])}"
              f"  [{', '.join(r['kinds'])}] top: {r['top']}"
              f"{'' if r['valid'] else '  (' + r['note'] + ')'}", flush=True)
        if "error" in r or "twin_error" in r:
            print("   ", r.get("error", ""), r.get("twin_error", ""))
    def totals(rs):
        t = {k: sum(r[k] for r in rs) for k in ["detected", "localized", "repaired",
                                                  "hollow_repairs"]}
        t["false_alarms"] = sum(not r["twin_healthy"] for r in rs)
        t["setups"] = len(rs)
        t["repairable"] = sum(r["repairable"] for r in rs)
        return t

    every, valid = totals(rows), totals([r for r in rows if r["valid"]])
    kinds = sorted({k for r in rows for k in r["kinds"]})
    cats = sorted({r["category"] for r in rows})
    print(f"\n{len(rows)} faulty setups ({len(cats)} categories: {', '.join(cats)}; symptom kinds "
          f"seen: {', '.join(kinds)})")
    for what, t in [("all setups", every), ("setups whose fault harms the loss and whose twin "
                                            "trains", valid)]:
        n = t["setups"]
        print(f"{what}: detected {t['detected']}/{n}, localized {t['localized']}/{n}, "
              f"repaired {t['repaired']}/{t['repairable']} (of those with a mechanical repair), "
              f"false alarms on the twins {t['false_alarms']}/{n}, repairs verified at the "
              f"trivial predictor's level {t['hollow_repairs']}")
    print("DeepLocalize (Wardat et al., ICSE 2021), 40 faulty programs: detected 34/40, "
          "localized 21/40")
    if a.json:
        json.dump({"setups": rows, "totals": every, "totals_effective": valid, "kinds": kinds,
                   "categories": cats, "variant": a.variant},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
