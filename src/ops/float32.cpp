// Triage's float32 evaluations of the ops' definitions (Float32Definition, ops/registry.h), for
// the ops whose rows are not declared with them (the element-wise unary rows carry their own):
// each computes the definition as the ONNX text writes it -- the op's function body where ONNX
// gives one (LayerNormalization, MeanVarianceNormalization, Softmax ...) -- in float32, every
// operation rounded to float32, its sums in the order asked for (SumOrder: as written, or the
// positive or the negative terms first, since a sum's definition leaves the order open and the
// partial sums' overflow depends on it). A finding whose kernel is no worse than
// this is a float32 limit of the formula, not a defect of the kernel (analysis/core/triage.h).
// Ops whose definition is one operation, or that only move data, are declared rounded once
// (their faithful evaluation is the reference); the choices ONNX leaves open are declared as
// conventions (ops/conventions.h). Written by hand: no library evaluates ONNX ops in float32
// operation by operation with the order of the definition, which is what the class rests on.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ops/conventions.h"
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/norm_util.h"
#include "ops/params.h"
#include "ops/window.h"

namespace metaop {

float float32_sum(std::vector<float> terms, SumOrder order) {
  if (order != SumOrder::written)
    std::stable_partition(terms.begin(), terms.end(), [order](float v) {
      return order == SumOrder::positives_first ? v > 0 : v < 0;
    });
  float acc = 0;
  for (float v : terms) acc += v;
  return acc;
}

namespace {

std::vector<float> f32(const Tensor& t) {
  auto v = t.to_f64();
  return {v.begin(), v.end()};
}

Tensor from_f32(const std::vector<float>& v, const Shape& s, DType t) {
  return Tensor::from_f64(std::vector<double>(v.begin(), v.end()), s, t);
}

// The float32 product of `factors` (SumOrder: positives_first multiplies the largest
// magnitudes first, negatives_first the smallest).

float fprod(std::vector<float> factors, SumOrder order) {
  if (order != SumOrder::written)
    std::stable_sort(factors.begin(), factors.end(), [order](float a, float b) {
      return order == SumOrder::positives_first ? std::fabs(a) > std::fabs(b)
                                                : std::fabs(a) < std::fabs(b);
    });
  float acc = 1;
  for (float v : factors) acc *= v;
  return acc;
}

// Data in float64 has no float32 evaluation (triage leaves it untriaged before asking).
void require_narrow(const KernelContext& c, const Tensors& in) {
  for (const auto& t : in)
    if (t.defined() && t.dtype() == DType::Float64)
      fail("{}: float64 data has no float32 evaluation", c.node.label());
}

// ---- Products: MatMul, Gemm, Conv, ConvTranspose through one GEMM whose products are rounded
// to float32 and summed in float32 in the order `O` (GemmFn takes no order: one per order).

template <SumOrder O>
void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              double alpha, const double* a, const double* b, double beta, double* c) {
  std::vector<float> terms(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t p = 0; p < k; ++p) {
        float x = static_cast<float>(trans_a ? a[p * m + i] : a[i * k + p]);
        float y = static_cast<float>(trans_b ? b[j * k + p] : b[p * n + j]);
        terms[p] = x * y;
      }
      float r = static_cast<float>(alpha) * float32_sum(terms, O);
      if (beta != 0) r += static_cast<float>(beta) * static_cast<float>(c[i * n + j]);
      c[i * n + j] = r;
    }
}

}  // namespace

GemmFn float32_gemm(SumOrder order) {
  return order == SumOrder::written           ? gemm_f32<SumOrder::written>
         : order == SumOrder::positives_first ? gemm_f32<SumOrder::positives_first>
                                              : gemm_f32<SumOrder::negatives_first>;
}

namespace {

Tensors products(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  return forward_with_gemm(c, in, float32_gemm(order));
}

// ---- Reductions: each group's terms f(x), summed (or multiplied) in float32, then finished.

struct Fold {
  float (*term)(float x);
  bool product;
  float (*finish)(float acc, std::int64_t n);
};

Tensors reduce_f32(const KernelContext& c, const Tensors& in, const Fold& fold, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  ReduceLayout l = reduce_layout(c, in);
  if (l.noop) return {x};
  auto v = f32(x);
  std::vector<std::vector<float>> terms(static_cast<std::size_t>(l.groups));
  for (std::int64_t i = 0; i < x.numel(); ++i) terms[l.map[i]].push_back(fold.term(v[i]));
  std::vector<float> acc(terms.size());
  for (std::size_t k = 0; k < acc.size(); ++k)
    acc[k] =
        fold.finish(fold.product ? fprod(terms[k], order) : float32_sum(terms[k], order), l.count);
  return {from_f32(acc, l.out_shape, x.dtype())};
}

float as_is(float a, std::int64_t) {
  return a;
}

// ---- Normalizations: statistics over groups of elements, in float32.

struct Groups {
  std::vector<std::int64_t> of;  // element -> group
  std::size_t n = 0;             // groups
};

std::vector<float> group_mean(const std::vector<float>& v, const Groups& g, SumOrder order) {
  std::vector<std::vector<float>> terms(g.n);
  for (std::size_t i = 0; i < v.size(); ++i) terms[g.of[i]].push_back(v[i]);
  std::vector<float> mean(g.n);
  for (std::size_t k = 0; k < g.n; ++k)
    mean[k] = float32_sum(terms[k], order) / static_cast<float>(terms[k].size());
  return mean;
}

// Population variance as the definitions write it: mean((x - mean)^2).
std::vector<float> group_var(const std::vector<float>& v, const Groups& g,
                             const std::vector<float>& mean, SumOrder order) {
  std::vector<float> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    float e = v[i] - mean[g.of[i]];
    d[i] = e * e;
  }
  return group_mean(d, g, order);
}

// Channel groups of [N, C, ...]: per (n, c) (instances) or per c (batch).
Groups channel_groups(const Shape& s, bool per_instance) {
  std::int64_t N = s[0], C = s[1], S = 1;
  for (std::size_t d = 2; d < s.size(); ++d) S *= s[d];
  Groups g;
  g.n = static_cast<std::size_t>(per_instance ? N * C : C);
  g.of.resize(static_cast<std::size_t>(N * C * S));
  for (std::int64_t i = 0; i < N * C * S; ++i) g.of[i] = per_instance ? i / S : (i / S) % C;
  return g;
}

// y = scale (x - mean) / sqrt(var + eps) + B, per channel parameters.
std::vector<float> normalize(const std::vector<float>& x, const Groups& g,
                             const std::vector<float>& mean, const std::vector<float>& var,
                             float eps, const std::vector<float>& scale,
                             const std::vector<float>& bias, std::int64_t S, std::int64_t C) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t ch = (static_cast<std::int64_t>(i) / S) % C;
    y[i] = scale[ch] * (x[i] - mean[g.of[i]]) / std::sqrt(var[g.of[i]] + eps) + bias[ch];
  }
  return y;
}

Tensors instance_norm_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  auto v = f32(x);
  Groups g = channel_groups(x.shape(), true);
  auto mean = group_mean(v, g, order);
  auto var = group_var(v, g, mean, order);
  std::int64_t C = x.dim(1), S = x.numel() / std::max<std::int64_t>(x.dim(0) * C, 1);
  return {from_f32(normalize(v, g, mean, var, static_cast<float>(attr_f(c, "epsilon")),
                             f32(input(c, in, 1)), f32(input(c, in, 2)), S, C),
                   x.shape(), x.dtype())};
}

Tensors batch_norm_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  auto v = f32(x);
  std::int64_t C = x.dim(1), S = x.numel() / std::max<std::int64_t>(x.dim(0) * C, 1);
  Groups g = channel_groups(x.shape(), false);
  auto mean = f32(input(c, in, 3)), var = f32(input(c, in, 4));
  bool training = batch_norm_training(c);
  std::vector<float> m = mean, s2 = var;
  if (training) {
    m = group_mean(v, g, order);
    s2 = group_var(v, g, m, order);
  }
  float eps = static_cast<float>(attr_f(c, "epsilon"));
  Tensors out{
      from_f32(normalize(v, g, m, s2, eps, f32(input(c, in, 1)), f32(input(c, in, 2)), S, C),
               x.shape(), x.dtype())};
  if (training) {
    float momentum = static_cast<float>(attr_f(c, "momentum"));
    std::vector<float> rm(C), rv(C);
    for (std::int64_t ch = 0; ch < C; ++ch) {
      rm[ch] = mean[ch] * momentum + m[ch] * (1 - momentum);
      rv[ch] = var[ch] * momentum + s2[ch] * (1 - momentum);
    }
    out.push_back(from_f32(rm, {C}, in[3].dtype()));
    out.push_back(from_f32(rv, {C}, in[4].dtype()));
  }
  return out;
}

// LayerNormalization's function body (opset 17): Mean = ReduceMean(X), D = X - Mean,
// Var = ReduceMean(D * D), InvStdDev = Reciprocal(Sqrt(Var + epsilon)),
// Y = D * InvStdDev * Scale + B, in the stash type (float32).
// LayerNormalization's and RMSNormalization's view of X: groups of the dims from `axis` on, and
// Scale broadcast over them.
struct TrailingGroups {
  std::int64_t axis = 0, outer = 1, inner = 1;
  Shape norm_shape;
  std::vector<float> scale;
  std::vector<std::int64_t> smap;  // position in the normalized shape -> Scale's element
  Groups g;
};

TrailingGroups trailing_groups(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  TrailingGroups t;
  t.axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  for (std::int64_t d = 0; d < x.rank(); ++d) (d < t.axis ? t.outer : t.inner) *= x.shape()[d];
  t.norm_shape.assign(x.shape().begin() + t.axis, x.shape().end());
  t.scale = f32(input(c, in, 1));
  t.smap = broadcast_map(in[1].shape(), t.norm_shape);
  t.g.n = static_cast<std::size_t>(t.outer);
  t.g.of.resize(static_cast<std::size_t>(x.numel()));
  for (std::int64_t i = 0; i < x.numel(); ++i) t.g.of[i] = i / t.inner;
  return t;
}

Tensors layer_norm_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  TrailingGroups tg = trailing_groups(c, in);
  const std::int64_t axis = tg.axis, inner = tg.inner;
  const Shape& norm_shape = tg.norm_shape;
  const auto& scale = tg.scale;
  const auto& smap = tg.smap;
  const Groups& g = tg.g;
  std::vector<float> bias(static_cast<std::size_t>(inner), 0.0f);
  if (has_input(in, 2)) {
    auto b = f32(in[2]);
    auto bmap = broadcast_map(in[2].shape(), norm_shape);
    for (std::int64_t j = 0; j < inner; ++j) bias[j] = b[bmap[j]];
  }
  auto v = f32(x);
  auto mean = group_mean(v, g, order);
  auto var = group_var(v, g, mean, order);
  float eps = static_cast<float>(attr_f(c, "epsilon"));
  std::vector<float> inv(g.n), y(v.size());
  for (std::size_t k = 0; k < g.n; ++k) inv[k] = 1.0f / std::sqrt(var[k] + eps);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::int64_t j = static_cast<std::int64_t>(i) % inner;
    y[i] = (v[i] - mean[g.of[i]]) * inv[g.of[i]] * scale[smap[j]] + bias[j];
  }
  Shape stat_shape = x.shape();
  for (std::int64_t d = axis; d < x.rank(); ++d) stat_shape[d] = 1;
  auto stash = dtype_from_onnx(static_cast<int>(attr_i(c, "stash_type"))).value_or(DType::Float32);
  return {from_f32(y, x.shape(), x.dtype()), from_f32(mean, stat_shape, stash),
          from_f32(inv, stat_shape, stash)};
}

// GroupNormalization's function body: the channels of X [N, C, ...] in num_groups groups, each
// (x - mean) / sqrt(var + epsilon) over its channels and spatial elements, then scale and bias
// (per group before opset 21, per channel from 21), in float32.
Tensors group_norm_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  if (x.rank() < 2) fail("{}: X must be [N, C, ...], got {}", c.node.label(), shape_str(x.shape()));
  std::int64_t N = x.dim(0), C = x.dim(1), G = attr_i(c, "num_groups");
  if (G <= 0 || C % G != 0)
    fail("{}: {} channels do not split into num_groups = {}", c.node.label(), C, G);
  std::int64_t S = x.numel() / std::max<std::int64_t>(N * C, 1), per = C / G;
  auto scale = f32(input(c, in, 1)), bias = f32(input(c, in, 2));
  Groups g;
  g.n = static_cast<std::size_t>(N * G);
  g.of.resize(static_cast<std::size_t>(x.numel()));
  std::vector<std::size_t> param(g.of.size());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::int64_t ch = i / S % C;
    g.of[i] = i / (C * S) * G + ch / per;
    param[i] = static_cast<std::size_t>(c.opset >= 21 ? ch : ch / per);
  }
  auto v = f32(x);
  auto mean = group_mean(v, g, order);
  auto var = group_var(v, g, mean, order);
  float eps = static_cast<float>(attr_f(c, "epsilon"));
  std::vector<float> y(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    y[i] = (v[i] - mean[g.of[i]]) / std::sqrt(var[g.of[i]] + eps) * scale.at(param[i]) +
           bias.at(param[i]);
  return {from_f32(y, x.shape(), x.dtype())};
}

// RMSNormalization's function body (opset 23): X / sqrt(ReduceMean(X^2) + epsilon) * Scale over
// the dims from `axis` on, in float32.
Tensors rms_norm_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  TrailingGroups tg = trailing_groups(c, in);
  auto v = f32(x);
  std::vector<float> sq(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) sq[i] = v[i] * v[i];
  auto ms = group_mean(sq, tg.g, order);
  float eps = static_cast<float>(attr_f(c, "epsilon"));
  std::vector<float> y(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    y[i] = v[i] / std::sqrt(ms[tg.g.of[i]] + eps) *
           tg.scale[tg.smap[static_cast<std::size_t>(static_cast<std::int64_t>(i) % tg.inner)]];
  return {from_f32(y, x.shape(), x.dtype())};
}

// MeanVarianceNormalization's function body: Variance = ReduceMean(X^2) - ReduceMean(X)^2,
// Y = (X - ReduceMean(X)) / (Sqrt(Variance) + 1e-9).
Tensors mvn_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  auto axes = norm_axes(c, attr_ints(c, "axes"), x.rank());
  auto [kept, map] = groups_over(x.shape(), axes);
  Groups g{map, static_cast<std::size_t>(shape_numel(kept))};
  auto v = f32(x);
  std::vector<float> sq(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) sq[i] = v[i] * v[i];
  auto mean = group_mean(v, g, order), mean_sq = group_mean(sq, g, order);
  std::vector<float> y(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    float m = mean[g.of[i]];
    float variance = mean_sq[g.of[i]] - m * m;
    y[i] = (v[i] - m) / (std::sqrt(variance) + 1e-9f);
  }
  return {from_f32(y, x.shape(), x.dtype())};
}

// LpNormalization: x / ||x||_p along `axis`, the norm summed in float32.
Tensors lp_norm_f32(const KernelContext& c, const Tensors& in, SumOrder) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  std::int64_t p = attr_i(c, "p");
  auto [kept, map] = groups_over(x.shape(), {axis});
  std::vector<float> norm(static_cast<std::size_t>(shape_numel(kept)), 0.0f);
  auto v = f32(x);
  for (std::size_t i = 0; i < v.size(); ++i) norm[map[i]] += p == 1 ? std::fabs(v[i]) : v[i] * v[i];
  if (p == 2)
    for (auto& e : norm) e = std::sqrt(e);
  std::vector<float> y(v.size());
  // From opset 22 a zero norm gives 0 (LpNormalization-22).
  for (std::size_t i = 0; i < v.size(); ++i)
    y[i] = norm[map[i]] == 0 && c.opset >= 22 ? 0.0f : v[i] / norm[map[i]];
  return {from_f32(y, x.shape(), x.dtype())};
}

// LRN: y = x / (bias + alpha / size * square_sum)^beta.
Tensors lrn_f32(const KernelContext& c, const Tensors& in, SumOrder) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  float alpha = static_cast<float>(attr_f(c, "alpha")),
        beta = static_cast<float>(attr_f(c, "beta")), bias = static_cast<float>(attr_f(c, "bias"));
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto y = lrn_values(f32(x), N, C, S, c.node.attr_i("size"), alpha, beta, bias);
  return {from_f32(y, x.shape(), x.dtype())};
}

// ---- Softmax and LogSoftmax (function bodies from opset 13; before, the same over the input
// coerced to 2-D): exp(x - max) / sum(exp(x - max)), and x - max - log(sum(exp(x - max))).

Tensors softmax_f32(const KernelContext& c, const Tensors& in, bool log) {  // positive terms
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  AxisSplit s = softmax_split(c, x.shape());
  auto v = f32(x);
  std::vector<float> y(v.size());
  for (std::int64_t o = 0; o < s.outer; ++o)
    for (std::int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](std::int64_t j) {
        return static_cast<std::size_t>((o * s.n + j) * s.inner + i);
      };
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < s.n; ++j) mx = std::max(mx, v[at(j)]);
      float sum = 0;
      for (std::int64_t j = 0; j < s.n; ++j) sum += std::exp(v[at(j)] - mx);
      for (std::int64_t j = 0; j < s.n; ++j)
        y[at(j)] = log ? (v[at(j)] - mx) - std::log(sum) : std::exp(v[at(j)] - mx) / sum;
    }
  return {from_f32(y, x.shape(), x.dtype())};
}

// ---- Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its function body:
// NegativeLogLikelihoodLoss of LogSoftmax over axis 1), each term -w[t] x[n, t, ...] in
// float32, summed in order; mean divides by the sum of the weights.

Tensors nll_f32(const KernelContext& c, const std::vector<float>& x, const Shape& xs,
                const Tensor& target, const Tensor* weight, DType dtype, SumOrder order) {
  std::int64_t N = xs[0], C = xs[1], D = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) D *= xs[d];
  auto t = target.to_f64();
  std::vector<float> w = weight ? f32(*weight) : std::vector<float>(C, 1.0f);
  bool has_ignore = c.node.has_attr("ignore_index");
  std::int64_t ignore = has_ignore ? c.node.attr_i("ignore_index") : 0;
  std::string reduction = attr_s(c, "reduction");
  std::vector<float> loss(static_cast<std::size_t>(N * D), 0.0f), terms;
  float wsum = 0;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      auto k = static_cast<std::int64_t>(t[n * D + d]);
      if (has_ignore && k == ignore) continue;
      if (k < 0 || k >= C) fail("{}: target {} outside [0, {})", c.node.label(), k, C);
      float l = -x[(n * C + k) * D + d] * w[k];
      loss[n * D + d] = l;
      terms.push_back(l);
      wsum += w[k];
    }
  if (reduction == "none") {
    Shape ls{N};
    for (std::size_t d = 2; d < xs.size(); ++d) ls.push_back(xs[d]);
    return {from_f32(loss, ls, dtype)};
  }
  float sum = float32_sum(terms, order);
  return {from_f32({reduction == "sum" ? sum : sum / wsum}, {}, dtype)};
}

Tensors nll_loss_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  return nll_f32(c, f32(x), x.shape(), input(c, in, 1), has_input(in, 2) ? &in[2] : nullptr,
                 x.dtype(), order);
}

Tensors softmax_ce_f32(const KernelContext& c, const Tensors& in, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  std::int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto v = f32(x);
  std::vector<float> lp(v.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      float mx = -std::numeric_limits<float>::infinity(), sum = 0;
      for (std::int64_t k = 0; k < C; ++k) mx = std::max(mx, v[(n * C + k) * D + d]);
      for (std::int64_t k = 0; k < C; ++k) sum += std::exp(v[(n * C + k) * D + d] - mx);
      for (std::int64_t k = 0; k < C; ++k)
        lp[(n * C + k) * D + d] = (v[(n * C + k) * D + d] - mx) - std::log(sum);
    }
  Tensors out = nll_f32(c, lp, x.shape(), input(c, in, 1), has_input(in, 2) ? &in[2] : nullptr,
                        x.dtype(), order);
  if (c.node.outputs.size() > 1) out.push_back(from_f32(lp, x.shape(), x.dtype()));
  return out;
}

// ---- Pools: the window's taps summed in float32 (AveragePool divides by the count the
// reference divides by; LpPool takes (sum |x|^p)^(1/p)).

// One window's taps (|x|^p for LpPool), and how many fall inside the padded input
// (AveragePool's count_include_pad).
struct WindowSum {
  std::vector<float> terms;
  std::int64_t padded = 0;
};

WindowSum window_terms(const Window& w, const float* xc, const std::array<std::int64_t, 3>& o,
                       bool lp, float p) {
  WindowSum s;
  for (std::int64_t k0 = 0; k0 < w.k[0]; ++k0)
    for (std::int64_t k1 = 0; k1 < w.k[1]; ++k1)
      for (std::int64_t k2 = 0; k2 < w.k[2]; ++k2) {
        std::array<std::int64_t, 3> k{k0, k1, k2}, i{};
        bool inside = true, in_pads = true;
        for (int d = 0; d < 3; ++d) {
          i[d] = o[d] * w.s[d] - w.pb[d] + k[d] * w.d[d];
          inside &= i[d] >= 0 && i[d] < w.in[d];
          in_pads &= i[d] >= -w.pb[d] && i[d] < w.in[d] + w.pe[d];
        }
        s.padded += in_pads;
        if (!inside) continue;
        float e = xc[(i[0] * w.in[1] + i[1]) * w.in[2] + i[2]];
        s.terms.push_back(lp ? std::pow(std::fabs(e), p) : e);
      }
  return s;
}

Tensors pool_f32(const KernelContext& c, const Tensors& in, bool lp, bool global, SumOrder order) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  std::vector<std::int64_t> kernel;
  if (global)
    kernel.assign(x.shape().begin() + 2, x.shape().end());
  else
    kernel = c.node.attr_ints("kernel_shape");
  // ceil_mode from opset 10, count_include_pad from 7; LpPool has neither (opsets 1 to 17).
  Window w = window_geometry(c, x.shape(), kernel, !global && attr_i_or(c, "ceil_mode", 0) != 0);
  bool include_pad = !global && attr_i_or(c, "count_include_pad", 0) != 0;
  float p = lp ? static_cast<float>(attr_i(c, "p")) : 1.0f;
  std::int64_t NC = x.dim(0) * x.dim(1), P = w.out_size();
  auto v = f32(x);
  std::vector<float> y(static_cast<std::size_t>(NC * P));
  for (std::int64_t nc = 0; nc < NC; ++nc)
    for (std::int64_t o0 = 0; o0 < w.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < w.out[1]; ++o1)
        for (std::int64_t o2 = 0; o2 < w.out[2]; ++o2) {
          WindowSum s = window_terms(w, v.data() + nc * w.in_size(), {o0, o1, o2}, lp, p);
          float acc = float32_sum(s.terms, order);
          y[nc * P + (o0 * w.out[1] + o1) * w.out[2] + o2] =
              lp ? std::pow(acc, 1.0f / p)
                 : acc / static_cast<float>(
                             include_pad ? s.padded : static_cast<std::int64_t>(s.terms.size()));
        }
  return {from_f32(y, w.out_shape(x.dim(0), x.dim(1)), x.dtype())};
}

// ---- Variadic Sum and Mean: numpy-broadcast operands added in float32 in order.

Tensors variadic_f32(const KernelContext& c, const Tensors& in, bool mean, SumOrder order) {
  require_narrow(c, in);
  std::vector<Shape> shapes;
  for (const auto& t : in) shapes.push_back(t.shape());
  Shape os = broadcast_shapes(c, shapes);
  std::int64_t n = shape_numel(os);
  std::vector<std::vector<float>> terms(static_cast<std::size_t>(n));
  for (const auto& t : in) {
    auto v = f32(t);
    auto map = broadcast_map(t.shape(), os);
    for (std::int64_t i = 0; i < n; ++i) terms[i].push_back(v[map[i]]);
  }
  std::vector<float> acc(terms.size());
  for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = float32_sum(terms[i], order);
  if (mean)
    for (auto& a : acc) a /= static_cast<float>(in.size());
  return {from_f32(acc, os, in[0].dtype())};
}

// ---- CumSum: a running float32 sum along the axis (exclusive, reverse as the attributes say).

Tensors cumsum_f32(const KernelContext& c, const Tensors& in, SumOrder) {
  require_narrow(c, in);
  const Tensor& x = input(c, in, 0);
  std::int64_t axis = norm_axis(c, static_cast<std::int64_t>(input(c, in, 1).f64_at(0)), x.rank());
  bool exclusive = attr_i(c, "exclusive") != 0, reverse = attr_i(c, "reverse") != 0;
  std::int64_t outer = 1, n = x.shape()[axis], inner = 1;
  for (std::int64_t d = 0; d < x.rank(); ++d)
    if (d < axis)
      outer *= x.shape()[d];
    else if (d > axis)
      inner *= x.shape()[d];
  auto v = f32(x);
  std::vector<float> y(v.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      float acc = 0;
      for (std::int64_t s = 0; s < n; ++s) {
        std::int64_t j = reverse ? n - 1 - s : s;
        std::size_t at = static_cast<std::size_t>((o * n + j) * inner + i);
        if (exclusive) {
          y[at] = acc;
          acc += v[at];
        } else {
          acc += v[at];
          y[at] = acc;
        }
      }
    }
  return {from_f32(y, x.shape(), x.dtype())};
}

// Resize with align_corners: x_original = x_resized * (length_original - 1) /
// (length_resized - 1), where the text does not say whether length_resized is the output's
// integer length or the scaled length length_original * scale. The choice matters where the
// scales are given and a scaled length is not whole.
Convention align_corners_length() {
  return {"align-corners-length",
          "with coordinate_transformation_mode align_corners, the ONNX text's length_resized may "
          "be read as the output's integer length or as the scaled length (input length times "
          "scale), which differ where the scaled length is not whole",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors&,
             const std::vector<std::vector<bool>>&) {
            // Resize-10 and Upsample have no such attribute: asymmetric coordinates.
            if (attr_s_or(c, "coordinate_transformation_mode", "asymmetric") != "align_corners")
              return false;
            std::size_t k = c.opset >= 11 ? 2 : 1;  // scales (Resize 10 and Upsample: input 1)
            if (!has_input(in, k) || in[k].numel() == 0) return false;
            auto scales = in[k].to_f64();
            const Shape& s = in[0].shape();
            for (std::size_t d = 0; d < s.size() && d < scales.size(); ++d) {
              double scaled = static_cast<double>(s[d]) * scales[d];
              if (scaled != std::floor(scaled)) return true;
            }
            return false;
          }};
}

// MatMul, Gemm, Conv, ConvTranspose; the reductions; CumSum, Sum and Mean.
void declare_sums(OpRegistry& r) {
  const char* sequential = "sum(x)";
  const char* products_better =
      "a float32 sum of products overflows or cancels where the exact result need not; "
      "accumulating in a wider type, or scaling, avoids it";
  for (const char* op : {"MatMul", "Gemm", "Conv", "ConvTranspose"})
    r.amend(op).float32(products, "the sum of the products", products_better);

  auto reduce = [&r](const char* op, Fold fold, const char* formula, const char* better) {
    r.amend(op).float32([fold](const KernelContext& c, const Tensors& in,
                               SumOrder order) { return reduce_f32(c, in, fold, order); },
                        formula, better);
  };
  reduce("ReduceSum", {[](float x) { return x; }, false, as_is}, sequential,
         "a wider accumulator, or pairwise summation, keeps what float32 loses");
  reduce("ReduceMean",
         {[](float x) { return x; }, false,
          [](float a, std::int64_t n) { return a / static_cast<float>(n); }},
         "sum(x) / n",
         "dividing before summing, or a wider accumulator, avoids the "
         "overflow of the sum");
  reduce("ReduceSumSquare", {[](float x) { return x * x; }, false, as_is}, "sum(x * x)",
         "a wider accumulator keeps the squares that underflow");
  reduce("ReduceL1", {[](float x) { return std::fabs(x); }, false, as_is}, "sum(|x|)",
         "a wider accumulator");
  reduce("ReduceL2",
         {[](float x) { return x * x; }, false, [](float a, std::int64_t) { return std::sqrt(a); }},
         "sqrt(sum(x * x))",
         "scaling by the largest |x| (as BLAS snrm2 does) keeps the squares from overflowing or "
         "underflowing");
  reduce("ReduceLogSum",
         {[](float x) { return x; }, false, [](float a, std::int64_t) { return std::log(a); }},
         "log(sum(x))", "a wider accumulator avoids the overflow of the sum");
  reduce("ReduceLogSumExp",
         {[](float x) { return std::exp(x); }, false,
          [](float a, std::int64_t) { return std::log(a); }},
         "log(sum(exp(x)))",
         "subtracting the largest x before exp (log-sum-exp) avoids the overflow");
  reduce("ReduceProd", {[](float x) { return x; }, true, as_is}, "the product, factor by factor",
         "a wider accumulator, or summing logarithms, avoids the intermediate overflow");
  r.amend("CumSum").float32(cumsum_f32, "the running sum", "a wider accumulator");
  r.amend("Sum").float32([](const KernelContext& c, const Tensors& in,
                            SumOrder o) { return variadic_f32(c, in, false, o); },
                         "the operands added", "a wider accumulator");
  r.amend("Mean").float32([](const KernelContext& c, const Tensors& in,
                             SumOrder o) { return variadic_f32(c, in, true, o); },
                          "the operands added, divided by their number",
                          "dividing before adding, or a wider accumulator");
}

// The normalizations and Softmax.
void declare_normalizations(OpRegistry& r) {
  r.amend("BatchNormalization")
      .float32(batch_norm_f32,
               "scale (x - mean) / sqrt(var + epsilon) + B, in training mode with the mean and "
               "mean((x - mean)^2) of the batch",
               "a wider accumulator for the statistics, or Welford's update");
  r.amend("InstanceNormalization")
      .float32(instance_norm_f32, "scale (x - mean) / sqrt(mean((x - mean)^2) + epsilon) + B",
               "a wider accumulator for the statistics, or scaling before squaring");
  r.amend("LayerNormalization")
      .float32(layer_norm_f32,
               "the function body: D = X - ReduceMean(X), (D / sqrt(ReduceMean(D * D) + "
               "epsilon)) Scale + B",
               "a wider accumulator for the statistics, or scaling before squaring");
  r.amend("GroupNormalization")
      .float32(group_norm_f32,
               "the function body: (X - mean) / sqrt(mean((X - mean)^2) + epsilon) per group, "
               "then scale and bias",
               "a wider accumulator for the statistics, or scaling before squaring");
  r.amend("RMSNormalization")
      .float32(rms_norm_f32, "the function body: X / sqrt(ReduceMean(X^2) + epsilon) * Scale",
               "a wider accumulator for the mean of squares, or scaling before squaring");
  r.amend("MeanVarianceNormalization")
      .float32(mvn_f32, "the function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)",
               "the variance as E[(X - E[X])^2] (or Welford's update) does not cancel, and "
               "scaling keeps X^2 from overflowing or underflowing");
  r.amend("LpNormalization")
      .float32(lp_norm_f32, "x / (sum |x|^p)^(1/p)",
               "scaling by the largest |x| keeps the squares from overflowing or underflowing");
  r.amend("LRN").float32(lrn_f32, "x / (bias + alpha / size * sum(x^2))^beta",
                         "scaling keeps the squares from overflowing");
  r.amend("Softmax").float32(
      [](const KernelContext& c, const Tensors& in, SumOrder) { return softmax_f32(c, in, false); },
      "the function body: exp(x - max) / sum(exp(x - max))", "none known");
  r.amend("LogSoftmax")
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return softmax_f32(c, in, true); },
               "the function body: x - max - log(sum(exp(x - max)))", "none known");
}

// The losses and the pools.
void declare_losses_and_pools(OpRegistry& r) {
  r.amend("NegativeLogLikelihoodLoss")
      .float32(nll_loss_f32, "the sum of -w[t] x[n, t] (divided by the weights' sum)",
               "a wider accumulator avoids the overflow of the sum");
  r.amend("SoftmaxCrossEntropyLoss")
      .float32(softmax_ce_f32,
               "the function body: NegativeLogLikelihoodLoss of LogSoftmax(x, axis 1)",
               "a wider accumulator avoids the overflow of the sum");
  struct Pool {
    const char *op, *formula, *better;
    bool lp, global;
  };
  const char* by_mean =
      "dividing before summing, or a wider accumulator, avoids the overflow of the sum";
  for (const Pool& p :
       {Pool{"AveragePool", "the window's sum, divided by its count", by_mean, false, false},
        Pool{"GlobalAveragePool", "the plane's sum, divided by its size", by_mean, false, true},
        Pool{"LpPool", "(sum |x|^p)^(1/p) over the window", "scaling by the window's largest |x|",
             true, false},
        Pool{"GlobalLpPool", "(sum |x|^p)^(1/p) over the plane",
             "scaling by the plane's largest |x|", true, true}})
    r.amend(p.op).float32(
        [lp = p.lp, global = p.global](const KernelContext& c, const Tensors& in, SumOrder o) {
          return pool_f32(c, in, lp, global, o);
        },
        p.formula, p.better);
}

}  // namespace

void register_float32_definitions(OpRegistry& r) {
  declare_sums(r);
  declare_normalizations(r);
  declare_losses_and_pools(r);
  // One operation rounded once, or a selection or comparison: the reference is the faithful
  // evaluation; NaN through maxima, minima and selections is a convention.
  for (const char* op : {"Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Mod",
                         "Equal",
                         "Less",
                         "LessOrEqual",
                         "Greater",
                         "GreaterOrEqual",
                         "And",
                         "Or",
                         "Xor",
                         "BitwiseAnd",
                         "BitwiseOr",
                         "BitwiseXor",
                         "BitShift",
                         "PRelu",
                         "Where",
                         "Cast",
                         "CastLike",
                         "Dropout",
                         "IsNaN",
                         "IsInf"})
    r.amend(op).float32_rounded();
  for (const char* op :
       {"Max", "Min", "Clip", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin"})
    r.amend(op).float32_rounded().conventions({nan_propagation()});
  // Softmax's and LogSoftmax's function bodies subtract ReduceMax(x) (SoftmaxCrossEntropyLoss
  // runs LogSoftmax): NaN through that maximum is the same open choice.
  for (const char* op : {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss"})
    r.amend(op).conventions({nan_propagation()});
  for (const char* op : {"ArgMax", "ArgMin", "Hardmax", "TopK"})
    r.amend(op).float32_rounded().conventions({nan_selection()});
  for (const char* op : {"Resize", "Upsample"}) r.amend(op).conventions({align_corners_length()});
  r.amend("Conv").conventions({padded_infinities()});
  r.amend("DFT").conventions({transform_infinities(), zero_twiddle_parts()});
  r.amend("STFT").conventions({transform_infinities(), zero_twiddle_parts()});
  r.amend("GridSample").conventions({zero_weight_infinities()});
  // Scatters: data movement, except where a reduction combines repeated indices in an order the
  // text leaves open (no float32 evaluation declared for those).
  for (const char* op : {"ScatterElements", "Scatter", "ScatterND"}) {
    ReferenceForward ref = r.find(op)->reference;
    r.amend(op).float32(
        [ref](const KernelContext& c, const Tensors& in, SumOrder) {
          // reduction from opset 16 (Scatter: never)
          std::string reduction = attr_s_or(c, "reduction", "none");
          if (reduction != "none")
            fail("{}: reduction '{}' combines repeated indices in an order ONNX leaves open",
                 c.node.label(), reduction);
          return ref(c, in);
        },
        "the scatter (data movement)", "none needed");
  }
  // Data movement: gathers and shapes (Resize interpolates: not declared).
  for (const auto& type : r.types()) {
    const MetaOp* op = r.find(type);
    if (op->float32.how == Float32Definition::How::undeclared && moves_data(op->family) &&
        type != "Resize" && type != "Upsample")
      r.amend(type).float32_rounded();
  }
}

}  // namespace metaop
