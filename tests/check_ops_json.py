#!/usr/bin/env python3
"""`metaop ops --json` is a list of {op, binding, forward, backward, dtypes, error_model, reason};
every "no" carries a reason, every op has an error model, and each binding's coverage is exactly
what the project claims: CLAIMS below and the README's binding table, both checked against
`metaop ops` (a claim that grows or shrinks is a change to make on purpose, in all three); an op
the ONNX text defines for integers or bool alone is claimed for no other dtype; the fault
benchmark's op lists name registered ops.

Usage: check_ops_json.py METAOP README.md   (the project's Python environment: the current onnx
package's schemas)
"""
import json
import pathlib
import re
import subprocess
import sys

import onnx

# (forward ops, backward ops) per binding.
CLAIMS = {"reference": (173, 128), "torch": (142, 105), "torch-1.13": (141, 104),
          "onednn": (50, 20), "onednn-2.6": (50, 20), "opencv": (154, 0), "opencv-4.6": (86, 0),
          "ort": (170, 0), "ort-1.30": (170, 0), "ort-wasm": (170, 0), "openvino": (164, 0), "tvm": (144, 0)}

rows = json.loads(subprocess.run([sys.argv[1], "ops", "--json"], check=True, capture_output=True,
                                 text=True).stdout)
failed, checks = 0, 0


def check(ok, what):
    global failed, checks
    checks += 1
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


for r in rows:
    if set(r) != {"op", "binding", "forward", "backward", "dtypes", "error_model", "reason"}:
        check(False, f"row with keys {sorted(r)}")
    if not r.get("error_model"):
        check(False, f"{r['op']}: no error model")
    if not r["forward"] and not r["reason"]:
        check(False, f"{r['binding']} {r['op']}: unsupported without a reason")

counts = {}
for b in sorted({r["binding"] for r in rows}):
    counts[b] = (sum(r["forward"] for r in rows if r["binding"] == b),
                 sum(r["backward"] for r in rows if r["binding"] == b))
ops = len({r["op"] for r in rows})
check(set(counts) == set(CLAIMS), f"bindings {sorted(counts)} are those claimed {sorted(CLAIMS)}")
for b, (fwd, bwd) in sorted(CLAIMS.items()):
    f, g = counts.get(b, (None, None))
    check((f, g) == (fwd, bwd), f"{b}: forward {f} ops, backward {g} ops (claimed {fwd}, {bwd})")

# The README's binding table: "| `name` | how | forward | backward |", the first "N ops" of each
# coverage column (the reference's forward is "every meta op", its backward "the N
# differentiable ops"; "-" is none).
readme = {}
for line in open(sys.argv[2]):
    m = re.match(r"\| `([a-z0-9.-]+)` \|(.*)\|(.*)\|(.*)\|\s*$", line)
    if not m:
        continue
    name, _, fwd, bwd = m.groups()

    def count(cell, every):
        if cell.strip() == "-":
            return 0
        if "every meta op" in cell:
            return every
        n = re.search(r"(\d+) (?:differentiable )?ops", cell)
        return int(n.group(1)) if n else None

    readme[name] = (count(fwd, ops), count(bwd, ops))
for b in sorted(counts):
    check(readme.get(b) == counts[b],
          f"README's binding table: {b} {readme.get(b)} = metaop ops {counts[b]}")

# The dtypes each op's schema (the newest opset MetaOp reads) allows its inputs and outputs; an op
# with no floating type among them (And, BitShift, MatMulInteger ...) is claimed for none of the
# dtypes it does not allow. The others may be claimed for more than the text lists: MetaOp's
# reference computes every op in float64, and the frameworks' kernels go past the text (bfloat16).
DTYPE = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
         "tensor(bfloat16)": "bfloat16", "tensor(bool)": "bool"}
DTYPE.update({f"tensor({t})": t for t in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                          "uint32", "uint64")})
FLOATING = {"float32", "float64", "float16", "bfloat16"}


def schema_dtypes(op):
    """The dtypes (MetaOp's names; other types by ONNX's) op's default-domain schema allows its
    inputs and outputs, or None without such a schema."""
    if not onnx.defs.has(op):
        return None
    s = onnx.defs.get_schema(op, 23)
    allowed = {c.type_param_str: c.allowed_type_strs for c in s.type_constraints}
    return {DTYPE.get(t, t) for p in list(s.inputs) + list(s.outputs)
            for t in allowed.get(p.type_str, [p.type_str])}


integer_only = 0
for op in sorted({r["op"] for r in rows}):
    allowed = schema_dtypes(op)
    if allowed is None or allowed & FLOATING:
        continue
    integer_only += 1
    for r in rows:
        if r["op"] == op and r["forward"]:
            check(set(r["dtypes"]) <= allowed,
                  f"{r['binding']} {op}: claims {r['dtypes']}, which the ONNX text allows")
check(integer_only >= 11, f"the ops defined for integers or bool alone are checked "
      f"({integer_only}: And, Or, Xor, Not, the bitwise ops, BitShift, ...)")

# The fault benchmark's own op list (bench/faults.py's SKIP_GENERIC) names registered ops: a
# misspelled one would silently be injected. Its op-specific lists come from `metaop ops
# --faults --json`, whose ops the registry checks.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
import faults  # noqa: E402

registered = {r["op"] for r in rows}
named = set(faults.SKIP_GENERIC).union(*(v for v in faults.fault_catalog(sys.argv[1]).values() if v))
check(named <= registered, f"bench/faults.py names registered ops (not: {sorted(named - registered)})")
# `metaop ops --missing`: the operators of ONNX's default domain through opset 23 without a meta
# operator (read from the current onnx package of the project's Python environment), each with a
# reason; none of them is a meta operator, and If, Loop and Scan (run inlined), the sequence and
# optional operators (lowered to tensor operators as control flow is inlined) and the string
# operators (evaluated there) are not among them.
missing = subprocess.run([sys.argv[1], "ops", "--missing", "--json"], capture_output=True,
                         text=True)
check(missing.returncode == 0, f"metaop ops --missing runs ({missing.stderr.strip()[:200]})")
if missing.returncode == 0:
    listed = json.loads(missing.stdout)
    names = {m["op"] for m in listed}
    check(not names & registered, f"--missing lists no meta operator ({sorted(names & registered)})")
    check(not names & {"If", "Loop", "Scan"}, "--missing leaves out If, Loop and Scan")
    lowered = {"ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
               "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
               "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence"}
    check(not names & lowered, f"--missing leaves out the lowered sequence operators "
          f"({sorted(names & lowered)})")
    check(all(m["reason"].startswith(("left out: ", "not yet")) for m in listed),
          "--missing gives each a reason")
    strings = {"RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"}
    check(not names & strings, f"--missing leaves out the string operators, evaluated as a model "
          f"is lowered ({sorted(names & strings)})")
    left_out = {"Bernoulli", "ImageDecoder", "Multinomial", "RandomNormal", "RandomNormalLike",
                "RandomUniform", "RandomUniformLike"}
    check(names == left_out, f"--missing lists the random draws and ImageDecoder alone "
          f"(more: {sorted(names - left_out)}, fewer: {sorted(left_out - names)})")
print(f"{checks - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
