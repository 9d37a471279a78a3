"""How the package runs a command: the arguments of `metaop COMMAND ...` made from Python values,
the model and arrays handed over in memory, a progress bar, and the failure raised."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from . import _core

ModelLike = Any  # a path (str or os.PathLike), the model's bytes, or an onnx.ModelProto


class InputError(ValueError):
    """A bad model, input or option: the message is the line the command line prints after
    "metaop: error: " (it names the file, node or value at fault)."""

    __module__ = "metaop"


class InternalError(RuntimeError):
    """A failure of MetaOp itself (a bug: please report it with the message)."""

    __module__ = "metaop"


class Workdir:
    """A folder for what a call writes when no folder was given (the model given as bytes, the
    training data, reproducers, the report, JSON): removed when the result holding it is
    gone."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="metaop-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    def file(self, name: str) -> str:
        return str(self.path / name)

    def keep(self) -> None:
        """Keeps the folder after the result is gone."""
        self._finalizer.detach()


def model_path(model: ModelLike, work: Workdir) -> str:
    """The model as a file the command reads: a path as it is, bytes or an onnx.ModelProto
    written into the work folder."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    else:
        raise TypeError(
            f"model: expected a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    path = work.file("model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    return path


def as_array(name: str, value: Any) -> np.ndarray:
    """A value MetaOp reads in place: C-contiguous, aligned, native byte order (copied only when
    it is not already)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor
        value = value.detach().cpu().numpy()
    a = np.asarray(value)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("="))
    return np.ascontiguousarray(a)


def input_args(inputs: Any) -> tuple[list[str], dict[str, np.ndarray]]:
    """--input arguments for in-memory arrays (a dict by input name, or a sequence in the
    model's input order) or files (str / os.PathLike values)."""
    if inputs is None:
        return [], {}
    args: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    items: Iterable[tuple[str | None, Any]]
    if isinstance(inputs, Mapping):
        items = inputs.items()
    elif isinstance(inputs, (list, tuple)):
        items = [(None, v) for v in inputs]
    else:
        items = [(None, inputs)]
    for k, (name, value) in enumerate(items):
        if isinstance(value, (str, os.PathLike)):
            args += ["--input", os.fspath(value) if name is None else f"{name}={os.fspath(value)}"]
            continue
        key = name if name is not None else f"input {k}"
        arrays[key] = as_array(key, value)
        path = f"<array {key}>"
        args += ["--input", path if name is None else f"{name}={path}"]
    return args, arrays


def option_args(options: Mapping[str, Any]) -> list[str]:
    """Any other option of the command by its long name, '-' written '_': True is a flag, False
    and None leave it out, a list repeats it, a pair (LO, HI) is 'LO,HI'."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, set)):
            for v in value:
                out += [flag, str(v)]
        elif isinstance(value, tuple):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return out


def joined(value: str | Sequence[str] | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return ",".join(value)


def _interactive() -> bool:
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Bar:
    """A tqdm bar fed by the command's progress lines (share done, and the line as its
    description)."""

    def __init__(self, what: str) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=1000, desc=what, leave=False, dynamic_ncols=True,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}")
        self._what = what

    def __call__(self, line: str, done: float) -> None:
        if done >= 0:
            self._bar.n = int(round(1000 * min(max(done, 0.0), 1.0)))
        self._bar.set_postfix_str(line, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def _quiet(line: str, done: float) -> None:
    pass


def run_command(args: list[str], arrays: Mapping[str, np.ndarray] | None = None,
                outputs: bool = False, progress: bool | Callable[[str, float], None] | None = None,
                echo: bool = False) -> Any:
    """Runs `metaop ARGS...` in this process and returns its outcome (exit code, what it printed,
    `run`'s outputs). Raises InputError, MemoryError or InternalError as the command line would
    exit 2; the command's notes and warnings (its stderr) go to sys.stderr."""
    bar = None
    # Always a callback: it is where Ctrl-C is noticed during a long call.
    callback: Callable[[str, float], None] = _quiet
    if callable(progress):
        callback = progress
    elif progress or (progress is None and _interactive()):
        bar = _Bar(f"metaop {args[0]}")
        callback = bar
    try:
        o = _core.command(list(args), dict(arrays or {}), outputs, callback)
    finally:
        if bar is not None:
            bar.close()
    if o.err:
        sys.stderr.write(o.err)
    if echo and o.out:
        sys.stdout.write(o.out)
    if o.failure_kind == "input":
        raise InputError(o.failure)
    if o.failure_kind == "memory":
        raise MemoryError(o.failure)
    if o.failure_kind:
        raise InternalError(o.failure)
    return o
