#!/usr/bin/python3
"""The documentation against the binary (ctest docs_fresh): README.md, CONTRIBUTING.md, docs/*.md.

1. Generated regions (`<!-- generated: metaop ops ARGS -->` ... `<!-- end generated -->`) hold
   exactly what `metaop ops ARGS` prints now; `scripts/update_docs.py` rewrites them.
   docs/expose.md's hand-written danger-zone summary names, per kind, exactly the ops
   `metaop ops --danger --json` gives that kind.
2. Counts: the README's Bindings table (forward and backward ops per binding), and each phrase
   of COUNTS below (e.g. "gradcheck of all N", "N meta operators"), equal what
   `metaop ops --json` (or tests/known_probe_findings.txt, which ctest probe_regression holds to
   `metaop probe`) gives. A phrase of COUNTS found nowhere fails too, so that a reworded sentence
   does not silently leave the check.
3. Flags: each `--flag` a document mentions must exist where it is used:
   - after `metaop SUB` (in a code span, a code block and its continuation lines, or a table row
     whose first cell is a `metaop SUB` command), or in a code span starting `SUB --flag`, in
     `metaop SUB --help`;
   - otherwise, in a document about one subcommand (DOC_COMMAND: docs/check.md is about
     `metaop check`, ...), in that subcommand's --help, unless it is no metaop flag at all but
     one of a project script (argparse in bench/, scripts/, tests/), which such pages describe
     too;
   - elsewhere, in some subcommand's --help or a project script's flags;
   - flags in code spans or code lines of other programs (ctest, python3 scripts, gtest) are
     theirs and not checked.
   And every flag of every subcommand's --help is mentioned somewhere in the documents (but
   --help itself).
4. With --self-test (ctest docs_fresh runs both), the same checks on a copy of the documents
   with planted defects (stale flags in a docs/check.md table row and after `metaop check` and
   `metaop run` in the README; wrong counts in the README's Bindings table, "gradcheck of all
   N", "N meta operators" and docs/findings.md; an op left out of the danger-zone summary; an
   edited row of a generated table): each must be reported, and the unplanted copy must pass.

Usage: /usr/bin/python3 docs_fresh.py METAOP SOURCE_DIR [--self-test]
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import update_docs  # noqa: E402

# Documents about one subcommand: flags without a command in front of them are that command's.
DOC_COMMAND = {"docs/check.md": "check", "docs/whole-graph.md": "check", "docs/train.md": "train",
               "docs/diagnose.md": "diagnose", "docs/expose.md": "expose",
               "docs/conformance.md": "conform"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
SEPARATORS = {"&&", "||", ";", "#"}


class Binary:
    """What the binary says: subcommands and their flags, `ops --json`, generated outputs."""

    def __init__(self, metaop):
        self.metaop = metaop
        top = self.run("--help")
        section = top.split("Subcommands:", 1)[1] if "Subcommands:" in top else ""
        self.commands = re.findall(r"^\s{2}([a-z][a-z-]*)\s", section, re.M)
        self.flags = {"": set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", top, re.M))}
        for c in self.commands:
            self.flags[c] = set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)",
                                           self.run(c, "--help"), re.M))
        self.all_flags = set().union(*self.flags.values())
        self.rows = json.loads(self.run("ops", "--json"))
        self.danger = json.loads(self.run("ops", "--danger", "--json"))
        self.outputs = update_docs.Outputs(metaop)

    def run(self, *args):
        return subprocess.run([self.metaop, *args], check=True, capture_output=True,
                              text=True).stdout


def script_flags(root):
    """The flags the project's Python scripts define (argparse)."""
    flags = set()
    for folder in ("bench", "scripts", "tests"):
        for path in (root / folder).rglob("*.py"):
            flags |= set(re.findall(r"add_argument\(\s*[\"'](--[a-z][a-z0-9-]*)[\"']",
                                    path.read_text(errors="replace")))
    return flags


# ---------------------------------------------------------------------------------------------
# 1. Generated regions and the danger-zone summary


def check_generated(rel, text, binary, problems):
    for m in update_docs.REGION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        try:
            want = update_docs.render(binary.outputs(m.group(2)))
        except (ValueError, subprocess.CalledProcessError) as e:
            problems.append(f"{rel}:{line}: generated region 'metaop {m.group(2)}': {e}")
            continue
        if m.group(3) != want:
            old, new = m.group(3).splitlines(), want.splitlines()
            diff = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b),
                        min(len(old), len(new)))
            problems.append(f"{rel}:{line + 1 + diff}: differs from `metaop {m.group(2)}` "
                            f"(run scripts/update_docs.py): document "
                            f"{old[diff] if diff < len(old) else '(end)'!r}, binary "
                            f"{new[diff] if diff < len(new) else '(end)'!r}")
    if text.count("<!-- generated:") != len(update_docs.REGION.findall(text)):
        problems.append(f"{rel}: a '<!-- generated: metaop ... -->' without its "
                        "'<!-- end generated -->'")


def cells(line):
    """The cells of a Markdown table row (`\\|` is a pipe inside a cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def check_danger_summary(rel, text, binary, problems):
    ops = {r["op"] for r in binary.rows}
    kinds = {}
    for z in binary.danger:
        kinds.setdefault(z["kind"], set()).add(z["op"])
    seen = set()
    for i, line in enumerate(text.splitlines(), 1):
        c = cells(line) if line.startswith("| `") else []
        m = re.fullmatch(r"`([a-z_]+)`", c[0]) if len(c) >= 2 else None
        if not m or m.group(1) not in kinds:
            continue
        kind = m.group(1)
        seen.add(kind)
        named = {w for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", c[1]) if w in ops}
        if named != kinds[kind]:
            problems.append(f"{rel}:{i}: danger zone {kind}: the table names "
                            f"{sorted(named - kinds[kind])} that `metaop ops --danger` does not "
                            f"and lacks {sorted(kinds[kind] - named)}")
    if seen != set(kinds):
        problems.append(f"{rel}: the danger-zone table lacks the kinds "
                        f"{sorted(set(kinds) - seen)} of `metaop ops --danger`")


# ---------------------------------------------------------------------------------------------
# 2. Counts


def coverage(binary):
    return update_docs.coverage(binary.rows)


def probe_findings(root):
    return update_docs.probe_findings(root)


def counts_table(binary, root):
    return update_docs.counts_table(binary.rows, root)


def check_counts(docs, binary, root, problems):
    for doc, phrase, want, what in counts_table(binary, root):
        found = 0
        for rel, text in docs.items():
            if doc not in ("*", rel):
                continue
            for m in re.finditer(phrase, text):
                found += 1
                got = [int(g) for g in m.groups()]
                if got != want:
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: '{m.group(0)}': {got}, but {what}: {want}")
        if not found and doc != "*":
            problems.append(f"{doc}: the phrase /{phrase}/ ({what}) is gone: reword the check "
                            "in tests/docs_fresh.py with the document")
    # The README's Bindings table: | `name` | how | forward | backward |; "every meta op", "N ops"
    # or "the N differentiable ops", "-" for none.
    cov, ops = coverage(binary)
    readme, text = {}, docs.get("README.md", "")
    for line in text.splitlines():
        c = cells(line) if line.startswith("| `") else []
        m = re.fullmatch(r"`([a-z0-9.-]+)`", c[0]) if len(c) == 4 else None
        if not m:
            continue

        def count(cell):
            if cell == "-":
                return 0
            if "every meta op" in cell:
                return ops
            n = re.search(r"(\d+) (?:differentiable )?ops", cell)
            return int(n.group(1)) if n else None

        readme[m.group(1)] = (count(c[2]), count(c[3]))
    for b in sorted(set(cov) | set(readme)):
        if readme.get(b) != cov.get(b):
            problems.append(f"README.md: Bindings table, {b}: (forward, backward) ops "
                            f"{readme.get(b)}, metaop ops --json {cov.get(b)}")


# ---------------------------------------------------------------------------------------------
# 3. Flags


def segments(text, commands):
    """([(owner, flag)] for each flag in a code span or code line, the owner at its end). owner:
    a subcommand, '' for `metaop --flag`, None when no command precedes the flag (the context
    decides), 'other' for another program's flags."""
    tokens = text.replace("[", " ").replace("]", " ").replace("(", " ").split()
    out, owner = [], None
    if tokens and tokens[0] in commands and len(tokens) > 1:
        owner = tokens[0]
    elif tokens and not tokens[0].startswith("-"):
        owner = "other"
    for i, t in enumerate(tokens):
        base = t.rsplit("/", 1)[-1]
        if base == "metaop" and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt in commands:
                owner = nxt
            elif nxt.startswith("-"):
                owner = ""
        elif t in SEPARATORS:
            owner = "other"
        elif t.startswith("--"):
            out += [(owner, f) for f in FLAG.findall(t)[:1]]
    return out, owner


def mentions(rel, text, commands):
    """(line, owner, flag, near) of every flag in a document. near: the last subcommand named
    (`metaop SUB`) before the flag in its paragraph or table row."""
    found = []
    lines = text.splitlines()
    fence, code_owner, para = False, None, []

    def prose(block):
        """A paragraph, list item or table row: its code spans and the flags outside them, in
        order, each with the last subcommand named (`metaop SUB`) before it there; in a table
        row whose first cell is a `metaop SUB` command, SUB is the row's."""
        start, body = block[0][0], "\n".join(l for _, l in block)
        row = None
        if body.startswith("|") and cells(body):
            m = re.search(r"metaop (\w+)", cells(body)[0])
            row = m.group(1) if m and m.group(1) in commands else None
        last = None
        for m in re.finditer(r"`([^`]+)`|(?<![\w`-])(--[a-z][a-z0-9_-]*)", body):
            line = start + body.count("\n", 0, m.start())
            if m.group(2):
                found.append((line, row, m.group(2), last))
                continue
            segs, end_owner = segments(m.group(1), commands)
            for owner, flag in segs:
                found.append((line, owner if owner is not None else row, flag, last))
            if end_owner not in (None, "other"):
                last = end_owner

    def flush():
        if para:
            prose(para)
            para.clear()

    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fence, code_owner = not fence, None
            continue
        indented_code = (line.startswith("    ") and not para and
                         (i == 1 or not lines[i - 2].strip() or code_owner is not None))
        if fence or indented_code:
            flush()
            # A code line; a line starting with a flag or '[' continues the command above.
            text_part = stripped.split(" # ", 1)[0]
            segs, end_owner = segments(text_part, commands)
            cont = code_owner if stripped.startswith(("-", "[")) else None
            for owner, flag in segs:
                found.append((i, cont if owner is None and cont else owner, flag, None))
            code_owner = end_owner if end_owner not in (None, "other") else cont
            continue
        code_owner = None
        if not stripped or stripped.startswith("#"):
            flush()
        elif stripped.startswith("|"):
            flush()
            para.append((i, stripped))
            flush()
        else:
            if re.match(r"\s*(?:[-*]|\d+\.) ", line):
                flush()  # a list item is a paragraph of its own
            para.append((i, line))
    flush()
    return found


def check_flags(docs, binary, extra_flags, problems):
    commands = set(binary.commands)
    documented = set()
    for rel, text in docs.items():
        # HTML comments (the generated regions' markers) are no documentation.
        text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        documented |= set(FLAG.findall(text))
        for line, owner, flag, near in mentions(rel, text, commands):
            if owner == "other":
                continue
            if owner is not None:
                # Strict: `metaop SUB ... --flag`, `SUB --flag`, or a `metaop SUB` table row.
                if flag not in binary.flags[owner]:
                    cmd = f"metaop {owner}".strip()
                    problems.append(f"{rel}:{line}: {flag} is not a flag of `{cmd}` "
                                    f"({cmd} --help)")
                continue
            # A flag on its own: the page's command's, the one named last before it in the
            # paragraph, or a project script's; on other pages, any command's or script's.
            page = DOC_COMMAND.get(rel)
            if flag in extra_flags - binary.all_flags:
                continue
            if page and flag not in binary.flags[page] | binary.flags.get(near, set()):
                problems.append(f"{rel}:{line}: {flag} is not a flag of `metaop {page}`, the "
                                "command this page is about" +
                                (f", nor of `metaop {near}` named before it" if near else "") +
                                " (write `metaop SUB --flag` for another command's)")
            elif not page and flag not in binary.all_flags:
                problems.append(f"{rel}:{line}: {flag} is a flag of no metaop subcommand nor "
                                "project script")
    for c in binary.commands:
        for flag in sorted(binary.flags[c] - documented - {"--help"}):
            problems.append(f"`metaop {c} {flag}` is documented nowhere (README.md, "
                            "CONTRIBUTING.md, docs/)")


# ---------------------------------------------------------------------------------------------


def read_docs(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in update_docs.doc_files(root)}


def check_all(root, binary, extra_flags):
    docs, problems = read_docs(root), []
    for rel, text in docs.items():
        check_generated(rel, text, binary, problems)
    check_danger_summary("docs/expose.md", docs.get("docs/expose.md", ""), binary, problems)
    check_counts(docs, binary, root, problems)
    check_flags(docs, binary, extra_flags, problems)
    return problems


def plant(root, rel, old, new):
    path = root / rel
    text = path.read_text()
    if old not in text:
        raise RuntimeError(f"self-test: cannot plant into {rel}: {old!r} is not there")
    path.write_text(text.replace(old, new, 1))


def self_test(root, binary, extra_flags):
    """Each planted defect is reported, and the unplanted copy passes."""
    cov, ops = coverage(binary)
    ref_bwd = cov["reference"][1]
    torch_fwd = cov["torch"][0]
    probe = probe_findings(root)
    plants = [
        ("a stale flag in a table row of docs/check.md", "docs/check.md",
         "| `bias` |", "| `--stale-option` biased |", "docs/check.md:", "--stale-option"),
        ("an unknown flag after `metaop check`", "README.md",
         "`metaop check MODEL.onnx [--bind", "`metaop check MODEL.onnx [--no-such-flag] [--bind",
         "README.md:", "--no-such-flag"),
        ("a flag of another subcommand after `metaop run`", "README.md",
         "`metaop run MODEL.onnx [--input", "`metaop run MODEL.onnx [--samples N] [--input",
         "README.md:", "--samples is not a flag of `metaop run`"),
        ("a wrong count in the Bindings table", "README.md", f"| {torch_fwd} ops |",
         f"| {torch_fwd + 1} ops |", "README.md: Bindings table, torch", str(torch_fwd + 1)),
        ("a wrong 'gradcheck of all N'", "README.md", f"gradcheck of all {ref_bwd}",
         f"gradcheck of all {ref_bwd - 1}", "gradcheck of all", str(ref_bwd - 1)),
        ("a wrong 'N meta operators'", "README.md", f"({ops} meta operators",
         f"({ops + 2} meta operators", "README.md:", f"[{ops + 2}]"),
        ("a wrong findings count in docs/findings.md", "docs/findings.md",
         f"Its {probe['frameworks']} findings", f"Its {probe['frameworks'] - 3} findings",
         "docs/findings.md:", f"[{probe['frameworks'] - 3}, "),
        ("an op left out of the danger-zone summary", "docs/expose.md",
         "| Div (divisor), Reciprocal, Mod", "| Div (divisor), Mod", "docs/expose.md:",
         "'Reciprocal'"),
        ("an edited row of the generated error-model table", "docs/error-models.md",
         "| Abs | elementwise | exact", "| Abs | elementwise | 2 ulp", "docs/error-models.md:",
         "metaop ops --error-models"),
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = pathlib.Path(tmp) / "clean"
        for rel in ("README.md", "CONTRIBUTING.md", "docs", "tests/known_probe_findings.txt"):
            src, dst = root / rel, base / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
        clean = check_all(base, binary, extra_flags)
        print(f"{'ok  ' if not clean else 'FAIL'} self-test: the unplanted copy passes"
              + "".join(f"\n       {p}" for p in clean))
        failed += bool(clean)
        for what, rel, old, new, where, word in plants:
            copy = pathlib.Path(tmp) / f"plant{plants.index((what, rel, old, new, where, word))}"
            shutil.copytree(base, copy)
            plant(copy, rel, old, new)
            caught = [p for p in check_all(copy, binary, extra_flags) if where in p and word in p]
            print(f"{'ok  ' if caught else 'FAIL'} self-test: {what} is caught"
                  + (f": {caught[0]}" if caught else ""))
            failed += not caught
    return failed


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--self-test"):
        print(__doc__.rsplit("Usage: ", 1)[1].strip())
        return 2
    binary, root = Binary(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
    extra_flags = script_flags(root)
    problems = check_all(root, binary, extra_flags)
    for p in problems:
        print(f"FAIL {p}")
    print(f"docs_fresh: {len(problems)} disagreements between the documents and {sys.argv[1]}")
    failed = bool(problems)
    if len(sys.argv) == 4:
        failed += self_test(root, binary, extra_flags)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
