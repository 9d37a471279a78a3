// Normalization meta operators over channels: BatchNormalization (inference and training mode)
// and InstanceNormalization, each op's forward, error model, VJP and its error model, and danger
// zones together; what they share with LayerNormalization and the others is in ops/norm_util.h.
#include <cmath>
#include <type_traits>

#include "ops/kernel_util.h"
#include "ops/norm_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// ---- BatchNormalization

Tensors batch_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  if (x.rank() < 2)
    fail("{}: input must be [N, C, ...], got {}", c.node.label(), shape_str(x.shape()));
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  auto mean = input(c, in, 3).to_f64(), var = input(c, in, 4).to_f64();
  double eps = attr_f(c, "epsilon"), momentum = attr_f(c, "momentum");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  for (auto* v : {&scale, &bias, &mean, &var})
    if (static_cast<std::int64_t>(v->size()) != C)
      fail("{}: scale, B, mean and var need {} elements (channels)", c.node.label(), C);
  bool training = batch_norm_training(c);
  auto vx = x.to_f64();
  std::vector<double> use_mean = mean, use_var = var;
  if (training) {
    for (std::int64_t ch = 0; ch < C; ++ch) {
      double s = 0, ss = 0;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < S; ++j) s += vx[(n * C + ch) * S + j];
      double m = s / static_cast<double>(N * S);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < S; ++j) {
          double d = vx[(n * C + ch) * S + j] - m;
          ss += d * d;
        }
      use_mean[ch] = m;
      use_var[ch] = ss / static_cast<double>(N * S);  // population variance, as the spec's np.var
    }
  }
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch) {
      double a = scale[ch] / std::sqrt(use_var[ch] + eps);
      for (std::int64_t j = 0; j < S; ++j) {
        std::int64_t i = (n * C + ch) * S + j;
        y[i] = (vx[i] - use_mean[ch]) * a + bias[ch];
      }
    }
  Tensors out{Tensor::from_f64(y, x.shape(), x.dtype())};
  if (training) {
    std::vector<double> rm(C), rv(C);
    for (std::int64_t ch = 0; ch < C; ++ch) {
      rm[ch] = mean[ch] * momentum + use_mean[ch] * (1 - momentum);
      rv[ch] = var[ch] * momentum + use_var[ch] * (1 - momentum);
    }
    out.push_back(Tensor::from_f64(rm, {C}, in[3].dtype()));
    out.push_back(Tensor::from_f64(rv, {C}, in[4].dtype()));
  }
  return out;
}

Magnitudes batch_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                                const AccumulationBound& bound) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  NormGroups g;
  g.group.resize(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) g.group[i] = (i / S) % C;
  g.gamma = per_channel(in[1].to_f64(), x.shape());
  g.beta = per_channel(in[2].to_f64(), x.shape());
  g.eps = attr_f(c, "epsilon");
  bool training = batch_norm_training(c);
  if (training) {
    g.n = static_cast<double>(N * S);
  } else {
    g.mean = in[3].to_f64();
    g.var = in[4].to_f64();
  }
  auto vx = x.to_f64();
  Magnitudes m{norm_magnitude(vx, g, bound)};
  // Running statistics: a blend of the old value and a batch statistic over N*S elements.
  double kappa = bound.kappa(static_cast<double>(N * S));
  for (std::size_t o = 1; o < ref.size(); ++o) {
    if (!ref[o].defined()) continue;
    auto r = ref[o].to_f64();
    std::vector<double> mag_x(C, 0.0);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      mag_x[(i / S) % C] += (o == 1 ? std::fabs(vx[i]) : vx[i] * vx[i]) / (N * S);
    std::vector<double> cm(r.size());
    for (std::size_t k = 0; k < r.size(); ++k) cm[k] = 4 * std::fabs(r[k]) + kappa * mag_x[k];
    m.push_back(std::move(cm));
  }
  return m;
}

// Every operation in T: float gives the VJP's float32 twin (its sums in the order written).
template <class T>
Tensors batch_norm_vjp_in(const KernelContext& c, const Tensors& in, const Tensors& out,
                          const Tensors& grads) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const Tensor& x = in[0];
  auto vx = x.to_f64(), scale = in[1].to_f64(), mean = in[3].to_f64(), var = in[4].to_f64();
  double eps = attr_f(c, "epsilon"), momentum = attr_f(c, "momentum");
  auto cmap = channel_map(x.shape());
  std::size_t C = scale.size();
  std::vector<double> gamma(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) gamma[i] = scale[cmap[i]];
  auto g = grad_of(grads, out, 0);
  auto t = [](double v) { return static_cast<T>(v); };
  Tensors r(in.size());
  if (!batch_norm_training(c)) {
    // Given statistics: y = gamma (x - mean) / sqrt(var + eps) + beta, element-wise per channel.
    std::vector<T> dx(vx.size()), dscale(C, 0), dbias(C, 0), dmean(C, 0), dvar(C, 0);
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = cmap[i];
      T is = 1 / std::sqrt(t(var[k]) + t(eps)), d = t(vx[i]) - t(mean[k]);
      dx[i] = t(g[i]) * t(scale[k]) * is;
      dscale[k] += t(g[i]) * d * is;
      dbias[k] += t(g[i]);
      dmean[k] -= t(g[i]) * t(scale[k]) * is;
      dvar[k] -= T(0.5) * t(g[i]) * t(scale[k]) * d * is * is * is;
    }
    auto wide = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
    r[0] = grad_like(wide(dx), x);
    r[1] = grad_like(wide(dscale), in[1]);
    r[2] = grad_like(wide(dbias), in[2]);
    r[3] = grad_like(wide(dmean), in[3]);
    r[4] = grad_like(wide(dvar), in[4]);
    return r;
  }
  NormGrad ng = normalize_vjp(vx, cmap, C, gamma, eps, g, f32);
  // Running statistics: mean * momentum + batch_mean * (1 - momentum), likewise the variance
  // (population variance of the batch).
  T n = t(static_cast<double>(vx.size()) / static_cast<double>(C));
  std::vector<double> dmean_in(C, 0.0), dvar_in(C, 0.0);
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto grm = grads[1].to_f64();
    for (std::size_t k = 0; k < C; ++k) dmean_in[k] = t(momentum) * t(grm[k]);
    for (std::size_t i = 0; i < vx.size(); ++i)
      ng.dx[i] = t(ng.dx[i]) + (1 - t(momentum)) * t(grm[cmap[i]]) / n;
  }
  if (out.size() > 2 && grads.size() > 2 && grads[2].defined()) {
    auto grv = grads[2].to_f64();
    for (std::size_t k = 0; k < C; ++k) dvar_in[k] = t(momentum) * t(grv[k]);
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = cmap[i];
      ng.dx[i] = t(ng.dx[i]) + (1 - t(momentum)) * t(grv[k]) * 2 * (t(vx[i]) - t(ng.mean[k])) / n;
    }
  }
  r[0] = grad_like(ng.dx, x);
  r[1] = grad_like(sum_into(ng.dgamma, cmap, C, f32), in[1]);
  r[2] = grad_like(sum_into(ng.dbeta, cmap, C, f32), in[2]);
  r[3] = grad_like(dmean_in, in[3]);
  r[4] = grad_like(dvar_in, in[4]);
  return r;
}

Magnitudes batch_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  auto vx = x.to_f64(), scale = in[1].to_f64(), mean = in[3].to_f64(), var = in[4].to_f64();
  double eps = attr_f(c, "epsilon"), momentum = attr_f(c, "momentum");
  auto cmap = channel_map(x.shape());
  std::size_t C = scale.size();
  double n = static_cast<double>(vx.size()) / static_cast<double>(C), kappa = bound.kappa(n);
  auto g = grad_of(grads, out, 0);
  Magnitudes m(in.size());
  std::vector<double> gamma(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) gamma[i] = scale[cmap[i]];
  if (!batch_norm_training(c)) {
    // Given statistics: dx = g gamma / sqrt(var + eps): 1/sigma carries 3.5 roundings and the
    // two products one each. dscale's terms g (x - mean) / sigma: the difference rounds by
    // |x| + |mean| relative to sigma, the rest 6 |g xh|; dmean = -sum g gamma / sigma and
    // dvar = -sum g gamma (x - mean) / (2 sigma^3) likewise.
    std::vector<double> err_dscale(vx.size()), abs_dmean(vx.size()), abs_dvar(vx.size()),
        err_dvar(vx.size()), abs_dscale(vx.size());
    m[0].resize(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = cmap[i];
      double is = 1 / std::sqrt(var[k] + eps), d = vx[i] - mean[k], gg = std::fabs(g[i] * gamma[i]);
      m[0][i] = 6 * gg * is;
      abs_dscale[i] = std::fabs(g[i] * d) * is;
      err_dscale[i] =
          std::fabs(g[i]) * ((std::fabs(vx[i]) + std::fabs(mean[k])) * is + 6 * std::fabs(d) * is);
      abs_dmean[i] = 7 * gg * is;
      abs_dvar[i] = 0.5 * gg * std::fabs(d) * is * is * is;
      err_dvar[i] =
          0.5 * gg * is * is * is * ((std::fabs(vx[i]) + std::fabs(mean[k])) + 12 * std::fabs(d));
    }
    m[1] = param_magnitude(abs_dscale, err_dscale, cmap, C, kappa);
    std::vector<double> abs_g(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) abs_g[i] = std::fabs(g[i]);
    m[2] = param_magnitude(abs_g, {}, cmap, C, kappa);
    if (in.size() > 3) m[3] = param_magnitude(abs_dmean, {}, cmap, C, kappa);
    if (in.size() > 4) m[4] = param_magnitude(abs_dvar, err_dvar, cmap, C, kappa);
    return m;
  }
  auto nm = normalize_vjp_magnitude(vx, cmap, C, gamma, eps, g, kappa);
  m[0] = nm.dx;
  // The running statistics' gradients reach x as (1 - momentum) grm / n and
  // (1 - momentum) grv 2 (x - mean) / n: a few roundings each, the difference's relative to its
  // terms.
  bool grm = out.size() > 1 && grads.size() > 1 && grads[1].defined();
  bool grv = out.size() > 2 && grads.size() > 2 && grads[2].defined();
  std::vector<double> vrm = grm ? grads[1].to_f64() : std::vector<double>(),
                      vrv = grv ? grads[2].to_f64() : std::vector<double>();
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = cmap[i];
    if (grm) m[0][i] += 4 * std::fabs((1 - momentum) * vrm[k]) / n;
    if (grv)
      m[0][i] += std::fabs((1 - momentum) * vrv[k]) * 2 *
                 (std::fabs(vx[i]) + std::fabs(nm.mean[k]) + kappa * std::sqrt(nm.var[k]) +
                  4 * std::fabs(vx[i] - nm.mean[k])) /
                 n;
  }
  m[1] = param_magnitude(nm.dgamma_abs, nm.dgamma_err, cmap, C, kappa);
  m[2] = param_magnitude(nm.dbeta_abs, {}, cmap, C, kappa);
  // The running statistics' own gradients are momentum * their output gradients: one rounding.
  for (std::size_t k = 3; k < in.size() && k < 5; ++k) {
    m[k].assign(static_cast<std::size_t>(in[k].numel()), 0.0);
    if (grads.size() > k - 2 && grads[k - 2].defined()) {
      auto gk = grads[k - 2].to_f64();
      for (std::size_t j = 0; j < m[k].size() && j < gk.size(); ++j)
        m[k][j] = std::fabs(momentum * gk[j]);
    }
  }
  return m;
}

// In training mode the batch's channel variance, in inference the given var input (+ epsilon)
// must stay above 0.
DangerZones batch_norm_danger() {
  DangerZone batch = zero_variance(
      [](const KernelContext& c, const Tensors& in) {
        if (!batch_norm_training(c)) return std::vector<std::vector<std::int64_t>>{};
        auto cmap = channel_map(in[0].shape());
        std::vector<std::vector<std::int64_t>> g(static_cast<std::size_t>(in[0].dim(1)));
        for (std::size_t i = 0; i < cmap.size(); ++i)
          g[static_cast<std::size_t>(cmap[i])].push_back(static_cast<std::int64_t>(i));
        return g;
      },
      "training mode, epsilon 0 and a channel is constant over the batch (0/0)");
  DangerZone given = danger::below(DangerKind::ZeroVariance, 4, 0, false,
                                   "inference with var + epsilon reaching 0 (division by 0)");
  auto below_zero = given.distances;
  given.distances = [below_zero](const KernelContext& c, const Tensors& in, const Tensors& out) {
    if (batch_norm_training(c)) return ZoneDistances{{}, {}, {}};
    // var + epsilon <= 0 is var <= -epsilon: shift the variances by epsilon.
    Tensors shifted = in;
    auto v = in[4].to_f64();
    for (auto& e : v) e += attr_f(c, "epsilon");
    shifted[4] = Tensor::from_f64(v, in[4].shape(), DType::Float64);
    return below_zero(c, shifted, out);
  };
  given.describe = [](const KernelContext& c, const Tensors& in, const Tensors&, std::size_t ch) {
    double v = in[4].f64_at(static_cast<std::int64_t>(ch)), eps = attr_f(c, "epsilon");
    return fmt::format("channel {}: var {:.7g} + epsilon {:.7g} = {:.7g}", ch, v, eps, v + eps);
  };
  return {batch, given};
}

// ---- InstanceNormalization

Tensors instance_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  double eps = attr_f(c, "epsilon");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch) {
      const double* xs = vx.data() + (n * C + ch) * S;
      double m = 0, v = 0;
      for (std::int64_t j = 0; j < S; ++j) m += xs[j];
      m /= static_cast<double>(S);
      for (std::int64_t j = 0; j < S; ++j) v += (xs[j] - m) * (xs[j] - m);
      v /= static_cast<double>(S);
      double a = scale[ch] / std::sqrt(v + eps);
      for (std::int64_t j = 0; j < S; ++j) y[(n * C + ch) * S + j] = (xs[j] - m) * a + bias[ch];
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Magnitudes instance_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                                   const AccumulationBound& bound) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  NormGroups g;
  g.group.resize(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) g.group[i] = i / S;
  g.gamma = per_channel(in[1].to_f64(), x.shape());
  g.beta = per_channel(in[2].to_f64(), x.shape());
  g.eps = attr_f(c, "epsilon");
  g.n = static_cast<double>(S);
  return {norm_magnitude(x.to_f64(), g, bound)};
}

// InstanceNormalization's view of X: its values, one group per (sample, channel), each
// element's channel, Scale per element, and N, C and the spatial size S.
struct InstanceNormLayout {
  std::vector<double> vx;
  std::vector<std::int64_t> group, cmap;
  std::vector<double> gamma;
  std::int64_t N = 0, C = 0, S = 0;
};

InstanceNormLayout instance_norm_layout(const Tensors& in) {
  const Tensor& x = in[0];
  InstanceNormLayout l;
  l.vx = x.to_f64();
  auto scale = in[1].to_f64();
  l.N = x.dim(0);
  l.C = x.dim(1);
  l.S = x.numel() / std::max<std::int64_t>(l.N * l.C, 1);
  l.group.resize(l.vx.size());
  for (std::size_t i = 0; i < l.vx.size(); ++i) l.group[i] = static_cast<std::int64_t>(i) / l.S;
  l.cmap = channel_map(x.shape());
  l.gamma.resize(l.vx.size());
  for (std::size_t i = 0; i < l.vx.size(); ++i) l.gamma[i] = scale[l.cmap[i]];
  return l;
}

// `float32`: its float32 twin.
Tensors instance_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                          const Tensors& grads, bool float32 = false) {
  InstanceNormLayout l = instance_norm_layout(in);
  auto& [vx, group, cmap, gamma, N, C, S] = l;
  NormGrad ng = normalize_vjp(vx, group, static_cast<std::size_t>(N * C), gamma,
                              attr_f(c, "epsilon"), grad_of(grads, out, 0), float32);
  return {grad_like(ng.dx, in[0]), grad_like(sum_into(ng.dgamma, cmap, C, float32), in[1]),
          grad_like(sum_into(ng.dbeta, cmap, C, float32), in[2])};
}

Magnitudes instance_norm_vjp_magnitude(const KernelContext& c, const Tensors& in,
                                       const Tensors& out, const Tensors& grads,
                                       const AccumulationBound& bound) {
  InstanceNormLayout l = instance_norm_layout(in);
  auto& [vx, group, cmap, gamma, N, C, S] = l;
  auto nm = normalize_vjp_magnitude(vx, group, static_cast<std::size_t>(N * C), gamma,
                                    attr_f(c, "epsilon"), grad_of(grads, out, 0),
                                    bound.kappa(static_cast<double>(S)));
  double kappa = bound.kappa(static_cast<double>(N * S));  // the parameters gather N*S terms
  return {nm.dx, param_magnitude(nm.dgamma_abs, nm.dgamma_err, cmap, C, kappa),
          param_magnitude(nm.dbeta_abs, {}, cmap, C, kappa)};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  using error_models::condition;
  r.op("BatchNormalization", Family::norm, batch_norm)
      .vjp(batch_norm_vjp_in<double>)
      .vjp_float32(
          [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
             SumOrder) { return batch_norm_vjp_in<float>(c, in, out, grads); },
          "the VJP as the reference writes it (dx = (g gamma - mean(g gamma) - xh mean(g gamma "
          "xh)) / sigma with the batch's statistics in training mode, g gamma / sigma with the "
          "given ones)",
          "a wider accumulator for the statistics and the sums")
      .error(condition(batch_norm_magnitude,
                       std::string(kNormDoc) +
                           " (inference: given statistics, n = 0); running stats: "
                           "4|r| + kappa(N*S)*mean of |x| or x^2"))
      .backward_error(batch_norm_vjp_magnitude,
                      std::string(kNormBackwardDoc) +
                          " (inference: 6|g gamma|/sigma; statistics' gradients likewise)")
      .danger(batch_norm_danger())
      .faults({"eps", "drop_bias"})
      .training({.state = {{1, 3}, {2, 4}}});

  with_norm_vjp(r.op("InstanceNormalization", Family::norm, instance_norm), instance_norm_vjp)
      .error(condition(instance_norm_magnitude, kNormDoc))
      .backward_error(instance_norm_vjp_magnitude, kNormBackwardDoc)
      .danger({zero_variance(
          [](const KernelContext&, const Tensors& in) {
            return groups_of(instance_norm_layout(in).group);
          },
          "epsilon is 0 and a (sample, channel) is constant (0/0)")})
      .faults({"eps", "drop_bias"});

  register_layer_norm_ops(r);
}

}  // namespace metaop
