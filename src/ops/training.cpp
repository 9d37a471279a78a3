// The training operators of ONNX's ai.onnx.preview.training domain (version 1): Adagrad, Adam and
// Momentum, each one optimizer step of n tensors at once. Inputs: the learning rate R and the
// step count T (scalars), then the n weights X, the n gradients G and the n state tensors of each
// kind (Adagrad: H; Adam: V, H; Momentum: V); outputs: the n new weights, then the new states in
// the same order. The formulas are the text's, evaluated once per element in a number type N:
// double (the reference), float (the float32 twin) or Err, which carries a first-order bound of
// the float32 evaluation's rounding error along (running error analysis: each operation adds its
// operands' errors times its partial derivatives, plus its own rounding, in units of u). No
// framework MetaOp binds runs these operators (ONNX Runtime 1.31: "not a registered function/op").
#include <cmath>

#include "ops/kernel_util.h"

namespace metaop {

namespace {

// A value and the first-order bound of its evaluation error in units of u.
struct Err {
  double v = 0, e = 0;
};
Err exact(double v) {
  return {v, 0};
}
Err operator+(Err a, Err b) {
  return {a.v + b.v, a.e + b.e + std::fabs(a.v + b.v)};
}
Err operator-(Err a, Err b) {
  return {a.v - b.v, a.e + b.e + std::fabs(a.v - b.v)};
}
Err operator*(Err a, Err b) {
  const double r = a.v * b.v;
  return {r, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + std::fabs(r)};
}
Err operator/(Err a, Err b) {
  const double r = a.v / b.v;
  return {r, a.e / std::fabs(b.v) + std::fabs(r) * b.e / std::fabs(b.v) + std::fabs(r)};
}
// A sum of non-negative terms is 0 only where they all are, with no error: sqrt(0) stays exact.
Err sqrt(Err a) {
  const double r = std::sqrt(a.v);
  return {r, (a.v > 0 ? a.e / (2 * r) : 0) + r};
}
// A libm power: 2 ulps of its own.
Err pow(Err a, double t) {
  const double r = std::pow(a.v, t);
  return {r, (a.v != 0 ? std::fabs(t * r / a.v) * a.e : 0) + 2 * std::fabs(r)};
}

template <typename N>
N constant(double v) {
  if constexpr (std::is_same_v<N, Err>)
    return exact(v);
  else
    return static_cast<N>(v);
}

enum class Optimizer { adagrad, adam, momentum };

struct Settings {
  Optimizer kind = Optimizer::adagrad;
  double decay = 0, epsilon = 0, norm = 0, norm_post = 0, alpha = 0, beta = 0;
  bool nesterov = false;
};

Settings settings(const KernelContext& c, Optimizer kind) {
  Settings s;
  s.kind = kind;
  s.norm = attr_f(c, "norm_coefficient");
  switch (kind) {
    case Optimizer::adagrad:
      s.decay = attr_f(c, "decay_factor");
      s.epsilon = attr_f(c, "epsilon");
      break;
    case Optimizer::adam:
      s.alpha = attr_f(c, "alpha");
      s.beta = attr_f(c, "beta");
      s.epsilon = attr_f(c, "epsilon");
      s.norm_post = attr_f(c, "norm_coefficient_post");
      break;
    case Optimizer::momentum: {
      s.alpha = attr_f(c, "alpha");
      s.beta = attr_f(c, "beta");
      const std::string mode = attr_s(c, "mode");
      if (mode != "standard" && mode != "nesterov")
        fail("{}: mode '{}' is not standard or nesterov", c.node.label(), mode);
      s.nesterov = mode == "nesterov";
      break;
    }
  }
  return s;
}

// One element of one step: the new weight and states (v: Adam's and Momentum's first moment, h:
// Adagrad's and Adam's accumulated squares), as the text writes it.
template <typename N>
struct Updated {
  N x, v, h;
};

template <typename N>
Updated<N> update(const Settings& s, N r, std::int64_t t, N x, N g, N v, N h) {
  using std::pow;
  using std::sqrt;
  auto k = [](double a) { return constant<N>(a); };
  const N gr = k(s.norm) * x + g;  // the gradient of 0.5 norm ||X||^2 added
  switch (s.kind) {
    case Optimizer::adagrad: {
      const N rate = r / (k(1) + k(static_cast<double>(t)) * k(s.decay));
      const N h_new = h + gr * gr;
      return {x - rate * gr / (sqrt(h_new) + k(s.epsilon)), v, h_new};
    }
    case Optimizer::adam: {
      const N v_new = k(s.alpha) * v + (k(1) - k(s.alpha)) * gr;
      const N h_new = k(s.beta) * h + (k(1) - k(s.beta)) * (gr * gr);
      const N rate = t > 0 ? r * sqrt(k(1) - pow(k(s.beta), static_cast<double>(t))) /
                                 (k(1) - pow(k(s.alpha), static_cast<double>(t)))
                           : r;
      const N x_new = x - rate * (v_new / (sqrt(h_new) + k(s.epsilon)));
      return {(k(1) - k(s.norm_post)) * x_new, v_new, h_new};
    }
    case Optimizer::momentum: {
      const N v_new = k(s.alpha) * v + (t > 0 ? k(s.beta) : k(1)) * gr;
      return {x - r * (s.nesterov ? gr + k(s.alpha) * v_new : v_new), v_new, h};
    }
  }
  return {x, v, h};
}

// The state tensors per weight, in input order: Adagrad H; Adam V, H; Momentum V.
std::size_t state_count(Optimizer kind) {
  return kind == Optimizer::adam ? 2 : 1;
}

// The step over every tensor in number type N: outputs X_new..., then the states; with `err`,
// each output element's bound (units of u) instead of its value.
template <typename N>
Tensors optimizer_step(const KernelContext& c, const Tensors& in, Optimizer kind, bool err) {
  const Settings s = settings(c, kind);
  const std::size_t states = state_count(kind), per = 2 + states;
  if (in.size() < 2 + per || (in.size() - 2) % per != 0)
    fail("{}: {} inputs: R, T and {} tensors per weight (X, G, {})", c.node.label(), in.size(), per,
         kind == Optimizer::adam      ? "V, H"
         : kind == Optimizer::adagrad ? "H"
                                      : "V");
  const std::size_t n = (in.size() - 2) / per;
  const Tensor &R = input(c, in, 0), &T = input(c, in, 1);
  if (R.numel() != 1 || T.numel() != 1)
    fail("{}: R {} and T {} must be scalars", c.node.label(), shape_str(R.shape()),
         shape_str(T.shape()));
  const auto r = constant<N>(R.to_f64()[0]);
  const std::int64_t t = T.to_i64()[0];
  Tensors out(n * (1 + states));
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& X = input(c, in, 2 + i);
    require_float(c, X, "X");
    std::vector<std::vector<double>> vals;
    for (std::size_t k = 1; k < per; ++k) {
      const Tensor& Y = input(c, in, 2 + k * n + i);
      if (Y.shape() != X.shape())
        fail("{}: input {} of shape {} does not match its weight's {}", c.node.label(),
             2 + k * n + i, shape_str(Y.shape()), shape_str(X.shape()));
      vals.push_back(Y.to_f64());
    }
    const auto x = X.to_f64();
    std::vector<double> nx(x.size()), ns1(x.size()), ns2(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) {
      const N g = constant<N>(vals[0][e]);
      const N a = constant<N>(vals[1][e]);
      const N b = states == 2 ? constant<N>(vals[2][e]) : constant<N>(0);
      // Adagrad's one state is H, Momentum's V; Adam's are V then H.
      const Updated<N> u = kind == Optimizer::adagrad
                               ? update<N>(s, r, t, constant<N>(x[e]), g, constant<N>(0), a)
                               : update<N>(s, r, t, constant<N>(x[e]), g, a, b);
      auto value = [](const N& v, bool bound) {
        if constexpr (std::is_same_v<N, Err>) {
          return bound ? v.e : v.v;
        } else {
          (void)bound;
          return static_cast<double>(v);
        }
      };
      nx[e] = value(u.x, err);
      ns1[e] = value(kind == Optimizer::adagrad ? u.h : u.v, err);
      ns2[e] = value(u.h, err);
    }
    out[i] = Tensor::from_f64(nx, X.shape(), X.dtype());
    out[n + i] = Tensor::from_f64(ns1, X.shape(), in[2 + 2 * n + i].dtype());
    if (states == 2) out[2 * n + i] = Tensor::from_f64(ns2, X.shape(), in[2 + 3 * n + i].dtype());
  }
  return out;
}

Magnitudes step_magnitudes(const KernelContext& c, const Tensors& in, Optimizer kind) {
  Magnitudes m;
  for (const Tensor& t : optimizer_step<Err>(c, in, kind, true)) m.push_back(t.to_f64());
  return m;
}

}  // namespace

void register_training_ops(OpRegistry& r) {
  using case_input::floats;
  const CaseInput rate = case_input::scalar(0.1);
  auto step = [](std::int64_t t) { return case_input::ints({}, {t}); };
  struct Row {
    const char* op;
    Optimizer kind;
    const char* formula;
  };
  for (const Row& row :
       {Row{"Adagrad", Optimizer::adagrad,
            "r = R / (1 + T decay_factor); G += norm_coefficient X; H += G^2; X -= r G / "
            "(sqrt(H) + epsilon)"},
        Row{"Adam", Optimizer::adam,
            "G += norm_coefficient X; V = alpha V + (1 - alpha) G; H = beta H + (1 - beta) G^2; "
            "X -= R sqrt(1 - beta^T) / (1 - alpha^T) V / (sqrt(H) + epsilon); X *= 1 - "
            "norm_coefficient_post"},
        Row{"Momentum", Optimizer::momentum,
            "G += norm_coefficient X; V = alpha V + (T > 0 ? beta : 1) G; X -= R V (standard) "
            "or R (G + alpha V) (nesterov)"}}) {
    const Optimizer kind = row.kind;
    const bool adam = kind == Optimizer::adam;
    // One weight, then two: X, G, the states (H is a sum of squares: at least 0).
    auto tensors = [adam](const Shape& a, const Shape& b) {
      std::vector<CaseInput> v;
      for (int k = 0; k < (adam ? 4 : 3); ++k)
        for (const Shape& s : {a, b})
          if (!s.empty()) v.push_back(k == (adam ? 3 : 2) ? floats(s, 0, 2) : floats(s));
      return v;
    };
    auto inputs = [&](std::int64_t t, const Shape& a, const Shape& b) {
      std::vector<CaseInput> v{rate, step(t)};
      for (auto& c : tensors(a, b)) v.push_back(std::move(c));
      return v;
    };
    std::map<std::string, Attribute> tuned;
    if (kind == Optimizer::adagrad)
      tuned = {{"decay_factor", Attribute::of_float(0.1)},
               {"epsilon", Attribute::of_float(1e-5)},
               {"norm_coefficient", Attribute::of_float(0.001)}};
    if (kind == Optimizer::adam)
      tuned = {{"alpha", Attribute::of_float(0.95)},
               {"beta", Attribute::of_float(0.1)},
               {"epsilon", Attribute::of_float(1e-7)},
               {"norm_coefficient", Attribute::of_float(0.001)},
               {"norm_coefficient_post", Attribute::of_float(0.01)}};
    if (kind == Optimizer::momentum)
      tuned = {{"alpha", Attribute::of_float(0.95)},
               {"beta", Attribute::of_float(0.1)},
               {"mode", Attribute::of_string("nesterov")},
               {"norm_coefficient", Attribute::of_float(0.001)}};
    std::map<std::string, Attribute> defaults;
    if (kind == Optimizer::momentum)
      defaults = {{"alpha", Attribute::of_float(0.9)},
                  {"beta", Attribute::of_float(1.0)},
                  {"mode", Attribute::of_string("standard")},
                  {"norm_coefficient", Attribute::of_float(0)}};
    r.op(row.op, Family::elementwise,
         [kind](const KernelContext& c, const Tensors& in) {
           return optimizer_step<double>(c, in, kind, false);
         })
        .onnx_domain("ai.onnx.preview.training")
        .error(error_models::condition(
            [kind](const KernelContext& c, const Tensors& in, const Tensors&,
                   const AccumulationBound&) { return step_magnitudes(c, in, kind); },
            std::string(row.formula) +
                ": a running first-order bound of the formula's roundings, in its order"))
        .float32([kind](const KernelContext& c, const Tensors& in,
                        SumOrder) { return optimizer_step<float>(c, in, kind, false); },
                 std::string(row.formula) + ", in float32 in the text's order",
                 "none needed: one step of one element")
        .cases({{1, inputs(1, {3, 4}, {}), tuned},
                {1, inputs(3, {2, 3}, {5}), tuned},
                {1, inputs(0, {4}, {}), defaults}});
  }
}

}  // namespace metaop
