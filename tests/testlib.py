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
