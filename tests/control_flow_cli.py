"""If, Loop and Scan run inlined (src/engine/control_flow.h): `metaop run` agrees with ONNX
Runtime on models whose bodies read outer values, nest, stop on their condition, scan in reverse
and run no iteration, and on models of sequences and optionals (lowered to their tensors);
`metaop check` runs the bodies' nodes and the lowered nodes under a binding and judges each;
`conform` reads sequence and optional values from test data; bad control flow is exit 2 with one
line naming the node.

Usage: control_flow_cli.py METAOP WORK_DIR   (the project's Python environment: onnx and
onnxruntime. ONNX's ReferenceEvaluator is no yardstick here: its Loop concatenates scan outputs
of rank >= 2 along their first axis instead of stacking them, and its Scan runs no reverse
direction.)
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime

from testlib import check, finish

METAOP, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
os.makedirs(WORK, exist_ok=True)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(array, name))


def save(name, nodes, inputs, outputs, initializers=(), opset=17):
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
    # The IR version of ONNX 1.12, which MetaOp links, up to opset 17; the current one past it.
    model.ir_version = 8 if opset <= 17 else 10
    onnx.checker.check_model(model)
    path = os.path.join(WORK, name + ".onnx")
    onnx.save(model, path)
    return path, model


def metaop(*args):
    return subprocess.run([METAOP, *args], capture_output=True, text=True)


def run_and_compare(what, path, model, feeds, expected=None):
    """metaop run's outputs against ONNX Runtime's (float32 kernels there, float64 rounded once
    here: within a few float32 units), or against `expected`."""
    args = ["run", path, "--out", os.path.join(WORK, what)]
    for k, v in feeds.items():
        f = os.path.join(WORK, f"{what}_{k}.npy")
        np.save(f, v)
        args += ["--input", f"{k}={f}"]
    r = metaop(*args)
    check(r.returncode == 0, f"{what}: metaop run exits 0", r.stdout + r.stderr)
    if r.returncode != 0:
        return r
    if expected is None:
        expected = onnxruntime.InferenceSession(path).run(None, feeds)
    for out, want in zip(model.graph.output, expected):
        got = np.load(os.path.join(WORK, what, out.name + ".npy"))
        ok = got.shape == np.asarray(want).shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)
        check(ok, f"{what}: output '{out.name}' agrees with ONNX Runtime",
              f"got {got.shape} {got.ravel()[:8]}, expected {np.asarray(want).shape} "
              f"{np.asarray(want).ravel()[:8]}")
    return r


# --- If: branches that read outer values, an initializer of their own, and a graph output ------
w = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")
then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"], name="add")], "then", [],
                           [vi("t", F, [3])])
else_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e"], name="mul")], "else", [],
                           [vi("e", F, [3])],
                           [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
if_nodes = [
    helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
    const("zero", np.array(0.0, np.float32)),
    helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
    helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
    helper.make_node("Neg", ["y"], ["z"], name="neg"),
]
if_path, if_model = save("if", if_nodes, [vi("x", F, [3])], [vi("y", F, [3]), vi("z", F, [3])],
                         [w])
r = run_and_compare("if_then", if_path, if_model, {"x": np.array([1, 2, 3], np.float32)})
check("node 'branch' (If): the then branch, 2 nodes" in r.stderr, "if_then: the path is printed", r.stderr)
r = run_and_compare("if_else", if_path, if_model, {"x": np.array([-1, -2, 0.5], np.float32)})
check("the else branch" in r.stderr, "if_else: the else branch ran", r.stderr)

# --- Loop: trip count and condition, a carried value, a scan output, outer W, the iteration ----
W = numpy_helper.from_array((np.arange(9, dtype=np.float32).reshape(3, 3) - 4) / 8, "W")
body = helper.make_graph(
    [
        helper.make_node("MatMul", ["h_in", "W"], ["m"], name="matmul"),
        helper.make_node("Cast", ["i"], ["i_f"], name="cast", to=F),
        helper.make_node("Add", ["m", "i_f"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["h_out"], name="tanh"),
        helper.make_node("ReduceSum", ["h_out"], ["hs"], name="sum", keepdims=0),
        helper.make_node("Less", ["hs", "limit"], ["cond_out"], name="less"),
        helper.make_node("Identity", ["h_out"], ["scan"], name="copy"),
    ],
    "body",
    [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, 3])],
    [vi("cond_out", B, []), vi("h_out", F, [1, 3]), vi("scan", F, [1, 3])],
)
loop_nodes = [
    helper.make_node("Loop", ["M", "cond", "h0"], ["h_final", "hs_all"], name="loop", body=body)
]
loop_path, loop_model = save(
    "loop", loop_nodes, [vi("h0", F, [1, 3]), vi("M", I64, []), vi("cond", B, []),
                         vi("limit", F, [])],
    [vi("h_final", F, [1, 3]), vi("hs_all", F, [None, 1, 3])], [W])
feeds = {"h0": np.array([[0.1, -0.2, 0.3]], np.float32), "M": np.array(6, np.int64),
         "cond": np.array(True), "limit": np.array(2.5, np.float32)}
r = run_and_compare("loop_cond", loop_path, loop_model, feeds)
check("(Loop): 3 iterations" in r.stderr, "loop_cond: the condition ends the loop after 3",
      r.stderr)
r = run_and_compare("loop_trip", loop_path, loop_model, dict(feeds, limit=np.array(9, np.float32),
                                                            M=np.array(4, np.int64)))
check("(Loop): 4 iterations" in r.stderr, "loop_trip: the trip count ends the loop", r.stderr)
r = run_and_compare("loop_zero", loop_path, loop_model, dict(feeds, M=np.array(0, np.int64)))
check("(Loop): 0 iterations" in r.stderr, "loop_zero: no iteration", r.stderr)
if r.returncode == 0:
    check(np.load(os.path.join(WORK, "loop_zero", "hs_all.npy")).shape == (0, 1, 3),
          "loop_zero: the scan output is empty, [0, 1, 3]")

# --- If nested in a Loop body, the body reading the loop's outer value -------------------------
inner_then = helper.make_graph([helper.make_node("Add", ["acc_in", "step"], ["p"], name="plus")],
                               "inner_then", [], [vi("p", F, [2])])
inner_else = helper.make_graph([helper.make_node("Sub", ["acc_in", "step"], ["q"], name="minus")],
                               "inner_else", [], [vi("q", F, [2])])
nested_body = helper.make_graph(
    [
        const("two", np.array(2, np.int64)),
        helper.make_node("Mod", ["i", "two"], ["r"], name="mod"),
        const("zero", np.array(0, np.int64)),
        helper.make_node("Equal", ["r", "zero"], ["even"], name="even"),
        helper.make_node("If", ["even"], ["acc_out"], name="pick", then_branch=inner_then,
                         else_branch=inner_else),
        helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
    ],
    "nested_body", [vi("i", I64, []), vi("c_in", B, []), vi("acc_in", F, [2])],
    [vi("c_out", B, []), vi("acc_out", F, [2])])
nested_path, nested_model = save(
    "nested", [helper.make_node("Loop", ["M", "", "acc0"], ["acc"], name="outer",
                                body=nested_body)],
    [vi("acc0", F, [2]), vi("step", F, [2]), vi("M", I64, [])], [vi("acc", F, [2])])
r = run_and_compare("nested", nested_path, nested_model,
                    {"acc0": np.array([1, 2], np.float32), "step": np.array([0.5, 3], np.float32),
                     "M": np.array(5, np.int64)})
check("outer/4/pick" in r.stderr and "the then branch" in r.stderr
      and "the else branch" in r.stderr, "nested: each iteration's If is inlined", r.stderr)

# --- Scan: two scan inputs (one along axis 1, one in reverse), a state, outputs along axis 1 and
# in reverse, at opset 21 (read through the current onnx package) -----------------------------
scan_body = helper.make_graph(
    [
        helper.make_node("Add", ["s_in", "a"], ["t"], name="add"),
        helper.make_node("Mul", ["t", "b"], ["s_out"], name="mul"),
        helper.make_node("Identity", ["s_out"], ["o1"], name="o1"),
        helper.make_node("Neg", ["a"], ["o2"], name="o2"),
    ],
    "scan_body", [vi("s_in", F, [2]), vi("a", F, [2]), vi("b", F, [2])],
    [vi("s_out", F, [2]), vi("o1", F, [2]), vi("o2", F, [2])])
scan_path, scan_model = save(
    "scan", [helper.make_node("Scan", ["s0", "A", "Bs"], ["s", "O1", "O2"], name="scan",
                              body=scan_body, num_scan_inputs=2, scan_input_axes=[1, 0],
                              scan_input_directions=[0, 1], scan_output_axes=[1, -2],
                              scan_output_directions=[0, 1])],
    [vi("s0", F, [2]), vi("A", F, [2, 4]), vi("Bs", F, [4, 2])],
    [vi("s", F, [2]), vi("O1", F, [2, 4]), vi("O2", F, [4, 2])], opset=21)
rng = np.random.default_rng(0)
scan_feeds = {"s0": np.array([0.1, 0.2], np.float32),
              "A": rng.standard_normal((2, 4)).astype(np.float32),
              "Bs": rng.standard_normal((4, 2)).astype(np.float32)}
# The scan written out in float64.
s, o1, o2 = scan_feeds["s0"].astype(np.float64), [], []
for t in range(4):
    a, b = scan_feeds["A"][:, t].astype(np.float64), scan_feeds["Bs"][3 - t].astype(np.float64)
    s = (s + a) * b
    o1.append(s)
    o2.append(-a)
r = run_and_compare("scan", scan_path, scan_model, scan_feeds,
                    [s, np.stack(o1, axis=1), np.stack(o2[::-1], axis=0)])
check("(Scan): 4 steps" in r.stderr, "scan: four steps", r.stderr)

# --- Scan of opset 8: a batch axis 0 on every input, the sequence along axis 1, one scan input
# reversed (directions); each batch element scanned as opset 9 does, the results stacked --------
scan8_body = helper.make_graph(
    [helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="add"),
     helper.make_node("Identity", ["acc_out"], ["running"], name="running")],
    "scan8_body", [vi("acc_in", F, [2]), vi("step", F, [2])],
    [vi("acc_out", F, [2]), vi("running", F, [2])])
scan8_path, scan8_model = save(
    "scan8", [helper.make_node("Scan", ["", "init", "X"], ["acc", "R"], name="scan8",
                               body=scan8_body, num_scan_inputs=1, directions=[1])],
    [vi("init", F, [2, 2]), vi("X", F, [2, 3, 2])], [vi("acc", F, [2, 2]), vi("R", F, [2, 3, 2])],
    opset=8)
scan8_feeds = {"init": np.array([[0, 0], [10, 20]], np.float32),
               "X": np.arange(12, dtype=np.float32).reshape(2, 3, 2)}
running = np.zeros((2, 3, 2))
for b in range(2):
    acc = scan8_feeds["init"][b].astype(np.float64)
    for t, step in enumerate((2, 1, 0)):
        acc = acc + scan8_feeds["X"][b, step]
        running[b, t] = acc
want8 = [scan8_feeds["init"] + scan8_feeds["X"].sum(axis=1), running]
r = run_and_compare("scan8", scan8_path, scan8_model, scan8_feeds, want8)
check("(Scan): 2 batch elements of 3 steps" in r.stderr, "scan8: two batch elements", r.stderr)
r = run_and_compare("scan8_ort", scan8_path, scan8_model, scan8_feeds)

# --- check: the bodies' nodes under a binding, each judged --------------------------------------
js = os.path.join(WORK, "loop_check.json")
args = ["check", loop_path, "--bind", "ort", "--no-verify", "--json", js]
for k, v in feeds.items():
    args += ["--input", f"{k}={os.path.join(WORK, 'loop_cond_' + k + '.npy')}"]
r = metaop(*args)
check(r.returncode == 0, "check --bind ort of the loop model: clean", r.stdout + r.stderr)
if r.returncode == 0:
    report = json.load(open(js))
    runs = [run for run in report["runs"] if run["binding"] == "ort"]
    on_ort = [n["node"] for n in runs[0]["nodes"] if n["ran_on"] == "ort"] if runs else []
    check("loop/2/matmul" in on_ort and "loop/0/tanh" in on_ort,
          "check: ONNX Runtime ran the bodies' nodes of each iteration", str(on_ort)[:600])
r = metaop("check", loop_path, "--bind", "ort", "--whole-graph", "--samples", "1")
check(r.returncode == 2 and "--whole-graph does not run models with If, Loop or Scan" in r.stderr,
      "check --whole-graph: refused in one line", r.stderr)

# --- sequences and optionals: lowered to the tensors they hold ----------------------------------
# SplitToSequence by lengths, SequenceInsert at the front, SequenceErase of the last, a Loop that
# carries a sequence and appends to it, SequenceAt, SequenceLength, ConcatFromSequence (along an
# axis and along a new one), SequenceMap, and an optional that holds a tensor.
S_F = helper.make_tensor_sequence_value_info
seq_body = helper.make_graph(
    [helper.make_node("Cast", ["i"], ["fi"], name="cast", to=F),
     helper.make_node("Mul", ["row", "fi"], ["scaled"], name="scale"),
     helper.make_node("SequenceInsert", ["acc_in", "scaled"], ["acc_out"], name="append"),
     helper.make_node("Identity", ["c_in"], ["c_out"], name="keep")],
    "append_body", [vi("i", I64, []), vi("c_in", B, []), S_F("acc_in", F, None)],
    [vi("c_out", B, []), S_F("acc_out", F, None)])
map_body = helper.make_graph([helper.make_node("Sigmoid", ["e"], ["m"], name="sigmoid")],
                             "map_body", [vi("e", F, [2])], [vi("m", F, [2])])
seq_nodes = [
    const("lengths", np.array([1, 2, 3], np.int64)),
    const("one_i", np.array(1, np.int64)), const("zero_i", np.array(0, np.int64)),
    helper.make_node("SplitToSequence", ["x", "lengths"], ["parts"], name="split", axis=0),
    helper.make_node("SequenceInsert", ["parts", "y", "zero_i"], ["with_y"], name="insert"),
    helper.make_node("SequenceErase", ["with_y"], ["erased"], name="erase"),
    helper.make_node("SequenceAt", ["erased", "one_i"], ["at1"], name="at"),
    helper.make_node("SequenceLength", ["erased"], ["count"], name="length"),
    helper.make_node("ConcatFromSequence", ["erased"], ["joined"], name="concat", axis=0),
    helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=F),
    const("trips", np.array(3, np.int64)), const("go", np.array(True)),
    helper.make_node("Loop", ["trips", "go", "empty"], ["grown"], name="grow", body=seq_body),
    helper.make_node("ConcatFromSequence", ["grown"], ["stacked"], name="stack", axis=0,
                     new_axis=1),
    helper.make_node("SequenceMap", ["grown"], ["mapped"], name="map", body=map_body),
    helper.make_node("ConcatFromSequence", ["mapped"], ["mapped_cat"], name="map_concat",
                     axis=0),
    helper.make_node("Optional", ["at1"], ["opt"], name="wrap"),
    helper.make_node("OptionalHasElement", ["opt"], ["has"], name="has"),
    helper.make_node("OptionalGetElement", ["opt"], ["unwrapped"], name="unwrap"),
]
seq_path, seq_model = save(
    "sequences", seq_nodes, [vi("x", F, [6, 2]), vi("y", F, [1, 2]), vi("row", F, [2])],
    [vi("at1", F, [1, 2]), vi("count", I64, []), vi("joined", F, [4, 2]),
     vi("stacked", F, [3, 2]), vi("mapped_cat", F, [6]), vi("has", B, []),
     vi("unwrapped", F, [1, 2])], opset=18)
seq_feeds = {"x": np.arange(12, dtype=np.float32).reshape(6, 2) / 4,
             "y": np.array([[-1, 1]], np.float32), "row": np.array([0.5, -2], np.float32)}
r = run_and_compare("sequences", seq_path, seq_model, seq_feeds)
check("node 'grow' (Loop): 3 iterations" in r.stderr and "node 'map' (SequenceMap): 3 elements"
      in r.stderr, "sequences: the loop's and the map's paths are printed", r.stderr)
r = metaop("check", seq_path, "--bind", "ort", "--no-verify", "--json",
           os.path.join(WORK, "seq_check.json"))
check(r.returncode == 0, "check --bind ort of the sequence model: clean", r.stdout + r.stderr)
if r.returncode == 0:
    runs = json.load(open(os.path.join(WORK, "seq_check.json")))["runs"]
    ran = {n["node"]: n["ran_on"] for run in runs if run["binding"] == "ort" for n in run["nodes"]}
    check(ran.get("split") == "ort" and ran.get("concat") == "ort" and
          ran.get("map/1/sigmoid") == "ort",
          "check: ONNX Runtime ran the Split, the Concat and the map's body", str(ran)[:600])

# A sequence input and a sequence and an optional output, from ONNX test data (conform).
test_dir = os.path.join(WORK, "test_sequence_io")
io_nodes = [helper.make_node("SequenceAt", ["xs", "last"], ["tail"], name="tail"),
            helper.make_node("Abs", ["tail"], ["abs"], name="abs"),
            helper.make_node("SequenceInsert", ["xs", "abs"], ["out_seq"], name="append"),
            helper.make_node("Optional", ["abs"], ["out_opt"], name="wrap")]
io_model = helper.make_model(
    helper.make_graph(io_nodes, "sequence_io", [S_F("xs", F, None)],
                      [S_F("out_seq", F, None),
                       helper.make_value_info("out_opt", helper.make_optional_type_proto(
                           helper.make_tensor_type_proto(F, None)))],
                      [numpy_helper.from_array(np.array(-1, np.int64), "last")]),
    opset_imports=[helper.make_opsetid("", 18)])
io_model.ir_version = 10
onnx.checker.check_model(io_model)
os.makedirs(os.path.join(test_dir, "test_data_set_0"), exist_ok=True)
onnx.save(io_model, os.path.join(test_dir, "model.onnx"))
xs = [np.array([1.5, -2], np.float32), np.array([[-3.25]], np.float32)]


def write_pb(name, proto):
    with open(os.path.join(test_dir, "test_data_set_0", name), "wb") as f:
        f.write(proto.SerializeToString())


write_pb("input_0.pb", numpy_helper.from_list(xs, "xs"))
expected_seq, expected_opt = onnxruntime.InferenceSession(io_model.SerializeToString()).run(
    None, {"xs": xs})
write_pb("output_0.pb", numpy_helper.from_list(list(expected_seq), "out_seq"))
write_pb("output_1.pb", numpy_helper.from_optional(expected_opt, "out_opt"))
r = metaop("conform", test_dir)
check(r.returncode == 0 and "1 passed" in r.stdout,
      "conform: a sequence input and sequence and optional outputs from test data", r.stdout + r.stderr)
# A wrong expected sequence (one tensor fewer) fails, naming the output.
write_pb("output_0.pb", numpy_helper.from_list(list(expected_seq)[:-1], "out_seq"))
r = metaop("conform", test_dir)
check(r.returncode != 0 and "output 'out_seq': 3 tensors, expected 2" in r.stdout + r.stderr,
      "conform: a sequence of the wrong length fails, naming the output", r.stdout + r.stderr)
# run takes tensors: a sequence input is refused in one line naming it.
r = metaop("run", os.path.join(test_dir, "model.onnx"), "--random-inputs")
check(r.returncode == 2 and "input 'xs' is a sequence of tensors" in r.stderr and
      r.stderr.count("\n") == 1, "run of a model with a sequence input: exit 2, one line",
      r.stderr)
# Identity passes a sequence on.
identity_path, _ = save("seq_identity", [
    helper.make_node("SplitToSequence", ["x"], ["parts"], name="split", axis=0),
    helper.make_node("Identity", ["parts"], ["same"], name="same"),
    helper.make_node("SequenceLength", ["same"], ["n"], name="n")], [vi("x", F, [3, 2])],
    [vi("n", I64, [])], opset=18)
r = metaop("run", identity_path, "--random-inputs")
check(r.returncode == 0, "Identity passes a sequence on", r.stdout + r.stderr)
# A tensor operator given a sequence: exit 2 naming the node.
relu_path, _ = save("seq_to_relu", [
    helper.make_node("SplitToSequence", ["x"], ["parts"], name="split", axis=0),
    helper.make_node("Relu", ["parts"], ["r"], name="relu")], [vi("x", F, [3, 2])],
    [vi("r", F, [1, 2])], opset=18)
r = metaop("run", relu_path, "--random-inputs")
check(r.returncode == 2 and "node 'relu' (Relu): input 'parts' is a sequence, which only the "
      "sequence and optional operators take" in r.stderr and r.stderr.count("\n") == 1,
      "a Relu given a sequence: exit 2, one line naming the node", r.stderr)
out_of_range = helper.make_graph(
    [helper.make_node("SplitToSequence", ["x"], ["parts"], name="split", axis=0),
     const("nine", np.array(9, np.int64)),
     helper.make_node("SequenceAt", ["parts", "nine"], ["p"], name="pick")],
    "out_of_range", [vi("x", F, [3, 2])], [vi("p", F, [1, 2])])
oor_model = helper.make_model(out_of_range, opset_imports=[helper.make_opsetid("", 18)])
oor_model.ir_version = 10
oor_path = os.path.join(WORK, "seq_out_of_range.onnx")
onnx.save(oor_model, oor_path)
r = metaop("run", oor_path, "--random-inputs")
check(r.returncode == 2 and "node 'pick' (SequenceAt): position 9 is out of range for a sequence "
      "of 3 tensors" in r.stderr and r.stderr.count("\n") == 1,
      "SequenceAt past the end: exit 2, one line naming the node", r.stderr)

# --- strings: evaluated as the model is lowered (src/engine/strings.h) --------------------------
# float -> string -> StringConcat with a suffix, StringSplit at it, Equal, RegexFullMatch, and back
# to float: run agrees with ONNX Runtime, the numeric results standing as constants.
STR = TensorProto.STRING
str_nodes = [
    helper.make_node("Cast", ["x"], ["text"], name="to_text", to=STR),
    helper.make_node("Constant", [], ["suffix"], name="suffix_const",
                     value=helper.make_tensor("suffix", STR, [], [b"|end"])),
    helper.make_node("StringConcat", ["text", "suffix"], ["joined"], name="concat"),
    helper.make_node("StringSplit", ["joined"], ["parts", "counts"], name="split", delimiter="|"),
    helper.make_node("RegexFullMatch", ["text"], ["negative"], name="match", pattern="-.*"),
    helper.make_node("Equal", ["text", "text"], ["same"], name="equal"),
    helper.make_node("Cast", ["text"], ["back"], name="to_float", to=F),
    helper.make_node("Add", ["back", "x"], ["twice"], name="add"),
]
str_path, str_model = save(
    "strings", str_nodes, [vi("x", F, [4])],
    [vi("counts", I64, [4]), vi("negative", B, [4]), vi("same", B, [4]), vi("twice", F, [4])],
    opset=20)
r = run_and_compare("strings", str_path, str_model,
                    {"x": np.array([0.1, -2.5, 3e-5, 1e20], np.float32)})
r = metaop("run", str_path, "--random-inputs")
# Left to run: the Add, and an Identity from each constant to its graph output.
check(r.returncode == 0 and "4 nodes, opset 20" in r.stdout,
      "strings: only the Add and the outputs' Identity nodes are left to run", r.stdout + r.stderr)
relu_str_path, _ = save("string_to_relu", [
    helper.make_node("Cast", ["x"], ["text"], name="to_text", to=STR),
    helper.make_node("Relu", ["text"], ["r"], name="relu")], [vi("x", F, [2])],
    [vi("r", F, [2])], opset=20)
r = metaop("run", relu_str_path, "--random-inputs")
check(r.returncode == 2 and "node 'relu' (Relu): input 'text' is a string tensor" in r.stderr and
      r.stderr.count("\n") == 1, "a Relu given strings: exit 2, one line naming the node",
      r.stderr)

# --- bad control flow: exit 2, one line naming the node -----------------------------------------
bad_path, _ = save("endless", [helper.make_node("Loop", ["", "", "h0"], ["h_final", "hs_all"],
                                                name="endless", body=body)],
                   [vi("h0", F, [1, 3]), vi("limit", F, [])],
                   [vi("h_final", F, [1, 3]), vi("hs_all", F, [None, 1, 3])], [W])
r = metaop("run", bad_path, "--random-inputs")
check(r.returncode == 2 and "node 'endless' (Loop): neither a trip count nor a condition"
      in r.stderr and r.stderr.count("\n") == 1, "a loop without an end: exit 2, one line",
      r.stderr)
cond2 = os.path.join(WORK, "cond2.npy")
np.save(cond2, np.array([True, False]))
two_path, _ = save("if_two", [helper.make_node("If", ["c"], ["y"], name="branch",
                                               then_branch=then_g, else_branch=else_g)],
                   [vi("x", F, [3]), vi("c", B, [None])], [vi("y", F, [3])], [w])
r = metaop("run", two_path, "--input", f"c={cond2}", "--random-inputs")
check(r.returncode == 2 and "node 'branch' (If): the condition 'c' has 2 elements" in r.stderr,
      "an If whose condition has two elements: exit 2 naming the node", r.stderr)
r = metaop("train", loop_path, "--random-inputs")
check(r.returncode == 2 and r.stderr.count("\n") == 1, "train of a loop model: exit 2, one line",
      r.stderr)

finish()
