#!/usr/bin/env python3
"""The PyTorch eager calls of the framework-native reproducer (src/report/core/native/
reproduce.py, torch_ops) make what MetaOp's torch binding makes: for every op they map, the
ONNX node tests of that op (float32 data; opset 7 and later for ops of several inputs) run once through `metaop run --bind
torch` (one model per opset, every test's node side by side) and once through the eager calls,
with the attributes as repro.json gives them (the schema's defaults filled in); the outputs must
be the same bits. A reproducer whose script computed something else would not show the finding.

Usage: torch_eager_map.py METAOP TESTDATA WORK_DIR   (the project's Python environment: torch
and onnx)
"""
import collections
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, finish  # noqa: E402

METAOP, TESTDATA, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "report", "core",
                      "native", "reproduce.py")
spec = importlib.util.spec_from_file_location("reproduce", SOURCE)
reproduce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reproduce)
OPS = reproduce.torch_ops()
torch.set_num_threads(1)  # as the script does: the binding's one intra-op thread (--threads 1)
DATA = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL}


def attributes(node, opset):
    """The node's attributes with the schema's defaults, as repro.json's onnx_node has them."""
    attrs = {}
    schema = onnx.defs.get_schema(node.op_type, opset, "")
    for name, a in schema.attributes.items():
        if a.default_value.type != onnx.AttributeProto.UNDEFINED:
            attrs[name] = helper.get_attribute_value(a.default_value)
    for a in node.attribute:
        attrs[a.name] = helper.get_attribute_value(a)
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}


# The node tests of the mapped ops, grouped by opset.
by_opset = collections.defaultdict(list)
for model_path in sorted(glob.glob(os.path.join(TESTDATA, "*", "model.onnx"))):
    model = onnx.load(model_path)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    pbs = sorted(glob.glob(os.path.join(os.path.dirname(model_path), "test_data_set_0",
                                        "input_*.pb")))
    # Before opset 7 broadcasting was explicit: ops of several inputs are not run there.
    if (len(graph.node) != 1 or graph.node[0].op_type not in OPS or
            (opset < 7 and len(graph.node[0].input) > 1) or graph.initializer or
            len(pbs) != len(graph.input)):
        continue
    values = [numpy_helper.to_array(onnx.load_tensor(p)) for p in pbs]
    if any(i.type.tensor_type.elem_type not in DATA for i in graph.input) or not any(
            v.dtype == np.float32 for v in values):
        continue
    by_opset[opset].append((os.path.basename(os.path.dirname(model_path)), graph, values))

tested = collections.Counter()
for opset, tests in sorted(by_opset.items()):
    # One model: each test's node with its names prefixed, its inputs graph inputs.
    nodes, inputs, outputs, feeds = [], [], [], []
    for k, (name, graph, values) in enumerate(tests):
        p = f"t{k}_"
        node = onnx.NodeProto()
        node.CopyFrom(graph.node[0])
        node.name = p + name
        node.input[:] = [p + i if i else "" for i in node.input]
        node.output[:] = [p + o if o else "" for o in node.output]
        nodes.append(node)
        for vi, v in zip(graph.input, values):
            inputs.append(helper.make_tensor_value_info(p + vi.name, vi.type.tensor_type.elem_type,
                                                        list(v.shape)))
            f = os.path.join(WORK, f"{opset}_{p}{vi.name}.npy")
            np.save(f, v)
            feeds += ["--input", f"{p}{vi.name}={f}"]
        for vo in graph.output:
            o = onnx.ValueInfoProto()
            o.CopyFrom(vo)
            o.name = p + vo.name
            outputs.append(o)
    model = helper.make_model(helper.make_graph(nodes, f"opset{opset}", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    path = os.path.join(WORK, f"opset{opset}.onnx")
    onnx.save(model, path)
    out = os.path.join(WORK, f"out{opset}")
    r = subprocess.run([METAOP, "run", path, "--bind", "torch", "--out", out] + feeds,
                       capture_output=True, text=True)
    check(r.returncode == 0, f"opset {opset}: metaop run --bind torch on {len(tests)} node tests",
          r.stdout[-3000:] + r.stderr[-3000:])
    if r.returncode != 0:
        continue
    fell_back = r.stdout + r.stderr
    for k, (name, graph, values) in enumerate(tests):
        node = graph.node[0]
        attrs = dict(attributes(node, opset), _op=node.op_type)
        named = {vi.name: torch.from_numpy(v.copy()) for vi, v in zip(graph.input, values)}
        with torch.no_grad():
            eager = OPS[node.op_type](attrs, [named[i] if i else None for i in node.input], opset)
        for vo, e in zip(graph.output, eager):
            got = np.load(os.path.join(out, f"t{k}_{vo.name}.npy"))
            e = e.numpy()
            same = got.shape == e.shape and got.dtype == e.dtype and (
                np.array_equal(got, e, equal_nan=True) if got.dtype.kind == "f"
                else np.array_equal(got, e))
            check(same, f"{name} ({node.op_type}, opset {opset}) {vo.name}: eager = torch binding",
                  f"binding {got.dtype}{got.shape} {got.ravel()[:6]}, eager {e.dtype}{e.shape} "
                  f"{e.ravel()[:6]}")
        tested[node.op_type] += 1

missing = sorted(set(OPS) - set(tested))
print(f"{sum(tested.values())} node tests of {len(tested)} ops; mapped ops without a float32 "
      f"node test here: {', '.join(missing) or 'none'}")
check(len(tested) >= len(OPS) * 3 // 4, f"most mapped ops are tested ({len(tested)} of {len(OPS)})")
finish()
