#!/usr/bin/python3
"""Rewrites the generated regions of the documentation from the binary: every region between

    <!-- generated: metaop ops ARGS -->
    ...
    <!-- end generated -->

in README.md, CONTRIBUTING.md and docs/*.md becomes the output of `METAOP ops ARGS` (a Markdown
table as printed, any other output in a ```text block). ctest docs_fresh (tests/docs_fresh.py)
fails when a region differs from what this would write.

Usage: /usr/bin/python3 scripts/update_docs.py [METAOP]     (default: build/metaop)
"""
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REGION = re.compile(r"(<!-- generated: metaop (.*?) -->\n)(.*?)(<!-- end generated -->)", re.S)


def doc_files(root):
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]


def command_args(spec):
    """The arguments of a region's command; only `ops` (its output depends on nothing but the
    binary)."""
    args = shlex.split(spec)
    if not args or args[0] != "ops":
        raise ValueError(f"generated region of 'metaop {spec}': only 'metaop ops ...' is allowed")
    return args


def render(output):
    """A region's text for a command's output: a Markdown table as is, anything else fenced."""
    lines = [line.rstrip() for line in output.strip("\n").splitlines()]
    if lines and all(line.startswith("|") for line in lines):
        return "\n".join(lines) + "\n"
    return "```text\n" + "\n".join(lines) + "\n```\n"


class Outputs:
    """`metaop ops ARGS` outputs, each run once."""

    def __init__(self, metaop):
        self.metaop, self.cache = metaop, {}

    def __call__(self, spec):
        if spec not in self.cache:
            self.cache[spec] = subprocess.run([self.metaop, *command_args(spec)], check=True,
                                              capture_output=True, text=True).stdout
        return self.cache[spec]


def regenerate(text, outputs):
    """(text with every region rewritten, [(spec, line) of the regions that changed])."""
    changed = []

    def one(m):
        new = render(outputs(m.group(2)))
        if new != m.group(3):
            changed.append((m.group(2), text.count("\n", 0, m.start()) + 1))
        return m.group(1) + new + m.group(4)

    return REGION.sub(one, text), changed


def main():
    metaop = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "metaop")
    outputs = Outputs(metaop)
    for path in doc_files(ROOT):
        text = path.read_text()
        new, changed = regenerate(text, outputs)
        for spec, line in changed:
            print(f"{path.relative_to(ROOT)}:{line}: rewrote the output of metaop {spec}")
        if new != text:
            path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
