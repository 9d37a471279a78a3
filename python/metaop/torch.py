"""MetaOp on PyTorch modules: export in memory, run MetaOp, and say where in the module each
finding comes from.

    import metaop.torch
    r = metaop.torch.check(model, (x,), bind="torch")
    for f in r.findings:
        print(f.module, f.source, f.op, f.cls, f.score)

The module is exported with PyTorch's current ONNX exporter (torch.onnx.export(dynamo=True)),
or the TorchScript-based one (exporter="legacy"). Every ONNX node is mapped back to the module's
qualified name (from the exporter's name scopes, or the legacy exporter's "/a/a.0/Op" names) and,
where the exporter records it, the source line. `watch` monitors a training loop as it runs
(metaop.watch).
"""
from __future__ import annotations

import inspect
import io
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

import metaop

from .results import CheckResult, ExposeResult, RunResult
from .watch import Watch, watch  # noqa: F401

__all__ = ["export", "check", "run", "expose", "watch", "Watch", "Origin", "origins"]


@dataclass
class Origin:
    """Where an ONNX node comes from in the PyTorch program: the module's qualified name ("" for
    the top module), its class, and the source line ("file:line") when the exporter records
    it."""

    module: str
    module_class: str | None = None
    source: str | None = None


def _flat_tensors(args: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    if isinstance(args, torch.Tensor):
        out.append(args)
    elif isinstance(args, Mapping):
        for v in args.values():
            out += _flat_tensors(v)
    elif isinstance(args, (list, tuple)):
        for v in args:
            out += _flat_tensors(v)
    return out


def export(module: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None = None, *,
           exporter: str = "dynamo", opset: int | None = None) -> Any:
    """The module as an onnx.ModelProto, exported in memory with its weights.

    exporter: "dynamo" (torch.onnx.export(dynamo=True), PyTorch 2's) or "legacy" (the
    TorchScript-based exporter). opset: the exporter's default when None.
    """
    import onnx

    args = args if isinstance(args, tuple) else (args,)
    if exporter == "dynamo":
        program = torch.onnx.export(module, args, kwargs=dict(kwargs or {}), dynamo=True,
                                    opset_version=opset, verbose=False)
        return program.model_proto
    if exporter != "legacy":
        raise ValueError(f"exporter {exporter!r}: expected 'dynamo' or 'legacy'")
    buf = io.BytesIO()
    extra: dict[str, Any] = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        extra["dynamo"] = False  # PyTorch 2; 1.x has the legacy exporter only
    if kwargs:
        args = (*args, dict(kwargs))  # the legacy exporter's way: a dict last
    torch.onnx.export(module, args, buf, opset_version=opset or 17, **extra)
    return onnx.load_from_string(buf.getvalue())


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_LIST = re.compile(r"'((?:[^'\\]|\\.)*)'")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _scopes(text: str) -> list[str]:
    """The exporter writes lists as Python literals: "['', 'body', 'body.0']"."""
    return _LIST.findall(text)


def origins(model: Any) -> dict[str, Origin]:
    """Where each node of an exported model (an onnx.ModelProto) comes from, by node name."""
    out: dict[str, Origin] = {}
    for node in model.graph.node:
        meta = {p.key: p.value for p in getattr(node, "metadata_props", [])}  # onnx < 1.16 has none
        scopes = meta.get("pkg.torch.onnx.name_scopes")
        if scopes is not None:
            # ['', 'body', 'body.0', 'linear'] beside ['M', 'Sequential', 'Linear',
            # 'aten.linear.default']: the last pair is the operation, the one before it the
            # module that called it.
            names = _scopes(scopes)
            classes = _scopes(meta.get("pkg.torch.onnx.class_hierarchy", "[]"))
            frames = _FRAME.findall(meta.get("pkg.torch.onnx.stack_trace", ""))
            # The innermost frame of the user's code (torch.nn's own forward calls are not).
            mine = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
            frame = (mine or frames)[-1] if frames else None
            source = f"{frame[0]}:{frame[1]}" if frame else None
            k = len(names) - 2
            out[node.name] = Origin(names[k] if k >= 0 else "",
                                    classes[k] if 0 <= k < len(classes) else None, source)
        elif node.name.startswith("/"):
            # The legacy exporter: one part per module, some qualified ("layer1.0"), some the
            # attribute's name ("conv1"): "/layer1/layer1.0/conv1/Conv" is layer1.0.conv1.
            q = ""
            for part in node.name.strip("/").split("/")[:-1]:
                q = part if (q and part.startswith(q + ".")) or (not q) else f"{q}.{part}"
            out[node.name] = Origin(q)
    return out


def _inputs(model: Any, args: Any, kwargs: Mapping[str, Any] | None) -> list[np.ndarray]:
    tensors = _flat_tensors(args) + _flat_tensors(dict(kwargs or {}))
    n = len(model.graph.input)
    if len(tensors) != n:
        raise metaop.InputError(
            f"the exported model has {n} inputs but the call gives {len(tensors)} tensors")
    return [t.detach().cpu().contiguous().numpy() for t in tensors]


def _annotate(result: Any, where: Mapping[str, Origin]) -> None:
    for f in getattr(result, "findings", []):
        o = where.get(f.node)
        if o is not None:
            f.module, f.source = o.module, o.source
    for t in getattr(result, "targets", []):
        o = where.get(t.get("node", ""))
        if o is not None:
            t["module"], t["source"] = o.module, o.source
    result.origins = dict(where)


def check(module: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None = None, *,
          bind: str | Sequence[str] | None = "torch", exporter: str = "dynamo",
          opset: int | None = None, **options: Any) -> CheckResult:
    """Exports `module` called on `args` (and `kwargs`) and checks it op by op (metaop.check)
    on those inputs; each finding carries `.module` (qualified name) and `.source`.

    bind: the bindings to check ("torch": the PyTorch this package was built with, as LibTorch
    kernels). **options: any option of metaop.check (samples, whole_graph, inject, ...).
    """
    model = export(module, args, kwargs, exporter=exporter, opset=opset)
    r = metaop.check(model, _inputs(model, args, kwargs), bind=bind, **options)
    _annotate(r, origins(model))
    return r


def run(module: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None = None, *,
        bind: str | Sequence[str] = "reference", exporter: str = "dynamo",
        opset: int | None = None, **options: Any) -> RunResult:
    """Exports `module` and runs it under a binding plan (default the float64 reference) on
    `args`: `.outputs` by the exported model's output names."""
    model = export(module, args, kwargs, exporter=exporter, opset=opset)
    r = metaop.run(model, _inputs(model, args, kwargs), bind=bind, **options)
    r.origins = origins(model)
    return r


def expose(module: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None = None, *,
           exporter: str = "dynamo", opset: int | None = None, **options: Any) -> ExposeResult:
    """Exports `module` and searches for inputs near `args` that make its danger zones fire
    (metaop.expose); each target carries "module" and "source"."""
    model = export(module, args, kwargs, exporter=exporter, opset=opset)
    r = metaop.expose(model, _inputs(model, args, kwargs), **options)
    _annotate(r, origins(model))
    return r
