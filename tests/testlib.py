"""What the end-to-end test scripts share: one line per check, the failures collected, and the
exit code."""
import sys

failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        if detail:
            print(detail)
        failures.append(what)


def finish():
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


def current_onednn(metaop):
    """The oneDNN binding this build has: onednn (oneDNN 3, from the Python environment) where it
    is built, else onednn-2.6 (Debian's; the sanitize build leaves oneDNN 3 out)."""
    import json
    import subprocess
    rows = json.loads(subprocess.run([metaop, "ops", "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    return "onednn" if any(r["binding"] == "onednn" for r in rows) else "onednn-2.6"
