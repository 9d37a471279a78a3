// Normalization meta operators over trailing dims, an axis or windows: LayerNormalization,
// MeanVarianceNormalization, LpNormalization and LRN, each op's forward, error model, VJP and its
// error model, and danger zones together (shared helpers in ops/norm_util.h).
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/norm_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

Tensors layer_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  double eps = attr_f(c, "epsilon");
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
  auto stash = dtype_from_onnx(static_cast<int>(attr_i(c, "stash_type"))).value_or(DType::Float32);
  return {Tensor::from_f64(y, x.shape(), x.dtype()), Tensor::from_f64(mean, stat_shape, stash),
          Tensor::from_f64(inv_std, stat_shape, stash)};
}

Tensors lrn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  double alpha = attr_f(c, "alpha"), beta = attr_f(c, "beta"), bias = attr_f(c, "bias");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto y = lrn_values(x.to_f64(), N, C, S, c.node.attr_i("size"), alpha, beta, bias);
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Tensors mvn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto axes = norm_axes(c, attr_ints(c, "axes"), x.rank());
  std::vector<bool> reduced(x.rank(), false);
  for (auto a : axes) reduced[a] = true;
  auto [kept, map] = groups_over(x.shape(), axes);
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
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
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
  g.eps = attr_f(c, "epsilon");
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
  auto axes = norm_axes(c, attr_ints(c, "axes"), x.rank());
  auto [kept, map] = groups_over(x.shape(), axes);
  NormGroups g;
  g.group = std::move(map);
  g.gamma.assign(x.numel(), 1.0);
  g.beta.assign(x.numel(), 0.0);
  g.n = static_cast<double>(x.numel()) / std::max<double>(1, shape_numel(kept));
  return {norm_magnitude(x.to_f64(), g, bound)};
}

Magnitudes lrn_magnitude(const KernelContext& c, const Tensors&, const Tensors& ref,
                         const AccumulationBound& bound) {
  double beta = attr_f(c, "beta");
  double kappa = bound.kappa(static_cast<double>(c.node.attr_i("size")));
  auto y = ref[0].to_f64();
  for (auto& v : y) v = std::fabs(v) * (4 + std::fabs(beta) * (kappa + 4));
  return {y};
}

// `float32`: every operation rounded to float32, the sums in the order written (the VJP's float32
// twin); likewise group_norm_vjp's.
Tensors layer_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads, bool float32 = false) {
  // One operation's result, rounded to float32 for the twin (its operands are float32 values).
  auto rnd = [float32](double v) {
    return float32 ? static_cast<double>(static_cast<float>(v)) : v;
  };
  const Tensor& x = in[0];
  LayerNormLayout l = layer_norm_layout(c, in);
  auto vx = x.to_f64();
  const auto &group = l.group, &pmap = l.pos;
  const auto& gamma = l.gamma;
  const Shape& norm_shape = l.norm_shape;
  std::int64_t inner = l.inner;
  std::size_t outer = l.outer;
  double eps = rnd(attr_f(c, "epsilon"));
  auto n = static_cast<double>(inner);
  NormGrad ng = normalize_vjp(vx, group, outer, gamma, eps, grad_of(grads, out, 0), float32);
  // Mean and InvStdDev outputs, when they receive gradients.
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto gm = grads[1].to_f64();
    for (std::size_t i = 0; i < vx.size(); ++i) ng.dx[i] = rnd(ng.dx[i] + rnd(gm[group[i]] / n));
  }
  if (out.size() > 2 && grads.size() > 2 && grads[2].defined()) {
    auto gi = grads[2].to_f64();
    for (std::size_t i = 0; i < vx.size(); ++i) {
      auto k = group[i];
      double is = rnd(1 / rnd(std::sqrt(rnd(ng.var[k] + eps))));
      double t = rnd(rnd(rnd(rnd(gi[k] * is) * is) * is) * rnd(vx[i] - ng.mean[k]));
      ng.dx[i] = rnd(ng.dx[i] - rnd(t / n));
    }
  }
  Tensors r(in.size());
  r[0] = grad_like(ng.dx, x);
  auto per_param = [&](const std::vector<double>& v, const Tensor& p) {
    auto full = sum_into(v, pmap, static_cast<std::size_t>(inner), float32);
    return grad_like(float32 ? unbroadcast_f32(full, norm_shape, p.shape(), SumOrder::written)
                             : unbroadcast(full, norm_shape, p.shape()),
                     p);
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
  auto axes = norm_axes(c, attr_ints(c, "axes"), x.rank());
  auto [kept, map] = groups_over(x.shape(), axes);
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
  double alpha = attr_f(c, "alpha"), beta = attr_f(c, "beta"), bias = attr_f(c, "bias");
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

Magnitudes layer_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  LayerNormLayout l = layer_norm_layout(c, in);
  auto vx = x.to_f64();
  double eps = attr_f(c, "epsilon"), n = static_cast<double>(l.inner);
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

// ---- LpNormalization: y = x / ||x||_p along `axis` (p 1 or 2), with no epsilon (ONNX has none):
// a slice of zeros gives 0/0 before opset 22, and 0 from opset 22 on (LpNormalization-22: "when
// the Lp norm is zero ... the output is defined to be zero"; its gradient there is taken as 0).

struct LpLayout {
  std::int64_t outer = 1, n = 1, inner = 1;
  int p = 2;
  bool zero_norm_gives_zero = false;  // opset 22 on
  std::vector<double> vx, norm;       // the input, and each slice's norm (outer * inner)
  // x_i / N of x_i's slice, 0 for a zero norm from opset 22.
  double ratio(std::size_t i) const {
    double n = norm[slice(i)];
    return n == 0 && zero_norm_gives_zero ? 0.0 : vx[i] / n;
  }
  std::size_t slice(std::size_t i) const {
    auto k = static_cast<std::int64_t>(i);
    return static_cast<std::size_t>(k / (n * inner) * inner + k % inner);
  }
};

LpLayout lp_layout(const KernelContext& c, const Tensor& x) {
  LpLayout l;
  l.p = static_cast<int>(attr_i(c, "p"));
  l.zero_norm_gives_zero = c.opset >= 22;
  if (l.p != 1 && l.p != 2) fail("{}: p = {}: LpNormalization takes 1 or 2", c.node.label(), l.p);
  if (x.rank() < 1) fail("{}: input must have at least one dim", c.node.label());
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  for (std::int64_t d = 0; d < x.rank(); ++d)
    (d < axis ? l.outer : d == axis ? l.n : l.inner) *= x.shape()[d];
  l.vx = x.to_f64();
  l.norm.assign(static_cast<std::size_t>(l.outer * l.inner), 0.0);
  for (std::size_t i = 0; i < l.vx.size(); ++i)
    l.norm[l.slice(i)] += l.p == 1 ? std::fabs(l.vx[i]) : l.vx[i] * l.vx[i];
  if (l.p == 2)
    for (auto& v : l.norm) v = std::sqrt(v);
  return l;
}

Tensors lp_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  LpLayout l = lp_layout(c, x);
  std::vector<double> y(l.vx.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = l.ratio(i);
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

// The relative rounding of y (units of u): p = 2 sums n squares (kappa(n)), whose square root
// halves it and rounds once; p = 1 sums n absolute values (kappa(n)); then the division (or a
// reciprocal and a product) rounds twice.
double lp_relative(const LpLayout& l, const AccumulationBound& bound) {
  double kappa = bound.kappa(static_cast<double>(l.n));
  return l.p == 2 ? kappa / 2 + 3 : kappa + 2;
}

Magnitudes lp_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                             const AccumulationBound& bound) {
  LpLayout l = lp_layout(c, in[0]);
  double e = lp_relative(l, bound);
  std::vector<double> m(l.vx.size());
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = e * std::fabs(l.ratio(i));
  return {m};
}

// dN/dx_i / (N / 1): y_i for p = 2, sign(x_i) for p = 1.
double lp_slope(const LpLayout& l, std::size_t i) {
  double x = l.vx[i];
  if (l.p == 2) return l.ratio(i);
  return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
}

// dx_i = (g_i - a_i sum_j g_j y_j) / N over x_i's slice, a_i = dN/dx_i.
Tensors lp_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                    const Tensors& grads) {
  LpLayout l = lp_layout(c, in[0]);
  auto g = grad_of(grads, out, 0);
  std::vector<double> dot(l.norm.size(), 0.0), dx(l.vx.size());
  for (std::size_t i = 0; i < dx.size(); ++i) dot[l.slice(i)] += g[i] * l.ratio(i);
  for (std::size_t i = 0; i < dx.size(); ++i)
    dx[i] = l.norm[l.slice(i)] == 0 && l.zero_norm_gives_zero
                ? 0.0
                : (g[i] - lp_slope(l, i) * dot[l.slice(i)]) / l.norm[l.slice(i)];
  return {grad_like(dx, in[0])};
}

// The kernel's y carries E = lp_relative, its N likewise; the dot product sum_j g_j y_j rounds
// by kappa(n) sum|g_j y_j| = kappa(n) S and its y's by E S; a_i (y_i for p = 2) by E; the
// difference, the division and g_i / N once each:
//   |dx_i - dx_i^| <= u (|g_i| (E + 3) + |a_i| S (3E + kappa(n) + 3)) / N.
Magnitudes lp_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                 const Tensors& grads, const AccumulationBound& bound) {
  LpLayout l = lp_layout(c, in[0]);
  double e = lp_relative(l, bound), kappa = bound.kappa(static_cast<double>(l.n));
  auto g = grad_of(grads, out, 0);
  std::vector<double> s(l.norm.size(), 0.0), m(l.vx.size());
  for (std::size_t i = 0; i < m.size(); ++i) s[l.slice(i)] += std::fabs(g[i] * l.ratio(i));
  for (std::size_t i = 0; i < m.size(); ++i) {
    std::size_t k = l.slice(i);
    m[i] =
        l.norm[k] == 0 && l.zero_norm_gives_zero
            ? 0.0
            : (std::fabs(g[i]) * (e + 3) + std::fabs(lp_slope(l, i)) * s[k] * (3 * e + kappa + 3)) /
                  l.norm[k];
  }
  return {m};
}

// A slice whose elements are all 0 has norm 0: 0/0. Distance: the slice's root mean square
// (the Gauss-Newton step on it lands on 0).
DangerZone lp_zero_norm() {
  DangerZone z;
  z.kind = DangerKind::ZeroDivisor;
  z.index = 0;
  z.condition = "a slice along axis is all 0: its norm is 0 (0/0)";
  auto rms = [](const KernelContext& c, const Tensors& in) {
    LpLayout l = lp_layout(c, in[0]);
    std::vector<double> sq(l.norm.size(), 0.0);
    std::vector<std::int64_t> first(l.norm.size(), -1);
    for (std::size_t i = 0; i < l.vx.size(); ++i) {
      sq[l.slice(i)] += l.vx[i] * l.vx[i] / static_cast<double>(l.n);
      if (first[l.slice(i)] < 0) first[l.slice(i)] = static_cast<std::int64_t>(i);
    }
    for (auto& v : sq) v = std::sqrt(v);
    return std::tuple{l, sq, first};
  };
  z.distances = [rms](const KernelContext& c, const Tensors& in, const Tensors&) {
    auto [l, r, first] = rms(c, in);
    ZoneDistances d;
    d.distance = r;
    d.element = first;
    d.slope = [l, r](std::size_t site) {
      std::vector<double> s(l.vx.size(), 0.0);
      if (r[site] > 0)
        for (std::size_t i = 0; i < s.size(); ++i)
          if (l.slice(i) == site) s[i] = l.vx[i] / (static_cast<double>(l.n) * r[site]);
      return s;
    };
    return d;
  };
  z.describe = [rms](const KernelContext& c, const Tensors& in, const Tensors&, std::size_t site) {
    auto [l, r, first] = rms(c, in);
    if (r[site] == 0) return fmt::format("normalized a slice of {} zeros (norm 0)", l.n);
    return fmt::format("root mean square {:.7g}, {:.7g} away", r[site], r[site]);
  };
  return z;
}

// ---- GroupNormalization (opset 18; 21 on: scale and bias per channel, not per group): the
// channels of X [N, C, ...] in num_groups groups, each normalized over its channels and spatial
// elements: y = (x - mean) / sqrt(var + epsilon) * scale + bias.

struct GroupNormLayout {
  NormGroups g;                     // group per element, scale and bias per element, eps, n
  std::vector<std::int64_t> param;  // element -> index into scale and bias
  std::size_t groups = 0, params = 0;
};

GroupNormLayout group_norm_layout(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  if (x.rank() < 2) fail("{}: X must be [N, C, ...], got {}", c.node.label(), shape_str(x.shape()));
  std::int64_t N = x.dim(0), C = x.dim(1), G = attr_i(c, "num_groups");
  if (G <= 0 || C % G != 0)
    fail("{}: {} channels do not split into num_groups = {}", c.node.label(), C, G);
  std::int64_t S = C ? x.numel() / std::max<std::int64_t>(N * C, 1) : 0, per = C / G;
  // Scale and bias: one per group before opset 21, one per channel from 21.
  bool per_channel = c.opset >= 21;
  std::size_t want = static_cast<std::size_t>(per_channel ? C : G);
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  if (scale.size() != want || bias.size() != want)
    fail("{}: scale and bias need {} values ({} at opset {}), got {} and {}", c.node.label(), want,
         per_channel ? "one per channel" : "one per group", c.opset, scale.size(), bias.size());
  GroupNormLayout l;
  l.groups = static_cast<std::size_t>(N * G);
  l.params = want;
  auto n = static_cast<std::size_t>(x.numel());
  l.g.group.resize(n);
  l.g.gamma.resize(n);
  l.g.beta.resize(n);
  l.param.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto k = static_cast<std::int64_t>(i);
    std::int64_t b = k / (C * S), ch = k / S % C;
    l.g.group[i] = b * G + ch / per;
    l.param[i] = per_channel ? ch : ch / per;
    l.g.gamma[i] = scale[static_cast<std::size_t>(l.param[i])];
    l.g.beta[i] = bias[static_cast<std::size_t>(l.param[i])];
  }
  l.g.eps = attr_f(c, "epsilon");
  l.g.n = static_cast<double>(per * S);
  return l;
}

Tensors group_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  GroupNormLayout l = group_norm_layout(c, in);
  auto vx = x.to_f64();
  std::vector<double> mean(l.groups, 0.0), var(l.groups, 0.0);
  for (std::size_t i = 0; i < vx.size(); ++i) mean[l.g.group[i]] += vx[i] / l.g.n;
  for (std::size_t i = 0; i < vx.size(); ++i) {
    double d = vx[i] - mean[l.g.group[i]];
    var[l.g.group[i]] += d * d / l.g.n;
  }
  std::vector<double> y(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = l.g.group[i];
    y[i] = (vx[i] - mean[k]) / std::sqrt(var[k] + l.g.eps) * l.g.gamma[i] + l.g.beta[i];
  }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Magnitudes group_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                                const AccumulationBound& bound) {
  GroupNormLayout l = group_norm_layout(c, in);
  return {norm_magnitude(in[0].to_f64(), l.g, bound)};
}

Tensors group_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads, bool float32 = false) {
  GroupNormLayout l = group_norm_layout(c, in);
  NormGrad ng = normalize_vjp(in[0].to_f64(), l.g.group, l.groups, l.g.gamma, l.g.eps,
                              grad_of(grads, out, 0), float32);
  return {grad_like(ng.dx, in[0]),
          grad_like(sum_into(ng.dgamma, l.param, l.params, float32), in[1]),
          grad_like(sum_into(ng.dbeta, l.param, l.params, float32), in[2])};
}

Magnitudes group_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  GroupNormLayout l = group_norm_layout(c, in);
  auto nm = normalize_vjp_magnitude(in[0].to_f64(), l.g.group, l.groups, l.g.gamma, l.g.eps,
                                    grad_of(grads, out, 0), bound.kappa(l.g.n));
  // Each parameter gathers its elements over the batch (and, per group, over its channels).
  double m =
      static_cast<double>(in[0].numel()) / std::max<double>(1, static_cast<double>(l.params));
  double kappa = bound.kappa(m);
  return {nm.dx, param_magnitude(nm.dgamma_abs, nm.dgamma_err, l.param, l.params, kappa),
          param_magnitude(nm.dbeta_abs, {}, l.param, l.params, kappa)};
}

// ---- RMSNormalization (opset 23): y = x / sqrt(mean(x^2) + epsilon) * scale over the dims from
// `axis` on, scale broadcast over them.

struct RmsLayout {
  std::int64_t inner = 1;
  std::size_t outer = 0;
  Shape norm_shape;
  std::vector<std::int64_t> pos;     // element -> position in the normalized shape
  std::vector<double> vx, gamma, r;  // the input, scale per element, each group's sqrt(ms + eps)
  double eps = 0;
  std::size_t group(std::size_t i) const { return i / static_cast<std::size_t>(inner); }
};

RmsLayout rms_layout(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  RmsLayout l;
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  for (std::int64_t d = axis; d < x.rank(); ++d) l.inner *= x.shape()[d];
  l.norm_shape.assign(x.shape().begin() + axis, x.shape().end());
  l.outer = static_cast<std::size_t>(x.numel() / std::max<std::int64_t>(l.inner, 1));
  l.eps = attr_f(c, "epsilon");
  const Tensor& sc = input(c, in, 1);
  auto scale = sc.to_f64();
  auto smap = broadcast_map(sc.shape(), l.norm_shape);
  l.vx = x.to_f64();
  auto n = l.vx.size();
  l.pos.resize(n);
  l.gamma.resize(n);
  l.r.assign(l.outer, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    l.pos[i] = static_cast<std::int64_t>(i) % l.inner;
    l.gamma[i] = scale[static_cast<std::size_t>(smap[static_cast<std::size_t>(l.pos[i])])];
    l.r[l.group(i)] += l.vx[i] * l.vx[i] / static_cast<double>(l.inner);
  }
  for (auto& v : l.r) v = std::sqrt(v + l.eps);
  return l;
}

Tensors rms_norm(const KernelContext& c, const Tensors& in) {
  RmsLayout l = rms_layout(c, in);
  std::vector<double> y(l.vx.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = l.vx[i] / l.r[l.group(i)] * l.gamma[i];
  return {Tensor::from_f64(y, in[0].shape(), in[0].dtype())};
}

// The mean of n squares carries kappa(n), its square root half of that, then the addition of
// epsilon, the square root, the division and the product by scale one rounding each.
double rms_relative(const RmsLayout& l, const AccumulationBound& bound) {
  return bound.kappa(static_cast<double>(l.inner)) / 2 + 4;
}

Magnitudes rms_norm_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                              const AccumulationBound& bound) {
  RmsLayout l = rms_layout(c, in);
  double e = rms_relative(l, bound);
  std::vector<double> m(l.vx.size());
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = e * std::fabs(l.vx[i] / l.r[l.group(i)] * l.gamma[i]);
  return {m};
}

// With a = g scale and r = sqrt(mean(x^2) + eps): dx_i = a_i / r - x_i sum_j(a_j x_j) / (n r^3);
// dscale gathers g x / r over the groups.
Tensors rms_norm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                     const Tensors& grads) {
  RmsLayout l = rms_layout(c, in);
  auto g = grad_of(grads, out, 0);
  auto n = static_cast<double>(l.inner);
  std::vector<double> dot(l.outer, 0.0), dx(l.vx.size()), dscale(l.vx.size());
  for (std::size_t i = 0; i < dx.size(); ++i) dot[l.group(i)] += g[i] * l.gamma[i] * l.vx[i];
  for (std::size_t i = 0; i < dx.size(); ++i) {
    double r = l.r[l.group(i)];
    dx[i] = g[i] * l.gamma[i] / r - l.vx[i] * dot[l.group(i)] / (n * r * r * r);
    dscale[i] = g[i] * l.vx[i] / r;
  }
  auto full = sum_into(dscale, l.pos, static_cast<std::size_t>(l.inner));
  return {grad_like(dx, in[0]), grad_like(unbroadcast(full, l.norm_shape, in[1].shape()), in[1])};
}

// As LpNormalization's: |dx_i| <= u (|a_i| (E + 3) + |x_i| / (n r^2) S (3E + kappa(n) + 3)) / r
// with S = sum_j |a_j x_j|, E the forward's relative bound; dscale's terms g x / r carry E each
// and their sum over the groups kappa(outer).
Magnitudes rms_norm_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                  const Tensors& grads, const AccumulationBound& bound) {
  RmsLayout l = rms_layout(c, in);
  double e = rms_relative(l, bound), kappa = bound.kappa(static_cast<double>(l.inner));
  auto g = grad_of(grads, out, 0);
  auto n = static_cast<double>(l.inner);
  std::vector<double> s(l.outer, 0.0), m(l.vx.size()), terms(l.vx.size()), err(l.vx.size());
  for (std::size_t i = 0; i < m.size(); ++i)
    s[l.group(i)] += std::fabs(g[i] * l.gamma[i] * l.vx[i]);
  for (std::size_t i = 0; i < m.size(); ++i) {
    double r = l.r[l.group(i)];
    m[i] = (std::fabs(g[i] * l.gamma[i]) * (e + 3) +
            std::fabs(l.vx[i]) / (n * r * r) * s[l.group(i)] * (3 * e + kappa + 3)) /
           r;
    terms[i] = std::fabs(g[i] * l.vx[i] / r);
    err[i] = terms[i] * e;
  }
  auto full = param_magnitude(terms, err, l.pos, static_cast<std::size_t>(l.inner),
                              bound.kappa(static_cast<double>(l.outer)));
  return {m, unbroadcast(full, l.norm_shape, in[1].shape())};
}

void register_layer_norm(OpRegistry& r) {
  using error_models::condition;
  with_norm_vjp(r.op("LayerNormalization", Family::norm, layer_norm), layer_norm_vjp)
      .error(condition(layer_norm_magnitude, std::string(kNormDoc) +
                                                 "; Mean: kappa(n)*mean|x|; InvStdDev: "
                                                 "(kappa(n)+4)*|r|"))
      .backward_error(layer_norm_vjp_magnitude,
                      std::string(kNormBackwardDoc) + "; Mean and InvStdDev gradients added")
      .danger({zero_variance(
          [](const KernelContext& c, const Tensors& in) {
            return groups_of(layer_norm_layout(c, in).group);
          },
          "epsilon is 0 and a normalized group is constant (0/0)")})
      .faults({"eps", "drop_bias"})
      .cases(
          {{17, {case_input::floats({2, 3, 8}), case_input::floats({8}), case_input::floats({8})}},
           // Mean and InvStdDev in float64 (stash_type 11), so that their gradients are checked
           // too.
           {17,
            {case_input::floats({2, 3, 8}), case_input::floats({8}), case_input::floats({8})},
            {{"stash_type", Attribute::of_int(11)}},
            3}});
}

void register_group_norm(OpRegistry& r) {
  using error_models::condition;
  with_norm_vjp(r.op("GroupNormalization", Family::norm, group_norm), group_norm_vjp)
      .error(condition(group_norm_magnitude, std::string(kNormDoc) + " (n: a group's channels "
                                                                     "times its spatial size)"))
      .backward_error(group_norm_vjp_magnitude, kNormBackwardDoc)
      .danger({zero_variance(
          [](const KernelContext& c, const Tensors& in) {
            return groups_of(group_norm_layout(c, in).g.group);
          },
          "epsilon is 0 and a group is constant (0/0)")})
      .cases({{18,
               {case_input::floats({2, 4, 3, 3}), case_input::floats({2}), case_input::floats({2})},
               {{"num_groups", Attribute::of_int(2)}}},
              {21,
               {case_input::floats({2, 6, 5}), case_input::floats({6}), case_input::floats({6})},
               {{"num_groups", Attribute::of_int(3)}}}});
}

}  // namespace

void register_layer_norm_ops(OpRegistry& r) {
  using error_models::condition;
  register_layer_norm(r);

  // MVN adds 1e-9 to the deviation and LRN's bias is positive by default: no 0/0.
  r.op("MeanVarianceNormalization", Family::norm, mvn)
      .vjp(mvn_vjp)
      .error(condition(mvn_magnitude, std::string(kNormDoc) + " (gamma = 1, beta = 0)"));

  r.op("LpNormalization", Family::norm, lp_norm)
      .vjp(lp_norm_vjp)
      .error(condition(lp_norm_magnitude,
                       "p = 2: (kappa(n)/2 + 3)*|y|, p = 1: (kappa(n) + 2)*|y| (n along axis), "
                       "4 ulp"))
      .backward_error(lp_norm_vjp_magnitude,
                      "(|g|(E + 3) + |dN/dx| sum|g y| (3E + kappa(n) + 3)) / N, E the forward's "
                      "relative bound, 4 ulp")
      .danger({lp_zero_norm()})
      .cases({{13, {case_input::floats({2, 3, 5})}},
              {13, {case_input::floats({2, 3, 5})}, {{"p", Attribute::of_int(1)}}},
              {13, {case_input::floats({2, 4, 3})}, {{"axis", Attribute::of_int(1)}}}});

  register_group_norm(r);

  r.op("RMSNormalization", Family::norm, rms_norm)
      .vjp(rms_norm_vjp)
      .error(condition(rms_norm_magnitude,
                       "(kappa(n)/2 + 4)*|y| (n: the normalized elements), "
                       "4 ulp"))
      .backward_error(rms_norm_vjp_magnitude,
                      "(|a|(E + 3) + |x| sum|a x| (3E + kappa(n) + 3) / (n r^2)) / r, a = g scale, "
                      "E the forward's relative bound; scale: kappa(m) sum|g x / r| + sum E|g x / "
                      "r|, 4 ulp")
      .cases({{23, {case_input::floats({2, 3, 8}), case_input::floats({8})}},
              {23,
               {case_input::floats({2, 3, 8}), case_input::floats({3, 8})},
               {{"axis", Attribute::of_int(1)}}}});

  r.op("LRN", Family::norm, lrn)
      .vjp(lrn_vjp)
      .error(condition(lrn_magnitude, "(4 + |beta|*(kappa(size)+4))*|y|, 4 ulp"));
}

}  // namespace metaop
