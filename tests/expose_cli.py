#!/usr/bin/python3
"""End-to-end tests of `metaop expose` on small buggy models and their fixed twins: the bug is
exposed and named, the twin stays quiet, the exposing input reproduces the NaN/INF with
`metaop run`, the JSON schema and the HTML report, --vary weights, integer inputs left alone,
--clip-from-inputs, the random and GRIST strategies, dangers behind a comparison, explanations
walked back to the input or weight that made the danger,
`metaop ops --danger`, and bad usage.

Usage: expose_cli.py METAOP WORK_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from testlib import check, finish

METAOP, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
os.makedirs(WORK, exist_ok=True)
BUDGET = ["--iterations", "400", "--time-limit", "30"]


def metaop(*args):
    p = subprocess.run([METAOP, *args], cwd=WORK, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def save_model(nodes, inputs, outputs, name, inits=None, opset=13):
    inits = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    path = os.path.join(WORK, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def save_npy(name, value):
    path = os.path.join(WORK, name + ".npy")
    np.save(path, value)
    return path


def fvi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def expose(model, *args, json_name="r.json"):
    rc, out, err = metaop("expose", model, "--json", json_name, "--out", "out_" + json_name[:-5],
                          *BUDGET, *args)
    doc = None
    if os.path.exists(os.path.join(WORK, json_name)):
        with open(os.path.join(WORK, json_name)) as f:
            doc = json.load(f)
        os.remove(os.path.join(WORK, json_name))
    return rc, out + err, doc


def exposed(doc, op_type=None):
    return [t for t in (doc or {}).get("targets", [])
            if t["exposed"] and (op_type is None or t["op_type"] == op_type)]


def replay_nonfinite(target):
    """Runs the target's run_command; returns the count of NaN/INF in the outputs."""
    cmd = shlex.split(target["run_command"])
    p = subprocess.run([METAOP, *cmd[1:]], cwd=WORK, capture_output=True, text=True)
    counts = re.findall(r"nan (\d+)\s+inf (\d+)", p.stdout)
    return p.returncode, sum(int(a) + int(b) for a, b in counts), p.stdout + p.stderr


rng = np.random.default_rng(0)

# 1. log(softmax(x W)): the Log is exposed from a typical input, named and explained; the
#    exposing input stays in the clip box and reproduces the INF with `metaop run`.
W = (rng.uniform(-1, 1, (8, 4)) * 2.5).astype(np.float32)
x_typ = save_npy("x_typ", rng.uniform(-0.5, 0.5, (2, 8)).astype(np.float32))
bug = save_model([helper.make_node("MatMul", ["x", "W"], ["z"], name="/fc/MatMul"),
                  helper.make_node("Softmax", ["z"], ["p"], name="/Softmax", axis=-1),
                  helper.make_node("Log", ["p"], ["y"], name="/Log")],
                 [fvi("x", [2, 8])], [fvi("y", [2, 4])], "log_softmax_bug", {"W": W})
fixed = save_model([helper.make_node("MatMul", ["x", "W"], ["z"], name="/fc/MatMul"),
                    helper.make_node("LogSoftmax", ["z"], ["y"], name="/LogSoftmax", axis=-1)],
                   [fvi("x", [2, 8])], [fvi("y", [2, 4])], "log_softmax_fixed", {"W": W})
rc, out, doc = expose(bug, "--input", x_typ, "--clip", "-10,10", "--report", "report")
check(rc == 1, f"log(softmax): exit 1 (got {rc})", out)
check(doc is not None and {"exposed", "targets", "model", "binding", "strategy", "iterations",
                           "seconds"} <= set(doc), "JSON top-level keys")
check(doc and doc["exposed"] is True, "JSON exposed: true")
keys = {"node", "op_type", "condition", "exposed", "iterations", "seconds", "distance",
        "input_files", "first_nonfinite"}
check(doc and all(keys <= set(t) for t in doc["targets"]), "every target has the documented keys")
logs = exposed(doc, "Log")
check(len(logs) == 1, "the Log target is exposed", out)
if logs:
    t = logs[0]
    check(t["first_nonfinite"] == {"node": "/Log", "op_type": "Log"},
          f"first non-finite node is /Log ({t['first_nonfinite']})")
    check("Softmax /Softmax underflowed to 0" in t["explanation"],
          "the explanation names the Softmax underflow", t["explanation"])
    check(t["distance"] == 0 and t["kind"] == "log_domain", "distance 0, kind log_domain")
    x_exp = np.load(os.path.join(WORK, t["input_files"][0]))
    check(x_exp.shape == (2, 8) and x_exp.dtype == np.float32 and np.abs(x_exp).max() <= 10,
          "the exposing input has the input's shape and dtype and stays in the clip box")
    code, bad, text = replay_nonfinite(t)
    check(code == 0 and bad > 0, "metaop run on the exposing input shows the NaN/INF", text)
    check("--bind torch" in t["run_command"], "the run command replays on the verdict's binding")
check("EXPOSED" in out and "Log input reached 0 at /Log" in out, "console names the chain", out)
html = os.path.join(WORK, "report", "index.html")
check(os.path.isfile(html) and "<svg" in open(html).read(), "HTML report with a plot")
not_exposed = [t for t in doc["targets"] if not t["exposed"]] if doc else []
check(all(t["first_nonfinite"] is None and t["distance"] > 0 for t in not_exposed),
      "targets not exposed have a closest distance and no verdict")

rc, out, doc = expose(fixed, "--input", x_typ, "--clip", "-10,10")
check(rc == 0 and doc and doc["exposed"] is False and not exposed(doc),
      f"LogSoftmax twin: exit 0, nothing exposed (got {rc})", out)

# 2. x / sum(relu(s)): all scores of a row negative; the twin adds an epsilon.
Ws = rng.uniform(-1, 1, (8, 6)).astype(np.float32)
b = np.full((6,), 0.2, np.float32)
eps = np.array(1e-6, np.float32)
body = [helper.make_node("MatMul", ["x", "Ws"], ["s0"], name="/MatMul"),
        helper.make_node("Add", ["s0", "b"], ["s"], name="/Add"),
        helper.make_node("Relu", ["s"], ["r"], name="/Relu"),
        helper.make_node("ReduceSum", ["r", "axes"], ["sum"], name="/ReduceSum", keepdims=1)]
axes = np.array([-1], np.int64)
bug = save_model(body + [helper.make_node("Div", ["r", "sum"], ["y"], name="/Div")],
                 [fvi("x", [2, 8])], [fvi("y", [2, 6])], "relu_sum_bug",
                 {"Ws": Ws, "b": b, "axes": axes})
fixed = save_model(body + [helper.make_node("Add", ["sum", "eps"], ["den"], name="/Add_1"),
                           helper.make_node("Div", ["r", "den"], ["y"], name="/Div")],
                   [fvi("x", [2, 8])], [fvi("y", [2, 6])], "relu_sum_fixed",
                   {"Ws": Ws, "b": b, "axes": axes, "eps": eps})
rc, out, doc = expose(bug, "--input", x_typ, "--no-constant-starts")
divs = exposed(doc, "Div")
check(rc == 1 and divs and divs[0]["first_nonfinite"]["node"] == "/Div",
      f"x / sum(relu(s)): the Div is exposed by the gradient search (got {rc})", out)
if divs:
    check("Relu /Relu clamped every one of them" in divs[0]["explanation"],
          "the explanation says every ReLU clamped", divs[0]["explanation"])
    check(divs[0]["found_by"] != "constant start point", "found by the search itself")
rc, out, doc = expose(fixed, "--input", x_typ)
check(rc == 0 and not exposed(doc), f"x / (sum + eps): exit 0 (got {rc})", out)

# 3. One-pass variance: sqrt(E[x^2] - E[x]^2) for rows with a large mean and a small spread.
def variance_model(name, two_pass):
    mean = [helper.make_node("ReduceMean", ["x"], ["m"], name="/ReduceMean", axes=[-1])]
    if two_pass:
        var = [helper.make_node("Sub", ["x", "m"], ["d"], name="/Sub"),
               helper.make_node("Mul", ["d", "d"], ["d2"], name="/Mul"),
               helper.make_node("ReduceMean", ["d2"], ["v0"], name="/ReduceMean_1", axes=[-1]),
               helper.make_node("Add", ["v0", "eps"], ["v"], name="/Add")]
    else:
        var = [helper.make_node("Mul", ["x", "x"], ["x2"], name="/Mul"),
               helper.make_node("ReduceMean", ["x2"], ["ex2"], name="/ReduceMean_1", axes=[-1]),
               helper.make_node("Mul", ["m", "m"], ["m2"], name="/Mul_1"),
               helper.make_node("Sub", ["ex2", "m2"], ["v"], name="/Sub")]
    rest = [helper.make_node("Sqrt", ["v"], ["sd"], name="/Sqrt"),
            helper.make_node("Sub", ["x", "m"], ["c"], name="/Sub_2"),
            helper.make_node("Div", ["c", "sd"], ["y"], name="/Div")]
    return save_model(mean + var + rest, [fvi("x", [2, 8])], [fvi("y", [2, 8])], name,
                      {"eps": np.array(1e-5, np.float32)} if two_pass else {})


x_var = save_npy("x_var", rng.uniform(0, 100, (2, 8)).astype(np.float32))
rc, out, doc = expose(variance_model("variance_bug", False), "--input", x_var, "--clip", "0,100")
hits = exposed(doc)
check(rc == 1 and any(t["first_nonfinite"]["op_type"] in ("Sqrt", "Div") for t in hits),
      f"one-pass variance: exposed at the Sqrt or the Div (got {rc})", out)
rc, out, doc = expose(variance_model("variance_fixed", True), "--input", x_var, "--clip", "0,100")
check(rc == 0 and not exposed(doc), f"two-pass variance + eps: exit 0 (got {rc})", out)

# 4. --vary weights: log(sigmoid(x w)) cannot underflow for x in [-1, 1] with these weights (z is
#    at least -32), but weights within the radius can from the given x; the written model with
#    those weights reproduces the INF.
w = np.full((8, 1), 4.0, np.float32)
sig = save_model([helper.make_node("MatMul", ["x", "w"], ["z"], name="/MatMul"),
                  helper.make_node("Sigmoid", ["z"], ["p"], name="/Sigmoid"),
                  helper.make_node("Log", ["p"], ["y"], name="/Log")],
                 [fvi("x", [2, 8])], [fvi("y", [2, 1])], "log_sigmoid", {"w": w})
x_pos = save_npy("x_pos", rng.uniform(0.5, 1, (2, 8)).astype(np.float32))
rc, out, doc = expose(sig, "--input", x_pos)
check(rc == 0 and not exposed(doc), f"log(sigmoid): inputs in [-1, 1] cannot expose (got {rc})",
      out)
rc, out, doc = expose(sig, "--input", x_pos, "--vary", "weights", "--weight-radius", "6")
hits = exposed(doc, "Log")
check(rc == 1 and hits, f"--vary weights --weight-radius 6 exposes the Log (got {rc})", out)
if hits:
    files = hits[0]["input_files"]
    model_file = [f for f in files if f.endswith("model.onnx")]
    check(len(model_file) == 1, "the model with the exposing weights is written")
    if model_file:
        wm = numpy_helper.to_array(onnx.load(os.path.join(WORK, model_file[0])).graph.initializer[0])
        check(np.all(np.abs(wm - 4.0) <= 6 * 4.0 + 1e-4) and not np.array_equal(wm, w),
              "its weights moved, within radius * max|w|")
    code, bad, text = replay_nonfinite(hits[0])
    check(code == 0 and bad > 0 and "model.onnx" in hits[0]["run_command"],
          "metaop run on the written model shows the INF", text)

# 5. Integer inputs stay as given: Log(Gather(x, idx)) varies x only.
gat = save_model([helper.make_node("Gather", ["x", "idx"], ["g"], name="/Gather", axis=1),
                  helper.make_node("Log", ["g"], ["y"], name="/Log")],
                 [fvi("x", [2, 8]), fvi("idx", [3], TensorProto.INT64)], [fvi("y", [2, 3])],
                 "gather_log")
idx = np.array([1, 5, 2], np.int64)
idx_file = save_npy("idx", idx)
rc, out, doc = expose(gat, "--input", "x=" + x_pos, "--input", "idx=" + idx_file, "--clip", "0,1")
hits = exposed(doc, "Log")
check(rc == 1 and hits and list(doc["varied"]) == ["x"], f"only the float input varies ({rc})",
      out)
if hits:
    idx_out = [f for f in hits[0]["input_files"] if f.endswith("idx.npy")]
    check(idx_out and np.array_equal(np.load(os.path.join(WORK, idx_out[0])), idx),
          "the integer input is written as given")

# 6. --clip-from-inputs keeps every element within the given input's min and max.
logm = save_model([helper.make_node("Log", ["x"], ["y"], name="/Log")], [fvi("x", [2, 8])],
                  [fvi("y", [2, 8])], "log_only")
rc, out, doc = expose(logm, "--input", x_pos, "--clip-from-inputs")
check(rc == 0 and not exposed(doc), f"--clip-from-inputs: log(x) of x in [0.5, 1] is safe ({rc})",
      out)
rc, out, doc = expose(logm, "--input", x_pos, "--clip", "0,1")
check(rc == 1, f"--clip 0,1: log(x) is exposed ({rc})", out)

# A zone entered whose NaN/INF the model absorbs is no exposure: log(x) clamped to [-10, 10].
clamp = save_model([helper.make_node("Log", ["x"], ["l"], name="/Log"),
                    helper.make_node("Clip", ["l", "lo", "hi"], ["y"], name="/Clip")],
                   [fvi("x", [2, 8])], [fvi("y", [2, 8])], "log_clamped",
                   {"lo": np.array(-10, np.float32), "hi": np.array(10, np.float32)})
rc, out, doc = expose(clamp, "--input", x_pos, "--clip", "0,1")
log_t = [t for t in (doc or {}).get("targets", []) if t["op_type"] == "Log"]
check(rc == 0 and log_t and log_t[0]["status"] == "reached" and not log_t[0]["exposed"],
      f"log(x) clamped: the zone is reached, nothing exposed ({rc})", out)

# 7. The baselines run on the same budget and report the same way.
for strategy in ("random", "grist"):
    rc, out, doc = expose(logm, "--input", x_pos, "--clip", "-1,1", "--strategy", strategy)
    check(rc == 1 and doc and doc["strategy"] == strategy and exposed(doc, "Log"),
          f"--strategy {strategy} exposes log(x) on [-1, 1] ({rc})", out)

# 8. The progress bar on request.
rc, out, err = metaop("expose", logm, "--input", x_pos, "--clip-from-inputs", "--progress",
                      "--out", "out_progress", *BUDGET)
check(rc == 0 and "steps" in err and "exposed 0/" in err, "--progress draws a bar on stderr", err)

# 9a. A danger made by float32 rounding: log(p / (1 - p)), p = Sigmoid(x), from x = [0.5, -1, 2, 0]
#     within [-17, 17]. The float64 reference keeps 1 - p at 5.96e-8 or more up to x = 17.33;
#     torch's float32 Sigmoid rounds p to exactly 1 from x = 16.64 on. The search measures the
#     distance on the binding too, and finds it; on the reference alone it cannot.
one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
logit = save_model([helper.make_node("Sigmoid", ["x"], ["p"], name="sig"),
                    helper.make_node("Constant", [], ["c1"], name="c1", value=one),
                    helper.make_node("Sub", ["c1", "p"], ["q"], name="sub"),
                    helper.make_node("Div", ["p", "q"], ["r"], name="div"),
                    helper.make_node("Log", ["r"], ["y"], name="log")],
                   [fvi("x", [4])], [fvi("y", [4])], "logit")
x_typ = save_npy("logit_x", np.array([0.5, -1, 2, 0], np.float32))
for strategy in ["gradient", "grist"]:
    p = subprocess.run([METAOP, "expose", logit, "--input", f"x={x_typ}", "--clip=-17,17",
                        "--strategy", strategy, "--stop-at-first", "--time-limit", "30",
                        "--json", "f32.json", "--out", f"out_f32_{strategy}"],
                       cwd=WORK, capture_output=True, text=True)
    doc = json.load(open(os.path.join(WORK, "f32.json")))
    div = [t for t in doc["targets"] if t["node"] == "div"]
    point = os.path.join(WORK, f"out_f32_{strategy}", "exposed_div_zero_divisor", "x.npy")
    x = np.load(point) if os.path.exists(point) else np.zeros(4, np.float32)
    ref = subprocess.run([METAOP, "run", logit, "--input", f"x={point}", "--bind", "reference",
                          "--out", os.path.join(WORK, f"ref_{strategy}")],
                         capture_output=True, text=True)
    y_ref = os.path.join(WORK, f"ref_{strategy}", "y.npy")
    check(p.returncode == 1 and div and div[0]["exposed"] and doc["binding_entries"] >= 1 and
          "on torch only" in p.stdout and x.max() <= 17 and x.max() > 16.6 and
          os.path.exists(y_ref) and np.isfinite(np.load(y_ref)).all(),
          f"{strategy}: a float32-only danger found inside [-17, 17], where the reference stays "
          f"finite (x max {x.max()})", p.stdout + p.stderr + ref.stderr)
rc, out, err = metaop("expose", logit, "--input", f"x={x_typ}", "--clip=-17,17",
                      "--no-binding-distances", "--time-limit", "3", "--json", "f64.json",
                      "--out", "out_f64")
doc = json.load(open(os.path.join(WORK, "f64.json")))
check(rc == 0 and not doc["exposed"] and doc["stop_reason"] == "the time limit (--time-limit 3 s)"
      and "stopped by the time limit" in out,
      "on the reference alone: not found, and the time limit (no step cap by default) said to "
      "end the search", out + err)
rc, out, doc = expose(logm, "--input", x_pos, json_name="cap.json")
check("--iterations 400" in (doc or {}).get("stop_reason", "") or
      (doc or {}).get("stop_reason", "").startswith("every target"),
      f"a step cap that ends the search is named ({(doc or {}).get('stop_reason')})", out)

# 9b. Per-input constraints: y = log(b) + a. Varying only `a` cannot reach the Log's zone (its
#     target does not depend on `a`); `b` boxed to [0.5, 1] cannot either; `b` boxed to [0, 1]
#     can, and `a` keeps its given value.
two = save_model([helper.make_node("Log", ["b"], ["l"], name="/Log"),
                  helper.make_node("Add", ["l", "a"], ["y"], name="/Add")],
                 [fvi("a", [2, 8]), fvi("b", [2, 8])], [fvi("y", [2, 8])], "two_inputs")
a_in = save_npy("two_a", np.full((2, 8), 0.25, np.float32))
for args, exposed, what in [
        (("--vary", "a"), False, "--vary a: the Log does not depend on it"),
        (("--vary", "b", "--clip", "b=0.5,1"), False, "--clip b=0.5,1 keeps the Log away"),
        (("--vary", "b", "--clip", "b=0,1", "--clip", "-9,9"), True,
         "--clip b=0,1: exposed, a unchanged")]:
    rc, out, doc = expose(two, "--input", f"a={a_in}", "--input", f"b={x_pos}", *args,
                          json_name="two.json")
    log = [t for t in (doc or {}).get("targets", []) if t["node"] == "/Log"]
    ok = rc == (1 if exposed else 0) and bool(log) and log[0]["exposed"] == exposed
    if exposed and ok:
        a_file = [f for f in log[0]["input_files"] if f.endswith("/a.npy")]
        b_file = [f for f in log[0]["input_files"] if f.endswith("/b.npy")]
        ok = (len(a_file) == 1 and (np.load(os.path.join(WORK, a_file[0])) == 0.25).all() and
              len(b_file) == 1 and np.load(os.path.join(WORK, b_file[0])).min() >= 0)
        ok = ok and set((doc or {}).get("varied", {})) == {"b"}
    check(ok, what, out)
rc, out, err = metaop("expose", two, "--input", f"a={a_in}", "--input", f"b={x_pos}", "--vary",
                      "c", "--out", "out_bad")
check(rc == 2 and "--vary c" in err, "--vary with a name the model lacks: exit 2 naming it", err)
rc, out, err = metaop("expose", two, "--input", f"a={a_in}", "--input", f"b={x_pos}", "--clip",
                      "c=0,1", "--out", "out_bad")
check(rc == 2 and "--clip c=0,1" in err, "--clip for an input the model lacks: exit 2", err)

# 9. metaop ops --danger lists every op's zones; every kind is declared somewhere.
rc, out, err = metaop("ops", "--danger", "--json")
zones = json.loads(out) if rc == 0 else []
kinds = {z["kind"] for z in zones}
check(rc == 0 and kinds == {"zero_divisor", "log_domain", "sqrt_domain", "inverse_trig_domain",
                            "pow_domain", "overflow", "underflow_to_zero", "zero_variance"},
      f"ops --danger --json covers every kind ({sorted(kinds)})")
check({"Log", "Div", "Sqrt", "Exp", "Pow", "Acos", "LayerNormalization"} <=
      {z["op"] for z in zones}, "ops --danger lists Log, Div, Sqrt, Exp, Pow, Acos, LayerNorm")
rc, out, err = metaop("ops", "--danger")
check(rc == 0 and re.search(r"^Log\s+log_domain\s+input 0", out, re.M), "ops --danger table")

# 9c. Dangers behind a comparison, which no gradient crosses: a softmax masked with -inf where a
#     learned gate is negative (every gate of a row negative: 0/0), and a mean over the positive
#     activations (none positive: 0/0). The boundary moves push the comparison's operands across;
#     the explanation walks back through the Where and the Cast to the comparison and the layer
#     that made its operand (the gate's or the layer's Add). The twins
#     (mask value -1e9, count at least 1) stay finite over the same step cap.
rng = np.random.default_rng(7)
gate_w = rng.uniform(-0.5, 0.5, (8, 4)).astype(np.float32)
score_w = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
x_cmp = save_npy("cmp_x", rng.standard_normal((2, 8)).astype(np.float32))


def masked_softmax(name, fill):
    fill_t = helper.make_tensor("fill", TensorProto.FLOAT, [], [fill])
    return save_model(
        [helper.make_node("MatMul", ["x", "Wg"], ["g0"], name="/gate/MatMul"),
         helper.make_node("Add", ["g0", "bg"], ["g"], name="/gate/Add"),
         helper.make_node("Less", ["g", "zero"], ["masked"], name="/Less"),
         helper.make_node("MatMul", ["x", "Ws"], ["s"], name="/score/MatMul"),
         helper.make_node("Constant", [], ["f"], name="/Constant", value=fill_t),
         helper.make_node("Where", ["masked", "f", "s"], ["z"], name="/Where"),
         helper.make_node("Softmax", ["z"], ["y"], name="/Softmax", axis=-1)],
        [fvi("x", [2, 8])], [fvi("y", [2, 4])], name,
        {"Wg": gate_w, "bg": np.full(4, 1.5, np.float32), "Ws": score_w,
         "zero": np.zeros((), np.float32)})


def count_mean(name, least):
    body = [helper.make_node("MatMul", ["x", "W"], ["h0"], name="/fc/MatMul"),
            helper.make_node("Add", ["h0", "b"], ["h"], name="/fc/Add"),
            helper.make_node("Greater", ["h", "zero"], ["pos"], name="/Greater"),
            helper.make_node("Cast", ["pos"], ["m"], name="/Cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", ["h", "m"], ["hm"], name="/Mul"),
            helper.make_node("ReduceSum", ["hm", "axes"], ["s"], name="/ReduceSum", keepdims=0),
            helper.make_node("ReduceSum", ["m", "axes"], ["n0"], name="/ReduceSum_1", keepdims=0)]
    if least:
        body += [helper.make_node("Max", ["n0", "one"], ["n"], name="/Max")]
    body += [helper.make_node("Div", ["s", "n" if least else "n0"], ["y"], name="/Div")]
    return save_model(body, [fvi("x", [2, 8])], [fvi("y", [2])], name,
                      {"W": gate_w, "b": np.full(4, 1.0, np.float32),
                       "zero": np.zeros((), np.float32), "axes": np.array([-1], np.int64),
                       "one": np.ones((), np.float32)})


for bug, twin, op, comparison, layer in [
        (masked_softmax("masked_softmax", float("-inf")),
         masked_softmax("masked_softmax_fixed", -1e9), "Softmax", "Less /Less", "Add /gate/Add"),
        (count_mean("count_mean", False), count_mean("count_mean_fixed", True), "Div",
         "Greater /Greater", "Add /fc/Add")]:
    cap = ["--iterations", "3000", "--time-limit", "60", "--stop-at-first"]
    p = subprocess.run([METAOP, "expose", bug, "--input", f"x={x_cmp}", "--clip=-5,5", *cap,
                        "--json", "cmp.json", "--out", "out_cmp"],
                       cwd=WORK, capture_output=True, text=True)
    doc = json.load(open(os.path.join(WORK, "cmp.json")))
    hit = [t for t in doc["targets"] if t["exposed"] and t["op_type"] == op]
    check(p.returncode == 1 and hit and hit[0]["found_by"].startswith("boundary move") and
          comparison in hit[0]["explanation"] and layer in hit[0]["explanation"] and
          replay_nonfinite(hit[0])[1] > 0,
          f"{op} behind a comparison: exposed by a boundary move, explained back to the "
          f"{comparison.split()[0]} and the {layer} that made its operand",
          (hit[0]["explanation"] if hit else "") + "\n" + p.stdout + p.stderr)
    # ... and on through the layer to the input element and the weight that made it so.
    check(hit and re.search(r"MatMul /(gate|fc)/MatMul gave \S+, its largest of 8 terms .* "
                            r"\(input 'x'\[\d, \d\] by weight '(Wg|W)'\[\d, \d\]\)",
                            hit[0]["explanation"]),
          f"{op}: the explanation walks back to the input element and the weight of the "
          f"layer's largest term", hit[0]["explanation"] if hit else "")
    steps = hit[0]["iterations"] if hit else None
    p = subprocess.run([METAOP, "expose", twin, "--input", f"x={x_cmp}", "--clip=-5,5", *cap,
                        "--json", "cmp_twin.json", "--out", "out_cmp_twin"],
                       cwd=WORK, capture_output=True, text=True)
    doc = json.load(open(os.path.join(WORK, "cmp_twin.json")))
    check(p.returncode == 0 and not doc["exposed"],
          f"{op}'s fixed twin stays quiet over 3000 steps (the bug took {steps})",
          p.stdout + p.stderr)

# 9d. The explanation walks back to the root cause: -log(IoU) of two 1-D boxes, whose overlap the
#     Clip zeroes when they part. The Log's zone is the Div's 0, the Div's numerator the Clip's
#     0, the Clip's input the Sub of the Min and the Max, each of them one box's corner.
#     `x` holds [a_lo, a_hi, b_lo, b_hi] per row.
def corner(k):
    return np.array([k], np.int64)


iou_nodes = [helper.make_node("Gather", ["x", f"k{k}"], [f"c{k}"], name=f"/Gather_{k}", axis=1)
             for k in range(4)]
iou_nodes += [
    helper.make_node("Min", ["c1", "c3"], ["hi"], name="/Min"),
    helper.make_node("Max", ["c0", "c2"], ["lo"], name="/Max"),
    helper.make_node("Sub", ["hi", "lo"], ["ov"], name="/Sub"),
    helper.make_node("Clip", ["ov", "zero"], ["inter"], name="/Clip"),
    helper.make_node("Sub", ["c1", "c0"], ["wa"], name="/Sub_1"),
    helper.make_node("Sub", ["c3", "c2"], ["wb"], name="/Sub_2"),
    helper.make_node("Add", ["wa", "wb"], ["ws"], name="/Add"),
    helper.make_node("Sub", ["ws", "inter"], ["union"], name="/Sub_3"),
    helper.make_node("Div", ["inter", "union"], ["iou"], name="/Div"),
    helper.make_node("Log", ["iou"], ["l"], name="/Log"),
    helper.make_node("Neg", ["l"], ["y"], name="/Neg")]
iou = save_model(iou_nodes, [fvi("x", [2, 4])], [fvi("y", [2, 1])], "iou_loss",
                 {**{f"k{k}": corner(k) for k in range(4)}, "zero": np.zeros((), np.float32)})
x_iou = save_npy("iou_x", np.array([[0, 2, 1, 3], [0, 1, 0.5, 2]], np.float32))
rc, out, doc = expose(iou, "--input", f"x={x_iou}", "--clip=-4,4")
logs = [t for t in (doc or {}).get("targets", []) if t["exposed"] and t["op_type"] == "Log"]
why = logs[0]["explanation"] if logs else ""
check(rc == 1 and logs and
      re.search(r"Log input reached 0 at /Log \(Div /Div: 0 / \S+ = 0 <- Clip /Clip clamped "
                r"\S+ to 0 <- Sub /Sub: \S+ - \S+ = \S+ <- (Min /Min|Max /Max) chose \S+ "
                r"\(input \d\) <- input 'x'\[\d, \d\] is \S+\)", why),
      "-log(IoU): the explanation walks from the Log through the Div to the Clip that zeroed "
      "the overlap, and on to the corner of the box that made it", why + "\n" + out)

# 10. Bad usage: exit 2 with one line naming the option or value.
ints = save_model([helper.make_node("Cast", ["i"], ["y"], name="/Cast", to=TensorProto.FLOAT)],
                  [fvi("i", [3], TensorProto.INT64)], [fvi("y", [3])], "ints_only")
for args, pattern in [
        ((logm, "--input", x_pos, "--vary", "everything"), "--vary everything"),
        ((logm, "--input", x_pos, "--strategy", "annealing"), "--strategy annealing"),
        ((logm, "--input", x_pos, "--clip", "3,1"), "--clip '3,1'"),
        ((logm, "--input", x_pos, "--clip", "0,1", "--clip-from-inputs"), "--clip-from-inputs"),
        ((logm, "--input", x_pos, "--iterations", "-1"), "--iterations -1"),
        ((logm, "--input", x_pos, "--time-limit", "0"), "--time-limit 0"),
        ((logm, "--input", x_pos, "--weight-radius", "-1"), "--weight-radius -1"),
        ((logm, "--input", x_pos, "--bind", "tensorflow"), "--bind tensorflow"),
        ((logm,), "no value for input 'x'"),
        ((ints, "--input", idx_file), "nothing to vary"),
        ((os.path.join(WORK, "missing.onnx"), "--random-inputs"), "missing.onnx: no such file")]:
    rc, out, err = metaop("expose", *args, "--out", "out_bad")
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 2 and len(lines) == 1 and pattern in err,
          f"bad usage {' '.join(args[1:]) or args[0]}: exit 2, one line with '{pattern}'",
          f"rc={rc} stderr={err!r}")

finish()
