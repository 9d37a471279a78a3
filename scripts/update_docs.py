#!/usr/bin/python3
"""Rewrites the generated regions of the documentation from the binary: every region between

    <!-- generated: metaop ops ARGS -->
    ...
    <!-- end generated -->

in README.md, CONTRIBUTING.md and docs/*.md becomes the output of `METAOP ops ARGS` (a Markdown
table as printed, any other output in a ```text block). And the counts the documents quote
(COUNTS: "N meta operators", "gradcheck of all N", the README's Bindings table ...) become what
`METAOP ops --json` and tests/known_probe_findings.txt give. ctest docs_fresh
(tests/docs_fresh.py) fails when a region or a count differs from what this would write.

Usage: /usr/bin/python3 scripts/update_docs.py [METAOP]     (default: build/metaop)
"""
import json
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


def coverage(rows):
    """{binding: (forward ops, backward ops)} and the number of meta ops, from `ops --json`."""
    counts = {}
    for r in rows:
        f, b = counts.get(r["binding"], (0, 0))
        counts[r["binding"]] = (f + bool(r["forward"]), b + bool(r["backward"]))
    return counts, len({r["op"] for r in rows})


# The CPU the docs' probe figures were measured on (an AMD EPYC with AVX-512): the list's lines
# marked cpu:FLAG or cpu:!FLAG count where they hold for it.
DOCS_CPU = {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}


def holds_on_docs_cpu(fields):
    cpu = fields[-1] if fields[-1].startswith("cpu:") else None
    return cpu is None or (cpu[4:].lstrip("!") in DOCS_CPU) != cpu.startswith("cpu:!")


def probe_findings(root):
    lines = [line.split() for line in (root / "tests/known_probe_findings.txt").read_text()
             .splitlines() if line.strip() and not line.startswith("#")]
    lines = [f for f in lines if holds_on_docs_cpu(f)]
    frameworks = [f for f in lines if f[0] in ("torch", "onednn", "opencv-4.6")]
    return {"frameworks": len(frameworks),
            "torch updates": sum(f[0] == "torch" and f[1].startswith("update") for f in lines),
            "torch-1.13": sum(f[0] == "torch-1.13" for f in lines),
            "onednn-2.6": sum(f[0] == "onednn-2.6" for f in lines),
            "ort-1.30": sum(f[0] in ("ort-1.30", "ort-wasm") for f in lines),
            "opencv": sum(f[0] == "opencv" for f in lines),
            "ort": sum(f[0] == "ort" for f in lines),
            "openvino": sum(f[0] == "openvino" for f in lines),
            "tvm": sum(f[0] == "tvm" for f in lines)}


def counts_table(rows, root):
    """(document, phrase with (\\d+) groups, the values the groups must have, what they are).
    A phrase must be found at least once, and every place it is found must agree."""
    cov, ops = coverage(rows)
    ref_bwd = cov["reference"][1]
    probe = probe_findings(root)
    return [
        ("README.md", r"\((\d+) meta operators", [ops], "meta operators (metaop ops --json)"),
        ("*", r"(\d+) meta operators", [ops], "meta operators (metaop ops --json)"),
        ("README.md", r"gradcheck of all (\d+)", [ref_bwd], "reference backward ops"),
        ("README.md", r"VJPs for the (\d+) differentiable ops \(the other (\d+) have",
         [ref_bwd, ops - ref_bwd], "reference backward ops, ops without"),
        ("docs/findings.md", r"Its (\d+) findings \(binding x op x kind, (\d+) of them torch's",
         [probe["frameworks"], probe["torch updates"]],
         "probe findings of torch, onednn, opencv-4.6; torch's updates (known_probe_findings.txt)"),
        ("docs/findings.md", r"`--bind torch-1.13` lists (\d+) findings", [probe["torch-1.13"]],
         "probe findings of torch-1.13, Debian's LibTorch (known_probe_findings.txt)"),
        ("docs/findings.md", r"--bind ort-1.30,ort-wasm` \([\d,]+ cases, [\d.]+ s\) lists (\d+) findings",
         [probe["ort-1.30"]], "probe findings of ort-1.30 and ort-wasm (known_probe_findings.txt)"),
        ("docs/findings.md", r"exits 1 with (\d+) findings: openvino (\d+) \(\d+ defect, \d+ "
         r"float32-limit, \d+ convention\), tvm (\d+)",
         [probe["openvino"] + probe["tvm"], probe["openvino"], probe["tvm"]],
         "probe findings of openvino and tvm (known_probe_findings.txt)"),
        ("docs/findings.md", r"`metaop probe --bind ort` lists (\d+) findings", [probe["ort"]],
         "probe findings of ort, ONNX Runtime 1.31 (known_probe_findings.txt)"),
        ("docs/findings.md", r"`metaop probe --bind opencv` lists (\d+) findings",
         [probe["opencv"]], "probe findings of opencv, OpenCV 5.0 (known_probe_findings.txt)"),
        ("docs/findings.md", r"the (\d+) ops\s+`opencv` claims", [cov["opencv"][0]],
         "opencv's forward ops"),
        ("docs/findings.md", r"checks\s+all (\d+) claimed ops", [cov["ort"][0]], "ort's forward ops"),
        ("docs/findings.md", r"`--bind onednn-2.6` (\d+) of its own", [probe["onednn-2.6"]],
         "probe findings of onednn-2.6, Debian's oneDNN (known_probe_findings.txt)"),
        ("docs/findings.md",
         r"reference on all (\d+) ops\s+`onednn` claims and all (\d+) `onednn-2.6` claims",
         [cov["onednn"][0], cov["onednn-2.6"][0]], "onednn's and onednn-2.6's forward ops"),
        ("docs/findings.md", r"the reference on all (\d+) and (\d+) they\s+claim",
         [cov["onednn"][1], cov["onednn-2.6"][1]], "onednn's and onednn-2.6's backward ops"),
        ("docs/findings.md", r"on all (\d+) ops the torch\s+binding claims", [cov["torch"][0]],
         "torch's forward ops"),
        ("docs/findings.md", r"reference on\s+all (\d+) it claims", [cov["torch"][1]],
         "torch's backward ops"),
    ]


CELL = r"((?:\\\||[^|\n])*)"  # a cell's text, escaped pipes (\|) included
BINDING_ROW = re.compile(rf"^\| `([a-z0-9.-]+)` \|{CELL}\|{CELL}\|{CELL}\|$", re.M)
OPS_IN_CELL = re.compile(r"(\d+)( (?:differentiable )?ops)")


def recount(rel, text, rows, root):
    """(text with every count of counts_table and the README's Bindings table set to what the
    binary gives, [what changed])."""
    changed = []
    for doc, phrase, want, what in counts_table(rows, root):
        if doc not in ("*", rel):
            continue

        def one(m, want=want, what=what):
            got = [int(g) for g in m.groups()]
            if got == want:
                return m.group(0)
            changed.append(f"{what}: {got} -> {want}")
            out, last = "", m.start()
            for k, value in enumerate(want, 1):
                out += text[last:m.start(k)] + str(value)
                last = m.end(k)
            return out + text[last:m.end()]

        text = re.sub(phrase, one, text)
    if rel == "README.md":
        cov, _ = coverage(rows)

        def row(m):
            if m.group(1) not in cov:
                return m.group(0)
            out = m.group(0)
            for k, value in ((3, cov[m.group(1)][0]), (4, cov[m.group(1)][1])):
                cell = m.group(k)
                new = OPS_IN_CELL.sub(lambda c, v=value: f"{v}{c.group(2)}", cell, count=1)
                if new != cell:
                    changed.append(f"Bindings table, {m.group(1)}: {cell.strip()} -> {new.strip()}")
                    out = out.replace(f"|{cell}|", f"|{new}|", 1)
            return out

        text = BINDING_ROW.sub(row, text)
    return text, changed


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
    rows = json.loads(outputs("ops --json"))
    for path in doc_files(ROOT):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        new, changed = regenerate(text, outputs)
        for spec, line in changed:
            print(f"{rel}:{line}: rewrote the output of metaop {spec}")
        new, counts = recount(rel, new, rows, ROOT)
        for c in counts:
            print(f"{rel}: {c}")
        if new != text:
            path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
