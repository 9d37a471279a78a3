"""metaop's functions on small models: what they return, that it equals the command line's JSON
for the same run, the arrays crossing in place, the exceptions, the notebook HTML."""
import json
import subprocess

import numpy as np
import pytest

import metaop

# Figures that change from run to run (times), memory figures (the Python module does not
# replace malloc: docs/python.md), and where files went.
VOLATILE = {"seconds", "step_seconds", "backward_seconds", "forward_seconds", "heap_delta",
            "heap_peak", "backward_peak", "forward_peak", "repro", "verification", "model",
            "reproducer", "input_files", "run_command"}


def scrub(doc):
    if isinstance(doc, dict):
        return {k: scrub(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [scrub(v) for v in doc]
    return doc


def cli_json(metaop_bin, args, tmp_path, name="cli.json"):
    out = tmp_path / name
    p = subprocess.run([metaop_bin, *args, "--json", str(out)], capture_output=True, text=True)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(out.read_text())


def test_run_outputs_are_arrays_over_metaops_memory(data):
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    r = metaop.run(data / "tiny_cnn.onnx", {"image": x})
    out = r.outputs["log_probs"]
    assert out.shape == (1, 10) and out.dtype == np.float32
    assert not out.flags.writeable and not out.flags.owndata
    # log-probabilities of the reference: they sum to 1 once exponentiated.
    assert abs(np.exp(out.astype(np.float64)).sum() - 1) < 1e-5
    # The same input in order, and as a torch-free list, gives the same values.
    again = metaop.run(data / "tiny_cnn.onnx", [x])
    np.testing.assert_array_equal(again["log_probs"], out)
    assert "ran 9 nodes on reference" in r.log


def test_run_takes_bytes_and_modelproto(data):
    onnx = pytest.importorskip("onnx")
    raw = (data / "tiny_cnn.onnx").read_bytes()
    a = metaop.run(raw, seed=3)["log_probs"]
    b = metaop.run(onnx.load_from_string(raw), seed=3)["log_probs"]
    np.testing.assert_array_equal(a, b)


def test_non_contiguous_and_big_endian_inputs_are_read_right(data):
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 16, 32)).astype(np.float32)
    view = x[:, :, :, ::2]  # not contiguous
    swapped = np.ascontiguousarray(view).astype(">f4")
    a = metaop.run(data / "tiny_cnn.onnx", {"image": np.ascontiguousarray(view)})["log_probs"]
    np.testing.assert_array_equal(metaop.run(data / "tiny_cnn.onnx", [view])["log_probs"], a)
    np.testing.assert_array_equal(metaop.run(data / "tiny_cnn.onnx", [swapped])["log_probs"], a)


def test_check_equals_the_command_line(metaop_bin, data, tmp_path):
    model = str(data / "tiny_cnn.onnx")
    opts = ["--bind", "torch", "--samples", "2", "--seed", "0", "--range", "-1,1",
            "--inject", "/features/features.4/Conv:bias@torch"]
    code, doc = cli_json(metaop_bin, ["check", model, *opts], tmp_path)
    r = metaop.check(model, bind="torch", samples=2, inject=["/features/features.4/Conv:bias@torch"])
    assert r.exit_code == code == 1 and not r.ok
    assert scrub(r.json) == scrub(doc)
    f = [f for f in r.findings if f.node == "/features/features.4/Conv"]
    assert f and f[0].binding == "torch" and f[0].cls == "defect" and f[0].verified
    assert f[0].phase == "forward" and f[0].kind == "accuracy" and f[0].score > 1
    assert f[0].worst["output"] == "/features/features.4/Conv_output_0"
    assert f[0].reproducer and (r.workdir / "report" / "repro").exists()
    assert [n["name"] for n in r.nodes][:1] == ["/features/features.0/Conv"]
    assert json.loads(r.to_json()) == r.json
    # The report, copied out.
    index = r.write_report(tmp_path / "copy")
    assert index.exists() and "features.4" in index.read_text()
    # The notebook view lists the finding; pandas gets one row per finding.
    html = r._repr_html_()
    assert "/features/features.4/Conv" in html and "defect" in html
    pd = pytest.importorskip("pandas")
    frame = r.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(r.findings)


def test_check_clean_and_whole_graph(data):
    r = metaop.check(data / "tiny_cnn.onnx", bind="ort", whole_graph=True)
    assert r.ok and r.whole_graph is not None and not r.defects
    assert "whole" in r.log


def test_errors_raise_with_the_command_lines_message(data, tmp_path):
    with pytest.raises(metaop.InputError, match="no such file"):
        metaop.check(tmp_path / "missing.onnx")
    with pytest.raises(metaop.InputError, match="has no input named 'nope'"):
        metaop.run(data / "tiny_cnn.onnx", {"nope": np.zeros(3, np.float32)})
    with pytest.raises(metaop.InputError, match="--bogus-option"):
        metaop.check(data / "tiny_cnn.onnx", bogus_option=3)
    with pytest.raises(metaop.InputError, match="is not a framework binding"):
        metaop.check(data / "tiny_cnn.onnx", bind="nosuchframework")
    with pytest.raises(metaop.InputError, match="dtype"):
        metaop.run(data / "tiny_cnn.onnx", [np.zeros((1, 3, 16, 16), np.complex64)])
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(metaop.InputError, match="bad.onnx"):
        metaop.check(bad)
    # The interpreter goes on: a call after the failures works.
    assert metaop.run(data / "tiny_cnn.onnx").ok


def test_a_crashing_kernel_is_a_finding(data):
    r = metaop.check(data / "tiny_cnn.onnx", bind="torch", inject=["Relu:segv@torch"],
                     no_verify=True)
    crashes = [f for f in r.findings if f.kind == "crash"]
    assert crashes and all(f.op == "Relu" for f in crashes)


def test_progress_callback_gets_lines_and_shares(data):
    seen = []
    metaop.run(data / "tiny_cnn.onnx", progress=lambda line, done: seen.append((line, done)))
    assert seen and seen[-1][1] == pytest.approx(1.0) and "nodes" in seen[-1][0]


def test_probe(data):
    r = metaop.probe("Relu", bind="torch")
    assert isinstance(r.json, dict) and r.exit_code in (0, 1)
    assert isinstance(r.findings, list)


def test_train_and_diagnose(metaop_bin, data, tmp_path):
    x, y = np.load(data / "train_x.npy"), np.load(data / "train_y.npy")
    t = metaop.train(data / "train_mlp.onnx", x, y, loss="cross_entropy", optimizer="adam",
                     lr=0.01, epochs=2, batch_size=16)
    assert len(t.losses) == 12 and all(np.isfinite(t.losses))
    code, doc = cli_json(metaop_bin, ["train", str(data / "train_mlp.onnx"), "--data",
                                      str(data / "train_x.npy"), "--labels",
                                      str(data / "train_y.npy"), "--loss", "cross_entropy",
                                      "--optimizer", "adam", "--lr", "0.01", "--epochs", "2",
                                      "--batch-size", "16"], tmp_path)
    assert scrub(t.json) == scrub(doc)
    d = metaop.diagnose(data / "train_mlp.onnx", x, y, loss="cross_entropy", optimizer="sgd",
                        lr=1000.0, epochs=2, batch_size=16, bind="reference", repair=False)
    assert not d.ok and any(s["kind"] in ("nonfinite_loss", "exploding_loss")
                            for s in d.symptoms)
    assert d.diagnoses and d.diagnoses[0]["category"] == "hyperparameter"
    assert "learning rate" in json.dumps(d.diagnoses[0])


def test_expose(data):
    r = metaop.expose(data / "tiny_cnn.onnx", time_limit=2)
    assert isinstance(r.targets, list) and r.json["schema"] == "metaop-expose/1"


def test_ops():
    rows = metaop.ops()
    assert any(r["op"] == "Conv" and r["binding"] == "reference" and r["forward"] for r in rows)
    assert any(r["op"] == "Conv" and r["binding"] == "torch" for r in rows)


def test_help_reads_well():
    doc = metaop.check.__doc__
    assert "findings" in doc and "bind" in doc and "Returns" in doc
    assert metaop.InputError.__module__ == "metaop"
