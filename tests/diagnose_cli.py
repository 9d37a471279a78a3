#!/usr/bin/python3
"""End-to-end tests of `metaop diagnose` and `metaop train --diagnose` on small faulty training
setups of bench/diagnose/make_setups.py and their fixed twins: every symptom kind shows where it
is planted, each fault gets the right category and place, the model-or-framework split calls a
planted kernel fault `framework` (its reproducer reproduces it) and a too-high learning rate
not, repairs verify and are written out, twins stay healthy; faults that leave the loss at the
trivial predictor's level (labels apart from their inputs, weight decay, target scale, momentum,
a flipped gradient or update) are named, and no repair is verified there; architecture faults
(layers without a nonlinearity, logits an output activation squeezes, a layer too narrow, whose
partial repairs are not verified) and inputs that do not
determine the labels are named; a learning-rate schedule that decays too fast and frozen layers
are named; batches of one sample and of the whole data set are named; bad usage exits 2.

Usage: diagnose_cli.py METAOP WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

from testlib import check, finish

METAOP, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["lr_high_sgd_mlp", "lr_low_sgd_mlp", "init_large_output_layer", "init_zero_layer",
         "init_large_tanh", "deep_sigmoid_mlp", "data_labels_from_one", "loss_double_softmax",
         "loss_bce_on_logits", "framework_nan_relu", "data_labels_sorted", "hp_weight_decay_typo",
         "data_target_scale", "hp_momentum_above_one", "framework_grad_sign_gemm",
         "framework_update_sign_adam", "arch_no_nonlinearity", "arch_sigmoid_logits",
         "arch_relu_logits_bce", "data_inputs_repeated", "data_inputs_erased",
         "hp_momentum_oscillating", "hp_lr_schedule_too_fast", "hp_frozen_hidden_layers",
         "hp_batch_size_one", "hp_full_batch", "arch_narrow_layer", "init_constant_weights",
         "hp_dropout_too_high", "two_constant_weights_raw_inputs", "init_compounding_deep_relu"]
os.makedirs(WORK, exist_ok=True)
subprocess.run([sys.executable, os.path.join(HERE, "..", "bench", "diagnose", "make_setups.py"),
                WORK, *NAMES], check=True, capture_output=True)
SETUPS = {s["name"]: s for s in json.load(open(os.path.join(WORK, "setups.json")))}


def diagnose(name, *extra, twin=False, command="diagnose"):
    s = SETUPS[name]
    model, data, loss, args = s["model"], s["data"], s["loss"], s["args"]
    if twin:
        t = s["twin"]
        model, data, loss, args = t["model"], t["data"], t["loss"], t["args"]
    out = os.path.join(WORK, f"{name}{'_twin' if twin else ''}_{command}.json")
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([METAOP, command, os.path.join(WORK, model + ".onnx"),
                        "--data", os.path.join(WORK, data + "_x.npy"),
                        "--labels", os.path.join(WORK, data + "_y.npy"),
                        "--loss", loss, *args, "--json", out, *extra,
                        *(["--diagnose"] if command == "train" else [])],
                       capture_output=True, text=True)
    doc = json.load(open(out)) if os.path.exists(out) else {}
    return p.returncode, p.stdout + p.stderr, doc


def kinds(doc):
    return {s["kind"] for s in doc.get("symptoms", [])}


def top(doc):
    return (doc.get("diagnoses") or [{}])[0]


def node_of(name, key):
    return SETUPS[name]["expect"][key]


def twin_healthy(name):
    """The setup's fixed twin: diagnosed healthy (exit 0)."""
    rc, out, doc = diagnose(name, twin=True)
    check(rc == 0 and doc.get("healthy") is True, f"{name}'s twin: healthy ({sorted(kinds(doc))})",
          out)


# 1. Each symptom kind where it is planted, with the right cause and place at the top.
cases = {  # setup: (symptom kinds that must show, what the top diagnosis must say)
    "lr_high_sgd_mlp": ({"exploding_loss", "nonfinite_loss", "nonfinite_activation"},
                        {"category": "hyperparameter", "hyperparameter": "learning_rate"}),
    "lr_low_sgd_mlp": ({"stagnant_loss", "slow_convergence"},
                       {"category": "hyperparameter", "hyperparameter": "learning_rate"}),
    "init_large_output_layer": ({"exploding_gradient"},
                                {"category": "initialization",
                                 "node": node_of("init_large_output_layer", "node")}),
    "init_zero_layer": ({"dead_relu", "vanishing_gradient"},
                        {"category": "initialization", "node": node_of("init_zero_layer", "node")}),
    "init_large_tanh": ({"saturation"},
                        {"category": "initialization", "node": node_of("init_large_tanh", "node")}),
    "deep_sigmoid_mlp": ({"vanishing_gradient"},
                         {"category": "activation", "node": node_of("deep_sigmoid_mlp", "node")}),
}
docs = {}
for name, (want, expect) in cases.items():
    rc, out, doc = diagnose(name, "--no-repair")
    docs[name] = doc
    got = top(doc)
    check(rc == 1 and want <= kinds(doc) and doc.get("healthy") is False and
          all(got.get(k) == v for k, v in expect.items()),
          f"{name}: symptoms {sorted(want)} and the top diagnosis {expect} (got {sorted(kinds(doc))}; "
          f"{got.get('category')} {got.get('place')})", out)
# The schema of docs/diagnose.md on one of them.
doc = docs["lr_high_sgd_mlp"]
s0, d0 = doc["symptoms"][0], doc["diagnoses"][0]
check(set(s0) >= {"kind", "step", "node", "op_type", "value", "threshold"} and
      set(d0) >= {"category", "hyperparameter", "node", "op_type", "evidence", "fix",
                  "fix_verified"} and d0["fix_verified"] is False and d0["fix"],
      f"JSON: symptoms and diagnoses carry the documented fields ({sorted(d0)})")
nf = [s for s in doc["symptoms"] if s["kind"] == "nonfinite_activation"]
check(bool(nf) and nf[0]["node"] and nf[0]["step"] == next(
      s["step"] for s in doc["symptoms"] if s["kind"] == "nonfinite_loss"),
      f"the first non-finite node is named at the step the loss turns non-finite ({nf[:1]})")

# 2. Model or framework: a too-high learning rate recurs on the reference (the model's); a NaN
#    planted in torch's ReLU vanishes there, and train --check names the kernel, whose
#    reproducer reproduces it.
rep = doc.get("replay", {})
check(rep.get("done") and not rep.get("vanished") and
      all(d["category"] != "framework" for d in doc["diagnoses"]),
      f"lr too high: the symptoms recur on the reference, no framework diagnosis ({rep.get('note')})")
shutil.rmtree(os.path.join(WORK, "repro"), ignore_errors=True)
rc, out, doc = diagnose("framework_nan_relu", "--repro", os.path.join(WORK, "repro"))
got, relu = top(doc), node_of("framework_nan_relu", "node")
check(rc == 1 and got.get("category") == "framework" and got.get("node") == relu and
      got.get("binding") == "torch" and got.get("phase") == "forward" and got.get("fix_verified"),
      f"a NaN planted in torch's {relu}: framework, that node, torch, forward, the rebinding "
      f"verified ({got.get('place')}: {got.get('fix_result')})", out)
found = doc.get("replay", {}).get("findings", [])
check(found and all(f.get("kind") in ("accuracy", "nonfinite", "crash", "hang") and
                    f.get("phase") in ("forward", "backward", "update") for f in found),
      "the replay's findings give their kind and phase in words "
      f"({[(f.get('kind'), f.get('phase')) for f in found][:3]})")
if got.get("repro"):
    again = subprocess.run([METAOP, "repro", got["repro"]], capture_output=True, text=True)
    clean = subprocess.run([METAOP, "repro", got["repro"], "--bind", "reference"],
                           capture_output=True, text=True)
    check(again.returncode == 1 and clean.returncode == 0,
          "the framework diagnosis's reproducer reproduces the fault, and the reference is clean",
          again.stdout + again.stderr + clean.stdout + clean.stderr)
else:
    check(False, "the framework diagnosis has a reproducer", out)
check(all(d["category"] == "framework" for d in doc.get("diagnoses", [])),
      f"model causes of the vanished symptoms are ruled out "
      f"({[d['category'] for d in doc.get('diagnoses', [])]})")

# 3. Repairs: retraining verifies the fix, and --out writes what was changed.
outdir = os.path.join(WORK, "repaired")
shutil.rmtree(outdir, ignore_errors=True)
shutil.rmtree(os.path.join(WORK, "report"), ignore_errors=True)
rc, out, doc = diagnose("lr_high_sgd_mlp", "--out", outdir, "--report",
                        os.path.join(WORK, "report"))
got = top(doc)
hp = os.path.join(outdir, "1_hyperparameter_learning_rate", "hparams.json")
lr = json.load(open(hp))["lr"] if os.path.exists(hp) else None
check(rc == 1 and got.get("fix_verified") and lr is not None and lr < 20 and
      any(r["verified"] for r in doc["repairs"]),
      f"lr too high: a lower learning rate verifies ({got.get('fix_result')}; written lr {lr})", out)
# Accuracy for classification: per step in the JSON, per epoch on the console, and the verified
# repair's last epoch well above the diverged run's (3 classes: about a third by chance).
repaired = [r.get("accuracy_last_epoch") for r in doc.get("repairs", []) if r["verified"]]
check(len(doc.get("accuracies", [])) == doc.get("steps") and "accuracy:" in out and
      isinstance(doc.get("accuracy_last_epoch"), float) and doc["accuracy_last_epoch"] < 0.5 and
      repaired and isinstance(repaired[0], float) and repaired[0] > 0.8,
      f"accuracy: the diverged run's last epoch {doc.get('accuracy_last_epoch')}, the repaired "
      f"run's {repaired}", out)
if lr is not None:  # the written hyperparameters train the model healthily
    s = SETUPS["lr_high_sgd_mlp"]
    p = subprocess.run([METAOP, "train", os.path.join(WORK, s["model"] + ".onnx"), "--data",
                        os.path.join(WORK, s["data"] + "_x.npy"), "--labels",
                        os.path.join(WORK, s["data"] + "_y.npy"), "--loss", s["loss"],
                        "--bind", "torch", "--hparams", hp, "--diagnose"],
                       capture_output=True, text=True)
    check(p.returncode == 0 and "diagnosis: healthy" in p.stdout,
          "train --hparams with the written repair: healthy", p.stdout + p.stderr)
html = open(os.path.join(WORK, "report", "index.html")).read() \
    if os.path.exists(os.path.join(WORK, "report", "index.html")) else ""
check(html.count("<svg") >= 4 and "id='metaop-graph'" in html and "<script src" not in html
      and "Diagnoses" in html,
      "--report: the model's graph, loss, gradient norms and dead units plotted, the diagnoses, "
      "nothing fetched")
for name, expect in [("data_labels_from_one", {"category": "data", "input": "labels"}),
                     ("loss_double_softmax", {"category": "loss",
                                              "node": node_of("loss_double_softmax", "node")}),
                     ("loss_bce_on_logits", {"category": "loss"})]:
    shutil.rmtree(os.path.join(WORK, "out_" + name), ignore_errors=True)
    rc, out, doc = diagnose(name, "--out", os.path.join(WORK, "out_" + name))
    got = top(doc)
    check(rc == 1 and all(got.get(k) == v for k, v in expect.items()) and got.get("fix_verified"),
          f"{name}: {expect} and its fix verified ({got.get('place')}: {got.get('fix_result')})",
          out)
# The repair's folder: "1_loss_" and the node's name made a file name (names with punctuation
# get a hash of the whole name, so that two names never share a folder).
out_dir = os.path.join(WORK, "out_loss_double_softmax")
repairs = [d for d in os.listdir(out_dir) if d.startswith("1_loss_")] \
    if os.path.isdir(out_dir) else []
written = os.path.join(out_dir, repairs[0] if len(repairs) == 1 else "1_loss_?", "model.onnx")
p = subprocess.run([METAOP, "diagnose", written, "--data",
                    os.path.join(WORK, "loss_double_softmax_x.npy"), "--labels",
                    os.path.join(WORK, "loss_double_softmax_y.npy"), "--loss", "cross_entropy",
                    "--epochs", "10", "--lr", "0.1", "--bind", "torch", "--no-repair"],
                   capture_output=True, text=True)
check(p.returncode == 0, f"the written model without its Softmax is healthy ({written})",
      p.stdout + p.stderr)

# 4. The twins stay quiet (exit 0), with diagnose and with train --diagnose.
for name in ["lr_high_sgd_mlp", "init_zero_layer", "init_large_tanh", "deep_sigmoid_mlp",
             "framework_nan_relu", "loss_bce_on_logits"]:
    rc, out, doc = diagnose(name, twin=True)
    check(rc == 0 and doc.get("healthy") is True and not doc.get("diagnoses"),
          f"{name}'s twin: healthy ({sorted(kinds(doc))})", out)
rc, out, doc = diagnose("lr_high_sgd_mlp", twin=True, command="train")
check(rc == 0 and doc.get("diagnosis", {}).get("healthy") is True,
      "train --diagnose on a healthy setup: exit 0, healthy", out)
rc, out, doc = diagnose("lr_high_sgd_mlp", command="train")
dg = doc.get("diagnosis", {})
check(rc == 1 and "nonfinite_loss" in {s["kind"] for s in dg.get("symptoms", [])} and
      (dg.get("diagnoses") or [{}])[0].get("hyperparameter") == "learning_rate" and
      len(doc.get("losses", [])) == 60,
      "train --diagnose with a too-high learning rate: the whole run, the symptoms and the "
      "cause in its JSON, exit 1", out)
# The monitors see what the loop computed: per-step series of every trainable weight.
check(all(len(w["grad_norm"]) == 60 for w in docs["lr_low_sgd_mlp"]["monitors"]["weights"]),
      "per-step gradient norms of every weight in the JSON")

# 5. Faults that leave no NaN and no textbook symptom: the loss ends at the trivial predictor's
#    level (chance_level), and a repair is verified only below it.
def hollow(doc):
    """Repairs called verified whose loss ends at the trivial predictor's level."""
    return [r["change"] for r in doc.get("repairs", []) if r["verified"] and
            not r["loss_last_quarter"] < 0.8 * r["trivial_loss"]]


rc, out, doc = diagnose("data_labels_sorted")
got = top(doc)
check(rc == 1 and "chance_level" in kinds(doc) and got.get("category") == "data" and
      got.get("input") == "labels" and "sorted" in got.get("evidence", "") and
      doc.get("small_batch", {}).get("fitted") is True and
      not any(r["verified"] for r in doc.get("repairs", [])),
      f"labels sorted apart from their inputs: data labels (the model fits a small batch), no "
      f"repair verified ({got.get('place')}; repairs {[r['result'] for r in doc.get('repairs', [])]})",
      out)
# The labels explain the chance level: the learning rate that "nothing else explains" is gone.
check(not any("nothing else explains it" in d.get("evidence", "") for d in doc.get("diagnoses", [])),
      "labels sorted: no cause named because nothing else explained the chance level "
      f"({[d.get('place') for d in doc.get('diagnoses', [])]})", out)
for name, expect in [("hp_weight_decay_typo", {"category": "hyperparameter",
                                               "hyperparameter": "weight_decay"}),
                     ("data_target_scale", {"category": "data", "input": "labels"}),
                     ("hp_momentum_above_one", {"category": "hyperparameter",
                                                "hyperparameter": "momentum"}),
                     ("hp_momentum_oscillating", {"category": "hyperparameter",
                                                  "hyperparameter": "momentum"})]:
    rc, out, doc = diagnose(name)
    got = top(doc)
    check(rc == 1 and all(got.get(k) == v for k, v in expect.items()) and
          got.get("fix_verified") and not hollow(doc),
          f"{name}: {expect}, its fix verified below the trivial predictor's loss "
          f"({got.get('place')}: {got.get('fix_result')}; hollow {hollow(doc)})", out)
    if name == "hp_momentum_above_one":
        check("warning: --momentum 1.1" in out, "momentum above 1 runs, with a warning", out)
    if name == "hp_momentum_oscillating":  # a loss that swings without exploding
        check("oscillating_loss" in kinds(doc) and "oscillating_loss" in got.get("symptoms", []),
              f"momentum 0.99: oscillating_loss, explained by the momentum ({sorted(kinds(doc))})",
              out)
    if name == "data_target_scale":  # regression (mse): no accuracy
        check(doc.get("accuracies") == [] and doc.get("accuracy_last_epoch") is None and
              "accuracy:" not in out, "mse: no accuracy is reported", out)
# The two planted framework faults without NaN: named with their node, phase and binding.
gemm = SETUPS["framework_grad_sign_gemm"]["expect"]["node"]
for name, where in [("framework_grad_sign_gemm", {"node": gemm, "phase": "backward"}),
                    ("framework_update_sign_adam", {"weight": "2.weight", "phase": "update"})]:
    rc, out, doc = diagnose(name)
    got = top(doc)
    check(rc == 1 and got.get("category") == "framework" and got.get("binding") == "torch" and
          all(got.get(k) == v for k, v in where.items()) and got.get("fix_verified"),
          f"{name}: the framework's {where} under torch ({got.get('category')} "
          f"{got.get('place')}: {got.get('evidence', '')[:200]})", out)
    twin_healthy(name)
# Architecture: layers stacked without a nonlinearity (chance level on rings; a Relu after
# each layer but the last verifies), logits an output activation squeezes (static faults whose
# removal verifies).
for name in ["arch_no_nonlinearity", "arch_sigmoid_logits", "arch_relu_logits_bce",
             "arch_narrow_layer"]:
    rc, out, doc = diagnose(name)
    got, where = top(doc), node_of(name, "node")
    static = SETUPS[name]["static"]
    check(rc == 1 and got.get("category") == "architecture" and got.get("node") == where and
          got.get("static") is static and got.get("fix_verified") and not hollow(doc),
          f"{name}: architecture at {where} (static: {static}), its fix verified below the "
          f"trivial predictor's loss ({got.get('place')}: {got.get('fix_result')})", out)
    if name == "arch_narrow_layer":
        # A layer of one unit between 8 features and 6 classes: widening it is the repair; the
        # learning rate raised also beats chance, but removes a fraction of what the widening
        # does, and is not called verified.
        others = [r for r in doc.get("repairs", []) if "widened" not in r["change"]]
        check("widened from 1 to 12 outputs" in got.get("fix_result", "") and
              all(not r["verified"] and "leaves most of the fault" in r["result"]
                  for r in others),
              f"{name}: the layer widened, no partial repair verified "
              f"({[(r['change'], r['result']) for r in doc.get('repairs', [])]})", out)
    twin_healthy(name)
# Every hidden weight one constant: the units of each hidden layer stay identical (a static
# initialization fault, whatever the run shows); re-initializing those layers verifies.
rc, out, doc = diagnose("init_constant_weights")
got, where = top(doc), node_of("init_constant_weights", "node")
check(rc == 1 and got.get("category") == "initialization" and got.get("node") == where and
      got.get("static") is True and "units identical" in got.get("evidence", "") and
      "whose units are identical too" in got.get("fix_result", "") and got.get("fix_verified") and
      not hollow(doc),
      f"init_constant_weights: initialization at {where}, static, both hidden layers "
      f"re-initialized and verified ({got.get('place')}: {got.get('fix_result')})", out)
twin_healthy("init_constant_weights")
# Seven ReLU layers each at gain 3, under the per-layer bound: their gains compound, the first
# loss is tens of times the trivial predictor's; the stack is named from its first layer, and
# re-initializing every layer of it verifies (the learning rate is not the first cause).
rc, out, doc = diagnose("init_compounding_deep_relu")
got, where = top(doc), node_of("init_compounding_deep_relu", "node")
check(rc == 1 and got.get("category") == "initialization" and got.get("node") == where and
      "compound" in got.get("evidence", "") and "gains compound with it" in
      got.get("fix_result", "") and got.get("fix_verified") and not hollow(doc),
      f"init_compounding_deep_relu: initialization from {where}, the stack re-initialized and "
      f"verified ({got.get('category')} {got.get('place')}: {got.get('fix_result')})", out)
twin_healthy("init_compounding_deep_relu")
# Two faults: the constant weights and inputs 300x off scale. Neither fix verifies alone; the
# two together verify both diagnoses.
rc, out, doc = diagnose("two_constant_weights_raw_inputs")
ds = doc.get("diagnoses", [])
both = [r for r in doc.get("repairs", []) if r.get("together_with")]
init = next((d for d in ds if d.get("category") == "initialization"), {})
data = next((d for d in ds if d.get("category") == "data" and d.get("input") == "x"), {})
check(rc == 1 and top(doc).get("category") == "initialization" and
      init.get("fix_verified") and data.get("fix_verified") and
      any(r["verified"] and "re-initialization" in r["change"] and "standardized" in r["change"]
          for r in both) and
      not any(r["verified"] for r in doc.get("repairs", []) if not r.get("together_with")) and
      not hollow(doc),
      f"two faults: the re-initialization and the standardization verified together, neither "
      f"alone ({[(r['change'], r['verified']) for r in doc.get('repairs', [])]})", out)
twin_healthy("two_constant_weights_raw_inputs")
# A Dropout that drops 0.95 of its units: found by training again with 0.5, which is the
# verified repair; the learning rate that "nothing else explains" is not named beside it.
rc, out, doc = diagnose("hp_dropout_too_high")
got = top(doc)
check(rc == 1 and got.get("category") == "hyperparameter" and
      got.get("hyperparameter") == "dropout" and "0.95 -> 0.5" in got.get("fix_result", "") and
      got.get("fix_verified") and not hollow(doc) and
      not any("nothing else explains it" in d.get("evidence", "") for d in doc["diagnoses"]),
      f"hp_dropout_too_high: hyperparameter dropout at the Dropout, ratio 0.95 -> 0.5 verified "
      f"({[(d.get('place'), d.get('fix_result')) for d in doc.get('diagnoses', [])]})", out)
twin_healthy("hp_dropout_too_high")

# Inputs that do not determine the labels: one batch's inputs repeated, every input erased. A
# static data fault of the input (no model can beat chance on them), no repair.
for name, needle in [("data_inputs_repeated", "8 distinct inputs"),
                     ("data_inputs_erased", "all 192 samples of input 'x' are identical")]:
    rc, out, doc = diagnose(name)
    got = top(doc)
    check(rc == 1 and got.get("category") == "data" and got.get("input") == "x" and
          got.get("static") is True and needle in got.get("evidence", "") and
          "chance_level" in got.get("symptoms", []) and
          doc.get("data", {}).get("distinct_inputs") == (8 if name.endswith("repeated") else 1) and
          doc["data"].get("floor_loss", 0) >= 0.8 * doc.get("trivial_loss", 1) and
          not any(r["verified"] for r in doc.get("repairs", [])),
          f"{name}: data x, '{needle}', explains chance_level, no repair ({got.get('evidence')})",
          out)
    twin_healthy(name)

# Settings of the training loop itself: a learning-rate schedule that stops the steps before the
# rings are learned, hidden layers frozen at their random initialization. Named, the responsible
# setting changed by the verified repair; the twins (a gentle schedule, nothing frozen) healthy.
for name, place, needle in [("hp_lr_schedule_too_fast", "lr_schedule", "step:1:0.1"),
                            ("hp_frozen_hidden_layers", "freeze", "0.weight")]:
    rc, out, doc = diagnose(name)
    got = top(doc)
    check(rc == 1 and got.get("category") == "hyperparameter" and
          got.get("hyperparameter") == place and needle in got.get("evidence", "") and
          got.get("fix_verified") and not hollow(doc) and
          (doc.get("lr_schedule") == "step:1:0.1" if place == "lr_schedule"
           else doc.get("frozen") == ["0.bias", "0.weight", "2.bias", "2.weight"]),
          f"{name}: hyperparameter {place}, its fix verified below the trivial predictor's loss "
          f"({got.get('place')}: {got.get('fix_result')})", out)
    twin_healthy(name)

# Batch sizes: batches of one sample behind a loss that swings and spikes, the whole data set as
# one batch behind a run of ten updates that ends near chance level. Named, the batch size
# changed by the verified repair; the twins (batches of 32 and 8) healthy.
for name, needle, batch in [("hp_batch_size_one", "batches of 1 of the 192 samples", 32),
                            ("hp_full_batch", "10 in the whole run of 10 epochs", 8)]:
    rc, out, doc = diagnose(name)
    got = top(doc)
    check(rc == 1 and got.get("hyperparameter") == "batch_size" and
          needle in got.get("evidence", "") and got.get("fix_verified") and not hollow(doc) and
          any(r["verified"] and r["change"].endswith(f"-> {batch}")
              for r in doc.get("repairs", [])),
          f"{name}: hyperparameter batch_size, batches of {batch} verified below the trivial "
          f"predictor's loss ({got.get('place')}: {got.get('fix_result')})", out)
    rc, out, doc = diagnose(name, twin=True)
    check(rc == 0 and doc.get("healthy") is True and doc.get("batch_size") in (32, 8),
          f"{name}'s twin: healthy ({sorted(kinds(doc))})", out)

# No verified repair of any setup above ends at the trivial predictor's level.
for f in sorted(os.listdir(WORK)):
    if f.endswith("_diagnose.json"):
        d = json.load(open(os.path.join(WORK, f)))
        check(not hollow(d), f"{f}: no repair verified at the trivial predictor's level "
              f"({hollow(d)})")

# 6. Bad usage: exit 2 naming the culprit.
s = SETUPS["lr_high_sgd_mlp"]
base = [os.path.join(WORK, s["model"] + ".onnx"), "--data", os.path.join(WORK, s["data"] + "_x.npy"),
        "--labels", os.path.join(WORK, s["data"] + "_y.npy")]
for args, needle in [(["--loss", "hinge"], "hinge"),
                     (["--loss", "mse"], "labels are int64"),
                     (["--loss", "cross_entropy", "--dead-fraction", "1.5"], "--dead-fraction"),
                     (["--loss", "cross_entropy", "--stagnation-epochs", "1"],
                      "--stagnation-epochs"),
                     (["--loss", "cross_entropy", "--loss-growth", "0.5"], "--loss-growth"),
                     (["--loss", "cross_entropy", "--oscillation-rise", "0"],
                      "--oscillation-rise"),
                     (["--loss", "cross_entropy", "--inject", "nosuch:update_nan@torch:update"],
                      "nosuch")]:
    p = subprocess.run([METAOP, "diagnose", *base, *args], capture_output=True, text=True)
    check(p.returncode == 2 and needle in p.stderr, f"diagnose {' '.join(args)}: exit 2 naming "
          f"'{needle}'", p.stdout + p.stderr)
p = subprocess.run([METAOP, "diagnose", os.path.join(WORK, "nosuch.onnx"), "--data", base[2],
                    "--labels", base[4], "--loss", "cross_entropy"], capture_output=True, text=True)
check(p.returncode == 2 and "nosuch.onnx" in p.stderr, "diagnose on a missing model: exit 2",
      p.stderr)

finish()
