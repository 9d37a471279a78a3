"""MetaOp from Python: the commands of the `metaop` command line as functions that return objects.

Each function runs the same C++ code as the command of its name, in this process (the extension
module metaop._core), and returns what that command's `--json` would write, read into objects.
A model is a path, the model's bytes or an onnx.ModelProto; inputs are NumPy arrays (or torch
tensors), by input name or in the model's input order, read in place when they are C-contiguous.

    import metaop
    r = metaop.check("model.onnx", bind="torch,onnxruntime")
    for f in r.findings:
        print(f.node, f.op, f.binding, f.cls, f.score, f.reproducer)

Every other option of a command is a keyword argument named after its long option, '-' written
'_' (`kernel_timeout=30` is `--kernel-timeout 30`; True for a flag). Bad input raises
InputError with the command line's message; a kernel that crashes is a finding, not an
exception. docs/python.md has an example per function; metaop.torch works on PyTorch modules.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

# The extension module holds MetaOp's code; the framework plugins (loaded in MetaOp's worker
# processes) resolve their references to it once it is made global there
# (src/bindings/plugin.cpp). A wheel carries its plugins beside it.
_plugins = Path(__file__).with_name("plugins")
if _plugins.is_dir():
    os.environ["METAOP_PLUGIN_PATH"] = os.pathsep.join(
        p for p in (os.environ.get("METAOP_PLUGIN_PATH"), str(_plugins)) if p)

from . import _core  # noqa: E402
from ._command import (InputError, InternalError, Workdir, input_args, joined,  # noqa: E402
                       model_path, option_args, run_command)
from .results import (CheckResult, DiagnoseResult, ExposeResult, Finding,  # noqa: E402
                      ProbeResult, Result, RunResult, TrainResult)

__version__ = _core.version
__all__ = ["run", "check", "probe", "train", "diagnose", "expose", "ops", "InputError",
           "InternalError", "Finding", "Result", "RunResult", "CheckResult", "ProbeResult",
           "TrainResult", "DiagnoseResult", "ExposeResult", "__version__"]

Progress = bool | Callable[[str, float], None] | None


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _folder(value: str | os.PathLike | None, work: Workdir, name: str) -> str:
    return os.fspath(value) if value is not None else work.file(name)


def run(model: Any, inputs: Any = None, *, bind: str | Sequence[str] = "reference",
        random_inputs: bool | None = None, seed: int = 0, range: tuple[float, float] = (-1, 1),
        progress: Progress = None, **options: Any) -> RunResult:
    """Runs a model under a binding plan (`metaop run`) and returns its outputs.

    Args:
        model: path, bytes or onnx.ModelProto.
        inputs: arrays by input name (dict) or in input order (list); inputs not given get
            seeded random values in `range` (random_inputs=False makes that an error).
        bind: the binding plan ("reference", "torch", "onnxruntime", ...).
        seed, range: of the random inputs.
        progress: a tqdm bar (None: when interactive), or a callable(line, share_done).
        **options: any other option of `metaop run` (bind_op=[...], threads=2, dump="dir", ...).

    Returns:
        RunResult: `.outputs` by name (read-only NumPy arrays over MetaOp's memory) and `.log`.
    """
    work = Workdir()
    args, arrays = input_args(inputs)
    cmd = ["run", model_path(model, work), *args, "--bind", joined(bind), "--seed", str(seed),
           "--range", f"{range[0]},{range[1]}"]
    if random_inputs is None or random_inputs:
        cmd.append("--random-inputs")
    cmd += option_args(options)
    o = run_command(cmd, arrays, outputs=True, progress=progress)
    return RunResult(cmd, o.exit_code, o.out, None, work, outputs=o.outputs)


def check(model: Any, inputs: Any = None, *, bind: str | Sequence[str] | None = None,
          samples: int = 1, seed: int = 0, range: tuple[float, float] = (-1, 1),
          whole_graph: bool = False, report: str | os.PathLike | None = None,
          repro: str | os.PathLike | None = None, progress: Progress = None,
          **options: Any) -> CheckResult:
    """Checks a model op by op under framework bindings against the float64 reference
    (`metaop check`): finds, localizes, verifies and triages numerical defects.

    Args:
        model: path, bytes or onnx.ModelProto.
        inputs: arrays by input name or in input order (one sample); default seeded random
            samples in `range`.
        bind: the bindings to check (default: the command line's, those present).
        samples, seed, range: random samples (seed, seed+1, ...).
        whole_graph: also run the model whole in each binding and localize discrepancies.
        report: folder for the HTML report (default: the result's work folder).
        repro: folder for reproducers (default: REPORT/repro).
        progress: a tqdm bar (None: when interactive), or a callable(line, share_done).
        **options: any other option of `metaop check` (inject=["Conv:bias"], bound="rigorous",
            no_verify=True, threads=2, kernel_timeout=30, ...).

    Returns:
        CheckResult: `.findings`, `.nodes`, `.ok`, `.whole_graph`, `.to_json()`,
        `.write_report(dir)`, `.to_pandas()`; shown as a table in notebooks.
    """
    work = Workdir()
    args, arrays = input_args(inputs)
    report_dir = _folder(report, work, "report")
    json_file = work.file("check.json")
    cmd = ["check", model_path(model, work), *args]
    if bind is not None:
        cmd += ["--bind", joined(bind)]
    if inputs is None:
        cmd += ["--samples", str(samples), "--seed", str(seed), "--range", f"{range[0]},{range[1]}"]
    if whole_graph:
        cmd.append("--whole-graph")
    cmd += ["--json", json_file, "--report", report_dir]
    if repro is not None:
        cmd += ["--repro", os.fspath(repro)]
    cmd += option_args(options)
    o = run_command(cmd, arrays, progress=progress)
    return CheckResult(cmd, o.exit_code, o.out, _read_json(json_file), work,
                       report=Path(report_dir))


def probe(ops: str | Sequence[str] | None = None, *, bind: str | Sequence[str] | None = None,
          out: str | os.PathLike | None = None, progress: Progress = None,
          **options: Any) -> ProbeResult:
    """Runs the ONNX node tests (and MetaOp's danger-zone cases) of the given ops under framework
    bindings against the float64 reference (`metaop probe`).

    Args:
        ops: op types (default all).
        bind: the bindings (default: the command line's).
        out: folder for reproducers (default: the result's work folder).
        **options: any other option of `metaop probe` (dtype=[...], testdata=..., ...).
    """
    work = Workdir()
    json_file = work.file("probe.json")
    cmd = ["probe"]
    for op in [ops] if isinstance(ops, str) else (ops or []):
        cmd += ["--op", op]
    if bind is not None:
        cmd += ["--bind", joined(bind)]
    cmd += ["--out", _folder(out, work, "repro"), "--json", json_file, *option_args(options)]
    o = run_command(cmd, progress=progress)
    return ProbeResult(cmd, o.exit_code, o.out, _read_json(json_file), work)


def _train_args(command: str, model: Any, data: Any, labels: Any, loss: str, work: Workdir,
                options: dict[str, Any]) -> list[str]:
    import numpy as np

    from ._command import as_array

    paths = []
    for name, value in (("x", data), ("y", labels)):
        if isinstance(value, (str, os.PathLike)):
            paths.append(os.fspath(value))
        else:
            # Files, not arrays in place: a diagnosis's repairs name their data files.
            p = work.file(f"{name}.npy")
            np.save(p, as_array(name, value))
            paths.append(p)
    return [command, model_path(model, work), "--data", paths[0], "--labels", paths[1],
            "--loss", loss, *option_args(options)]


def train(model: Any, data: Any, labels: Any, *, loss: str, optimizer: str = "sgd",
          lr: float = 0.01, epochs: int = 1, batch_size: int = 32, bind: str = "reference",
          check: bool = False, report: str | os.PathLike | None = None,
          progress: Progress = None, **options: Any) -> TrainResult:
    """Trains a model under a binding plan, forward and backward node by node (`metaop train`).

    Args:
        model: path, bytes or onnx.ModelProto (its initializers are the weights).
        data, labels: arrays (first dimension: samples) or .npy paths.
        loss: cross_entropy, mse, bce_with_logits, ... (as `metaop train --loss`).
        optimizer, lr, epochs, batch_size: as the command line's.
        bind: the binding plan of forward and backward.
        check: check every node's forward and backward against the reference each step.
        report: folder for the HTML report (default: none).
        **options: any other option of `metaop train` (momentum=0.9, bind_update="torch",
            diagnose=True, check_every=5, save="trained.onnx", ...).

    Returns:
        TrainResult: `.losses` per step, `.findings` (check=True), `.diagnosis` (diagnose=True).
    """
    work = Workdir()
    json_file = work.file("train.json")
    opts = dict(optimizer=optimizer, lr=lr, epochs=epochs, batch_size=batch_size, bind=bind,
                check=check, report=report, json=json_file, **options)
    if check and "repro" not in opts:
        opts["repro"] = work.file("repro")
    cmd = _train_args("train", model, data, labels, loss, work, opts)
    o = run_command(cmd, progress=progress)
    return TrainResult(cmd, o.exit_code, o.out, _read_json(json_file), work,
                       report=Path(report) if report else None)


def diagnose(model: Any, data: Any, labels: Any, *, loss: str, optimizer: str = "sgd",
             lr: float = 0.01, epochs: int = 10, batch_size: int = 32,
             bind: str | None = None, repair: bool = True,
             report: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
             progress: Progress = None, **options: Any) -> DiagnoseResult:
    """Trains with monitors and diagnoses training faults (`metaop diagnose`): each symptom, its
    root cause (category and place), whether the model or the framework is at fault, and a
    verified repair.

    Args:
        model, data, labels, loss, optimizer, lr, epochs, batch_size: as metaop.train.
        bind: the binding plan (default: torch when it is built, else the reference).
        repair: try repairs and verify them by training again.
        report: folder for the HTML report; out: folder for the verified repairs.
        **options: any other option of `metaop diagnose` (thresholds such as
            vanish_ratio=1e-4, window=50, ...).

    Returns:
        DiagnoseResult: `.symptoms`, `.diagnoses`, `.repairs`, `.ok` (nothing diagnosed).
    """
    work = Workdir()
    json_file = work.file("diagnose.json")
    opts = dict(optimizer=optimizer, lr=lr, epochs=epochs, batch_size=batch_size, bind=bind,
                no_repair=not repair, report=report, out=out, json=json_file,
                repro=options.pop("repro", None) or work.file("repro"), **options)
    cmd = _train_args("diagnose", model, data, labels, loss, work, opts)
    o = run_command(cmd, progress=progress)
    return DiagnoseResult(cmd, o.exit_code, o.out, _read_json(json_file), work,
                          report=Path(report) if report else None)


def expose(model: Any, inputs: Any = None, *, time_limit: float = 60,
           bind: str | None = None, out: str | os.PathLike | None = None, seed: int = 0,
           progress: Progress = None, **options: Any) -> ExposeResult:
    """Searches for inputs that make the model's NaN/INF danger zones fire (`metaop expose`,
    GRIST style) and says, for each, which node first gives a non-finite value.

    Args:
        model: path, bytes or onnx.ModelProto.
        inputs: the starting inputs (arrays by name or in order); default random.
        time_limit: seconds for the whole search.
        bind: the binding of the verdict run (default: the command line's).
        out: folder for the exposing inputs (default: the result's work folder).
        **options: any other option of `metaop expose` (vary="weights", strategy=...,
            stop_at_first=True, ...).

    Returns:
        ExposeResult: `.targets` with their verdicts, `.exposed`, `.inputs(target)`.
    """
    work = Workdir()
    args, arrays = input_args(inputs)
    json_file = work.file("expose.json")
    cmd = ["expose", model_path(model, work), *args, "--time-limit", str(time_limit),
           "--seed", str(seed), "--out", _folder(out, work, "exposed"), "--json", json_file]
    if inputs is None:
        cmd.append("--random-inputs")
    if bind is not None:
        cmd += ["--bind", bind]
    cmd += option_args(options)
    o = run_command(cmd, arrays, progress=progress)
    return ExposeResult(cmd, o.exit_code, o.out, _read_json(json_file), work)


def ops(**options: Any) -> list[dict[str, Any]]:
    """The coverage matrix (`metaop ops --json`): one record per meta operator and binding with
    forward, backward, dtypes, error model and the reason when a binding declines.
    `missing=True` lists ONNX operators without a meta operator; `danger=True` the danger zones;
    `faults=True` the faults `inject` plants."""
    o = run_command(["ops", "--json", *option_args(options)], progress=False)
    return json.loads(o.out)
