// What the normalization meta operators (norm.cpp: BatchNormalization, InstanceNormalization;
// norm_layer.cpp: LayerNormalization, MeanVarianceNormalization, LRN) share: the forward error
// magnitude of a normalization over groups, its VJP and the VJP's error magnitude, and the maps
// between elements, groups and parameters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <source_location>
#include <vector>

#include "ops/danger.h"
#include "ops/error_model.h"
#include "ops/registry.h"

namespace metaop {

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
                                   const AccumulationBound& bound);

// y = gamma * (x - mu) / sigma + beta, with mu and sigma^2 + eps the mean and variance over
// each group: dx = (dxh - mean(dxh) - xh * mean(dxh * xh)) / sigma with dxh = g * gamma, and per
// element the terms of dgamma (g * xh) and dbeta (g), which the caller sums into its parameters.
// `float32`: every operation rounded to float32, the sums in the order written (the VJP's float32
// twin); likewise sum_into's.
struct NormGrad {
  std::vector<double> dx, dgamma, dbeta, mean, var;
};
NormGrad normalize_vjp(const std::vector<double>& x, const std::vector<std::int64_t>& group,
                       std::size_t groups, const std::vector<double>& gamma, double eps,
                       const std::vector<double>& g, bool float32 = false);

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
                                          double eps, const std::vector<double>& g, double kappa);

// A parameter's gradient from per-element terms: kappa(m) sum|terms| + sum of the terms' own
// errors, summed into `size` parameters by `map`.
std::vector<double> param_magnitude(const std::vector<double>& abs_terms,
                                    const std::vector<double>& term_err,
                                    const std::vector<std::int64_t>& map, std::size_t size,
                                    double kappa);

// How the normalizations' error models read (metaop ops --error-models).
inline constexpr const char* kNormDoc =
    "first-order: gamma*(|x|+|mu|+kappa(n)*mean|x|)/sigma + (kappa(n)+4)*|x_hat|*|gamma| + "
    "2|beta|, 4 ulp";
inline constexpr const char* kNormBackwardDoc =
    "dx: ((kappa(n) + 3)(mean|a| + |xh| mean|a xh|) + 3|a| + |xh| mean(|a| E) + mean|a xh| E) / "
    "sigma + (kappa(n)/2 + 3)|dx|, a = g gamma, E the forward's bound of xh; parameters: "
    "kappa(m) sum|terms| + sum |g| E, 4 ulp";

// Per-element values of a per-channel vector for an [N, C, ...] tensor.
std::vector<double> per_channel(const std::vector<double>& v, const Shape& s);
// Each element's channel in an [N, C, ...] tensor.
std::vector<std::int64_t> channel_map(const Shape& s);
// A normalization's VJP: the reference's, or with `float32` its float32 twin.
using NormVjpFn = Tensors (*)(const KernelContext& c, const Tensors& in, const Tensors& out,
                              const Tensors& grads, bool float32);
// Declares both on the op being built (OpBuilder::vjp and vjp_float32); returns the builder.
OpBuilder with_norm_vjp(OpBuilder b, NormVjpFn f,
                        std::source_location where = std::source_location::current());

// Sums per-element values into `size` parameters by `map` (per channel, or over
// LayerNormalization's normalized dims).
std::vector<double> sum_into(const std::vector<double>& v, const std::vector<std::int64_t>& map,
                             std::size_t size, bool float32 = false);
// Elements grouped by their group number.
std::vector<std::vector<std::int64_t>> groups_of(const std::vector<std::int64_t>& group);

// The danger zone of a normalization with epsilon 0 over groups that may be constant (0/0).
DangerZone zero_variance(const danger::Groups& groups, std::string condition);

// LayerNormalization, MeanVarianceNormalization and LRN (norm_layer.cpp).
void register_layer_norm_ops(OpRegistry& r);

// LRN over the channels of x laid out [N, C, S] (S: the product of the other dims), computed in
// T: y = x / (bias + alpha / size * square_sum)^beta, the square sum over the window of `size`
// channels around each (floor((size-1)/2) before, ceil after). The reference runs it in double,
// its float32 evaluation (ops/float32.cpp) in float.
template <typename T>
std::vector<T> lrn_values(const std::vector<T>& x, std::int64_t N, std::int64_t C, std::int64_t S,
                          std::int64_t size, T alpha, T beta, T bias) {
  std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  std::vector<T> y(x.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch)
      for (std::int64_t j = 0; j < S; ++j) {
        T sq = 0;
        for (std::int64_t k = std::max<std::int64_t>(0, ch - lo); k <= std::min(C - 1, ch + hi);
             ++k) {
          T v = x[static_cast<std::size_t>((n * C + k) * S + j)];
          sq += v * v;
        }
        auto i = static_cast<std::size_t>((n * C + ch) * S + j);
        y[i] = x[i] / std::pow(bias + alpha / static_cast<T>(size) * sq, beta);
      }
  return y;
}

}  // namespace metaop
