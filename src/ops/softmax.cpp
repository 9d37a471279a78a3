// The softmax family: Softmax, LogSoftmax and Hardmax along one axis, each op's reference, VJP,
// error models (derived in docs/error-models.md, "Softmax"), domain and danger zones together.
#include "ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

// First-order error magnitude of Softmax / LogSoftmax: x_j - m is rounded (u |x_j - m|, which
// scales p_j relatively), the n-term sum S adds kappa(n), and log S, the final subtraction or
// division a few more roundings. LogSoftmax may subtract m + log S in one step (torch does),
// whose rounding is u (|m| + |log S|); softmax's exp(x_j - m) / S has no such term.
std::vector<double> softmax_magnitude(const std::vector<double>& vx, const AxisSplit& split,
                                      double kappa, bool log) {
  auto [axis, outer, n, inner] = split;
  (void)axis;
  std::vector<double> mag(vx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
      double m = -kInf;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, vx[at(j)]);
      if (!std::isfinite(m)) m = 0;
      double s = 0, wsum = 0;
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(vx[at(j)] - m);
      // Each term's own rounding: |x_j - m| for softmax, |x_j| + |m| where log-softmax rounds
      // m + log S.
      auto own = [&](std::int64_t j) {
        return log ? std::fabs(vx[at(j)]) + std::fabs(m) : std::fabs(vx[at(j)] - m);
      };
      for (std::int64_t j = 0; j < n; ++j)
        if (double p = std::exp(vx[at(j)] - m) / s; p > 0) wsum += p * own(j);
      for (std::int64_t j = 0; j < n; ++j) {
        double p = std::exp(vx[at(j)] - m) / s;
        double common = own(j) + wsum + kappa;
        mag[at(j)] = !log ? p * (common + 4)
                          : common + 2 * std::fabs(std::log(s)) + 2 * std::fabs(vx[at(j)] - m);
      }
    }
  return mag;
}

namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

Tensors softmax(const KernelContext& c, const Tensors& in, SoftmaxKind kind) {
  const Tensor& x = input(c, in, 0);
  if (kind != SoftmaxKind::Hardmax) require_float(c, x, "input");
  auto [axis, outer, n, inner] = softmax_split(c, x.shape());
  (void)axis;
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
      double m = -kInf;
      std::int64_t arg = 0;
      for (std::int64_t j = 0; j < n; ++j)  // numpy's argmax: the first NaN wins
        if (std::isnan(vx[at(j)]) ? !std::isnan(m) : vx[at(j)] > m) {
          m = vx[at(j)];
          arg = j;
        }
      if (kind == SoftmaxKind::Hardmax) {
        for (std::int64_t j = 0; j < n; ++j) y[at(j)] = j == arg ? 1.0 : 0.0;
        continue;
      }
      double s = 0;
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(vx[at(j)] - m);
      for (std::int64_t j = 0; j < n; ++j)
        y[at(j)] = kind == SoftmaxKind::Softmax ? std::exp(vx[at(j)] - m) / s
                                                : vx[at(j)] - m - std::log(s);
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

// Softmax: dx = y (g - sum(g y)); LogSoftmax: dx = g - exp(y) sum(g).
// The rows a softmax normalizes: element numbers along its axis (opset 13 on) or of the
// flattened trailing dimensions (before).
std::vector<std::vector<std::int64_t>> softmax_rows(const KernelContext& c, const Tensors& in) {
  auto [axis, outer, n, inner] = softmax_split(c, input(c, in, 0).shape());
  (void)axis;
  std::vector<std::vector<std::int64_t>> rows;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      rows.emplace_back();
      for (std::int64_t j = 0; j < n; ++j) rows.back().push_back((o * n + j) * inner + i);
    }
  return rows;
}

// A probability of a masked logit (-inf) is 0 exactly: no underflow.
std::vector<bool> masked_logits(const KernelContext& c, const Tensors& in, const Tensors&) {
  std::vector<bool> r;
  for (double v : input(c, in, 0).to_f64()) r.push_back(v == -kInf);
  return r;
}

// Softmax: dx_j = y_j (g_j - sum_k g_k y_k); LogSoftmax: dx_j = g_j - exp(y_j) sum_k g_k. T float:
// every operation in float32, the sum in `order` (the VJP's float32 twin).
template <class T>
Tensors softmax_grads(SoftmaxKind kind, const KernelContext& c, const Tensors& in,
                      const Tensors& out, const Tensors& grads, SumOrder order) {
  const Tensor& x = in[0];
  auto [axis, outer, n, inner] = softmax_split(c, x.shape());
  (void)axis;
  auto g = grad_of(grads, out, 0), y = out[0].to_f64();
  std::vector<double> gx(g.size());
  std::vector<float> terms(std::is_same_v<T, float> ? static_cast<std::size_t>(n) : 0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return static_cast<std::size_t>((o * n + j) * inner + i); };
      auto gt = [&](std::int64_t j) { return static_cast<T>(g[at(j)]); };
      auto yt = [&](std::int64_t j) { return static_cast<T>(y[at(j)]); };
      T s = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        T t = kind == SoftmaxKind::Softmax ? gt(j) * yt(j) : gt(j);
        if constexpr (std::is_same_v<T, float>)
          terms[j] = t;
        else
          s += t;
      }
      if constexpr (std::is_same_v<T, float>) s = float32_sum(terms, order);
      for (std::int64_t j = 0; j < n; ++j)
        gx[at(j)] =
            kind == SoftmaxKind::Softmax ? yt(j) * (gt(j) - s) : gt(j) - std::exp(yt(j)) * s;
    }
  Tensors r(in.size());
  r[0] = grad_like(gx, x);
  return r;
}

ReferenceVjp softmax_vjp(SoftmaxKind kind) {
  return
      [kind](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return softmax_grads<double>(kind, c, in, out, grads, SumOrder::written);
      };
}

Float32VjpEvaluate softmax_vjp_f32(SoftmaxKind kind) {
  return [kind](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
                SumOrder order) { return softmax_grads<float>(kind, c, in, out, grads, order); };
}

// Backward rounding of the softmax family, derived once (docs/error-models.md). Softmax:
// dx_j = y_j (g_j - s), s = sum_k g_k y_k: the products and the n-term sum carry kappa(n) u S
// (S = sum_k |g_k y_k|), the difference u (|g_j| + S), the last product u |dx_j|; so
// C_j = |y_j| ((kappa(n) + 2) S + 2 |g_j|). LogSoftmax: dx_j = g_j - p_j G, p_j = exp(y_j),
// G = sum_k g_k: the sum carries kappa(n) u sum|g|, exp(y_j) 4 ulp, the product and the
// difference one rounding each; so C_j = p_j (kappa(n) sum|g| + 6 |G|) + |g_j|.
Magnitudes softmax_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                 const Tensors& grads, const AccumulationBound& bound,
                                 SoftmaxKind kind) {
  auto [axis, outer, n, inner] = softmax_split(c, in[0].shape());
  (void)axis;
  auto g = grad_of(grads, out, 0), y = out[0].to_f64();
  double k = bound.kappa(static_cast<double>(n));
  Magnitudes m(in.size());
  m[0].resize(g.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return static_cast<std::size_t>((o * n + j) * inner + i); };
      double sum_abs = 0, sum = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        double t = kind == SoftmaxKind::Softmax ? g[at(j)] * y[at(j)] : g[at(j)];
        sum_abs += std::fabs(t);
        sum += t;
      }
      for (std::int64_t j = 0; j < n; ++j) {
        double gj = std::fabs(g[at(j)]);
        m[0][at(j)] = kind == SoftmaxKind::Softmax
                          ? std::fabs(y[at(j)]) * ((k + 2) * sum_abs + 2 * gj)
                          : std::exp(y[at(j)]) * (k * sum_abs + 6 * std::fabs(sum)) + gj;
      }
    }
  return m;
}

// Hardmax is piecewise constant in its input.
Tensors zero_vjp(const KernelContext&, const Tensors& in, const Tensors&, const Tensors&) {
  Tensors res(in.size());
  res[0] = grad_like(std::vector<double>(static_cast<std::size_t>(in[0].numel()), 0.0), in[0]);
  return res;
}

Magnitudes softmax_forward_magnitude(const KernelContext& c, const Tensors& in, bool log,
                                     const AccumulationBound& bound) {
  AxisSplit split = softmax_split(c, in[0].shape());
  return Magnitudes{
      softmax_magnitude(in[0].to_f64(), split, bound.kappa(static_cast<double>(split.n)), log)};
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  using namespace error_models;
  // exp of the inputs overflows float32 above 88.72 (without the max subtracted).
  auto exp_domain = [](const KernelContext&) { return std::vector<double>{0, 88.7228, 100, -100}; };

  r.op("Softmax", Family::reduce,
       [](const KernelContext& c, const Tensors& in) {
         return softmax(c, in, SoftmaxKind::Softmax);
       })
      .vjp(softmax_vjp(SoftmaxKind::Softmax))
      .vjp_float32(softmax_vjp_f32(SoftmaxKind::Softmax),
                   "the VJP y_j (g_j - sum_k g_k y_k) from the output y",
                   "a wider accumulator for the sum")
      .error(condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            return softmax_forward_magnitude(c, in, false, bound);
          },
          "p_i * (|x_i - m| + sum_j p_j |x_j - m| + kappa(n) + 4) with m = max x, 4 ulp"))
      .backward_error(
          [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
             const AccumulationBound& bound) {
            return softmax_vjp_magnitude(c, in, out, grads, bound, SoftmaxKind::Softmax);
          },
          "|y_j| ((kappa(n) + 2) sum_k |g_k y_k| + 2|g_j|), 1 ulp", 1)
      .domain({{0}, exp_domain})
      .danger({danger::output_underflow(
                   "probability rounds to 0 (logit gap above about 104 in float32)", masked_logits),
               danger::group_all_masked(
                   DangerKind::ZeroDivisor, 0, softmax_rows,
                   "every logit of a row is -inf (masked): its sum of exponentials is 0 (0/0)")})
      .faults({"nomax"})
      .explain({.form = ExplainForm::softmax, .telling = true});

  // Subtracts the maximum: finite for every finite input.
  r.op("LogSoftmax", Family::reduce,
       [](const KernelContext& c, const Tensors& in) {
         return softmax(c, in, SoftmaxKind::LogSoftmax);
       })
      .vjp(softmax_vjp(SoftmaxKind::LogSoftmax))
      .vjp_float32(softmax_vjp_f32(SoftmaxKind::LogSoftmax),
                   "the VJP g_j - exp(y_j) sum_k g_k from the output y",
                   "a wider accumulator for the sum")
      .error(condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            return softmax_forward_magnitude(c, in, true, bound);
          },
          "|x_i| + |m| + sum_j p_j (|x_j| + |m|) + kappa(n) + 2 |log S| + 2 |y_i|, 4 ulp"))
      .backward_error(
          [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
             const AccumulationBound& bound) {
            return softmax_vjp_magnitude(c, in, out, grads, bound, SoftmaxKind::LogSoftmax);
          },
          "exp(y_j) (kappa(n) sum|g| + 6|sum g|) + |g_j|, 1 ulp", 1)
      .domain({{0}, exp_domain})
      .danger({danger::group_all_masked(
          DangerKind::LogDomain, 0, softmax_rows,
          "every logit of a row is -inf (masked): the log of a sum of 0 (-inf - -inf, NaN)")})
      .faults({"nomax"});

  r.op("Hardmax", Family::reduce,
       [](const KernelContext& c, const Tensors& in) {
         return softmax(c, in, SoftmaxKind::Hardmax);
       })
      .vjp(zero_vjp)
      .error(exact());
}

}  // namespace metaop
