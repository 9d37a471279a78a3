// Normalization meta operators: BatchNormalization (inference and training mode),
// InstanceNormalization, LayerNormalization, LRN, MeanVarianceNormalization.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

bool batch_norm_training(const KernelContext& c) {
  return c.opset >= 14 ? c.node.attr_i("training_mode", 0) != 0
                       : (c.opset >= 9 && c.node.outputs.size() > 1);
}

namespace {

Tensors batch_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  if (x.rank() < 2)
    fail("{}: input must be [N, C, ...], got {}", c.node.label(), shape_str(x.shape()));
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  auto mean = input(c, in, 3).to_f64(), var = input(c, in, 4).to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5), momentum = c.node.attr_f("momentum", 0.9);
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

Tensors instance_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5);
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

Tensors layer_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  double eps = c.node.attr_f("epsilon", 1e-5);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < x.rank(); ++d) (d < axis ? outer : inner) *= x.shape()[d];
  Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  const Tensor& sc = input(c, in, 1);
  auto scale = sc.to_f64();
  auto smap = broadcast_map(sc.shape(), norm_shape);
  std::vector<double> bias(static_cast<std::size_t>(inner), 0.0);
  if (has_input(in, 2)) {
    auto b = in[2].to_f64();
    auto bmap = broadcast_map(in[2].shape(), norm_shape);
    for (std::int64_t j = 0; j < inner; ++j) bias[j] = b[bmap[j]];
  }
  auto vx = x.to_f64();
  std::vector<double> y(vx.size()), mean(static_cast<std::size_t>(outer)),
      inv_std(static_cast<std::size_t>(outer));
  for (std::int64_t o = 0; o < outer; ++o) {
    const double* xs = vx.data() + o * inner;
    double m = 0, v = 0;
    for (std::int64_t j = 0; j < inner; ++j) m += xs[j];
    m /= static_cast<double>(inner);
    for (std::int64_t j = 0; j < inner; ++j) v += (xs[j] - m) * (xs[j] - m);
    v /= static_cast<double>(inner);
    double is = 1.0 / std::sqrt(v + eps);
    mean[o] = m;
    inv_std[o] = is;
    for (std::int64_t j = 0; j < inner; ++j)
      y[o * inner + j] = (xs[j] - m) * is * scale[smap[j]] + bias[j];
  }
  Shape stat_shape = x.shape();
  for (std::int64_t d = axis; d < x.rank(); ++d) stat_shape[d] = 1;
  // Mean and InvStdDev come out in the stash type (float32 by default).
  auto stash =
      dtype_from_onnx(static_cast<int>(c.node.attr_i("stash_type", 1))).value_or(DType::Float32);
  return {Tensor::from_f64(y, x.shape(), x.dtype()), Tensor::from_f64(mean, stat_shape, stash),
          Tensor::from_f64(inv_std, stat_shape, stash)};
}

Tensors lrn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  double alpha = c.node.attr_f("alpha", 1e-4), beta = c.node.attr_f("beta", 0.75),
         bias = c.node.attr_f("bias", 1.0);
  std::int64_t size = c.node.attr_i("size");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // floor and ceil of (size-1)/2
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch)
      for (std::int64_t j = 0; j < S; ++j) {
        double sq = 0;
        for (std::int64_t k = std::max<std::int64_t>(0, ch - lo); k <= std::min(C - 1, ch + hi);
             ++k) {
          double v = vx[(n * C + k) * S + j];
          sq += v * v;
        }
        std::int64_t i = (n * C + ch) * S + j;
        y[i] = vx[i] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Tensors mvn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto axes = norm_axes(c, c.node.attr_ints("axes", {0, 2, 3}), x.rank());
  std::vector<bool> reduced(x.rank(), false);
  for (auto a : axes) reduced[a] = true;
  Shape kept = x.shape();
  for (auto a : axes) kept[a] = 1;
  auto map = broadcast_map(kept, x.shape());
  std::int64_t groups = shape_numel(kept), per = x.numel() / std::max<std::int64_t>(groups, 1);
  auto vx = x.to_f64();
  std::vector<double> sum(groups, 0.0), sq(groups, 0.0);
  for (std::int64_t i = 0; i < x.numel(); ++i) sum[map[i]] += vx[i];
  for (auto& s : sum) s /= static_cast<double>(per);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    sq[map[i]] += (vx[i] - sum[map[i]]) * (vx[i] - sum[map[i]]);
  std::vector<double> y(vx.size());
  for (std::int64_t i = 0; i < x.numel(); ++i)
    y[i] = (vx[i] - sum[map[i]]) / (std::sqrt(sq[map[i]] / static_cast<double>(per)) + 1e-9);
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

// First-order rounding-error magnitude of y = gamma * (x - mu) / sqrt(var + eps) + beta with
// mu and var over n elements of each group (given statistics: n = 0): the mean's error
// kappa(n)*mean|x| and the difference's u*|x - mu| scale by gamma/sigma; the variance's
// relative error kappa(n) scales |x_hat|; a few more roundings for the affine step, including
// implementations that fold it into x*a + b (hence |mu|).
struct NormGroups {
  std::vector<std::int64_t> group;  // element -> group
  std::vector<double> gamma, beta;  // per element
  std::vector<double> mean, var;    // per group (computed here when not given)
  double eps = 0;
  double n = 0;  // elements reduced per group (0: statistics are inputs)
};

std::vector<double> norm_magnitude(const std::vector<double>& x, NormGroups g,
                                   const AccumulationBound& bound) {
  std::size_t groups = 0;
  for (auto k : g.group) groups = std::max<std::size_t>(groups, static_cast<std::size_t>(k) + 1);
  std::vector<double> mean_abs(groups, 0.0), count(groups, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    mean_abs[g.group[i]] += std::fabs(x[i]);
    count[g.group[i]] += 1;
  }
  if (g.n > 0) {
    g.mean.assign(groups, 0.0);
    g.var.assign(groups, 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) g.mean[g.group[i]] += x[i];
    for (std::size_t k = 0; k < groups; ++k) g.mean[k] /= std::max(count[k], 1.0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      double d = x[i] - g.mean[g.group[i]];
      g.var[g.group[i]] += d * d;
    }
    for (std::size_t k = 0; k < groups; ++k) g.var[k] /= std::max(count[k], 1.0);
  }
  for (std::size_t k = 0; k < groups; ++k) mean_abs[k] /= std::max(count[k], 1.0);
  double kappa = g.n > 0 ? bound.kappa(g.n) : 0;
  std::vector<double> c(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto k = g.group[i];
    double sigma = std::sqrt(std::max(g.var[k], 0.0) + g.eps);
    double mu = g.mean[k], xhat = (x[i] - mu) / sigma;
    double scaled =
        (std::fabs(x[i]) + std::fabs(mu) + (kappa > 0 ? kappa * mean_abs[k] : 0)) / sigma +
        std::fabs(xhat) * (kappa + 4);
    c[i] = std::fabs(g.gamma[i]) * scaled + 2 * std::fabs(g.beta[i]);
  }
  return c;
}

// Per-element values of a per-channel vector for an [N, C, ...] tensor.
std::vector<double> per_channel(const std::vector<double>& v, const Shape& s) {
  std::int64_t N = s[0], C = s[1], S = shape_numel(s) / std::max<std::int64_t>(N * C, 1);
  std::vector<double> out(static_cast<std::size_t>(N * C * S));
  for (std::int64_t i = 0; i < N * C * S; ++i) out[i] = v[(i / S) % C];
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
  g.eps = c.node.attr_f("epsilon", 1e-5);
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

Magnitudes instance_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                                   const AccumulationBound& bound) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  NormGroups g;
  g.group.resize(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) g.group[i] = i / S;
  g.gamma = per_channel(in[1].to_f64(), x.shape());
  g.beta = per_channel(in[2].to_f64(), x.shape());
  g.eps = c.node.attr_f("epsilon", 1e-5);
  g.n = static_cast<double>(S);
  return {norm_magnitude(x.to_f64(), g, bound)};
}

// LayerNormalization's view of X: groups of `inner` elements (the dims from `axis` on), each
// element's position in the normalized shape, and Scale (and B) per element.
struct LayerNormLayout {
  std::int64_t inner = 1;
  std::size_t outer = 0;
  Shape norm_shape;
  std::vector<std::int64_t> group, pos;
  std::vector<double> gamma, beta;
};

LayerNormLayout layer_norm_layout(const KernelContext& c, const Tensors& in) {
  const Tensor& x = in[0];
  LayerNormLayout l;
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  for (std::int64_t d = axis; d < x.rank(); ++d) l.inner *= x.shape()[d];
  l.norm_shape.assign(x.shape().begin() + axis, x.shape().end());
  l.outer = static_cast<std::size_t>(x.numel() / std::max<std::int64_t>(l.inner, 1));
  auto sc = in[1].to_f64();
  auto smap = broadcast_map(in[1].shape(), l.norm_shape);
  std::vector<double> b;
  std::vector<std::int64_t> bmap;
  if (has_input(in, 2)) {
    b = in[2].to_f64();
    bmap = broadcast_map(in[2].shape(), l.norm_shape);
  }
  auto n = static_cast<std::size_t>(x.numel());
  l.group.resize(n);
  l.pos.resize(n);
  l.gamma.resize(n);
  l.beta.assign(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    l.group[i] = static_cast<std::int64_t>(i) / l.inner;
    l.pos[i] = static_cast<std::int64_t>(i) % l.inner;
    l.gamma[i] = sc[smap[l.pos[i]]];
    if (!b.empty()) l.beta[i] = b[bmap[l.pos[i]]];
  }
  return l;
}

Magnitudes layer_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                                const AccumulationBound& bound) {
  const Tensor& x = in[0];
  LayerNormLayout l = layer_norm_layout(c, in);
  std::int64_t inner = l.inner;
  NormGroups g;
  g.group = l.group;
  g.gamma = l.gamma;
  g.beta = l.beta;
  g.eps = c.node.attr_f("epsilon", 1e-5);
  g.n = static_cast<double>(inner);
  auto vx = x.to_f64();
  Magnitudes m{norm_magnitude(vx, g, bound)};
  // Mean: an n-term sum; InvStdDev: relative error of the variance.
  double kappa = bound.kappa(g.n);
  for (std::size_t o = 1; o < ref.size(); ++o) {
    if (!ref[o].defined()) {
      m.emplace_back();
      continue;
    }
    auto r = ref[o].to_f64();
    std::vector<double> cm(r.size());
    for (std::size_t k = 0; k < r.size(); ++k) {
      double mean_abs = 0;
      for (std::int64_t j = 0; j < inner; ++j) mean_abs += std::fabs(vx[k * inner + j]);
      mean_abs /= static_cast<double>(inner);
      cm[k] = o == 1 ? kappa * mean_abs + 2 * std::fabs(r[k]) : (kappa + 4) * std::fabs(r[k]);
    }
    m.push_back(std::move(cm));
  }
  return m;
}

Magnitudes mvn_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                         const AccumulationBound& bound) {
  const Tensor& x = in[0];
  auto axes = norm_axes(c, c.node.attr_ints("axes", {0, 2, 3}), x.rank());
  Shape kept = x.shape();
  for (auto a : axes) kept[a] = 1;
  NormGroups g;
  g.group = broadcast_map(kept, x.shape());
  g.gamma.assign(x.numel(), 1.0);
  g.beta.assign(x.numel(), 0.0);
  g.n = static_cast<double>(x.numel()) / std::max<double>(1, shape_numel(kept));
  return {norm_magnitude(x.to_f64(), g, bound)};
}

Magnitudes lrn_magnitude(const KernelContext& c, const Tensors&, const Tensors& ref,
                         const AccumulationBound& bound) {
  double beta = c.node.attr_f("beta", 0.75);
  double kappa = bound.kappa(static_cast<double>(c.node.attr_i("size")));
  auto y = ref[0].to_f64();
  for (auto& v : y) v = std::fabs(v) * (4 + std::fabs(beta) * (kappa + 4));
  return {y};
}

// --- gradients

// y = gamma * (x - mu) / sigma + beta, with mu and sigma^2 + eps the mean and variance over
// each group: dx = (dxh - mean(dxh) - xh * mean(dxh * xh)) / sigma with dxh = g * gamma, and per
// element the terms of dgamma (g * xh) and dbeta (g), which the caller sums into its parameters.
struct NormGrad {
  std::vector<double> dx, dgamma, dbeta, mean, var;
};

NormGrad normalize_vjp(const std::vector<double>& x, const std::vector<std::int64_t>& group,
                       std::size_t groups, const std::vector<double>& gamma, double eps,
                       const std::vector<double>& g) {
  NormGrad r;
  std::vector<double> count(groups, 0.0);
  r.mean.assign(groups, 0.0);
  r.var.assign(groups, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    r.mean[group[i]] += x[i];
    count[group[i]] += 1;
  }
  for (std::size_t k = 0; k < groups; ++k) r.mean[k] /= std::max(count[k], 1.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double d = x[i] - r.mean[group[i]];
    r.var[group[i]] += d * d;
  }
  for (std::size_t k = 0; k < groups; ++k) r.var[k] /= std::max(count[k], 1.0);
  std::vector<double> s1(groups, 0.0), s2(groups, 0.0), xh(x.size()), dxh(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto k = group[i];
    xh[i] = (x[i] - r.mean[k]) / std::sqrt(r.var[k] + eps);
    dxh[i] = g[i] * gamma[i];
    s1[k] += dxh[i];
    s2[k] += dxh[i] * xh[i];
  }
  r.dx.resize(x.size());
  r.dgamma.resize(x.size());
  r.dbeta = g;
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto k = group[i];
    double n = std::max(count[k], 1.0);
    r.dx[i] = (dxh[i] - s1[k] / n - xh[i] * s2[k] / n) / std::sqrt(r.var[k] + eps);
    r.dgamma[i] = g[i] * xh[i];
  }
  return r;
}

// Sums per-element values into a parameter of shape `ps` broadcast over `xs` (per channel, or
// over LayerNormalization's normalized dims).
std::vector<double> sum_into(const std::vector<double>& v, const std::vector<std::int64_t>& map,
                             std::size_t size) {
  std::vector<double> r(size, 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) r[map[i]] += v[i];
  return r;
}

std::vector<std::int64_t> channel_map(const Shape& s) {
  std::int64_t N = s[0], C = s[1], S = shape_numel(s) / std::max<std::int64_t>(N * C, 1);
  std::vector<std::int64_t> m(static_cast<std::size_t>(N * C * S));
  for (std::int64_t i = 0; i < N * C * S; ++i) m[i] = (i / S) % C;
  return m;
}

Tensors batch_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads) {
  const Tensor& x = in[0];
  auto vx = x.to_f64(), scale = in[1].to_f64(), mean = in[3].to_f64(), var = in[4].to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5), momentum = c.node.attr_f("momentum", 0.9);
  auto cmap = channel_map(x.shape());
  std::size_t C = scale.size();
  std::vector<double> gamma(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) gamma[i] = scale[cmap[i]];
  auto g = grad_of(grads, out, 0);
  Tensors r(in.size());
  if (!batch_norm_training(c)) {
    // Given statistics: y = gamma (x - mean) / sqrt(var + eps) + beta, element-wise per channel.
    std::vector<double> dx(vx.size()), dscale(C, 0.0), dbias(C, 0.0), dmean(C, 0.0), dvar(C, 0.0);
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = cmap[i];
      double is = 1 / std::sqrt(var[k] + eps), d = vx[i] - mean[k];
      dx[i] = g[i] * scale[k] * is;
      dscale[k] += g[i] * d * is;
      dbias[k] += g[i];
      dmean[k] -= g[i] * scale[k] * is;
      dvar[k] -= 0.5 * g[i] * scale[k] * d * is * is * is;
    }
    r[0] = grad_like(dx, x);
    r[1] = grad_like(dscale, in[1]);
    r[2] = grad_like(dbias, in[2]);
    r[3] = grad_like(dmean, in[3]);
    r[4] = grad_like(dvar, in[4]);
    return r;
  }
  NormGrad ng = normalize_vjp(vx, cmap, C, gamma, eps, g);
  // Running statistics: mean * momentum + batch_mean * (1 - momentum), likewise the variance
  // (population variance of the batch).
  double n = static_cast<double>(vx.size()) / static_cast<double>(C);
  std::vector<double> dmean_in(C, 0.0), dvar_in(C, 0.0);
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto grm = grads[1].to_f64();
    for (std::size_t k = 0; k < C; ++k) dmean_in[k] = momentum * grm[k];
    for (std::size_t i = 0; i < vx.size(); ++i) ng.dx[i] += (1 - momentum) * grm[cmap[i]] / n;
  }
  if (out.size() > 2 && grads.size() > 2 && grads[2].defined()) {
    auto grv = grads[2].to_f64();
    for (std::size_t k = 0; k < C; ++k) dvar_in[k] = momentum * grv[k];
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = cmap[i];
      ng.dx[i] += (1 - momentum) * grv[k] * 2 * (vx[i] - ng.mean[k]) / n;
    }
  }
  r[0] = grad_like(ng.dx, x);
  r[1] = grad_like(sum_into(ng.dgamma, cmap, C), in[1]);
  r[2] = grad_like(sum_into(ng.dbeta, cmap, C), in[2]);
  r[3] = grad_like(dmean_in, in[3]);
  r[4] = grad_like(dvar_in, in[4]);
  return r;
}

// Elements grouped by their group number.
std::vector<std::vector<std::int64_t>> groups_of(const std::vector<std::int64_t>& group) {
  std::vector<std::vector<std::int64_t>> g;
  for (std::size_t i = 0; i < group.size(); ++i) {
    auto k = static_cast<std::size_t>(group[i]);
    if (k >= g.size()) g.resize(k + 1);
    g[k].push_back(static_cast<std::int64_t>(i));
  }
  return g;
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

Tensors instance_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                          const Tensors& grads) {
  InstanceNormLayout l = instance_norm_layout(in);
  auto& [vx, group, cmap, gamma, N, C, S] = l;
  NormGrad ng = normalize_vjp(vx, group, static_cast<std::size_t>(N * C), gamma,
                              c.node.attr_f("epsilon", 1e-5), grad_of(grads, out, 0));
  return {grad_like(ng.dx, in[0]), grad_like(sum_into(ng.dgamma, cmap, C), in[1]),
          grad_like(sum_into(ng.dbeta, cmap, C), in[2])};
}

Tensors layer_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads) {
  const Tensor& x = in[0];
  LayerNormLayout l = layer_norm_layout(c, in);
  auto vx = x.to_f64();
  const auto &group = l.group, &pmap = l.pos;
  const auto& gamma = l.gamma;
  const Shape& norm_shape = l.norm_shape;
  std::int64_t inner = l.inner;
  std::size_t outer = l.outer;
  double eps = c.node.attr_f("epsilon", 1e-5);
  NormGrad ng = normalize_vjp(vx, group, outer, gamma, eps, grad_of(grads, out, 0));
  // Mean and InvStdDev outputs, when they receive gradients.
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto gm = grads[1].to_f64();
    for (std::size_t i = 0; i < vx.size(); ++i) ng.dx[i] += gm[group[i]] / inner;
  }
  if (out.size() > 2 && grads.size() > 2 && grads[2].defined()) {
    auto gi = grads[2].to_f64();
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = group[i];
      double is = 1 / std::sqrt(ng.var[k] + eps);
      ng.dx[i] -= gi[k] * is * is * is * (vx[i] - ng.mean[k]) / inner;
    }
  }
  Tensors r(in.size());
  r[0] = grad_like(ng.dx, x);
  auto per_param = [&](const std::vector<double>& v, const Tensor& p) {
    auto full = sum_into(v, pmap, static_cast<std::size_t>(inner));
    return grad_like(unbroadcast(full, norm_shape, p.shape()), p);
  };
  r[1] = per_param(ng.dgamma, in[1]);
  if (has_input(in, 2)) r[2] = per_param(ng.dbeta, in[2]);
  return r;
}

// MeanVarianceNormalization: y = d / (s + 1e-9), d = x - mean, s = sqrt(mean(d^2)) per group:
// dL/dd_k = g_k / (s + e) - d_k sum_i(g_i d_i) / (n s (s + e)^2), then centred.
Tensors mvn_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                const Tensors& grads) {
  const Tensor& x = in[0];
  auto axes = norm_axes(c, c.node.attr_ints("axes", {0, 2, 3}), x.rank());
  Shape kept = x.shape();
  for (auto a : axes) kept[a] = 1;
  auto map = broadcast_map(kept, x.shape());
  auto groups = static_cast<std::size_t>(shape_numel(kept));
  double n = static_cast<double>(x.numel()) / std::max<double>(1, static_cast<double>(groups));
  auto vx = x.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> mean(groups, 0.0), sq(groups, 0.0), gd(groups, 0.0), sum_dd(groups, 0.0);
  for (std::size_t i = 0; i < vx.size(); ++i) mean[map[i]] += vx[i] / n;
  for (std::size_t i = 0; i < vx.size(); ++i) {
    double d = vx[i] - mean[map[i]];
    sq[map[i]] += d * d / n;
    gd[map[i]] += g[i] * d;
  }
  std::vector<double> dd(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = map[i];
    double s = std::sqrt(sq[k]), e = s + 1e-9, d = vx[i] - mean[k];
    dd[i] = g[i] / e - (s > 0 ? d * gd[k] / (n * s * e * e) : 0.0);
    sum_dd[k] += dd[i];
  }
  for (std::size_t i = 0; i < vx.size(); ++i) dd[i] -= sum_dd[map[i]] / n;
  return {grad_like(dd, x)};
}

// LRN: y_i = x_i D_i^-beta, D_i = bias + alpha/size * sum_{k in win(i)} x_k^2, so
// dx_j = g_j D_j^-beta - 2 alpha beta / size * x_j * sum_{i: j in win(i)} g_i x_i D_i^(-beta-1).
Tensors lrn_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                const Tensors& grads) {
  const Tensor& x = in[0];
  double alpha = c.node.attr_f("alpha", 1e-4), beta = c.node.attr_f("beta", 0.75),
         bias = c.node.attr_f("bias", 1.0);
  std::int64_t size = c.node.attr_i("size");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  auto vx = x.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> D(vx.size()), gx(vx.size());
  auto at = [&](std::int64_t n, std::int64_t ch, std::int64_t j) { return (n * C + ch) * S + j; };
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch)
      for (std::int64_t j = 0; j < S; ++j) {
        double sq = 0;
        for (std::int64_t k = std::max<std::int64_t>(0, ch - lo); k <= std::min(C - 1, ch + hi);
             ++k)
          sq += vx[at(n, k, j)] * vx[at(n, k, j)];
        D[at(n, ch, j)] = bias + alpha / static_cast<double>(size) * sq;
      }
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch)
      for (std::int64_t j = 0; j < S; ++j) {
        double acc = 0;  // channels i whose window holds ch: i in [ch - hi, ch + lo]
        for (std::int64_t i = std::max<std::int64_t>(0, ch - hi); i <= std::min(C - 1, ch + lo);
             ++i)
          acc += g[at(n, i, j)] * vx[at(n, i, j)] * std::pow(D[at(n, i, j)], -beta - 1);
        std::int64_t p = at(n, ch, j);
        gx[p] = g[p] * std::pow(D[p], -beta) -
                2 * alpha * beta / static_cast<double>(size) * vx[p] * acc;
      }
  return {grad_like(gx, x)};
}

// Rounding magnitude of the normalization VJP (docs/error-models.md, "Normalization backward"),
// per group of n elements with a = g * gamma, s1 = sum a, s2 = sum a xh:
//   dx = (a - s1/n - xh s2/n) / sigma.
// A kernel recomputes xh from its own mean and 1/sigma, so xh_i carries E_i (units of u, the
// forward's bound without gamma); s1/n carries kappa(n) mean|a|, s2/n kappa(n) mean|a xh| +
// mean(|a| E), xh_i s2/n also mean|a xh| E_i; the two differences and a's product round by
// 3 (|a_i| + mean|a| + |xh_i| mean|a xh|) at most, and 1/sigma carries the variance's
// kappa(n)/2 + 3 relative to |dx_i|. Per element of a parameter's gradient (summed over the m
// elements it gathers by the caller): dgamma's terms g xh carry |g| E and dbeta's |g|; the m-term
// sums add kappa(m) sum|g xh| and kappa(m) sum|g|.
struct NormGradMagnitude {
  std::vector<double> dx, dgamma_abs, dgamma_err, dbeta_abs;  // the last three: per element
  std::vector<double> mean, var;                              // per group
};

NormGradMagnitude normalize_vjp_magnitude(const std::vector<double>& x,
                                          const std::vector<std::int64_t>& group,
                                          std::size_t groups, const std::vector<double>& gamma,
                                          double eps, const std::vector<double>& g, double kappa) {
  std::vector<double> mean(groups, 0.0), var(groups, 0.0), cnt(groups, 0.0), mean_abs(groups, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    mean[group[i]] += x[i];
    mean_abs[group[i]] += std::fabs(x[i]);
    cnt[group[i]] += 1;
  }
  for (std::size_t k = 0; k < groups; ++k) {
    mean[k] /= std::max(cnt[k], 1.0);
    mean_abs[k] /= std::max(cnt[k], 1.0);
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    var[group[i]] += (x[i] - mean[group[i]]) * (x[i] - mean[group[i]]);
  for (std::size_t k = 0; k < groups; ++k) var[k] /= std::max(cnt[k], 1.0);
  std::vector<double> xh(x.size()), E(x.size()), sigma(groups);
  std::vector<double> ma(groups, 0.0), maxh(groups, 0.0), maE(groups, 0.0), s1(groups, 0.0),
      s2(groups, 0.0);
  for (std::size_t k = 0; k < groups; ++k) sigma[k] = std::sqrt(var[k] + eps);
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto k = group[i];
    double n = std::max(cnt[k], 1.0), a = g[i] * gamma[i];
    xh[i] = (x[i] - mean[k]) / sigma[k];
    E[i] = (std::fabs(x[i]) + std::fabs(mean[k]) + kappa * mean_abs[k]) / sigma[k] +
           (kappa + 4) * std::fabs(xh[i]);
    ma[k] += std::fabs(a) / n;
    maxh[k] += std::fabs(a * xh[i]) / n;
    maE[k] += std::fabs(a) * E[i] / n;
    s1[k] += a / n;
    s2[k] += a * xh[i] / n;
  }
  NormGradMagnitude m;
  m.dx.resize(x.size());
  m.dgamma_abs.resize(x.size());
  m.dgamma_err.resize(x.size());
  m.dbeta_abs.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto k = group[i];
    double a = std::fabs(g[i] * gamma[i]);
    double dx = std::fabs(g[i] * gamma[i] - s1[k] - xh[i] * s2[k]) / sigma[k];
    m.dx[i] = (3 * (a + ma[k] + std::fabs(xh[i]) * maxh[k]) +
               kappa * (ma[k] + std::fabs(xh[i]) * maxh[k]) + std::fabs(xh[i]) * maE[k] +
               maxh[k] * E[i]) /
                  sigma[k] +
              (kappa / 2 + 3) * dx;
    m.dgamma_abs[i] = std::fabs(g[i] * xh[i]);
    m.dgamma_err[i] = std::fabs(g[i]) * E[i];
    m.dbeta_abs[i] = std::fabs(g[i]);
  }
  m.mean = std::move(mean);
  m.var = std::move(var);
  return m;
}

// A parameter's gradient from per-element terms: kappa(m) sum|terms| + sum of the terms' own
// errors.
std::vector<double> param_magnitude(const std::vector<double>& abs_terms,
                                    const std::vector<double>& term_err,
                                    const std::vector<std::int64_t>& map, std::size_t size,
                                    double kappa) {
  auto r = sum_into(abs_terms, map, size);
  for (auto& v : r) v *= kappa;
  if (!term_err.empty()) {
    auto e = sum_into(term_err, map, size);
    for (std::size_t k = 0; k < size; ++k) r[k] += e[k];
  }
  return r;
}

Magnitudes batch_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  auto vx = x.to_f64(), scale = in[1].to_f64(), mean = in[3].to_f64(), var = in[4].to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5), momentum = c.node.attr_f("momentum", 0.9);
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

Magnitudes instance_norm_vjp_magnitude(const KernelContext& c, const Tensors& in,
                                       const Tensors& out, const Tensors& grads,
                                       const AccumulationBound& bound) {
  InstanceNormLayout l = instance_norm_layout(in);
  auto& [vx, group, cmap, gamma, N, C, S] = l;
  auto nm = normalize_vjp_magnitude(vx, group, static_cast<std::size_t>(N * C), gamma,
                                    c.node.attr_f("epsilon", 1e-5), grad_of(grads, out, 0),
                                    bound.kappa(static_cast<double>(S)));
  double kappa = bound.kappa(static_cast<double>(N * S));  // the parameters gather N*S terms
  return {nm.dx, param_magnitude(nm.dgamma_abs, nm.dgamma_err, cmap, C, kappa),
          param_magnitude(nm.dbeta_abs, {}, cmap, C, kappa)};
}

Magnitudes layer_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  LayerNormLayout l = layer_norm_layout(c, in);
  auto vx = x.to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5), n = static_cast<double>(l.inner);
  double kappa_n = bound.kappa(n);
  auto nm =
      normalize_vjp_magnitude(vx, l.group, l.outer, l.gamma, eps, grad_of(grads, out, 0), kappa_n);
  Magnitudes m(in.size());
  m[0] = nm.dx;
  // Mean and InvStdDev outputs with gradients: dx += gm / n - gi (x - mean) / (n sigma^3).
  bool gmean = out.size() > 1 && grads.size() > 1 && grads[1].defined();
  bool ginv = out.size() > 2 && grads.size() > 2 && grads[2].defined();
  std::vector<double> gm = gmean ? grads[1].to_f64() : std::vector<double>(),
                      gi = ginv ? grads[2].to_f64() : std::vector<double>();
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = l.group[i];
    if (gmean) m[0][i] += 3 * std::fabs(gm[k]) / n;
    if (ginv) {
      double is = 1 / std::sqrt(nm.var[k] + eps), d = vx[i] - nm.mean[k];
      m[0][i] += std::fabs(gi[k]) * is * is * is *
                 (std::fabs(vx[i]) + std::fabs(nm.mean[k]) + kappa_n * std::sqrt(nm.var[k]) +
                  (1.5 * kappa_n + 8) * std::fabs(d)) /
                 n;
    }
  }
  // Scale and B gather one term per group (outer of them) for each normalized position.
  double kappa = bound.kappa(static_cast<double>(l.outer));
  auto per_param = [&](const std::vector<double>& abs_terms, const std::vector<double>& err,
                       const Tensor& p) {
    auto full = param_magnitude(abs_terms, err, l.pos, static_cast<std::size_t>(l.inner), kappa);
    return unbroadcast(full, l.norm_shape, p.shape());
  };
  m[1] = per_param(nm.dgamma_abs, nm.dgamma_err, in[1]);
  if (has_input(in, 2)) m[2] = per_param(nm.dbeta_abs, {}, in[2]);
  return m;
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.add({"BatchNormalization", "norm", batch_norm});
  r.add({"InstanceNormalization", "norm", instance_norm});
  r.add({"LayerNormalization", "norm", layer_norm});
  r.add({"LRN", "norm", lrn});
  r.add({"MeanVarianceNormalization", "norm", mvn});
  r.set_vjp("BatchNormalization", batch_norm_vjp);
  r.set_vjp("InstanceNormalization", instance_norm_vjp);
  r.set_vjp("LayerNormalization", layer_norm_vjp);
  r.set_vjp("MeanVarianceNormalization", mvn_vjp);
  r.set_vjp("LRN", lrn_vjp);

  using error_models::condition;
  const char* norm_doc =
      "first-order: gamma*(|x|+|mu|+kappa(n)*mean|x|)/sigma + (kappa(n)+4)*|x_hat|*|gamma| + "
      "2|beta|, 4 ulp";
  r.set_error_model(
      "BatchNormalization",
      condition(batch_norm_magnitude, std::string(norm_doc) +
                                          " (inference: given statistics, n = 0); running stats: "
                                          "4|r| + kappa(N*S)*mean of |x| or x^2"));
  r.set_error_model("InstanceNormalization", condition(instance_norm_magnitude, norm_doc));
  r.set_error_model(
      "LayerNormalization",
      condition(layer_norm_magnitude,
                std::string(norm_doc) + "; Mean: kappa(n)*mean|x|; InvStdDev: (kappa(n)+4)*|r|"));
  r.set_error_model("MeanVarianceNormalization",
                    condition(mvn_magnitude, std::string(norm_doc) + " (gamma = 1, beta = 0)"));
  r.set_error_model("LRN", condition(lrn_magnitude, "(4 + |beta|*(kappa(size)+4))*|y|, 4 ulp"));
  // Backward: first-order bounds of the normalization VJPs' own roundings.
  const char* norm_bwd =
      "dx: ((kappa(n) + 3)(mean|a| + |xh| mean|a xh|) + 3|a| + |xh| mean(|a| E) + mean|a xh| E) / "
      "sigma + (kappa(n)/2 + 3)|dx|, a = g gamma, E the forward's bound of xh; parameters: "
      "kappa(m) sum|terms| + sum |g| E, 4 ulp";
  r.set_backward_error_model(
      "BatchNormalization", batch_norm_vjp_magnitude,
      std::string(norm_bwd) + " (inference: 6|g gamma|/sigma; statistics' gradients likewise)");
  r.set_backward_error_model("InstanceNormalization", instance_norm_vjp_magnitude, norm_bwd);
  r.set_backward_error_model("LayerNormalization", layer_norm_vjp_magnitude,
                             std::string(norm_bwd) + "; Mean and InvStdDev gradients added");

  // Danger zones: with epsilon 0, a group of equal values divides 0 by 0 (MVN adds 1e-9 to the
  // deviation and LRN's bias is positive by default; neither can).
  auto eps_zero = [](const Node& n) { return n.attr_f("epsilon", 1e-5) == 0; };
  auto zero_variance = [eps_zero](danger::Groups groups, std::string condition) {
    DangerZone z = danger::group_constant(0, std::move(groups), std::move(condition));
    z.applies = eps_zero;
    return z;
  };
  r.set_danger("LayerNormalization", {zero_variance(
                                         [](const KernelContext& c, const Tensors& in) {
                                           return groups_of(layer_norm_layout(c, in).group);
                                         },
                                         "epsilon is 0 and a normalized group is constant (0/0)")});
  r.set_danger(
      "InstanceNormalization",
      {zero_variance([](const KernelContext&,
                        const Tensors& in) { return groups_of(instance_norm_layout(in).group); },
                     "epsilon is 0 and a (sample, channel) is constant (0/0)")});
  // BatchNormalization: in training mode the batch's channel variance, in inference the given
  // var input (+ epsilon) must stay above 0.
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
    for (auto& e : v) e += c.node.attr_f("epsilon", 1e-5);
    shifted[4] = Tensor::from_f64(v, in[4].shape(), DType::Float64);
    return below_zero(c, shifted, out);
  };
  given.describe = [](const KernelContext& c, const Tensors& in, const Tensors&, std::size_t ch) {
    double v = in[4].f64_at(static_cast<std::int64_t>(ch)), eps = c.node.attr_f("epsilon", 1e-5);
    return fmt::format("channel {}: var {:.7g} + epsilon {:.7g} = {:.7g}", ch, v, eps, v + eps);
  };
  r.set_danger("BatchNormalization", {batch, given});
}

}  // namespace metaop
