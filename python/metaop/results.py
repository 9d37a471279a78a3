"""What the functions of metaop return: the command's JSON document, read into objects, with what
the command printed and where its files are."""
from __future__ import annotations

import html
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ._command import Workdir


class Result:
    """What every command returns.

    Attributes:
        command: the command line that ran (`metaop` and its arguments).
        exit_code: as the command line exits: 0 clean, 1 findings or faults.
        log: what the command printed (its summary).
        json: the command's JSON document (the same as `--json FILE` writes), or None.
        workdir: the folder of files written for this result (removed with it) or None.
    """

    def __init__(self, command: list[str], exit_code: int, log: str,
                 document: Any = None, workdir: Workdir | None = None) -> None:
        self.command = ["metaop", *command]
        self.exit_code = exit_code
        self.log = log
        self.json = document
        self._work = workdir
        self.workdir = workdir.path if workdir else None

    @property
    def ok(self) -> bool:
        """True when the command exits 0: nothing found (or nothing diagnosed)."""
        return self.exit_code == 0

    def to_json(self, indent: int | None = 1) -> str:
        """The command's JSON document as text (what `--json` writes)."""
        return json.dumps(self.json, indent=indent)

    def keep(self) -> Path | None:
        """Keeps the work folder (reproducers, report) after this result is gone; returns it."""
        if self._work:
            self._work.keep()
        return self.workdir

    def __str__(self) -> str:
        return self.log

    def __repr__(self) -> str:
        return f"<{type(self).__name__} exit {self.exit_code}>"


class RunResult(Result):
    """`metaop.run`: the graph's outputs by name (NumPy arrays over MetaOp's memory, read-only)."""

    def __init__(self, *args: Any, outputs: Mapping[str, np.ndarray], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.outputs: dict[str, np.ndarray] = dict(outputs)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]


def _number(v: Any) -> float | None:
    """JSON numbers as floats; MetaOp writes NaN and infinities as strings."""
    if v is None:
        return None
    if isinstance(v, str):
        return float(v.replace("Infinity", "inf"))
    return float(v)


@dataclass
class Finding:
    """One finding of `check` (or `train --check`): a node's kernel under a binding that the
    float64 reference and its error model do not admit.

    `cls` is the triage class (defect, float32-limit, convention, untriaged: docs/check.md);
    `worst` the worst element (output, flat index, reference value, the binding's value,
    tolerance); `reproducer` the folder of its reproducer (its README and `repro.json` say how to
    run it with MetaOp and with the framework alone). `module` and `source` are set by
    metaop.torch: the PyTorch module (qualified name) and source line the node came from.
    """

    node: str
    op: str
    binding: str
    phase: str
    kind: str
    cls: str | None
    score: float | None
    detail: str
    verified: bool
    verification: str
    reproducer: str | None
    worst: dict[str, Any] | None = None
    sample: int | None = None
    module: str | None = None
    source: str | None = None
    data: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> "Finding":
        worst = None
        if "output" in j:
            worst = {"output": j["output"], "index": j.get("index"),
                     "reference": _number(j.get("reference_value")),
                     "value": _number(j.get("binding_value")),
                     "tolerance": _number(j.get("tolerance"))}
        return cls(node=j.get("node", ""), op=j.get("op_type", ""), binding=j.get("binding", ""),
                   phase=j.get("phase", ""), kind=j.get("kind", ""), cls=j.get("class"),
                   score=_number(j.get("score")), detail=j.get("detail", ""),
                   verified=bool(j.get("verified", False)),
                   verification=j.get("verification", ""), reproducer=j.get("repro"),
                   worst=worst, sample=j.get("sample"), data=dict(j))

    @property
    def defect(self) -> bool:
        return self.cls == "defect"


_COLUMNS = ["node", "module", "op", "binding", "phase", "kind", "cls", "score", "verified",
            "reproducer", "detail"]


def _score_text(s: float | None) -> str:
    if s is None:
        return ""
    if math.isinf(s) or math.isnan(s):
        return str(s)
    return f"{s:.3g}"


class CheckResult(Result):
    """`metaop.check`: the findings, the nodes, and the whole-graph verdicts when asked for.

    Attributes:
        findings: [Finding], as the JSON lists them.
        nodes: [{"name", "op_type"}] of the model as checked.
        runs: per binding and sample: time, output error, per-node errors (the JSON's "runs").
        whole_graph: the whole-graph verdicts (check(..., whole_graph=True)) or None.
        report: the folder of the HTML report (index.html), or None.
    """

    def __init__(self, *args: Any, report: Path | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        doc = self.json or {}
        self.findings: list[Finding] = [Finding.from_json(f) for f in doc.get("findings", [])]
        self.nodes: list[dict[str, Any]] = doc.get("nodes", [])
        self.runs: list[dict[str, Any]] = doc.get("runs", [])
        self.whole_graph: dict[str, Any] | None = doc.get("whole_graph")
        self.report = report

    @property
    def defects(self) -> list[Finding]:
        return [f for f in self.findings if f.cls == "defect"]

    def write_report(self, folder: str | Path) -> Path:
        """Copies the HTML report (index.html and its reproducers) into `folder`; returns the
        path of index.html."""
        if self.report is None:
            raise ValueError("this check wrote no report")
        folder = Path(folder)
        shutil.copytree(self.report, folder, dirs_exist_ok=True)
        return folder / "index.html"

    def to_pandas(self) -> Any:
        """The findings as a pandas DataFrame (one row per finding; pandas must be installed)."""
        import pandas as pd

        rows = [{c: getattr(f, c) for c in _COLUMNS} for f in self.findings]
        return pd.DataFrame(rows, columns=_COLUMNS)

    def _repr_html_(self) -> str:
        e = html.escape
        head = (f"<p><b>metaop check</b> {e(str((self.json or {}).get('model', '')))}: "
                f"{len(self.nodes)} nodes, {len(self.findings)} finding(s), exit "
                f"{self.exit_code}</p>")
        if not self.findings:
            return head + "<p>No findings.</p>"
        rows = "".join(
            "<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in (
                f.node, f.module or "", f.op, f.binding, f.phase, f.kind, f.cls or "",
                _score_text(f.score), "yes" if f.verified else "no", f.reproducer or "")) +
            "</tr>" for f in self.findings)
        header = "".join(f"<th>{c}</th>" for c in (
            "node", "module", "op", "binding", "phase", "kind", "class", "score", "verified",
            "reproducer"))
        return head + f"<table class='metaop-findings'><tr>{header}</tr>{rows}</table>"

    def __repr__(self) -> str:
        classes = (self.json or {}).get("classes", {})
        return (f"<CheckResult {len(self.findings)} finding(s) {classes} exit "
                f"{self.exit_code}>")


class ProbeResult(Result):
    """`metaop.probe`: the findings over the ONNX node tests (the JSON's "findings") and the
    per-op counts."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        doc = self.json or {}
        self.findings: list[dict[str, Any]] = doc.get("findings", [])


class TrainResult(Result):
    """`metaop.train`: per-step losses and, with check=True, the findings (the JSON's)."""

    def __init__(self, *args: Any, report: Path | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        doc = self.json or {}
        self.report = report
        self.losses: list[float | None] = [_number(v) for v in doc.get("losses", [])]
        self.diagnosis: dict[str, Any] | None = doc.get("diagnosis")
        self.findings: list[Finding] = [Finding.from_json(f) for f in doc.get("findings", [])]


class DiagnoseResult(Result):
    """`metaop.diagnose`: symptoms, diagnoses (category, place, model or framework) and the
    verified repairs (the JSON's)."""

    def __init__(self, *args: Any, report: Path | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        doc = self.json or {}
        self.report = report
        self.symptoms: list[dict[str, Any]] = doc.get("symptoms", [])
        self.diagnoses: list[dict[str, Any]] = doc.get("diagnoses", [])
        self.repairs: list[dict[str, Any]] = doc.get("repairs", [])

    @property
    def ok(self) -> bool:
        """True when nothing was diagnosed."""
        return self.exit_code == 0


class ExposeResult(Result):
    """`metaop.expose`: each target and its verdict (the JSON's "targets"); exposed ones have the
    folder of the exposing input."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        doc = self.json or {}
        self.targets: list[dict[str, Any]] = doc.get("targets", [])

    @property
    def exposed(self) -> list[dict[str, Any]]:
        return [t for t in self.targets if t.get("exposed")]

    def inputs(self, target: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The exposing input of a target (its "input_files"), by the file's name without .npy
        (the model input's name, made safe for a file name)."""
        out: dict[str, np.ndarray] = {}
        for f in target.get("input_files") or []:
            out[Path(f).stem] = np.load(f)
        return out
