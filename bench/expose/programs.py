"""Small PyTorch programs with a numerical bug that a typical input does not trigger, each with
a fixed twin, for the `metaop expose` benchmark (bench/expose/run.py). The patterns come from
the GRIST study's subjects (Yan et al., FSE 2021: TensorFuzz's unsafe softmax and cross
entropy, hand-written logistic and softmax regression costs, RBM and GAN losses) and from
numerical-bug reports in deep-learning programs (one-pass variance, normalizing by a sum or a
norm that can vanish, expanded pairwise distances, haversine and angle formulas, hyperbolic
embeddings, learned temperatures, mixed precision).

Each program: `build()` returns (buggy, fixed) modules with fixed weights; `inputs` maps input
name -> (shape, typical sampler); `clip` is the data range the search stays in; `expect` the op
types of the node where the first non-finite value appears.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SEED = 1234


def linear(i, o, gain, bias=0.0):
    """A Linear layer with weights uniform in [-gain/2, gain/2] (the magnitudes training
    reaches) and a constant bias."""
    lin = nn.Linear(i, o)
    with torch.no_grad():
        lin.weight.uniform_(-gain / 2, gain / 2)
        lin.bias.fill_(bias)
    return lin


def normal(shape, scale=1.0):
    return lambda rng: (rng.standard_normal(shape) * scale).astype(np.float32)


def uniform(shape, lo, hi):
    return lambda rng: rng.uniform(lo, hi, shape).astype(np.float32)


class Program:
    def __init__(self, name, pattern, source, build, inputs, clip, expect):
        self.name, self.pattern, self.source = name, pattern, source
        self.build, self.inputs, self.clip, self.expect = build, inputs, clip, expect


class Twin(nn.Module):
    """Shares the layers of a program; forward is the buggy or the fixed formula."""

    def __init__(self, layers, forward):
        super().__init__()
        self.layers = nn.ModuleDict(layers)
        self.f = forward

    def forward(self, *xs):
        return self.f(self.layers, *xs)


def pair(layers, buggy, fixed):
    torch.manual_seed(SEED)
    ls = layers()
    return Twin(ls, buggy), Twin(ls, fixed)


PROGRAMS = []


def program(name, pattern, source, inputs, clip, expect):
    def register(fn):
        PROGRAMS.append(Program(name, pattern, source, fn, inputs, clip, expect))
        return fn
    return register


# --- log of probabilities

@program("log_softmax", "log(softmax(z)) of a classifier (NLL written by hand)",
         "GRIST subjects (TensorFuzz, softmax regression costs)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log"})
def _():
    return pair(lambda: {"fc": linear(16, 5, 5.0)},
                lambda L, x: torch.log(torch.softmax(L.fc(x), -1)),
                lambda L, x: F.log_softmax(L.fc(x), -1))


@program("entropy", "entropy -sum(p log p) of a softmax (0 * -inf)",
         "entropy regularizers in policy-gradient code",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log", "Mul"})
def _():
    def buggy(L, x):
        p = torch.softmax(L.fc(x), -1)
        return -(p * torch.log(p)).sum(-1)

    def fixed(L, x):
        z = L.fc(x)
        return -(torch.softmax(z, -1) * F.log_softmax(z, -1)).sum(-1)
    return pair(lambda: {"fc": linear(16, 5, 5.0)}, buggy, fixed)


@program("bce_sigmoid", "binary cross entropy of sigmoid written by hand",
         "GRIST subjects (logistic regression costs)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log", "Mul"})
def _():
    y = torch.tensor([[1.0], [0.0], [1.0], [0.0]])

    def buggy(L, x):
        p = torch.sigmoid(L.fc(x))
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    def fixed(L, x):
        z = L.fc(x)
        return (F.relu(z) - z * y + torch.log(1 + torch.exp(-z.abs()))).mean()
    return pair(lambda: {"fc": linear(16, 1, 2.0)}, buggy, fixed)


@program("log_sigmoid", "log(sigmoid(z)) of a logistic likelihood",
         "GRIST subjects (RBM free energies, logistic regression)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log"})
def _():
    # F.logsigmoid is stable in PyTorch itself but PyTorch 1.13 exports it as this very
    # Log(Sigmoid(z)); written out here, the program is unstable in both.
    return pair(lambda: {"fc": linear(16, 4, 8.0)},
                lambda L, x: -torch.log(torch.sigmoid(L.fc(x))).sum(-1),
                lambda L, x: F.softplus(-L.fc(x)).sum(-1))


@program("gan_loss", "GAN discriminator loss log D(x) + log(1 - D(G(z)))",
         "GRIST subjects (GAN_MNIST)",
         {"x": ((4, 8), uniform((4, 8), -0.5, 0.5)), "z": ((4, 4), normal((4, 4), 0.5))},
         (-1, 1), {"Log", "Mul"})
def _():
    def layers():
        return {"g": linear(4, 8, 8.0), "d1": linear(8, 16, 6.0), "d2": linear(16, 1, 6.0)}

    def logit(L, v):
        return L.d2(torch.relu(L.d1(v)))

    def buggy(L, x, z):
        fake = torch.tanh(L.g(z))
        return -(torch.log(torch.sigmoid(logit(L, x))) +
                 torch.log(1 - torch.sigmoid(logit(L, fake)))).mean()

    def fixed(L, x, z):
        fake = torch.tanh(L.g(z))
        return (F.softplus(-logit(L, x)) + F.softplus(logit(L, fake))).mean()
    return pair(layers, buggy, fixed)


@program("tanh_squash", "log(1 - tanh(u)^2) of a squashed Gaussian policy",
         "soft actor-critic log-probabilities",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log"})
def _():
    def buggy(L, x):
        u = L.fc(x)
        return (-0.5 * u * u).sum(-1) - torch.log(1 - torch.tanh(u) ** 2).sum(-1)

    def fixed(L, x):
        u = L.fc(x)
        return (-0.5 * u * u).sum(-1) - torch.log(1 - torch.tanh(u) ** 2 + 1e-6).sum(-1)
    return pair(lambda: {"fc": linear(16, 4, 1.0)}, buggy, fixed)


@program("prod_log", "log of a product of probabilities (underflow of the product)",
         "naive likelihoods",
         {"x": ((4, 32), normal((4, 32)))}, (-5, 5), {"Log"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def buggy(L, x):
        return torch.log(torch.sigmoid(1.5 * x).prod(-1))

    def fixed(L, x):
        return -F.softplus(-1.5 * x).sum(-1)
    return pair(layers, buggy, fixed)


@program("rmsle", "root mean squared log error of an unconstrained regression",
         "regression losses on counts",
         {"x": ((4, 8), uniform((4, 8), -0.5, 0.5))}, (-2, 2), {"Log"})
def _():
    y = torch.tensor([[2.0], [5.0], [1.0], [3.0]])

    def buggy(L, x):
        return torch.sqrt(((torch.log(L.fc(x) + 1) - torch.log(y + 1)) ** 2).mean())

    def fixed(L, x):
        return torch.sqrt(((torch.log(F.relu(L.fc(x)) + 1) - torch.log(y + 1)) ** 2).mean())
    return pair(lambda: {"fc": linear(8, 1, 1.0, bias=2.0)}, buggy, fixed)


@program("log_input", "log of a raw count feature that can be 0",
         "feature preprocessing inside the model",
         {"x": ((4, 8), uniform((4, 8), 1, 100))}, (0, 100), {"Log"})
def _():
    return pair(lambda: {"fc": linear(8, 2, 1.0)},
                lambda L, x: L.fc(torch.log(x)),
                lambda L, x: L.fc(torch.log(x + 1)))


@program("inverse_softplus", "log(exp(x) - 1), the inverse of softplus, at x = 0",
         "positive-parameter transforms",
         {"x": ((4, 8), uniform((4, 8), 0.5, 5))}, (0, 5), {"Log"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}
    return pair(layers, lambda L, x: torch.log(torch.exp(x) - 1),
                lambda L, x: torch.log(torch.exp(x) - 1 + 1e-6))


# --- divisions

@program("div_relu_sum", "x / sum(relu(s)): every score of a row negative",
         "attention-like normalizations",
         {"x": ((4, 16), uniform((4, 16), -0.5, 0.5))}, (-1, 1), {"Div"})
def _():
    def buggy(L, x):
        w = torch.relu(L.fc(x))
        return w / w.sum(-1, keepdim=True)

    def fixed(L, x):
        w = torch.relu(L.fc(x))
        return w / (w.sum(-1, keepdim=True) + 1e-6)
    return pair(lambda: {"fc": linear(16, 8, 1.0, bias=0.1)}, buggy, fixed)


@program("l2_normalize", "e / sqrt(sum(e^2)) of a ReLU embedding (zero vector)",
         "embedding normalization written by hand",
         {"x": ((4, 16), uniform((4, 16), -0.5, 0.5))}, (-1, 1), {"Div"})
def _():
    def buggy(L, x):
        e = torch.relu(L.fc(x))
        return e / torch.sqrt((e * e).sum(-1, keepdim=True))

    def fixed(L, x):
        return F.normalize(torch.relu(L.fc(x)), dim=-1)
    return pair(lambda: {"fc": linear(16, 8, 1.0, bias=0.1)}, buggy, fixed)


@program("minmax_norm", "(x - min) / (max - min) of a constant row",
         "min-max scaling of images inside the model",
         {"x": ((4, 16), uniform((4, 16), 0, 255))}, (0, 255), {"Div"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def buggy(L, x):
        lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
        return (x - lo) / (hi - lo)

    def fixed(L, x):
        lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
        return (x - lo) / (hi - lo + 1e-6)
    return pair(layers, buggy, fixed)


@program("temperature", "logits / exp(log_t): a learned temperature that underflows",
         "temperature scaling with a predicted temperature",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Div"})
def _():
    def layers():
        return {"fc": linear(16, 5, 1.0), "t": linear(16, 1, 8.0)}

    def buggy(L, x):
        return torch.softmax(L.fc(x) / torch.exp(L.t(x)), -1)

    def fixed(L, x):
        return torch.softmax(L.fc(x) / (F.softplus(L.t(x)) + 0.05), -1)
    return pair(layers, buggy, fixed)


@program("poincare_log", "Poincare-ball log map: atanh(|x|) written as a log ratio, x / |x|",
         "hyperbolic embeddings",
         {"x": ((4, 4), uniform((4, 4), -0.3, 0.3))}, (-1, 1), {"Div", "Log"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def buggy(L, x):
        n = x.norm(dim=-1, keepdim=True)
        return 0.5 * torch.log((1 + n) / (1 - n)) * x / n

    def fixed(L, x):
        n = x.norm(dim=-1, keepdim=True).clamp(1e-5, 1 - 1e-5)
        return 0.5 * torch.log((1 + n) / (1 - n)) * x / n
    return pair(layers, buggy, fixed)


# --- square roots and cancellation

@program("one_pass_variance", "(x - mean) / sqrt(E[x^2] - E[x]^2)",
         "standardization written by hand",
         {"x": ((4, 16), uniform((4, 16), 0, 100))}, (0, 100), {"Sqrt", "Div"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def buggy(L, x):
        m = x.mean(-1, keepdim=True)
        return (x - m) / torch.sqrt((x * x).mean(-1, keepdim=True) - m * m)

    def fixed(L, x):
        m = x.mean(-1, keepdim=True)
        return (x - m) / torch.sqrt(((x - m) ** 2).mean(-1, keepdim=True) + 1e-5)
    return pair(layers, buggy, fixed)


@program("pairwise_distance", "sqrt(|a|^2 + |b|^2 - 2 a.b) for nearly equal points",
         "expanded pairwise distances (cdist-style)",
         {"a": ((4, 8), uniform((4, 8), -5, 5)), "b": ((4, 8), uniform((4, 8), -5, 5))},
         (-10, 10), {"Sqrt"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def d2(a, b):
        return (a * a).sum(-1) + (b * b).sum(-1) - 2 * (a * b).sum(-1)
    return pair(layers, lambda L, a, b: torch.sqrt(d2(a, b)),
                lambda L, a, b: torch.sqrt(torch.clamp(d2(a, b), min=0)))


@program("cosine_angle", "acos of a cosine similarity (|cos| above 1 by rounding)",
         "angle losses",
         {"a": ((4, 8), uniform((4, 8), -1, 1)), "b": ((4, 8), uniform((4, 8), -1, 1))},
         (-1, 1), {"Acos", "Div"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def cos(a, b, eps):
        return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + eps)
    return pair(layers, lambda L, a, b: torch.acos(cos(a, b, 0.0)),
                lambda L, a, b: torch.acos(torch.clamp(cos(a, b, 1e-8), -1 + 1e-6, 1 - 1e-6)))


@program("haversine", "2 asin(sqrt(h)) of the haversine distance (h above 1 by rounding)",
         "geographic distances",
         {"p": ((4, 2), uniform((4, 2), -1, 1)), "q": ((4, 2), uniform((4, 2), -1, 1))},
         (-3.1416, 3.1416), {"Asin", "Sqrt"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}

    def h(p, q):
        dlat, dlon = (q[:, 0] - p[:, 0]) / 2, (q[:, 1] - p[:, 1]) / 2
        return torch.sin(dlat) ** 2 + torch.cos(p[:, 0]) * torch.cos(q[:, 0]) * torch.sin(dlon) ** 2
    return pair(layers, lambda L, p, q: 2 * torch.asin(torch.sqrt(h(p, q))),
                lambda L, p, q: 2 * torch.asin(torch.sqrt(torch.clamp(h(p, q), 0, 1))))


@program("gamma_correct", "((x - 0.1) / 0.9) ** (1 / 2.2) below the black level",
         "image preprocessing inside the model",
         {"x": ((4, 16), uniform((4, 16), 0.3, 1))}, (0, 1), {"Pow"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}
    return pair(layers, lambda L, x: ((x - 0.1) / 0.9) ** (1 / 2.2),
                lambda L, x: torch.clamp((x - 0.1) / 0.9, min=0) ** (1 / 2.2))


@program("layernorm_eps0", "LayerNorm(eps=0) of a ReLU layer (a row of zeros)",
         "normalization without epsilon",
         {"x": ((4, 16), uniform((4, 16), -0.5, 0.5))}, (-1, 1), {"LayerNormalization"})
def _():
    def layers():
        return {"fc": linear(16, 8, 1.0, bias=0.1), "ln0": nn.LayerNorm(8, eps=0.0),
                "ln": nn.LayerNorm(8, eps=1e-5)}
    return pair(layers, lambda L, x: L.ln0(torch.relu(L.fc(x))),
                lambda L, x: L.ln(torch.relu(L.fc(x))))


# --- overflow

@program("unsafe_softmax", "exp(z) / sum(exp(z)) without subtracting the maximum",
         "GRIST subjects (TensorFuzz)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Exp", "Div"})
def _():
    def buggy(L, x):
        e = torch.exp(L.fc(x))
        return e / e.sum(-1, keepdim=True)
    return pair(lambda: {"fc": linear(16, 5, 6.0)}, buggy,
                lambda L, x: torch.softmax(L.fc(x), -1))


@program("poisson_nll", "Poisson NLL exp(r) - y r of an unconstrained log-rate",
         "count regression losses",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Exp"})
def _():
    y = torch.tensor([[1.0], [0.0], [4.0], [2.0]])
    return pair(lambda: {"fc": linear(16, 1, 6.0)},
                lambda L, x: (torch.exp(L.fc(x)) - y * L.fc(x)).mean(),
                lambda L, x: (torch.exp(torch.clamp(L.fc(x), max=20)) -
                              y * torch.clamp(L.fc(x), max=20)).mean())


@program("vae_kl", "VAE KL term with exp(logvar) of an unconstrained log-variance",
         "variational autoencoders",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Exp"})
def _():
    def layers():
        return {"mu": linear(16, 4, 1.0), "lv": linear(16, 4, 6.0)}

    def kl(mu, lv):
        return -0.5 * (1 + lv - mu * mu - torch.exp(lv)).sum(-1)
    return pair(layers, lambda L, x: kl(L.mu(x), L.lv(x)),
                lambda L, x: kl(L.mu(x), torch.clamp(L.lv(x), -10, 10)))


@program("log_cosh", "log-cosh loss with cosh(d) = (exp(d) + exp(-d)) / 2 (exp overflows)",
         "robust regression losses",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Exp"})
def _():
    y = torch.tensor([[0.5], [-1.0], [2.0], [0.0]])

    def buggy(L, x):
        d = L.fc(x) - y
        return torch.log((torch.exp(d) + torch.exp(-d)) / 2).mean()

    def fixed(L, x):
        d = (L.fc(x) - y).abs()
        return (d + F.softplus(-2 * d) - math.log(2.0)).mean()
    return pair(lambda: {"fc": linear(16, 1, 6.0)}, buggy, fixed)


@program("geometric_mean", "prod(x) ** (1/n) of positive measurements",
         "geometric means and likelihood products",
         {"x": ((4, 32), uniform((4, 32), 0.5, 2))}, (0.01, 1000), {"ReduceProd"})
def _():
    def layers():
        return {"w": nn.Linear(1, 1)}
    return pair(layers, lambda L, x: x.prod(-1) ** (1 / 32),
                lambda L, x: torch.exp(torch.log(x).mean(-1)))


@program("fp16_square", "a float16 square of activations (mixed precision overflow)",
         "mixed-precision inference",
         {"x": ((4, 16), normal((4, 16)))}, (-10, 10), {"Mul", "Pow"})
def _():
    def buggy(L, x):
        h = L.fc(x).half()
        return (h * h).float().sum(-1)

    def fixed(L, x):
        h = L.fc(x)
        return (h * h).sum(-1)
    return pair(lambda: {"fc": linear(16, 8, 8.0)}, buggy, fixed)


# --- paths through comparisons: a mask or a count built by a comparison, which no gradient
# crosses (the search's boundary moves push the comparison's operands across instead)

@program("masked_softmax",
         "attention masked with -inf where a learned gate is negative (every gate of a row "
         "negative: softmax of -inf only, 0/0)",
         "padding and causal masks in attention (masked_fill(mask, -inf) before a softmax)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Softmax"})
def _():
    def layers():
        return {"fc": linear(16, 6, 2.0), "gate": linear(16, 6, 1.0, bias=1.5)}

    def attend(L, x, fill):
        return torch.softmax(L.fc(x).masked_fill(L.gate(x) < 0, fill), -1)
    return pair(layers, lambda L, x: attend(L, x, float("-inf")),
                lambda L, x: attend(L, x, -1e9))


@program("count_mean",
         "mean of the positive activations, sum(relu(h)) / count(h > 0) (none positive: 0/0)",
         "means over a mask (valid positions, active units, foreground pixels)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Div"})
def _():
    def mean(L, x, fixed):
        h = L.fc(x)
        m = (h > 0).float()
        count = m.sum(-1)
        return (h * m).sum(-1) / (count.clamp(min=1) if fixed else count)
    return pair(lambda: {"fc": linear(16, 16, 1.0, bias=2.0)},
                lambda L, x: mean(L, x, False), lambda L, x: mean(L, x, True))


@program("log_count",
         "log of the number of scores above a threshold (no score above it: log 0)",
         "detection and retrieval metrics (log of the count of hits)",
         {"x": ((4, 16), normal((4, 16)))}, (-5, 5), {"Log"})
def _():
    def count(L, x):
        return (torch.sigmoid(L.fc(x)) > 0.5).float().sum(-1)
    return pair(lambda: {"fc": linear(16, 16, 1.0, bias=2.0)},
                lambda L, x: torch.log(count(L, x)), lambda L, x: torch.log1p(count(L, x)))
