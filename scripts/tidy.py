#!/usr/bin/python3
"""clang-tidy 16 (.clang-tidy, warnings are errors) on the project's own .cpp files.

Which files: every .cpp of src, tests and bench in BUILD_DIR/compile_commands.json (so a file that
is added or moved is covered as soon as CMake knows it), but for those that include LibTorch's
headers, directly or through the project's headers (today the torch binding's files and
bench/reference_vs_torch.cpp): clang 16 cannot parse LibTorch 1.13's headers against GCC 12's
library (c10::IValue incomplete in std::vector). tests/fuzz is built apart (make fuzz) and is not
in BUILD_DIR's compile_commands.json.

  tidy.py all SRC_DIR BUILD_DIR [-j N]
      every such file (make tidy). On success it writes BUILD_DIR/tidy-passed: the commit it
      passed on, whether the tree was clean, and the files that differed from that commit (they
      were checked as they were in the tree), all taken before the first file is checked.
  tidy.py changed SRC_DIR BUILD_DIR [-j N] [--budget SECONDS]
      only the files changed since the state tidy-passed records (commits since, uncommitted
      changes and untracked files), or, with no usable record, those changed relative to HEAD;
      plus the files that include a changed header (directly or through other headers), and every
      file if .clang-tidy changed (ctest tidy_changed). Prints which files it checks and why;
      with nothing changed it says so and passes. Starts no file after --budget seconds: the
      files left unchecked are listed and it exits 77 (ctest: skipped) unless a checked file had
      findings (exit 1).
  tidy.py list SRC_DIR BUILD_DIR
      prints the files `all` checks.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import time

TIDY = "clang-tidy-16"
ROOTS = ("src", "tests", "bench")
LIBTORCH = re.compile(r"^(ATen|torch|c10)/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
RECORD = "tidy-passed"
SKIPPED = 77


def git(src, *args):
    return subprocess.run(["git", "-C", str(src), *args], check=True, capture_output=True,
                          text=True).stdout


def project_files(src):
    """Every .h and .cpp under src, tests and bench, relative to SRC_DIR, with its includes."""
    files = {}
    for root in ROOTS:
        for path in sorted((src / root).rglob("*")):
            if path.suffix in (".h", ".cpp") and path.is_file():
                text = path.read_text(errors="replace")
                files[path.relative_to(src).as_posix()] = INCLUDE.findall(text)
    return files


def include_graph(files):
    """file -> project files it includes, and the files that include LibTorch's headers. A quoted
    include resolves to the project file next to the includer or whose path ends with it."""
    by_suffix = {}
    for f in files:
        parts = f.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)
    graph, torch_direct = {}, set()
    for f, includes in files.items():
        graph[f] = set()
        for kind, name in includes:
            if LIBTORCH.match(name):
                torch_direct.add(f)
            if kind != '"':
                continue
            local = os.path.normpath(os.path.join(os.path.dirname(f), name))
            graph[f].update([local] if local in files else by_suffix.get(name, []))
    return graph, closure_of(graph, torch_direct)


def closure_of(graph, targets):
    """The files that include any of targets, directly or through other files, and targets."""
    reached = set(targets)
    changed = True
    while changed:
        changed = False
        for f, deps in graph.items():
            if f not in reached and deps & reached:
                reached.add(f)
                changed = True
    return reached


def tidy_files(src, build):
    """The .cpp files of compile_commands.json under src, tests and bench, and those left out
    because they include LibTorch's headers."""
    db = json.loads((build / "compile_commands.json").read_text())
    listed = set()
    for entry in db:
        path = pathlib.Path(entry["directory"], entry["file"]).resolve()
        try:
            rel = path.relative_to(src).as_posix()
        except ValueError:
            continue
        if rel.endswith(".cpp") and rel.split("/")[0] in ROOTS:
            listed.add(rel)
    graph, torch_users = include_graph(project_files(src))
    return sorted(listed - torch_users), sorted(listed & torch_users), graph


def check(src, build, files, jobs, budget=None):
    """clang-tidy on files, jobs at a time; returns (failed files, files not started)."""
    start = time.monotonic()
    failed, left = [], []

    def one(f):
        if budget is not None and time.monotonic() - start > budget:
            return f, None, 0.0
        t = time.monotonic()
        r = subprocess.run([TIDY, "-p", str(build), "--quiet", str(src / f)],
                           capture_output=True, text=True)
        return f, r, time.monotonic() - t

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f, r, seconds in pool.map(one, files):
            if r is None:
                left.append(f)
                continue
            if r.returncode == 0:
                print(f"  clean     {f} ({seconds:.0f} s)", flush=True)
                continue
            failed.append(f)
            print(f"  FINDINGS  {f} ({seconds:.0f} s)", flush=True)
            lines = [l for l in (r.stdout + r.stderr).splitlines()
                     if re.search(r"(error|warning):", l) and "warnings generated" not in l]
            for line in lines[:50] or (r.stdout + r.stderr).splitlines()[-20:]:
                print(f"    {line}")
    return failed, left


def tree_state(src):
    """(HEAD, files that differ from it: modified, staged, deleted or untracked)."""
    head = git(src, "rev-parse", "HEAD").strip()
    dirty = set(git(src, "diff", "--name-only", "--no-renames", "HEAD", "--").split())
    dirty |= set(git(src, "ls-files", "--others", "--exclude-standard").split())
    return head, sorted(dirty)


def read_record(src, build):
    """(commit, dirty files) of BUILD_DIR/tidy-passed, or None when missing or unusable."""
    path = build / RECORD
    if not path.is_file():
        return None
    commit, dirty = None, []
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "commit":
            commit = value.strip()
        elif key == "dirty":
            dirty.append(value.strip())
    ok = commit and subprocess.run(["git", "-C", str(src), "cat-file", "-e", commit + "^{commit}"],
                                   capture_output=True).returncode == 0
    return (commit, dirty) if ok else None


def run_all(src, build, jobs):
    files, torch_users, _ = tidy_files(src, build)
    try:
        state = tree_state(src)
    except (subprocess.CalledProcessError, FileNotFoundError):
        state = None  # not a git checkout: nothing to record
    print(f"tidy: {len(files)} files of compile_commands.json, {jobs} at a time; left out "
          f"(they include LibTorch's headers): {' '.join(torch_users) or 'none'}", flush=True)
    failed, _ = check(src, build, files, jobs)
    if failed:
        print(f"tidy: findings in {len(failed)} of {len(files)} files: {' '.join(failed)}")
        return 1
    if state:
        head, dirty = state
        lines = [f"# make tidy (scripts/tidy.py all) passed on {len(files)} files",
                 f"commit {head}", f"clean {'no' if dirty else 'yes'}"]
        lines += [f"dirty {f}" for f in dirty]
        (build / RECORD).write_text("\n".join(lines) + "\n")
        print(f"tidy: {len(files)} files clean; recorded commit {head[:12]} "
              f"({'with ' + str(len(dirty)) + ' changed files' if dirty else 'clean tree'}) "
              f"in {build / RECORD}")
    else:
        print(f"tidy: {len(files)} files clean (not a git checkout: nothing recorded)")
    return 0


def run_changed(src, build, jobs, budget):
    files, torch_users, graph = tidy_files(src, build)
    try:
        record = read_record(src, build)
        if record:
            base, extra = record
            why = f"since {base[:12]}, the last commit make tidy passed on ({build / RECORD})"
        else:
            base, extra = "HEAD", []
            why = "relative to HEAD (no make tidy record in this build tree)"
        changed = set(git(src, "diff", "--name-only", "--no-renames", base, "--").split())
        changed |= set(git(src, "ls-files", "--others", "--exclude-standard").split())
        changed |= set(extra)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("tidy_changed: not a git checkout, nothing to compare with; make tidy checks every "
              "file")
        return SKIPPED
    changed = sorted(f for f in changed if (src / f).is_file())
    print(f"tidy_changed: files changed {why}: {len(changed)}"
          + (f" ({' '.join(changed)})" if 0 < len(changed) <= 20 else ""))
    reasons = {}
    if ".clang-tidy" in changed:
        for f in files:
            reasons.setdefault(f, ".clang-tidy changed")
    for f in changed:
        if f in files:
            reasons[f] = "changed"
    for h in (f for f in changed if f.endswith(".h") and f in graph):
        for f in sorted(closure_of(graph, {h}) - {h}):
            if f in files:
                reasons.setdefault(f, f"includes {h}")
    for f in changed:
        if f.endswith(".cpp") and f not in reasons:
            note = ("includes LibTorch's headers" if f in torch_users else
                    "not in compile_commands.json (tests/fuzz, or not configured yet)")
            print(f"  not checked: {f} ({note})")
    if not reasons:
        print("tidy_changed: no file to check (nothing changed that clang-tidy reads); passed")
        return 0
    # The changed files first, then their includers: the budget goes to the likeliest first.
    todo = sorted(reasons, key=lambda f: (reasons[f] != "changed", f))
    for f in todo:
        print(f"  to check  {f}: {reasons[f]}")
    print(f"tidy_changed: {len(todo)} of {len(files)} files, {jobs} at a time", flush=True)
    failed, left = check(src, build, todo, jobs, budget)
    if failed:
        print(f"tidy_changed: findings in {' '.join(failed)}")
        return 1
    if left:
        print(f"tidy_changed: {len(todo) - len(left)} files clean; {len(left)} not checked within "
              f"the {budget:.0f} s budget (make tidy checks them): {' '.join(left)}")
        return SKIPPED
    print(f"tidy_changed: {len(todo)} files clean")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["all", "changed", "list"])
    p.add_argument("src", type=pathlib.Path)
    p.add_argument("build", type=pathlib.Path)
    p.add_argument("-j", "--jobs", type=int, default=1)
    p.add_argument("--budget", type=float, default=None)
    a = p.parse_args()
    src, build = a.src.resolve(), a.build.resolve()
    if a.mode == "list":
        print("\n".join(tidy_files(src, build)[0]))
        return 0
    if subprocess.run(["sh", "-c", f"command -v {TIDY}"], capture_output=True).returncode:
        print(f"tidy: {TIDY} is missing (scripts/install-deps.sh installs it; Debian: "
              "apt-get install clang-tidy-16)")
        return 2
    if a.mode == "all":
        return run_all(src, build, a.jobs)
    return run_changed(src, build, a.jobs, a.budget)


if __name__ == "__main__":
    sys.exit(main())
