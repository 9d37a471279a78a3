#!/usr/bin/env python3
"""The PyTorch eager calls of the framework-native reproducer (src/report/core/native/
reproduce.py, torch_ops) make what MetaOp's torch binding makes: for every op they map, the
ONNX node tests of that op (float32 data, or the integer or bool data the binding claims for the
op; opset 7 and later for ops of several inputs) run once through `metaop run --bind torch` (one
model per opset, every test's node side by side; a node the binding refuses is not a test) and
once through the eager calls, with the attributes as repro.json gives them (the schema's defaults
filled in); the outputs must be the same bits. A reproducer whose script computed something else
would not show the finding.

Usage: torch_eager_map.py METAOP WORK_DIR NODE_TESTS...   (the project's Python environment:
torch and onnx; NODE_TESTS: folders of backend-test folders, Debian's ONNX 1.12 data and the
current onnx package's as scripts/onnx_node_tests.py writes them; a test at the same opset in
two of them runs once)
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

METAOP, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
TESTDATA = [os.path.abspath(a) for a in sys.argv[3:]]
MAX_OPSET = 23  # the newest opset MetaOp reads (kMaxOpset)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "report", "core",
                      "native", "reproduce.py")
spec = importlib.util.spec_from_file_location("reproduce", SOURCE)
reproduce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reproduce)
OPS = reproduce.torch_ops()
torch.set_num_threads(1)  # as the script does: the binding's one intra-op thread (--threads 1)
T = onnx.TensorProto
DATA = {T.FLOAT, T.DOUBLE, T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.BOOL}
# The dtypes the torch binding claims for each op (metaop ops --json): an op that claims float64,
# integer or bool data is tested on those node tests too, and must run them on torch.
r = subprocess.run([METAOP, "ops", "--json"], capture_output=True, text=True, check=True)
CLAIMS = {o["op"]: set(o["dtypes"]) for o in json.loads(r.stdout)
          if o["binding"] == "torch" and o["forward"]}
ONNX_NAME = {T.DOUBLE: "float64", T.INT8: "int8", T.INT16: "int16", T.INT32: "int32",
             T.INT64: "int64", T.UINT8: "uint8", T.BOOL: "bool"}


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
seen = set()
for model_path in sorted(p for d in TESTDATA for p in glob.glob(os.path.join(d, "*",
                                                                              "model.onnx"))):
    model = onnx.load(model_path)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    key = (os.path.basename(os.path.dirname(model_path)), opset)
    if opset > MAX_OPSET or key in seen:
        continue
    seen.add(key)
    pbs = sorted(glob.glob(os.path.join(os.path.dirname(model_path), "test_data_set_0",
                                        "input_*.pb")))
    # Before opset 7 broadcasting was explicit: ops of several inputs are not run there.
    if (len(graph.node) != 1 or graph.node[0].op_type not in OPS or
            (opset < 7 and len(graph.node[0].input) > 1) or graph.initializer or
            len(pbs) != len(graph.input)):
        continue
    values = [numpy_helper.to_array(onnx.load_tensor(p)) for p in pbs]
    types = [i.type.tensor_type.elem_type for i in graph.input]
    # float32 data, or the float64, integer or bool data the op claims (its first input's dtype).
    claimed = ONNX_NAME.get(types[0]) in CLAIMS.get(graph.node[0].op_type, set())
    if any(t not in DATA for t in types) or not (claimed or any(
            v.dtype == np.float32 for v in values)):
        continue
    by_opset[opset].append((os.path.basename(os.path.dirname(model_path)), graph, values,
                            claimed))

tested = collections.Counter()
fell_back = []
for opset, tests in sorted(by_opset.items()):
    # One model: each test's node with its names prefixed, its inputs graph inputs.
    nodes, inputs, outputs, feeds = [], [], [], []
    for k, (name, graph, values, _) in enumerate(tests):
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
    out, dump = os.path.join(WORK, f"out{opset}"), os.path.join(WORK, f"dump{opset}")
    r = subprocess.run([METAOP, "run", path, "--bind", "torch", "--out", out, "--dump", dump] +
                       feeds, capture_output=True, text=True)
    check(r.returncode == 0, f"opset {opset}: metaop run --bind torch on {len(tests)} node tests",
          r.stdout[-3000:] + r.stderr[-3000:])
    if r.returncode != 0:
        continue
    # Which binding ran each node (the dump's index: node, op, binding, value, file).
    ran_on = {line.split("\t")[0]: line.split("\t")[2]
              for line in open(os.path.join(dump, "index.txt")).read().splitlines()}
    for k, (name, graph, values, claimed) in enumerate(tests):
        node = graph.node[0]
        if ran_on.get(f"t{k}_{name}") != "torch":
            # The binding refused the node (an attribute or shape it does not take): the output
            # is the reference's, no test of the eager calls. A claimed dtype must not be refused.
            fell_back.append(f"{name} ({node.op_type})")
            check(not claimed, f"{name} ({node.op_type}, opset {opset}) runs on torch, whose "
                  f"claims include its data's dtype", r.stdout[-2000:])
            continue
        attrs = dict(attributes(node, opset), _op=node.op_type)
        named = {vi.name: torch.from_numpy(v.copy()) for vi, v in zip(graph.input, values)}
        with torch.no_grad():
            eager = OPS[node.op_type](attrs, [named[i] if i else None for i in node.input], opset)
        # The eager call returns the outputs by position; the node may leave some out ("").
        position = {o: i for i, o in enumerate(node.output) if o}
        for vo in graph.output:
            e = eager[position[vo.name]]
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
print(f"{sum(tested.values())} node tests of {len(tested)} ops; mapped ops without a node test "
      f"here that runs on torch: {', '.join(missing) or 'none'}; node tests the binding refused "
      f"(the reference ran them): {', '.join(fell_back) or 'none'}")
check(len(tested) >= len(OPS) * 3 // 4, f"most mapped ops are tested ({len(tested)} of {len(OPS)})")
finish()
