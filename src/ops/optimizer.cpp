#include "ops/optimizer.h"

#include <cmath>

#include "ops/error_model.h"
#include "ops/kernel_util.h"

namespace metaop {

void validate(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw")
    fail("--optimizer {}: expected sgd, adam or adamw", c.kind);
  if (!(c.lr > 0)) fail("--lr {}: must be positive", c.lr);
  if (!(c.weight_decay >= 0)) fail("--weight-decay {}: must be at least 0", c.weight_decay);
  if (c.kind == "sgd") {
    // PyTorch refuses only a negative momentum; 1 or more runs (optimizer_warnings says why it
    // should not).
    if (!(c.momentum >= 0) || !std::isfinite(c.momentum))
      fail("--momentum {}: must be at least 0", c.momentum);
    if (c.nesterov && c.momentum == 0) fail("--nesterov needs a positive --momentum");
    return;
  }
  if (!(c.beta1 >= 0 && c.beta1 < 1)) fail("beta1 {}: must be in [0, 1)", c.beta1);
  if (!(c.beta2 >= 0 && c.beta2 < 1)) fail("beta2 {}: must be in [0, 1)", c.beta2);
  if (!(c.eps > 0)) fail("eps {}: must be positive", c.eps);
}

std::vector<std::string> optimizer_warnings(const OptimizerConfig& c) {
  std::vector<std::string> w;
  if (c.kind == "sgd" && c.momentum >= 1)
    w.push_back(
        fmt::format("--momentum {:g} is at least 1: the momentum buffer never decays and "
                    "the steps grow without bound (PyTorch runs it too; usual: 0.9)",
                    c.momentum));
  return w;
}

std::vector<std::string> optimizer_slots(const OptimizerConfig& c) {
  if (c.kind == "sgd")
    return c.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                           : std::vector<std::string>{};
  return {"exp_avg", "exp_avg_sq"};
}

UpdateRule::UpdateRule(const OptimizerConfig& c, long t)
    : c_(c),
      b1_(1 - std::pow(c.beta1, static_cast<double>(t))),
      b2_(1 - std::pow(c.beta2, static_cast<double>(t))) {}

UpdateElement UpdateRule::operator()(bool first, double w, double g, double m, double v) const {
  const OptimizerConfig& c = c_;
  UpdateElement r;
  double aw = std::fabs(w);
  if (c.kind == "sgd") {
    // No weight decay term at all when it is 0 (0 * inf would be NaN), as torch.optim skips it.
    bool decay = c.weight_decay != 0;
    double d = decay ? g + c.weight_decay * w : g;
    double dmag = decay ? std::fabs(g) + c.weight_decay * aw : std::fabs(g);
    double s = d, smag = dmag;
    if (c.momentum != 0) {
      r.m = first ? d : c.momentum * m + d;
      r.m_mag = first ? dmag : c.momentum * std::fabs(m) + dmag;
      s = c.nesterov ? d + c.momentum * r.m : r.m;
      smag = c.nesterov ? dmag + c.momentum * r.m_mag : r.m_mag;
    }
    r.w = w - c.lr * s;
    r.w_mag = aw + c.lr * smag;
    return r;
  }
  bool decay = c.weight_decay != 0, decoupled = c.kind == "adamw";
  double shrink = decay && decoupled ? c.lr * c.weight_decay : 0;
  double d = decay && !decoupled ? g + c.weight_decay * w : g;
  double dmag = decay && !decoupled ? std::fabs(g) + c.weight_decay * aw : std::fabs(g);
  r.m = c.beta1 * m + (1 - c.beta1) * d;
  r.m_mag = c.beta1 * std::fabs(m) + (1 - c.beta1) * dmag;
  r.v = c.beta2 * v + (1 - c.beta2) * d * d;
  r.v_mag = c.beta2 * std::fabs(v) + (1 - c.beta2) * dmag * dmag;
  double denom = std::sqrt(r.v / b2_) + c.eps;
  double step = c.lr / b1_ * r.m / denom;
  // The step's error: the numerator's, plus |step| times the denominator's relative error, at
  // most half of v's (square root) -- large when v's terms cancelled, i.e. v_mag >> v.
  // An infinite denominator makes a finite step exactly 0.
  double v_ratio = r.v > 0 && std::isfinite(r.v) ? r.v_mag / r.v : 1;
  double step_mag = std::isinf(denom) && std::isfinite(r.m)
                        ? 0
                        : c.lr / b1_ * (r.m_mag + 0.5 * std::fabs(r.m) * v_ratio) / denom;
  r.w = shrink != 0 ? w - shrink * w - step : w - step;
  r.w_mag = (shrink != 0 ? aw + shrink * aw : aw) + step_mag;
  return r;
}

UpdateRoundings update_roundings(const OptimizerConfig& c) {
  // Products with a scalar cost 2, sums 1 more than their deepest term, a square root halves
  // the relative error and rounds once. Weight decay g + wd * w: 3.
  if (c.kind == "sgd") {
    if (c.momentum == 0) return {6, 0, 0};  // w + (-lr) d
    if (!c.nesterov) return {7, 4, 0};      // buf = mu buf + d; w + (-lr) buf
    return {10, 4, 0};                      // d + mu buf, then w + (-lr) (...)
  }
  // m = beta1 m + (1 - beta1) d: 6; v = beta2 v + (1 - beta2) d d: 10; denominator
  // sqrt(v) / sqrt(bc2) + eps: 10; m / denom times the step size: 13; w - step: 14 (adamw's
  // w (1 - lr wd) is a shorter path).
  return {14, 6, 10};
}

namespace {

// One element of a step with every operation's result rounded by R (to the weight's dtype), as
// PyTorch's documentation of torch.optim.SGD, Adam and AdamW writes the algorithm (the
// definition; torch's kernels reorder it: lerp for the first moment, the bias corrections folded
// into the step size). In float64 then rounded once per operation: for +, -, *, / and sqrt that
// is the dtype's own correctly rounded operation (float64 has more than twice the digits).
struct StepElement {
  double w, m, v;
};

template <typename Round>
StepElement sgd_step(const OptimizerConfig& c, bool first, double w, double g, double m,
                     const Round& R) {
  if (c.weight_decay != 0) g = R(g + R(R(c.weight_decay) * w));  // g + lambda theta
  double s = g;
  if (c.momentum != 0) {
    m = first ? g : R(R(R(c.momentum) * m) + g);  // b = mu b + g
    s = c.nesterov ? R(g + R(R(c.momentum) * m)) : m;
  }
  return {R(w - R(R(c.lr) * s)), m, 0};  // theta - gamma g
}

template <typename Round>
StepElement adam_step(const OptimizerConfig& c, long t, double w, double g, double m, double v,
                      const Round& R) {
  if (c.weight_decay != 0) {
    if (c.kind == "adamw")
      w = R(w - R(R(R(c.lr) * R(c.weight_decay)) * w));  // theta - gamma lambda theta
    else
      g = R(g + R(R(c.weight_decay) * w));  // g + lambda theta
  }
  m = R(R(R(c.beta1) * m) + R(R(1 - c.beta1) * g));
  v = R(R(R(c.beta2) * v) + R(R(1 - c.beta2) * R(g * g)));
  double m_hat = R(m / R(1 - std::pow(c.beta1, static_cast<double>(t))));
  double v_hat = R(v / R(1 - std::pow(c.beta2, static_cast<double>(t))));
  return {R(w - R(R(R(c.lr) * m_hat) / R(R(std::sqrt(v_hat)) + R(c.eps)))), m, v};
}

template <typename Round>
Tensors faithful_update_in(const OptimizerConfig& c, long t, const Tensor& weight,
                           const Tensor& grad, const Tensors& slots, const Round& R) {
  auto w = weight.to_f64(), g = grad.to_f64();
  std::vector<double> m = slots.size() > 0 ? slots[0].to_f64() : std::vector<double>(w.size(), 0);
  std::vector<double> v = slots.size() > 1 ? slots[1].to_f64() : std::vector<double>(w.size(), 0);
  bool first = slots.empty();
  std::vector<double> nw(w.size()), nm(w.size()), nv(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    StepElement e = c.kind == "sgd" ? sgd_step(c, first, R(w[i]), R(g[i]), R(m[i]), R)
                                    : adam_step(c, t, R(w[i]), R(g[i]), R(m[i]), R(v[i]), R);
    nw[i] = e.w;
    nm[i] = e.m;
    nv[i] = e.v;
  }
  // The state in the weight's dtype, as torch.optim keeps it (a kernel that keeps it narrower
  // is worse than the definition).
  DType dt = weight.dtype();
  Tensors out{Tensor::from_f64(nw, weight.shape(), dt)};
  std::size_t k = optimizer_slots(c).size();
  if (k > 0) out.push_back(Tensor::from_f64(nm, weight.shape(), dt));
  if (k > 1) out.push_back(Tensor::from_f64(nv, weight.shape(), dt));
  return out;
}

}  // namespace

Tensors faithful_update(const OptimizerConfig& c, long t, const Tensor& weight, const Tensor& grad,
                        const Tensors& slots) {
  if (weight.dtype() == DType::Float32)
    return faithful_update_in(c, t, weight, grad, slots,
                              [](double x) { return static_cast<double>(static_cast<float>(x)); });
  if (weight.dtype() == DType::Float16)
    return faithful_update_in(c, t, weight, grad, slots,
                              [](double x) { return half_bits_to_f64(f64_to_half_bits(x)); });
  if (weight.dtype() == DType::BFloat16)
    return faithful_update_in(c, t, weight, grad, slots,
                              [](double x) { return bf16_bits_to_f64(f64_to_bf16_bits(x)); });
  return faithful_update_in(c, t, weight, grad, slots, [](double x) { return x; });
}

UpdateReference reference_update(const OptimizerConfig& c, long t, const Tensor& weight,
                                 const Tensor& grad, const Tensors& slots, DType weight_dtype,
                                 DType state_dtype) {
  auto names = optimizer_slots(c);
  if (weight.numel() != grad.numel())
    fail("update: weight {} and gradient {} differ in size", shape_str(weight.shape()),
         shape_str(grad.shape()));
  bool first = slots.empty();
  if (!first && slots.size() != names.size())
    fail("update: {} state tensors given, the {} optimizer keeps {}", slots.size(), c.kind,
         names.size());
  for (const auto& s : slots)
    if (s.numel() != weight.numel())
      fail("update: a state tensor of shape {} for a weight of shape {}", shape_str(s.shape()),
           shape_str(weight.shape()));
  auto w = weight.to_f64(), g = grad.to_f64();
  std::vector<double> m = slots.size() > 0 ? slots[0].to_f64() : std::vector<double>(w.size(), 0);
  std::vector<double> v = slots.size() > 1 ? slots[1].to_f64() : std::vector<double>(w.size(), 0);
  UpdateRoundings n = update_roundings(c);
  auto gamma = [](int k, DType dt) {
    double u = unit_roundoff(dt);
    return k * u / (1 - k * u);
  };
  double gw = gamma(n.weight, weight_dtype), gm = gamma(n.m, state_dtype),
         gv = gamma(n.v, state_dtype);
  // Subnormal results: each rounding may lose up to the smallest subnormal spacing.
  double floor_w = n.weight * ulp_of(0, weight_dtype), floor_m = n.m * ulp_of(0, state_dtype),
         floor_v = n.v * ulp_of(0, state_dtype);
  std::size_t k = names.size();
  std::vector<double> nw(w.size()), nm(k > 0 ? w.size() : 0), nv(k > 1 ? w.size() : 0);
  UpdateReference r;
  r.weight_tol.resize(w.size());
  r.slot_tols.assign(k, std::vector<double>(w.size()));
  UpdateRule rule(c, t);
  for (std::size_t i = 0; i < w.size(); ++i) {
    UpdateElement e = rule(first, w[i], g[i], m[i], v[i]);
    nw[i] = e.w;
    r.weight_tol[i] = gw * e.w_mag + floor_w;
    if (k > 0) {
      nm[i] = e.m;
      r.slot_tols[0][i] = gm * e.m_mag + floor_m;
    }
    if (k > 1) {
      nv[i] = e.v;
      r.slot_tols[1][i] = gv * e.v_mag + floor_v;
    }
  }
  r.weight = Tensor::from_f64(nw, weight.shape(), DType::Float64);
  if (k > 0) r.slots.push_back(Tensor::from_f64(nm, weight.shape(), DType::Float64));
  if (k > 1) r.slots.push_back(Tensor::from_f64(nv, weight.shape(), DType::Float64));
  return r;
}

}  // namespace metaop
