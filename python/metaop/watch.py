"""metaop.torch.watch: the training monitors of `metaop diagnose` on a PyTorch loop as it runs.

    with metaop.torch.watch(model, optimizer, loss_fn=loss_fn) as w:
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            w.observe(loss)          # the step's loss (optional, but the loss symptoms need it)
            optimizer.step()
    print(w.report())                # symptoms, where, and what probably causes them
    w.replay(x, y)                   # this step through MetaOp: model or framework at fault?

What it watches, with the thresholds `metaop diagnose` uses (metaop._core.thresholds(); the
sources are cited in docs/diagnose.md): the loss (non-finite, exploding: above `loss_growth`
times the first), per weight tensor the gradient norm and the update-to-weight ratio (learning
rate too high or too low), the ratio of the first layer's gradient norm to the last's
(vanishing, exploding), and through forward hooks on nn.ReLU, nn.Sigmoid and nn.Tanh modules the
units dead over a window and the saturated share. After a non-finite loss the next forward
names the first module whose output is non-finite.

The monitors sample: every `every` steps (default 10) they read gradients, weights and
activations (one synchronization each); other steps cost a few Python calls. Functional activations
(torch.relu in forward) are not seen by module hooks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from . import _core


@dataclass
class Symptom:
    """A symptom of `metaop diagnose`'s kinds (metaop._core.symptom_kinds()), or
    nonfinite_gradient (a non-finite gradient norm, watch's own): the first step it shows at
    (1-based), where (a parameter or module name), its value against the threshold, and in
    words."""

    kind: str
    step: int
    where: str
    value: float
    threshold: float
    detail: str


@dataclass
class Cause:
    """What probably causes the symptoms (the rules `metaop diagnose` reports, in short) and
    what to try."""

    category: str
    where: str
    why: str
    fix: str


@dataclass
class WatchReport:
    steps: int
    sampled: int
    symptoms: list[Symptom] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        return not self.symptoms

    def __str__(self) -> str:
        lines = [f"metaop watch: {self.steps} steps, {self.sampled} sampled: "
                 + ("no symptom" if self.healthy else f"{len(self.symptoms)} symptom(s)")]
        for s in self.symptoms:
            lines.append(f"  {s.kind} at step {s.step} ({s.where}): {s.detail}")
        for c in self.causes:
            lines.append(f"  cause: {c.category} at {c.where}: {c.why}; try: {c.fix}")
        return "\n".join(lines)


_LOSSES = {"CrossEntropyLoss": "cross_entropy", "MSELoss": "mse", "NLLLoss": "nll",
           "BCEWithLogitsLoss": "bce_with_logits", "BCELoss": "bce", "L1Loss": "l1"}


def _is_kernel(p: torch.nn.Parameter) -> bool:
    return p.dim() >= 2


class Watch:
    """The monitors attached to one model and optimizer (metaop.torch.watch makes one)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                 loss_fn: Callable[..., Any] | None = None, every: int = 10, window: int = 50,
                 thresholds: dict[str, float] | None = None) -> None:
        if every < 1 or window < 1:
            raise ValueError("every and window must be at least 1")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.every, self.window = every, window
        self.t = dict(_core.thresholds())
        self.t.update(thresholds or {})
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        kernels = [k for k, (_, p) in enumerate(self.params) if _is_kernel(p)]
        self.first_kernel = kernels[0] if kernels else None
        self.last_kernel = kernels[-1] if kernels else None
        self.step = 0
        self.sampled = 0
        self.losses: list[torch.Tensor] = []
        self.loss_values: list[float] = []
        self.grad_norms: dict[int, list[float]] = {}   # step -> per parameter
        self.update_ratios: dict[int, list[float]] = {}
        self.dead: dict[str, torch.Tensor] = {}         # ReLU module -> units alive this window
        self.dead_share: dict[str, list[float]] = {}    # per window
        self.saturated: dict[str, list[float]] = {}     # per sampled step
        self.symptoms: list[Symptom] = []
        self.first_nonfinite_module: tuple[int, str] | None = None
        self._before: list[torch.Tensor] | None = None
        self._sampling = False
        self._localizing = 0  # 1: hooks armed for the next forward; 2: that forward runs
        self._localizers: list[Any] = []
        self._judged = 0  # losses judged so far
        self._handles: list[Any] = []
        self._seconds = 0.0
        self._attached = False

    # --- attaching

    def attach(self) -> "Watch":
        if self._attached:
            return self
        for name, m in self.model.named_modules():
            if isinstance(m, (torch.nn.ReLU, torch.nn.Sigmoid, torch.nn.Tanh)):
                self._handles.append(m.register_forward_hook(self._activation_hook(name)))
        self._handles.append(self.model.register_forward_pre_hook(self._forward_start))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._before_step))
            self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        self._attached = True
        return self

    def close(self) -> None:
        for h in self._handles + self._localizers:
            h.remove()
        self._handles.clear()
        self._localizers.clear()
        self._attached = False

    def _arm_localizer(self) -> None:
        """Hooks on every leaf module for the next forward only: the first whose output is
        non-finite."""
        if self._localizing or self.first_nonfinite_module is not None or not self._attached:
            return
        for name, m in self.model.named_modules():
            if not list(m.children()):
                self._localizers.append(m.register_forward_hook(self._nonfinite_hook(name)))
        self._localizing = 1

    def __enter__(self) -> "Watch":
        return self.attach()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- per step

    def _forward_start(self, module: Any, args: Any) -> None:
        # Each forward of the model in training mode is a step's; sample every `every`-th.
        if module.training:
            self._sampling = (self.step % self.every) == 0
        if self._localizing == 1:
            self._localizing = 2
        elif self._localizing == 2:
            for h in self._localizers:
                h.remove()
            self._localizers.clear()
            self._localizing = 0

    def _activation_hook(self, name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, out: Any) -> None:
            if not (self._sampling and module.training and isinstance(out, torch.Tensor)):
                return
            with torch.no_grad():
                o = out.detach()
                if isinstance(module, torch.nn.ReLU):
                    if o.dim() < 2:
                        return
                    alive = (o > 0).transpose(0, 1).reshape(o.shape[1], -1).any(dim=1)
                    prev = self.dead.get(name)
                    self.dead[name] = alive if prev is None or prev.shape != alive.shape \
                        else (prev | alive)
                else:
                    eps = self.t["saturation_output"]
                    if isinstance(module, torch.nn.Sigmoid):
                        sat = (o < eps) | (o > 1 - eps)
                    else:
                        sat = o.abs() > 1 - eps
                    self.saturated.setdefault(name, []).append(sat.float().mean())
        return hook

    def _nonfinite_hook(self, name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, out: Any) -> None:
            if self.first_nonfinite_module is not None or not isinstance(out, torch.Tensor):
                return
            if not bool(torch.isfinite(out.detach()).all()):
                self.first_nonfinite_module = (self.step + 1, name)
        return hook

    def observe(self, loss: torch.Tensor | float) -> None:
        """The step's loss (call once per step, before optimizer.step())."""
        self.losses.append(loss.detach() if isinstance(loss, torch.Tensor)
                           else torch.tensor(float(loss)))

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._sampling:
            return
        with torch.no_grad():
            grads = [p.grad for _, p in self.params if p.grad is not None]
            if len(grads) == len(self.params) and grads:
                norms = torch.stack(torch._foreach_norm(grads))
                self._pending_norms = norms
            else:
                self._pending_norms = None
            self._before = [p.detach().clone() for _, p in self.params]

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step += 1
        if not self._sampling:
            if self.step % self.window == 0:
                self._end_window()
            return
        self._sampling = False
        self.sampled += 1
        with torch.no_grad():
            after = [p.detach() for _, p in self.params]
            if self._before is not None and after:
                moved = torch.stack(torch._foreach_norm(torch._foreach_sub(after, self._before)))
                size = torch.stack(torch._foreach_norm(self._before))
                ratios = (moved / size.clamp_min(1e-30)).tolist()
                self.update_ratios[self.step] = ratios
            if getattr(self, "_pending_norms", None) is not None:
                self.grad_norms[self.step] = self._pending_norms.tolist()
            self._before = None
        self._judge_step()
        if self.step % self.window == 0:
            self._end_window()

    # --- judging

    def _add(self, kind: str, step: int, where: str, value: float, threshold: float,
             detail: str) -> None:
        if any(s.kind == kind and s.where == where for s in self.symptoms):
            return
        self.symptoms.append(Symptom(kind, step, where, value, threshold, detail))

    def _judge_step(self) -> None:
        s = self.step
        # Losses read now (one synchronization per sampled step).
        if len(self.losses) > len(self.loss_values):
            new = torch.stack([x.float().reshape(()) for x in
                               self.losses[len(self.loss_values):]]).tolist()
            self.loss_values += new
        first = abs(self.loss_values[0]) if self.loss_values else math.nan
        for k in range(self._judged, len(self.loss_values)):
            v = self.loss_values[k]
            if not math.isfinite(v):
                self._add("nonfinite_loss", k + 1, "loss", v, 0,
                          f"the loss is {v} at step {k + 1}")
                self._arm_localizer()
            elif math.isfinite(first) and first > 0 and v > self.t["loss_growth"] * first:
                self._add("exploding_loss", k + 1, "loss", v / first, self.t["loss_growth"],
                          f"the loss {v:.4g} at step {k + 1} is {v / first:.3g} times the "
                          f"first step's ({self.loss_values[0]:.4g})")
        self._judged = len(self.loss_values)
        norms = self.grad_norms.get(s)
        if norms is not None:
            for (name, _), n in zip(self.params, norms):
                if not math.isfinite(n):
                    self._add("nonfinite_gradient", s, name, n, 0,
                              f"the gradient of {name} is non-finite ({n}) at step {s}")
                    self._arm_localizer()
                    break
            if self.first_kernel is not None and self.last_kernel != self.first_kernel:
                f, l = norms[self.first_kernel], norms[self.last_kernel]
                if math.isfinite(f) and math.isfinite(l) and l > 0:
                    r = f / l
                    first_name = self.params[self.first_kernel][0]
                    if r < self.t["vanish_ratio"] and f < self.t["vanish_first"]:
                        self._add("vanishing_gradient", s, first_name, r, self.t["vanish_ratio"],
                                  f"the first layer's gradient norm {f:.3g} is {r:.3g} of the "
                                  f"last layer's (threshold {self.t['vanish_ratio']:g})")
                    elif r > self.t["explode_ratio"]:
                        self._add("exploding_gradient", s, first_name, r,
                                  self.t["explode_ratio"],
                                  f"the first layer's gradient norm {f:.3g} is {r:.3g} times "
                                  f"the last layer's (threshold {self.t['explode_ratio']:g})")

    def _diverged(self) -> bool:
        return any(x.kind in ("nonfinite_loss", "nonfinite_gradient") for x in self.symptoms)

    def _end_window(self) -> None:
        s = self.step
        if self._diverged():
            # Units of a run gone non-finite compare false everywhere: not judged any more.
            self.dead.clear()
            self.saturated.clear()
            return
        for name, alive in self.dead.items():
            share = 1.0 - float(alive.float().mean())
            self.dead_share.setdefault(name, []).append(share)
            if share >= self.t["dead_fraction"]:
                self._add("dead_relu", s, name, share, self.t["dead_fraction"],
                          f"{share:.0%} of {name}'s units gave 0 for every sample of steps "
                          f"{s - self.window + 1} to {s}")
        self.dead.clear()
        for name, shares in self.saturated.items():
            if not shares:
                continue
            mean = float(torch.stack(shares).mean())
            self.saturated[name] = []
            if mean > self.t["saturated_fraction"]:
                self._add("saturation", s, name, mean, self.t["saturated_fraction"],
                          f"{mean:.0%} of {name}'s outputs are saturated over steps "
                          f"{s - self.window + 1} to {s}")

    def _typical_update_ratio(self) -> float | None:
        # Weights that did not move at all (behind dead units) say nothing of the rate.
        vals = [r[k] for r in self.update_ratios.values() for k, (_, p) in
                enumerate(self.params)
                if _is_kernel(p) and k < len(r) and math.isfinite(r[k]) and r[k] > 0]
        if not vals:
            return None
        vals.sort()
        return vals[len(vals) // 2]

    def _causes(self) -> list[Cause]:
        kinds = {s.kind for s in self.symptoms}
        causes: list[Cause] = []
        ratio = self._typical_update_ratio()
        lr = self.optimizer.param_groups[0].get("lr") if self.optimizer else None
        high = ratio is not None and ratio > self.t["update_ratio_high"]
        diverged = kinds & {"nonfinite_loss", "nonfinite_gradient", "exploding_loss"}
        if (kinds & {"exploding_gradient", "dead_relu"} and high) or diverged:
            why = (f"the median update-to-weight ratio is {ratio:.3g} (above "
                   f"{self.t['update_ratio_high']:g})" if high else
                   "the loss or the gradients grow without bound")
            causes.append(Cause("learning_rate", "optimizer", why,
                                f"lower the learning rate ({lr} now) by 10x" if lr else
                                "lower the learning rate"))
        if ratio is not None and ratio < self.t["update_ratio_low"] and not diverged:
            causes.append(Cause("learning_rate", "optimizer",
                                f"the median update-to-weight ratio is {ratio:.3g} (below "
                                f"{self.t['update_ratio_low']:g})",
                                "raise the learning rate"))
        for s in self.symptoms:
            if s.kind == "dead_relu" and not high and not diverged:
                causes.append(Cause(
                    "initialization", s.where,
                    f"{s.detail}: the layer before it gives negative values for every sample",
                    "check that layer's initialization and bias, or use LeakyReLU"))
        for s in self.symptoms:
            if s.kind == "saturation" or (s.kind == "vanishing_gradient" and any(
                    isinstance(m, (torch.nn.Sigmoid, torch.nn.Tanh))
                    for m in self.model.modules())):
                causes.append(Cause("activation", s.where, s.detail,
                                    "use ReLU (or a normalization layer) in hidden layers"))
                break
        if self.first_nonfinite_module is not None:
            step, name = self.first_nonfinite_module
            causes.append(Cause("nonfinite", name,
                                f"in the forward of step {step} the first module with a "
                                f"non-finite output is {name}",
                                "replay the step (Watch.replay) to see whether the model or "
                                "the framework gives it"))
        return causes

    def report(self) -> WatchReport:
        """The symptoms so far and what probably causes them."""
        if self.losses and len(self.losses) > len(self.loss_values):
            self._judge_step()
        return WatchReport(self.step, self.sampled, list(self.symptoms), self._causes())

    # --- replay

    def replay(self, inputs: Any, targets: Any, *, loss: str | None = None,
               bind: str = "torch", **options: Any) -> dict[str, Any]:
        """Replays one step on (inputs, targets) through MetaOp: the model at its current weights
        exported, its forward, backward and update run under `bind` (the framework's kernels)
        node by node and checked against the float64 reference. Says whether the framework's
        kernels are at fault (findings), or the model and its data (the reference's step shows
        the same non-finite loss), or neither.

        loss: MetaOp's name of the loss (cross_entropy, mse, ...); default from loss_fn.
        """
        import metaop
        from . import torch as metaop_torch

        kind = loss or _LOSSES.get(type(self.loss_fn).__name__)
        if kind is None:
            raise ValueError("replay: name the loss (loss='cross_entropy', 'mse', ...); "
                             f"{type(self.loss_fn).__name__} has no MetaOp name")
        x = inputs.detach().cpu() if isinstance(inputs, torch.Tensor) else torch.as_tensor(inputs)
        y = targets.detach().cpu() if isinstance(targets, torch.Tensor) else \
            torch.as_tensor(targets)
        was_training = self.model.training
        self.model.eval()
        try:
            exported = metaop_torch.export(self.model, (x,))
        finally:
            self.model.train(was_training)
        opt: dict[str, Any] = {"optimizer": "sgd", "lr": 0.01}
        if self.optimizer is not None:
            g = self.optimizer.param_groups[0]
            name = type(self.optimizer).__name__.lower()
            opt = {"optimizer": name if name in ("sgd", "adam", "adamw") else "sgd",
                   "lr": g.get("lr", 0.01)}
            if name == "sgd":
                opt["momentum"] = g.get("momentum", 0)
        common = dict(epochs=1, batch_size=int(x.shape[0]), progress=False, **opt, **options)
        reference = metaop.train(exported, x.numpy(), y.numpy(), loss=kind, bind="reference",
                                 **common)
        checked = metaop.train(exported, x.numpy(), y.numpy(), loss=kind, bind=bind,
                               check=True, **common)
        ref_loss = reference.losses[0] if reference.losses else None
        defects = [f for f in checked.findings if f.cls in ("defect", "untriaged")]
        for f in checked.findings:
            o = metaop_torch.origins(exported).get(f.node)
            if o is not None:
                f.module, f.source = o.module, o.source
        if ref_loss is None or not math.isfinite(ref_loss):
            verdict = "model"
            why = (f"the float64 reference's step gives loss {ref_loss}: the model, its weights "
                   "or its data give it, not the framework's float32 kernels")
        elif defects:
            verdict = "framework"
            why = (f"{len(defects)} kernel(s) of {bind} differ from the float64 reference "
                   "beyond their error models in this step")
        else:
            verdict = "neither"
            why = (f"the step agrees with the float64 reference within the error models "
                   f"(reference loss {ref_loss:.6g})")
        return {"verdict": verdict, "why": why, "reference_loss": ref_loss,
                "framework_loss": checked.losses[0] if checked.losses else None,
                "findings": checked.findings, "reference": reference, "checked": checked}


def watch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
          loss_fn: Callable[..., Any] | None = None, every: int = 10, window: int = 50,
          thresholds: dict[str, float] | None = None) -> Watch:
    """Monitors a PyTorch training loop as it runs (a context manager; or call .attach() and
    .close()). See the module's documentation; Watch.report() gives the symptoms and causes,
    Watch.replay(x, y) replays a step through MetaOp.

    every: sample the monitors every this many steps (1: each step; the default 10 keeps a step
        within 1.1x of a plain one: docs/benchmarks.md).
    window: steps per window of the dead-unit and saturation monitors.
    thresholds: overrides of metaop._core.thresholds().
    """
    return Watch(model, optimizer, loss_fn=loss_fn, every=every, window=window,
                 thresholds=thresholds)
