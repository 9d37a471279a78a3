#!/usr/bin/python3
"""Kill-and-resume: `metaop probe` writes each case's outcome to its journal as it goes; killed
midway (SIGKILL, no chance to clean up) and run again with --resume, it must end with exactly
the result of an uninterrupted run -- the same case count, counts per op and binding, and
findings (each with its case count, worst case, what the other binding gave there and a
reproducer that exists) -- with no case
run twice and none lost.

Usage: probe_resume.py METAOP WORK_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from testlib import check, finish

METAOP, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
if os.path.isdir(WORK):
    shutil.rmtree(WORK)
os.makedirs(WORK)
BIND = ["--bind", "torch,opencv-4.6"]


def probe(name, *extra):
    out = os.path.join(WORK, name)
    return [METAOP, "probe", *BIND, "--out", out, "--json", out + ".json", *extra]


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def summary(path):
    doc = json.load(open(path))
    fs = sorted((f["op_type"], f["binding"], f["kind"], f["cases"], f["test"], f["pattern"],
                 str(f["score"]), f.get("agreement", "")) for f in doc["findings"])
    return doc["cases"], doc["counts"], fs, doc["findings"]


# The uninterrupted run.
p = subprocess.run(probe("whole"), capture_output=True, text=True)
check(p.returncode in (0, 1), f"uninterrupted probe: exit {p.returncode}", p.stderr[-2000:])
whole = summary(os.path.join(WORK, "whole.json"))
# What the other binding gave at the worst element, where it ran the case.
agreeing = [f for f in whole[3] if f.get("agreement", "").startswith("at ")]
check(len(agreeing) > len(whole[3]) // 2,
      f"findings say what the other binding gave ({len(agreeing)} of {len(whole[3])})")
total = lines(os.path.join(WORK, "whole", "journal.jsonl")) - 1  # the start line

# Killed once a third of the cases are journaled.
journal = os.path.join(WORK, "killed", "journal.jsonl")
k = subprocess.Popen(probe("killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.time() + 300
while lines(journal) < total // 3 and k.poll() is None and time.time() < deadline:
    time.sleep(0.002)
k.send_signal(signal.SIGKILL)
k.wait()
at_kill = lines(journal) - 1
check(0 < at_kill < total, f"killed midway: {at_kill} of {total} cases journaled")
check(not os.path.exists(os.path.join(WORK, "killed.json")), "the killed run wrote no result")

# Resumed.
p = subprocess.run(probe("killed", "--resume"), capture_output=True, text=True)
check(p.returncode in (0, 1), f"resumed probe: exit {p.returncode}", p.stderr[-2000:])
resumed = summary(os.path.join(WORK, "killed.json"))
check(resumed[0] == whole[0], f"same case count ({resumed[0]} vs {whole[0]})")
check(resumed[1] == whole[1], "same counts per op, binding and outcome")
check(resumed[2] == whole[2], f"same findings ({len(resumed[2])} vs {len(whole[2])})",
      "\n".join(map(str, sorted(set(resumed[2]) ^ set(whole[2])))))
missing = [f["repro"] for f in resumed[3] if not os.path.isfile(os.path.join(f["repro"],
                                                                             "repro.json"))]
check(not missing, f"every finding's reproducer exists ({len(missing)} missing)",
      "\n".join(missing[:5]))
keys = [json.loads(ln)["key"] for ln in open(journal) if '"type":"case"' in ln]
check(len(keys) == len(set(keys)) == total,
      f"journal: {len(keys)} cases, {len(set(keys))} distinct, {total} expected")

# A journal of other options is refused, not mixed in.
p = subprocess.run([METAOP, "probe", "--bind", "torch", "--out", os.path.join(WORK, "killed"),
                    "--resume"], capture_output=True, text=True)
check(p.returncode == 2 and "other options" in p.stderr,
      f"--resume with other options: exit {p.returncode}", p.stderr)
finish()
