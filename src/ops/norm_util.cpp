// Helpers the normalization meta operators share (ops/norm_util.h).
#include "ops/norm_util.h"

#include <algorithm>
#include <cmath>

#include "ops/kernel_util.h"

namespace metaop {

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

std::vector<double> per_channel(const std::vector<double>& v, const Shape& s) {
  std::int64_t N = s[0], C = s[1], S = shape_numel(s) / std::max<std::int64_t>(N * C, 1);
  std::vector<double> out(static_cast<std::size_t>(N * C * S));
  for (std::int64_t i = 0; i < N * C * S; ++i) out[i] = v[(i / S) % C];
  return out;
}

namespace {

// normalize_vjp with every operation in T (float: the VJP's float32 twin, its sums in the order
// written).
template <class T>
NormGrad normalize_vjp_in(const std::vector<double>& xd, const std::vector<std::int64_t>& group,
                          std::size_t groups, const std::vector<double>& gammad, double epsd,
                          const std::vector<double>& gd) {
  auto x = [&xd](std::size_t i) { return static_cast<T>(xd[i]); };
  auto gamma = [&gammad](std::size_t i) { return static_cast<T>(gammad[i]); };
  auto g = [&gd](std::size_t i) { return static_cast<T>(gd[i]); };
  const auto eps = static_cast<T>(epsd);
  std::vector<T> count(groups, 0), mean(groups, 0), var(groups, 0);
  for (std::size_t i = 0; i < xd.size(); ++i) {
    mean[group[i]] += x(i);
    count[group[i]] += 1;
  }
  for (std::size_t k = 0; k < groups; ++k) mean[k] /= std::max(count[k], T(1));
  for (std::size_t i = 0; i < xd.size(); ++i) {
    T d = x(i) - mean[group[i]];
    var[group[i]] += d * d;
  }
  for (std::size_t k = 0; k < groups; ++k) var[k] /= std::max(count[k], T(1));
  std::vector<T> s1(groups, 0), s2(groups, 0), xh(xd.size()), dxh(xd.size());
  for (std::size_t i = 0; i < xd.size(); ++i) {
    auto k = group[i];
    xh[i] = (x(i) - mean[k]) / std::sqrt(var[k] + eps);
    dxh[i] = g(i) * gamma(i);
    s1[k] += dxh[i];
    s2[k] += dxh[i] * xh[i];
  }
  NormGrad r;
  r.dx.resize(xd.size());
  r.dgamma.resize(xd.size());
  r.dbeta.resize(xd.size());
  for (std::size_t i = 0; i < xd.size(); ++i) {
    auto k = group[i];
    T n = std::max(count[k], T(1));
    r.dx[i] = (dxh[i] - s1[k] / n - xh[i] * s2[k] / n) / std::sqrt(var[k] + eps);
    r.dgamma[i] = g(i) * xh[i];
    r.dbeta[i] = g(i);
  }
  r.mean.assign(mean.begin(), mean.end());
  r.var.assign(var.begin(), var.end());
  return r;
}

}  // namespace

NormGrad normalize_vjp(const std::vector<double>& x, const std::vector<std::int64_t>& group,
                       std::size_t groups, const std::vector<double>& gamma, double eps,
                       const std::vector<double>& g, bool float32) {
  return float32 ? normalize_vjp_in<float>(x, group, groups, gamma, eps, g)
                 : normalize_vjp_in<double>(x, group, groups, gamma, eps, g);
}

std::vector<double> sum_into(const std::vector<double>& v, const std::vector<std::int64_t>& map,
                             std::size_t size, bool float32) {
  std::vector<double> r(size, 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    double s = r[map[i]] + v[i];
    r[map[i]] = float32 ? static_cast<float>(s) : s;
  }
  return r;
}

OpBuilder with_norm_vjp(OpBuilder b, NormVjpFn f, std::source_location where) {
  b.vjp([f](const KernelContext& c, const Tensors& in, const Tensors& out,
            const Tensors& grads) { return f(c, in, out, grads, false); },
        where);
  b.vjp_float32(
      [f](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
          SumOrder) { return f(c, in, out, grads, true); },
      "the VJP as the reference writes it: dx = (g gamma - mean(g gamma) - xh mean(g gamma xh)) / "
      "sigma per group, the parameters' gradients summed",
      "a wider accumulator for the statistics and the sums", where);
  return b;
}

std::vector<std::int64_t> channel_map(const Shape& s) {
  std::int64_t N = s[0], C = s[1], S = shape_numel(s) / std::max<std::int64_t>(N * C, 1);
  std::vector<std::int64_t> m(static_cast<std::size_t>(N * C * S));
  for (std::int64_t i = 0; i < N * C * S; ++i) m[i] = (i / S) % C;
  return m;
}

std::vector<std::vector<std::int64_t>> groups_of(const std::vector<std::int64_t>& group) {
  std::vector<std::vector<std::int64_t>> g;
  for (std::size_t i = 0; i < group.size(); ++i) {
    auto k = static_cast<std::size_t>(group[i]);
    if (k >= g.size()) g.resize(k + 1);
    g[k].push_back(static_cast<std::int64_t>(i));
  }
  return g;
}

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

DangerZone zero_variance(const danger::Groups& groups, std::string condition) {
  DangerZone z = danger::group_constant(0, groups, std::move(condition));
  z.applies = [](const KernelContext& c) { return attr_f(c, "epsilon") == 0; };
  return z;
}

}  // namespace metaop
