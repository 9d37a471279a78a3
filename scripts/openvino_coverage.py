#!/usr/bin/env python3
"""Screens the OpenVINO adapter (src/bindings/openvino/openvino_adapter.py) on MetaOp's ops and
writes a table: op -> status per dtype, with the reasons.

Cases: the ONNX node tests (libonnx-testdata) whose op is a MetaOp op, exported the way MetaOp
exports a node (data inputs as graph inputs, weights, shapes, axes and indices as initializers);
MetaOp's own sample cases (the `.cases` of src/ops, re-seeded); a few cases of opsets after 17.
Each runs in its own dtypes and, for floating tests, as float32, float64, float16 and bfloat16
variants, at every adapter level, in a worker process (a crash or hang is recorded, not fatal).
Expected outputs: the node test's own, else onnx.reference on the model's float64 variant
(exact widening of the inputs), rounded to the case's dtype.

This is a screening, not MetaOp's judgement (its error models judge the binding): a float
output matches when max|d| <= atol + rtol * max|ref| (float32 1e-4/1e-5, float16 4e-3/1e-3,
bfloat16 and the bf16 level 3e-2/1e-2, float64 1e-11/1e-12), NaN and infinities must agree, and
anything else must be equal.

Usage: .venv/bin/python scripts/openvino_coverage.py [--metaop build/metaop]
           [--out src/bindings/openvino/coverage.tsv] [--details FILE.jsonl] [--only OP,...]
"""
import argparse
import collections
import glob
import json
import multiprocessing as mp
import os
import subprocess
import sys
import types

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADAPTER_DIR = os.path.join(ROOT, "src", "bindings", "openvino")
WORKER_DIR = os.path.join(ROOT, "src", "bindings", "onnx_import")
TOL = {"float32": (1e-4, 1e-5), "float16": (4e-3, 1e-3), "bfloat16": (3e-2, 1e-2),
       "float64": (1e-11, 1e-12)}
TOL_BF16_LEVEL = (3e-2, 1e-2)
DTYPES = ["float32", "float16", "bfloat16", "float64"]
ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
        "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
NAME_OF_ELEM = {v: k for k, v in ELEM.items()}
NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
      "bfloat16": ml_dtypes.bfloat16}
# MetaOp's data inputs besides input 0 (InputRoles in src/ops): every floating input of these.
COMBINE = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "LessOrEqual", "Greater",
           "GreaterOrEqual", "And", "Or", "Xor", "Sum", "Max", "Min", "Mean", "MatMul", "Einsum",
           "Concat", "Where"}


def is_float(a):
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"


def to_tensor(a, name):
    if a.dtype.name == "bfloat16":
        return helper.make_tensor(name, TensorProto.BFLOAT16, a.shape, a.view(np.uint16).tobytes(),
                                  raw=True)
    return numpy_helper.from_array(a, name)


# ---- the worker process ------------------------------------------------------------------------
def serve(conn):
    sys.path[:0] = [WORKER_DIR, ADAPTER_DIR]
    if not os.path.exists(os.path.join(WORKER_DIR, "metaop_adapter.py")):
        stub = types.ModuleType("metaop_adapter")  # until MetaOp's worker script is there
        stub.Unsupported = type("Unsupported", (Exception,), {})
        sys.modules["metaop_adapter"] = stub
    import openvino_adapter as adapter
    from metaop_adapter import Unsupported
    conn.send((adapter.version(), adapter.LEVELS))
    while (task := conn.recv()) is not None:
        model, level, feeds, outputs = task
        try:
            conn.send(("ok", adapter.run(adapter.load(model, level, 1), feeds, outputs)))
        except Unsupported as e:
            conn.send(("refused", str(e)))
        except Exception as e:  # noqa: BLE001 -- a failure to record
            conn.send(("error", f"{type(e).__name__}: {e}"))


class Worker:
    TIMEOUT = 120

    def __init__(self):
        self.proc = None
        self.start()

    def start(self):
        ctx = mp.get_context("spawn")  # no fork of a process with a framework's threads
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child,), daemon=True)
        self.proc.start()
        if not self.conn.poll(300):
            sys.exit("the adapter's worker did not start")
        self.version, self.levels = self.conn.recv()

    def call(self, *task):
        if not self.proc.is_alive():
            self.start()
        self.conn.send(task)
        if self.conn.poll(self.TIMEOUT):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
            return ("hang", f"no answer in {self.TIMEOUT} s")
        self.proc.join()
        return ("crash", f"the worker died (exit code {self.proc.exitcode})")

    def close(self):
        if self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)


# ---- cases -------------------------------------------------------------------------------------
def node_tests(node_dir):
    for d in sorted(glob.glob(os.path.join(node_dir, "*/"))):
        m = onnx.load(os.path.join(d, "model.onnx"))
        ops = {n.op_type for n in m.graph.node} - {"Constant"}
        if len(ops) != 1:
            continue  # function expansions
        name, op = os.path.basename(d.rstrip("/")), ops.pop()
        data = os.path.join(d, "test_data_set_0")
        try:
            inits = {i.name for i in m.graph.initializer}
            names = [i.name for i in m.graph.input if i.name not in inits]
            feeds = {n: read_pb(os.path.join(data, f"input_{k}.pb")) for k, n in enumerate(names)}
            outs = [o.name for o in m.graph.output]
            expected = [read_pb(os.path.join(data, f"output_{k}.pb")) for k in range(len(outs))]
        except Exception as e:  # noqa: BLE001 -- sequences and optionals
            yield name, op, None, f"not a tensor test: {e}"
            continue
        # numpy_helper gives bfloat16 tensors as their uint16 bits.
        elem = {v.name: v.type.tensor_type.elem_type
                for v in list(m.graph.input) + list(m.graph.output)}
        bf16 = lambda n, a: a.view(ml_dtypes.bfloat16) if elem.get(n) == TensorProto.BFLOAT16 else a
        feeds = {n: bf16(n, a) for n, a in feeds.items()}
        expected = [bf16(n, a) for n, a in zip(outs, expected)]
        m, feeds = as_metaop_export(m, feeds)
        yield name, op, (m, feeds, outs, expected), None


def read_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def as_metaop_export(model, feeds):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = next(n for n in m.graph.node if n.op_type != "Constant")
    keep, data = [], {}
    for vi in m.graph.input:
        a = feeds.get(vi.name)
        if a is None:
            keep.append(vi)
        elif 0 in [k for k, x in enumerate(node.input) if x == vi.name] or (
                node.op_type in COMBINE and is_float(a)):
            keep.append(vi)
            data[vi.name] = a
        else:
            m.graph.initializer.append(to_tensor(a, vi.name))
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m, data


def one_node(op, opset, data, params=(), attrs=None, n_out=1):
    """A one-node model: `data` graph inputs, `params` initializers (None: an omitted input)."""
    names, inputs, inits, feeds = [], [], [], {}
    for k, a in enumerate(data):
        names.append(f"x{k}")
        elem = helper.np_dtype_to_tensor_dtype(a.dtype)
        inputs.append(helper.make_tensor_value_info(f"x{k}", elem, a.shape))
        feeds[f"x{k}"] = a
    for k, a in enumerate(params):
        names.append("" if a is None else f"p{k}")
        if a is not None:
            inits.append(numpy_helper.from_array(a, f"p{k}"))
    outs = [f"y{k}" for k in range(n_out)]
    g = helper.make_graph([helper.make_node(op, names, outs, **(attrs or {}))], op, inputs,
                          [onnx.ValueInfoProto(name=o) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), feeds, outs


def generated_cases():
    """MetaOp's `.cases` (src/ops; other seeds), then opsets after 17."""
    rng = np.random.default_rng(12345)
    floats = lambda s, lo=-2, hi=2: rng.uniform(lo, hi, s).astype(np.float32)
    whole = lambda s: rng.integers(-2, 3, s).astype(np.float32)
    i64 = lambda v: np.array(v, dtype=np.int64)
    out = []
    add = lambda name, op, *a, **k: out.append((name, op, one_node(op, *a, **k)))
    for op in ["Abs", "Relu", "LeakyRelu", "Exp", "Sin", "Sigmoid", "Tanh", "Softplus", "Elu"]:
        add(f"case_{op}", op, 13, [whole((2, 3, 4, 5))])
    for op in ["Sign", "Round"]:
        add(f"case_{op}", op, 13, [floats((2, 3, 4, 5))])
    add("case_HardSwish", "HardSwish", 14, [whole((2, 3, 4, 5))])
    add("case_Pow", "Pow", 13, [floats((2, 3, 4), 0.5, 2), floats((2, 3, 4))])
    add("case_Equal", "Equal", 13, [whole((2, 3, 4, 5)), whole((2, 3, 4, 5))])
    for op in ["Max", "Min"]:
        add(f"case_{op}_floats", op, 13, [floats((2, 3, 4, 5)), floats((2, 3, 4, 5))])
        add(f"case_{op}_whole", op, 13, [whole((2, 3, 4, 5)), whole((2, 3, 4, 5))])
    for op in ["Sum", "Mean"]:
        add(f"case_{op}", op, 13, [floats((2, 3, 4, 5)), floats((2, 3, 4, 5))])
    add("case_Clip_floats", "Clip", 13, [floats((2, 3, 4, 5))], [np.float32(-0.5), np.float32(0.5)])
    add("case_Clip_whole", "Clip", 13, [whole((2, 3, 4, 5))], [np.float32(-1), np.float32(1)])
    add("case_Gather", "Gather", 13, [floats((3, 4, 5))], [i64([0, 2])], {"axis": 1})
    add("case_LayerNormalization", "LayerNormalization", 17, [floats((2, 3, 8))],
        [floats(8), floats(8)])
    add("case_LayerNormalization_stash", "LayerNormalization", 17, [floats((2, 3, 8))],
        [floats(8), floats(8)], {"stash_type": 11}, 3)
    add("case_LpNormalization", "LpNormalization", 13, [floats((2, 3, 5))])
    add("case_LpNormalization_p1", "LpNormalization", 13, [floats((2, 3, 5))], attrs={"p": 1})
    add("case_LpNormalization_axis1", "LpNormalization", 13, [floats((2, 4, 3))], attrs={"axis": 1})
    add("case_MaxPool", "MaxPool", 13, [whole((2, 3, 4, 5))],
        attrs={"kernel_shape": [2, 2], "strides": [1, 1]})
    add("case_GlobalMaxPool", "GlobalMaxPool", 13, [whole((2, 3, 4, 5))])
    add("case_LpPool", "LpPool", 13, [floats((2, 3, 4, 5))], attrs={"kernel_shape": [2, 2], "p": 3})
    add("case_GlobalLpPool", "GlobalLpPool", 13, [floats((2, 3, 4, 5))], attrs={"p": 2})
    add("case_ReduceSum", "ReduceSum", 13, [floats((2, 3, 4))], [i64([1])])
    add("case_ReduceMean", "ReduceMean", 13, [whole((2, 3, 4, 5))], attrs={"axes": [3]})
    add("case_ReduceMin", "ReduceMin", 13, [whole((2, 3, 4, 5))], attrs={"axes": [1]})
    add("case_ReduceLogSumExp", "ReduceLogSumExp", 13, [floats((2, 3, 4))], attrs={"axes": [1]})
    add("case_TopK", "TopK", 13, [whole((2, 3, 4, 5))], [i64([3])], n_out=2)
    add("case_CumSum", "CumSum", 13, [floats((2, 3, 4))], [i64(1)])
    add("case_Squeeze", "Squeeze", 13, [floats((2, 1, 4, 1))], [i64([1])])
    add("case_PRelu", "PRelu", 13, [floats((2, 3, 4, 5))], [floats((3, 1, 1))])
    add("case_PRelu_scalar", "PRelu", 13, [floats((2, 3, 4, 5))], [floats((1,))])
    # Floating cases for ops whose node tests are integer only.
    add("float_Trilu_upper", "Trilu", 14, [floats((2, 4, 5))], [i64(1)])
    add("float_Trilu_lower", "Trilu", 14, [floats((2, 4, 5))], [i64(-1)], {"upper": 0})
    add("float_EyeLike", "EyeLike", 9, [floats((4, 5))], attrs={"k": 1})
    add("float_ConstantOfShape", "ConstantOfShape", 9, [i64([2, 3])],
        attrs={"value": numpy_helper.from_array(np.array([1.5], np.float32), "v")})
    value = numpy_helper.from_array(floats((2, 3)), "v")
    g = helper.make_graph([helper.make_node("Constant", [], ["y0"], value=value)], "Constant", [],
                          [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)])
    constant = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    out.append(("case_Constant", "Constant", (constant, {}, ["y0"])))
    for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
               "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"]:
        x = floats((2, 3, 4), 0.1, 2) if op == "ReduceLogSum" else floats((2, 3, 4))
        add(f"opset18_{op}_axes_input", op, 18, [x], [i64([1])], {"keepdims": 1})
        add(f"opset13_{op}_axes_attribute", op, 11 if op == "ReduceSum" else 13, [x],
            attrs={"axes": [1], "keepdims": 0})
    add("opset18_Split_num_outputs", "Split", 18, [floats((2, 6, 4))],
        attrs={"axis": 1, "num_outputs": 3}, n_out=3)
    add("opset18_Pad_axes", "Pad", 18, [floats((2, 3, 4))],
        [i64([1, 2]), np.float32(0.5), i64([2])])
    for mode in ["edge", "wrap"]:
        add(f"opset19_Pad_{mode}", "Pad", 19, [floats((2, 3, 4))], [i64([0, 1, 1, 0, 2, 1])],
            {"mode": mode})
    half = np.array([1, 1, 0.5, 0.5], np.float32)
    add("opset18_Resize_antialias_linear", "Resize", 18, [floats((1, 2, 8, 8))], [None, half],
        {"mode": "linear", "antialias": 1})
    add("opset18_Resize_antialias_cubic", "Resize", 18, [floats((1, 2, 8, 8))], [None, half],
        {"mode": "cubic", "antialias": 1})
    add("opset18_Resize_keep_aspect_not_larger", "Resize", 18, [floats((1, 2, 4, 6))],
        [None, None, i64([3, 3])],
        {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"})
    add("opset19_Resize_half_pixel_symmetric", "Resize", 19, [floats((1, 2, 4, 4))],
        [None, np.array([1, 1, 1.5, 2.5], np.float32)],
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"})
    add("opset18_ScatterElements_max", "ScatterElements", 18, [floats((3, 4))],
        [i64([[0, 1], [2, 0], [0, 0]]), floats((3, 2))], {"axis": 1, "reduction": "max"})
    add("opset18_ScatterND_min", "ScatterND", 18, [floats((4, 3))],
        [i64([[1], [3], [1]]), floats((3, 3))],
        {"reduction": "min"})
    add("opset19_AveragePool_dilations", "AveragePool", 19, [floats((1, 2, 7, 7))],
        attrs={"kernel_shape": [3, 3], "dilations": [2, 2]})
    add("opset18_LpPool_ceil_mode", "LpPool", 18, [floats((1, 2, 5, 5))],
        attrs={"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "p": 2})
    add("opset22_Conv", "Conv", 22, [floats((1, 3, 8, 8))], [floats((4, 3, 3, 3)), floats(4)],
        {"pads": [1, 1, 1, 1]})
    add("opset21_Cast_to_bfloat16", "Cast", 21, [floats((3, 4))],
        attrs={"to": TensorProto.BFLOAT16})
    return out


# ---- dtypes and references ---------------------------------------------------------------------
def source_dtype(model, feeds):
    for a in feeds.values():
        if is_float(a):
            return a.dtype.name
    for i in model.graph.initializer:
        if i.data_type in NAME_OF_ELEM:
            return NAME_OF_ELEM[i.data_type]
    for a in feeds.values():
        return a.dtype.name
    return next((NAME_OF_ELEM[o.type.tensor_type.elem_type] for o in model.graph.output
                 if o.type.tensor_type.elem_type in NAME_OF_ELEM), "float32")


ONNX_NAME = {"float32": "float", "float64": "double", "float16": "float16", "bfloat16": "bfloat16"}


def feeds_and_inits(m, feeds, src):
    return ({n for n, a in feeds.items() if a.dtype.name == src} |
            {t.name for t in m.graph.initializer if t.data_type == ELEM[src]})


def outputs_of(m, src):
    return {o.name for o in m.graph.output if o.type.tensor_type.elem_type == ELEM[src]}


def variant(model, feeds, src, target):
    """(model, feeds, off_schema): the model with its `src` tensors of a type-variable schema
    type in `target`, and whether the op's schema at that opset allows `target` there (OpenVINO
    runs most such models anyway); None where that is not simple (Constant nodes, dtype
    attributes)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    retyped, off_schema = set(), False
    for n in m.graph.node:
        if n.op_type == "Constant" or n.domain not in ("", "ai.onnx"):
            return None
        if any(a.type == onnx.AttributeProto.TENSOR or a.name in ("to", "dtype", "stash_type")
               for a in n.attribute):
            return None
        s = onnx.defs.get_schema(n.op_type, opset)
        # LayerNormalization's U (Mean, InvStdDev) follows stash_type, not the data.
        type_vars = {c.type_param_str for c in s.type_constraints} - (
            {"U"} if n.op_type == "LayerNormalization" else set())
        allowed = {c.type_param_str: c.allowed_type_strs for c in s.type_constraints}
        for names, formals in ((n.input, s.inputs), (n.output, s.outputs)):
            for k, x in enumerate(names):
                t = formals[min(k, len(formals) - 1)].type_str
                if t in type_vars and x in feeds_and_inits(m, feeds, src) | outputs_of(m, src):
                    off_schema |= f"tensor({ONNX_NAME[target]})" not in allowed[t]
                    retyped.add(x)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in retyped and vi.type.tensor_type.elem_type == ELEM[src]:
            vi.type.tensor_type.elem_type = ELEM[target]
    changed = False
    for k, t in enumerate(m.graph.initializer):
        if t.name in retyped and t.data_type == ELEM[src]:
            wider = numpy_helper.to_array(t).astype(NP[target])
            m.graph.initializer[k].CopyFrom(to_tensor(wider, t.name))
            changed = True
    new = {}
    for n, a in feeds.items():
        changed |= n in retyped and a.dtype.name == src
        new[n] = a.astype(NP[target]) if n in retyped and a.dtype.name == src else a
    return (m, new, off_schema) if changed else None


def manual_reference(model, feeds, outs):
    """Where onnx.reference lacks the op or a dtype, or is wrong (its LpNormalization leaves
    out |x| for p = 1)."""
    node = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Scatter":  # ScatterElements' former name
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.node[0].op_type = "ScatterElements"
        del m.opset_import[:]
        m.opset_import.append(helper.make_opsetid("", 11))
        return ReferenceEvaluator(m).run(outs, feeds)
    if node.op_type not in ("GlobalLpPool", "LpNormalization", "LayerNormalization",
                            "MeanVarianceNormalization"):
        return None
    x = next(iter(feeds.values())).astype(np.float64)
    if node.op_type == "MeanVarianceNormalization":
        axes = tuple(at.get("axes", [0, 2, 3]))
        centred = x - x.mean(axis=axes, keepdims=True)
        return [centred / (np.sqrt((centred ** 2).mean(axis=axes, keepdims=True)) + 1e-9)]
    if node.op_type == "GlobalLpPool":
        p = at.get("p", 2)
        return [(np.abs(x) ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True) ** (1 / p)]
    if node.op_type == "LpNormalization":
        p, axis = at.get("p", 2), at.get("axis", -1)
        return [x / (np.abs(x) ** p).sum(axis=axis, keepdims=True) ** (1 / p)]
    if node.op_type == "LayerNormalization":
        inits = {i.name: numpy_helper.to_array(i).astype(np.float64)
                 for i in model.graph.initializer}
        axes = tuple(range(at.get("axis", -1) % x.ndim, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(var + at.get("epsilon", 1e-5))
        y = (x - mean) * inv * inits[node.input[1]] + inits[node.input[2]]
        return [y, mean, inv][:len(outs)]


def reference(model, feeds, outs, dtype):
    """Exact outputs on these inputs, rounded to `dtype`: the model widened to float64 (exact)
    under onnx.reference."""
    src = source_dtype(model, feeds)
    wide = variant(model, feeds, src, "float64") if src in ELEM and src != "float64" else None
    m, f = wide[:2] if wide else (model, feeds)
    res = manual_reference(m, f, outs)
    if res is None:
        try:
            res = ReferenceEvaluator(m).run(outs, f)
        except Exception:  # noqa: BLE001 -- then the model as it is
            res = ReferenceEvaluator(model).run(outs, feeds)
    # Each output in its declared dtype (LayerNormalization's Mean stays float32), else the case's.
    declared = [NAME_OF_ELEM.get(o.type.tensor_type.elem_type, dtype) for o in model.graph.output]
    return [r.astype(NP[d]) if d in NP and r.dtype.name in ("float32", "float64") else r
            for r, d in zip((np.asarray(r) for r in res), declared)]


def compare(got, exp, tol):
    got, exp = np.asarray(got), np.asarray(exp)
    if got.shape != exp.shape:
        return "differs", f"shape {got.shape} instead of {exp.shape}", None
    if not is_float(exp):
        bad = int((got != exp).sum())
        return ("match", "", 0.0) if bad == 0 else ("differs", f"{bad}/{exp.size} elements", None)
    g, e = got.astype(np.float64), exp.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(e)):
        return "differs", f"NaN at {int((np.isnan(g) != np.isnan(e)).sum())} places", None
    inf = np.isinf(e) | np.isinf(g)
    if not np.array_equal(g[inf], e[inf]):
        return "differs", f"infinity at {int((g[inf] != e[inf]).sum())} places", None
    fin = ~inf & ~np.isnan(e)
    if not fin.any():
        return "match", "", 0.0
    d, ref = np.abs(g[fin] - e[fin]).max(), np.abs(e[fin]).max()
    rel = d / ref if ref > 0 else d
    if d <= tol[1] + tol[0] * ref:
        return "match", "", rel
    return "differs", f"max|d|/max|ref| = {rel:.2g}", rel


# ---- main --------------------------------------------------------------------------------------
def run_cases(worker, ops, only, node_dir, details):
    cases = [(n, op, d, e) for n, op, d, e in node_tests(node_dir)]
    cases += [(n, op, (m, f, o, None), None) for n, op, (m, f, o) in generated_cases()]
    for name, op, data, err in cases:
        if op not in ops or (only and op not in only):
            continue
        if data is None:
            yield dict(test=name, op=op, dtype="-", level="-", status="skipped", detail=err,
                       off_schema=False)
            continue
        model, feeds, outs, expected = data
        src = source_dtype(model, feeds)
        runs = [(src, model, feeds, expected, False)]
        for target in DTYPES if src in ELEM else []:
            v = variant(model, feeds, src, target) if target != src else None
            if v is not None:
                runs.append((target, v[0], v[1], None, v[2]))
        for dtype, m, f, exp, off_schema in runs:
            try:
                exp = exp if exp is not None else reference(m, f, outs, dtype)
            except Exception as e:  # noqa: BLE001
                yield dict(test=name, op=op, dtype=dtype, level="-", status="no reference",
                           detail=str(e)[:200], off_schema=off_schema)
                continue
            blob = m.SerializeToString()
            for level, level_name in enumerate(worker.levels):
                status, *rest = worker.call(blob, level, f, outs)
                rec = dict(test=name, op=op, dtype=dtype, level=level_name, status=status,
                           off_schema=off_schema)
                if status == "ok":
                    tol = TOL.get(dtype, (0, 0)) if level == 0 else TOL_BF16_LEVEL
                    res = [compare(g, e, tol) for g, e in zip(rest[0], exp)]
                    rec["status"] = "match" if all(r[0] == "match" for r in res) else "differs"
                    rec["detail"] = "; ".join(r[1] for r in res if r[1])
                    rels = [r[2] for r in res if r[2] is not None]
                    rec["rel"] = max(rels) if rels else None
                    got_types = {np.asarray(g).dtype.name for g in rest[0]}
                    exp_types = {np.asarray(e).dtype.name for e in exp}
                    if got_types != exp_types:
                        rec["detail"] += (f" (dtypes {sorted(got_types)}, "
                                          f"expected {sorted(exp_types)})")
                else:
                    rec["detail"] = " ".join(rest[0].split())[:300]
                if details:
                    details.write(json.dumps(rec) + "\n")
                yield rec


def table(records, ops, levels):
    """One row per op: 'matched/cases' per dtype at the first level (*: some of them in a dtype
    the op's schema does not allow at that opset), non-float cases by dtype; float64's and
    float32's largest error at the first and last level; the failures at the first level,
    float64's only where they are more than float32 arithmetic (OpenVINO computes float64
    models in float32)."""
    by = collections.defaultdict(list)
    for r in records:
        by[r["op"]].append(r)
    rows = [["op"] + [f"{d} ({levels[0]})" for d in DTYPES] + [
        f"other dtypes ({levels[0]})", f"float64 max rel. ({levels[0]})",
        f"float32 max rel. ({levels[-1]})", "failures"]]
    for op in sorted(ops):
        rs = by.get(op, [])
        first = [r for r in rs if r["level"] == levels[0]]
        cells = []
        for d in DTYPES:
            at = [r for r in first if r["dtype"] == d]
            star = "*" if any(r["off_schema"] for r in at) else ""
            matched = sum(r["status"] == "match" for r in at)
            cells.append(f"{matched}/{len(at)}{star}" if at else "-")
        other = sorted({r["dtype"] for r in first} - set(DTYPES))
        counts = [(d, [r["status"] == "match" for r in first if r["dtype"] == d]) for d in other]
        cells.append(", ".join(f"{d} {sum(c)}/{len(c)}" for d, c in counts) or "-")
        for d, lv in (("float64", levels[0]), ("float32", levels[-1])):
            rel = [r["rel"] for r in rs
                   if r["dtype"] == d and r["level"] == lv and r.get("rel") is not None]
            cells.append(f"{max(rel):.2g}" if rel else "-")
        fails = collections.defaultdict(set)
        for r in rs:
            precision_only = (r["dtype"] == "float64" and r["status"] == "differs" and
                              r.get("rel") is not None and r["rel"] < 1e-5 and all(
                                  part.startswith("max|d|")
                                  for part in r["detail"].split(" (dtypes")[0].split("; ")))
            if r["status"] != "match" and r["level"] in (levels[0], "-") and not precision_only:
                detail = "; ".join(dict.fromkeys(r.get("detail", "").split("; ")))
                fails[f"{r['test']}: {r['status']}" + (f" ({detail})" if detail else "")].add(
                    r["dtype"] + ("*" if r.get("off_schema") else ""))
        notes = "; ".join(f"{k} [{','.join(sorted(v))}]" for k, v in sorted(fails.items()))
        rows.append([op] + cells + [notes or "-"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metaop", default=os.path.join(ROOT, "build", "metaop"))
    ap.add_argument("--node-tests", default="/usr/share/libonnx-testdata/data/node")
    ap.add_argument("--out", default=os.path.join(ADAPTER_DIR, "coverage.tsv"))
    ap.add_argument("--details", help="every run as JSON lines")
    ap.add_argument("--only", help="comma-separated ops")
    args = ap.parse_args()
    ops = {r["op"] for r in json.loads(subprocess.run([args.metaop, "ops", "--json"], check=True,
                                                      capture_output=True, text=True).stdout)}
    only = set(args.only.split(",")) if args.only else None
    worker = Worker()
    details = open(args.details, "w") if args.details else None
    records = list(run_cases(worker, ops, only, args.node_tests, details))
    worker.close()
    with open(args.out, "w") as f:
        f.write(f"# OpenVINO {worker.version} CPU via openvino_adapter.py, levels {worker.levels}: "
                "scripts/openvino_coverage.py (a screening; MetaOp's error models judge)\n")
        for row in table(records, only or ops, worker.levels):
            f.write("\t".join(row) + "\n")
    print(f"{len(records)} runs -> {args.out}")


if __name__ == "__main__":
    main()
