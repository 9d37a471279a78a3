// Loss meta operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/softmax.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// NLL over log-probabilities lp viewed as [N, C, D]; target [N, D].
Tensor nll(const KernelContext& c, const std::vector<double>& lp, const Shape& in_shape,
           const Tensor& target, const Tensors& in, std::size_t weight_input, DType dt) {
  std::int64_t N = in_shape[0], C = in_shape[1], D = 1;
  for (std::size_t d = 2; d < in_shape.size(); ++d) D *= in_shape[d];
  auto t = target.to_i64();
  if (static_cast<std::int64_t>(t.size()) != N * D)
    fail("{}: target {} does not fit input {}", c.node.label(), shape_str(target.shape()),
         shape_str(in_shape));
  std::vector<double> w(static_cast<std::size_t>(C), 1.0);
  if (has_input(in, weight_input)) w = in[weight_input].to_f64();
  bool has_ignore = c.node.has_attr("ignore_index");
  std::int64_t ignore = has_ignore ? c.node.attr_i("ignore_index") : 0;
  std::string red = attr_s(c, "reduction");
  std::vector<double> loss(static_cast<std::size_t>(N * D));
  double wsum = 0, lsum = 0;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      std::int64_t cls = t[n * D + d];
      if (has_ignore && cls == ignore) {
        loss[n * D + d] = 0;
        continue;
      }
      if (cls < 0 || cls >= C)
        fail("{}: target class {} out of range [0, {})", c.node.label(), cls, C);
      double l = -lp[(n * C + cls) * D + d] * w[cls];
      loss[n * D + d] = l;
      lsum += l;
      wsum += w[cls];
    }
  if (red == "none") return Tensor::from_f64(loss, target.shape(), dt);
  if (red == "sum") return Tensor::scalar(lsum, dt);
  if (red == "mean") return Tensor::scalar(lsum / wsum, dt);
  fail("{}: unknown reduction '{}'", c.node.label(), red);
}

Tensors nll_loss(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  if (x.rank() < 2) fail("{}: input must be [N, C, ...]", c.node.label());
  return {nll(c, x.to_f64(), x.shape(), input(c, in, 1), in, 2, x.dtype())};
}

Tensors softmax_ce(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "scores");
  if (x.rank() < 2) fail("{}: scores must be [N, C, ...]", c.node.label());
  std::int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto v = x.to_f64();
  std::vector<double> lp(v.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      double m = -INFINITY, s = 0;
      for (std::int64_t k = 0; k < C; ++k) m = std::max(m, v[(n * C + k) * D + d]);
      for (std::int64_t k = 0; k < C; ++k) s += std::exp(v[(n * C + k) * D + d] - m);
      double ls = std::log(s) + m;
      for (std::int64_t k = 0; k < C; ++k) lp[(n * C + k) * D + d] = v[(n * C + k) * D + d] - ls;
    }
  Tensors out{nll(c, lp, x.shape(), input(c, in, 1), in, 2, x.dtype())};
  if (c.node.outputs.size() > 1) out.push_back(Tensor::from_f64(lp, x.shape(), x.dtype()));
  return out;
}

// --- gradients

// d loss / d lp for NLL over log-probabilities viewed as [N, C, D]: -w[t] g (divided by the
// weight sum for "mean"), at the target class of each sample; ignored samples get none.
std::vector<double> nll_grad(const KernelContext& c, const Shape& in_shape, const Tensor& target,
                             const Tensors& in, std::size_t weight_input, const Tensors& out,
                             const Tensors& grads) {
  std::int64_t N = in_shape[0], C = in_shape[1], D = 1;
  for (std::size_t d = 2; d < in_shape.size(); ++d) D *= in_shape[d];
  auto t = target.to_i64();
  std::vector<double> w(static_cast<std::size_t>(C), 1.0);
  if (has_input(in, weight_input)) w = in[weight_input].to_f64();
  bool has_ignore = c.node.has_attr("ignore_index");
  std::int64_t ignore = has_ignore ? c.node.attr_i("ignore_index") : 0;
  std::string red = attr_s(c, "reduction");
  auto g = grad_of(grads, out, 0);
  double wsum = 0;
  for (std::int64_t i = 0; i < N * D; ++i)
    if (!(has_ignore && t[i] == ignore)) wsum += w[t[i]];
  std::vector<double> dlp(static_cast<std::size_t>(N * C * D), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      std::int64_t cls = t[n * D + d];
      if (has_ignore && cls == ignore) continue;
      double gi = red == "none" ? g[n * D + d] : (red == "sum" ? g[0] : g[0] / wsum);
      dlp[(n * C + cls) * D + d] = -w[cls] * gi;
    }
  return dlp;
}

Tensors nll_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                const Tensors& grads) {
  Tensors r(in.size());
  r[0] = grad_like(nll_grad(c, in[0].shape(), in[1], in, 2, out, grads), in[0]);
  return r;
}

// SoftmaxCrossEntropyLoss: lp = log_softmax(x) over C; dx = dlp - softmax(x) * sum_C dlp, where
// dlp gathers the NLL part and the log_prob output's own gradient.
Tensors softmax_ce_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto dlp = nll_grad(c, x.shape(), in[1], in, 2, out, grads);
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto gl = grads[1].to_f64();
    for (std::size_t i = 0; i < dlp.size(); ++i) dlp[i] += gl[i];
  }
  auto v = x.to_f64();
  std::vector<double> gx(v.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      auto at = [&](std::int64_t k) { return (n * C + k) * D + d; };
      double m = -INFINITY, s = 0, sd = 0;
      for (std::int64_t k = 0; k < C; ++k) m = std::max(m, v[at(k)]);
      for (std::int64_t k = 0; k < C; ++k) s += std::exp(v[at(k)] - m);
      for (std::int64_t k = 0; k < C; ++k) sd += dlp[at(k)];
      for (std::int64_t k = 0; k < C; ++k) gx[at(k)] = dlp[at(k)] - std::exp(v[at(k)] - m) / s * sd;
    }
  Tensors r(in.size());
  r[0] = grad_like(gx, x);
  return r;
}

// The relative rounding of 1/W for "mean" (W = sum of the counted samples' weights, an N-term
// sum): kappa(N) sum|w| / |W|; 0 for the other reductions.
double weight_sum_rel(const KernelContext& c, const Tensors& in, std::int64_t C,
                      const AccumulationBound& bound) {
  if (attr_s(c, "reduction") != "mean") return 0;
  auto t = in[1].to_i64();
  std::vector<double> w(static_cast<std::size_t>(C), 1.0);
  if (has_input(in, 2)) w = in[2].to_f64();
  bool has_ignore = c.node.has_attr("ignore_index");
  std::int64_t ignore = has_ignore ? c.node.attr_i("ignore_index") : 0;
  double abs_w = 0, wsum = 0;
  for (auto cls : t)
    if (!(has_ignore && cls == ignore) && cls >= 0 && cls < C) {
      abs_w += std::fabs(w[cls]);
      wsum += w[cls];
    }
  return bound.kappa(static_cast<double>(t.size())) * abs_w / std::fabs(wsum);
}

// NLL backward: dlp = -w g / W at each target, exact but for 1/W and two roundings.
Magnitudes nll_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                             const Tensors& grads, const AccumulationBound& bound) {
  auto dlp = nll_grad(c, in[0].shape(), in[1], in, 2, out, grads);
  double rel = weight_sum_rel(c, in, in[0].dim(1), bound) + 3;
  for (auto& v : dlp) v = rel * std::fabs(v);
  Magnitudes m(in.size());
  m[0] = std::move(dlp);
  return m;
}

// SoftmaxCrossEntropyLoss backward: dx_k = dlp_k - p_k sd, sd = sum over the C classes of dlp.
// p_k carries the softmax's own forward bound P_k, sd the C-term sum's kappa(C) sum|dlp|; the
// product and the difference one rounding each, dlp two and, for "mean", 1/W's relative error.
Magnitudes softmax_ce_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                    const Tensors& grads, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto dlp = nll_grad(c, x.shape(), in[1], in, 2, out, grads);
  double rel = weight_sum_rel(c, in, C, bound);
  if (out.size() > 1 && grads.size() > 1 && grads[1].defined()) {
    auto gl = grads[1].to_f64();
    for (std::size_t i = 0; i < dlp.size(); ++i) dlp[i] += gl[i];
  }
  auto v = x.to_f64();
  double kc = bound.kappa(static_cast<double>(C));
  auto P = softmax_magnitude(v, AxisSplit{1, N, C, D}, kc, false);
  Magnitudes m(in.size());
  m[0].resize(v.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t d = 0; d < D; ++d) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((n * C + k) * D + d); };
      double mx = -INFINITY, s = 0, sd = 0, sd_abs = 0;
      for (std::int64_t k = 0; k < C; ++k) mx = std::max(mx, v[at(k)]);
      for (std::int64_t k = 0; k < C; ++k) s += std::exp(v[at(k)] - mx);
      for (std::int64_t k = 0; k < C; ++k) {
        sd += dlp[at(k)];
        sd_abs += std::fabs(dlp[at(k)]);
      }
      for (std::int64_t k = 0; k < C; ++k) {
        double p = std::exp(v[at(k)] - mx) / s, gx = dlp[at(k)] - p * sd;
        m[0][at(k)] = p * kc * sd_abs + std::fabs(sd) * P[at(k)] + std::fabs(p * sd) +
                      std::fabs(gx) + 2 * std::fabs(dlp[at(k)]) +
                      rel * (std::fabs(dlp[at(k)]) + p * std::fabs(sd));
      }
    }
  return m;
}

double nll_samples(const KernelContext&, const Tensors& in) {
  return static_cast<double>(std::max<std::int64_t>(1, in[1].numel()));
}

// SoftmaxCrossEntropyLoss = NLL of log-softmax over C: each sample's term -w lp carries the
// log-softmax's own bound E at its target (units of u) times |w|, and its product |w lp|;
// "sum" adds the N-term sum's kappa(N) sum|w lp|, "mean" divides by W = sum w, whose own
// kappa(N) sum|w| relative error scales the loss. The log_prob output: E per element.
Magnitudes softmax_ce_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                                const AccumulationBound& bound) {
  const Tensor& x = in[0];
  std::int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto vx = x.to_f64();
  auto E = softmax_magnitude(vx, AxisSplit{1, N, C, D}, bound.kappa(static_cast<double>(C)), true);
  auto t = in[1].to_i64();
  std::vector<double> w(static_cast<std::size_t>(C), 1.0);
  if (has_input(in, 2)) w = in[2].to_f64();
  bool has_ignore = c.node.has_attr("ignore_index");
  std::int64_t ignore = has_ignore ? c.node.attr_i("ignore_index") : 0;
  std::string red = attr_s(c, "reduction");
  std::vector<double> per(static_cast<std::size_t>(N * D), 0.0);
  double err = 0, abs_terms = 0, abs_w = 0, wsum = 0;
  for (std::int64_t i = 0; i < N * D; ++i) {
    std::int64_t cls = t[i];
    if ((has_ignore && cls == ignore) || cls < 0 || cls >= C) continue;
    std::int64_t n = i / D, d = i % D, at = (n * C + cls) * D + d;
    // |lp| at the target: the loss term over the weight, from the reference.
    double m = -INFINITY, s = 0;
    for (std::int64_t k = 0; k < C; ++k) m = std::max(m, vx[(n * C + k) * D + d]);
    for (std::int64_t k = 0; k < C; ++k) s += std::exp(vx[(n * C + k) * D + d] - m);
    double lp = std::fabs(vx[at] - m - std::log(s));
    per[i] = std::fabs(w[cls]) * (E[at] + lp);
    err += std::fabs(w[cls]) * E[at];
    abs_terms += std::fabs(w[cls]) * lp;
    abs_w += std::fabs(w[cls]);
    wsum += w[cls];
  }
  double kn = bound.kappa(static_cast<double>(N * D));
  Magnitudes mag;
  if (red == "none") {
    mag.push_back(per);
  } else {
    double loss = ref[0].defined() ? std::fabs(ref[0].f64_at(0)) : 0;
    double v = err + kn * abs_terms;
    if (red == "mean") v = v / std::fabs(wsum) + kn * abs_w / std::fabs(wsum) * loss;
    mag.push_back({v});
  }
  if (ref.size() > 1) mag.push_back(E);
  return mag;
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  using namespace error_models;

  r.op("NegativeLogLikelihoodLoss", Family::loss, nll_loss)
      .vjp(nll_vjp)
      .error(accumulation(nll_samples, "kappa(#samples) * nll(|x|, |w|), 4 ulp", 4))
      .backward_error(nll_vjp_magnitude, "|dlp| (3 + kappa(N) sum|w| / |W| for mean), 4 ulp");

  r.op("SoftmaxCrossEntropyLoss", Family::loss, softmax_ce)
      .vjp(softmax_ce_vjp)
      .error(condition(
          softmax_ce_magnitude,
          "|w| E_t + |w lp_t| per sample (E: LogSoftmax's bound at the target); sum: + "
          "kappa(N) sum|w lp|; mean: / |W|, + kappa(N) sum|w| / |W| |loss|; log_prob: E, 4 ulp"))
      .backward_error(
          softmax_ce_vjp_magnitude,
          "p kappa(C) sum|dlp| + |sd| P + |p sd| + |dx| + 2|dlp| (+ 1/W's kappa(N) sum|w|/|W| "
          "(|dlp| + p|sd|) for mean), sd = sum dlp, P softmax's forward bound, 4 ulp");
}

}  // namespace metaop
