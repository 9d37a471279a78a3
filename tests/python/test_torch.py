"""metaop.torch: modules exported in memory with PyTorch's current exporter, findings mapped back
to module names and source lines (and, with Debian's PyTorch 1.13 and torchvision, the legacy
exporter's names on a torchvision model); watch on faulty and healthy training loops."""
import inspect
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import metaop  # noqa: E402
import metaop.torch  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Block()
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.stem(x).mean(dim=(2, 3))
        return torch.log_softmax(self.head(h), dim=-1)


def net_and_input():
    torch.manual_seed(0)
    return Net().eval(), torch.rand(2, 3, 8, 8) * 2 - 1


def test_check_maps_findings_to_modules_and_lines():
    model, x = net_and_input()
    exported = metaop.torch.export(model, (x,))
    where = metaop.torch.origins(exported)
    conv = [n for n in exported.graph.node if n.op_type == "Conv"]
    assert conv and where[conv[0].name].module == "stem.conv"
    assert where[conv[0].name].module_class.endswith("Conv2d")
    r = metaop.torch.check(model, (x,), bind="torch", inject=[f"{conv[0].name}:bias@torch"])
    found = [f for f in r.findings if f.node == conv[0].name]
    assert found and found[0].cls == "defect"
    assert found[0].module == "stem.conv"
    # The line of Block.forward that calls the convolution.
    line = inspect.getsource(Block.forward).splitlines()[-1].strip()
    number = inspect.getsourcelines(Block.forward)[1] + 1
    assert line == "return self.act(self.conv(x))"
    assert found[0].source == f"{__file__}:{number}"
    head = [f for f in r.findings if f.op == "Gemm"]
    assert all(f.module == "head" for f in head)


def test_run_matches_the_module():
    model, x = net_and_input()
    r = metaop.torch.run(model, (x,))
    (out,) = r.outputs.values()
    with torch.no_grad():
        want = model(x).double().numpy()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_legacy_exporter_names():
    model, x = net_and_input()
    exported = metaop.torch.export(model, (x,), exporter="legacy")
    where = metaop.torch.origins(exported)
    assert where["/stem/conv/Conv"].module == "stem.conv"
    assert where["/head/Gemm"].module == "head"


class Dangerous(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.log(self.fc(x))


def test_expose_names_the_module():
    torch.manual_seed(0)
    r = metaop.torch.expose(Dangerous(), (torch.rand(1, 4),), time_limit=5)
    exposed = [t for t in r.targets if t["exposed"]]
    assert exposed, r.log
    assert any(t.get("module") == "" for t in exposed)  # torch.log is called by the top module
    inputs = r.inputs(exposed[0])
    assert inputs and all(isinstance(v, np.ndarray) for v in inputs.values())


def _loop(model, opt, steps=60, every=1, x_scale=1.0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 8, generator=g) * x_scale
    y = (x[:, 0] + x[:, 1] > 0).long()
    lf = torch.nn.CrossEntropyLoss()
    with metaop.torch.watch(model, opt, loss_fn=lf, every=every, window=20) as w:
        for s in range(steps):
            b = slice((s * 24) % 240, (s * 24) % 240 + 24)
            opt.zero_grad()
            loss = lf(model(x[b]), y[b])
            loss.backward()
            w.observe(loss)
            opt.step()
    return w, x[:24], y[:24]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 2))


def test_watch_healthy_loop_has_no_symptom():
    m = _mlp()
    w, _, _ = _loop(m, torch.optim.SGD(m.parameters(), lr=0.05))
    rep = w.report()
    assert rep.healthy and rep.steps == 60 and rep.sampled == 60, str(rep)


def test_watch_nan_from_a_high_learning_rate():
    m = _mlp()
    w, x, y = _loop(m, torch.optim.SGD(m.parameters(), lr=1e4))
    rep = w.report()
    kinds = {s.kind for s in rep.symptoms}
    assert "nonfinite_loss" in kinds, str(rep)
    assert any(c.category == "learning_rate" for c in rep.causes), str(rep)
    assert w.first_nonfinite_module is not None
    replay = w.replay(x, y)
    assert replay["verdict"] == "model", replay["why"]


def test_watch_dying_layer():
    m = _mlp()
    with torch.no_grad():
        m[2].bias.fill_(-10.0)
    w, _, _ = _loop(m, torch.optim.SGD(m.parameters(), lr=0.05))
    rep = w.report()
    dead = [s for s in rep.symptoms if s.kind == "dead_relu"]
    assert dead and dead[0].where == "3", str(rep)
    assert not any(s.kind == "nonfinite_loss" for s in rep.symptoms)


def test_watch_sampling_sees_the_same_faults():
    m = _mlp()
    w, _, _ = _loop(m, torch.optim.SGD(m.parameters(), lr=1e4), every=4)
    assert any(s.kind == "nonfinite_loss" for s in w.report().symptoms)
    assert w.sampled == 15
    m = _mlp()
    with torch.no_grad():
        m[2].bias.fill_(-10.0)
    w, _, _ = _loop(m, torch.optim.SGD(m.parameters(), lr=0.05), every=3)
    assert any(s.kind == "dead_relu" and s.where == "3" for s in w.report().symptoms)


def test_torchvision_legacy_export_maps_an_injected_fault():
    """Debian's python3 (PyTorch 1.13, torchvision 0.14, the legacy exporter): resnet18 with a
    fault planted in one convolution under the torch-1.13 binding."""
    env = dict(os.environ)
    p = subprocess.run(["/usr/bin/python3", str(HERE / "torchvision_legacy.py")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    found = json.loads(p.stdout.strip().splitlines()[-1])
    assert found["node"] == "/layer2/layer2.0/conv1/Conv"
    assert found["module"] == "layer2.0.conv1" and found["cls"] == "defect"
