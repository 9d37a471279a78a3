// Det (opset 11): the determinant of each square matrix of [..., M, M], by LU factorization with
// partial pivoting. The error model is first order in an LU's backward error: a float32 LU gives
// the exact determinant of A + dA with |dA| <= gamma(3M) |L||U| (Higham, Accuracy and Stability
// of Numerical Algorithms, 2nd ed., Thm 9.3), and d det = sum_ij cof(A)_ij dA_ij, so the kernel
// may be off by kappa(3M) * sum_ij |cof(A)_ij| (|L||U|)_ij units of u. The VJP is g * cof(A),
// bounded as the first-order change of det(A) A^-T under such perturbations (det_vjp_magnitude).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// LU with partial pivoting of the n x n matrix a (row-major, in place) in T: the determinant
// (the product of U's diagonal, negated per row swap), accumulated in the factorization's order.
template <typename T>
T lu_det(std::vector<T>& a, std::int64_t n, std::vector<std::int64_t>* perm = nullptr) {
  T det = 1;
  if (perm) {
    perm->resize(static_cast<std::size_t>(n));
    std::iota(perm->begin(), perm->end(), 0);
  }
  auto at = [&](std::int64_t i, std::int64_t j) -> T& {
    return a[static_cast<std::size_t>(i * n + j)];
  };
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t p = k;
    for (std::int64_t i = k + 1; i < n; ++i)
      if (std::fabs(at(i, k)) > std::fabs(at(p, k))) p = i;
    if (p != k) {
      for (std::int64_t j = 0; j < n; ++j) std::swap(at(k, j), at(p, j));
      if (perm)
        std::swap((*perm)[static_cast<std::size_t>(k)], (*perm)[static_cast<std::size_t>(p)]);
      det = -det;
    }
    det *= at(k, k);
    if (at(k, k) == 0) continue;  // singular: det is 0, the rest does not change it
    for (std::int64_t i = k + 1; i < n; ++i) {
      at(i, k) /= at(k, k);
      for (std::int64_t j = k + 1; j < n; ++j) at(i, j) -= at(i, k) * at(k, j);
    }
  }
  return det;
}

struct Matrices {
  std::int64_t count = 1, n = 0;
  Shape batch;
};

Matrices matrices(const KernelContext& c, const Tensor& x) {
  if (x.rank() < 2 || x.dim(-1) != x.dim(-2))
    fail("{}: X of shape {}: [..., M, M]", c.node.label(), shape_str(x.shape()));
  Matrices m;
  m.n = x.dim(-1);
  m.batch.assign(x.shape().begin(), x.shape().end() - 2);
  m.count = shape_numel(m.batch);
  return m;
}

template <typename T>
Tensors det_in(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "X");
  Matrices m = matrices(c, x);
  const auto v = x.to_f64();
  const auto nn = static_cast<std::size_t>(m.n * m.n);
  std::vector<double> out;
  for (std::int64_t b = 0; b < m.count; ++b) {
    std::vector<T> a(v.begin() + static_cast<std::ptrdiff_t>(b * m.n * m.n),
                     v.begin() + static_cast<std::ptrdiff_t>(b * m.n * m.n + nn));
    out.push_back(static_cast<double>(lu_det(a, m.n)));
  }
  return {Tensor::from_f64(out, m.batch, x.dtype())};
}

// The cofactors of the n x n matrix a (row-major): cof_ij = (-1)^(i+j) det(a without row i and
// column j), each minor's determinant by LU in float64 (n^2 LUs: the matrices ONNX models take
// determinants of are small).
std::vector<double> cofactors(const std::vector<double>& a, std::int64_t n) {
  std::vector<double> cof(static_cast<std::size_t>(n * n), n == 1 ? 1.0 : 0.0);
  if (n == 1) return cof;
  std::vector<double> minor(static_cast<std::size_t>((n - 1) * (n - 1)));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      std::size_t k = 0;
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t s = 0; s < n && r != i; ++s)
          if (s != j) minor[k++] = a[static_cast<std::size_t>(r * n + s)];
      double d = lu_det(minor, n - 1);
      cof[static_cast<std::size_t>(i * n + j)] = ((i + j) % 2 ? -d : d);
    }
  return cof;
}

constexpr std::int64_t kMaxCofactorSize = 64;

std::vector<double> matrix(const std::vector<double>& v, std::int64_t b, std::int64_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(b * n * n),
          v.begin() + static_cast<std::ptrdiff_t>((b + 1) * n * n)};
}

void require_small(const KernelContext& c, std::int64_t n) {
  if (n > kMaxCofactorSize)
    throw Unsupported(
        fmt::format("{}: {} x {} matrices: the error model and VJP of Det take its "
                    "cofactors, up to {} x {}",
                    c.node.label(), n, n, kMaxCofactorSize, kMaxCofactorSize));
}

// |L||U| of P A = L U in A's row order (each pivot row charged to the row of A it came from): a
// float32 LU's backward error is at most gamma(3M) times it.
std::vector<double> lu_magnitude(const std::vector<double>& a, std::int64_t n) {
  std::vector<double> lu = a, out(a.size(), 0.0);
  std::vector<std::int64_t> perm;
  lu_det(lu, n, &perm);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double lu_ij = 0;
      for (std::int64_t k = 0; k <= std::min(i, j); ++k) {
        double l = k == i ? 1.0 : std::fabs(lu[static_cast<std::size_t>(i * n + k)]);
        lu_ij += l * std::fabs(lu[static_cast<std::size_t>(k * n + j)]);
      }
      out[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)] * n + j)] = lu_ij;
    }
  return out;
}

Magnitudes det_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                         const AccumulationBound& bound) {
  Matrices m = matrices(c, in[0]);
  require_small(c, m.n);
  const auto v = in[0].to_f64();
  std::vector<double> mag;
  for (std::int64_t b = 0; b < m.count; ++b) {
    const std::vector<double> a = matrix(v, b, m.n);
    const auto cof = cofactors(a, m.n), e = lu_magnitude(a, m.n);
    double sum = 0;
    for (std::size_t k = 0; k < e.size(); ++k) sum += std::fabs(cof[k]) * e[k];
    mag.push_back(bound.kappa(static_cast<double>(3 * m.n)) * sum);
  }
  return {mag};
}

Tensors det_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                const Tensors& grads) {
  Matrices m = matrices(c, in[0]);
  require_small(c, m.n);
  const auto v = in[0].to_f64();
  const auto g = grad_of(grads, out, 0);
  std::vector<double> gx;
  for (std::int64_t b = 0; b < m.count; ++b)
    for (double e : cofactors(matrix(v, b, m.n), m.n))
      gx.push_back(g[static_cast<std::size_t>(b)] * e);
  return {grad_like(gx, in[0])};
}

// The backward bound (units of u): a kernel computes g cof(A) as g det(A) A^-T from LU
// factorizations, each exact for a perturbed A with |dA| <= kappa(3M) |L||U| (E). To first
// order, d cof = d(det) A^-T + det d(A^-T) with d(A^-T) = -A^-T dA^T A^-T, so per element
// |g| (m_det |A^-T| + |det| (|A^-T| E^T |A^-T|)) plus the two products' roundings, m_det the
// forward's bound. A singular A (det 0 in float64) has no inverse: there cof(A + dA) - cof(A),
// which is linear in each entry of dA, is bounded entry by entry, sum_kl |d cof / d a_kl| E_kl
// (exact: the difference of the cofactors with a_kl set to 1 and to 0), for M <= 8.
constexpr std::int64_t kMaxSingularBound = 8;

Magnitudes det_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                             const Tensors& grads, const AccumulationBound& bound) {
  Matrices m = matrices(c, in[0]);
  require_small(c, m.n);
  const auto v = in[0].to_f64();
  const auto g = grad_of(grads, out, 0);
  const std::int64_t n = m.n;
  const auto nn = static_cast<std::size_t>(n * n);
  const double k3 = bound.kappa(static_cast<double>(3 * n));
  std::vector<double> mag;
  for (std::int64_t b = 0; b < m.count; ++b) {
    const std::vector<double> a = matrix(v, b, n);
    const auto cof = cofactors(a, n);
    std::vector<double> e = lu_magnitude(a, n);
    for (auto& x : e) x *= k3;
    std::vector<double> lu = a;
    const double det = lu_det(lu, n);
    const double gb = std::fabs(g[static_cast<std::size_t>(b)]);
    std::vector<double> own(nn, 0.0);
    if (det != 0) {
      // |A^-T| = |cof| / |det|; m_det = sum |cof| E (the forward's bound, kappa included).
      std::vector<double> ait(nn);
      double m_det = 0;
      for (std::size_t k = 0; k < nn; ++k) {
        ait[k] = std::fabs(cof[k] / det);
        m_det += std::fabs(cof[k]) * e[k];
      }
      // (|A^-T| E^T |A^-T|)_ij = sum_kl |A^-T|_ik E_lk |A^-T|_lj.
      std::vector<double> t(nn, 0.0);  // |A^-T| E^T
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t k = 0; k < n; ++k)
          for (std::int64_t l = 0; l < n; ++l)
            t[static_cast<std::size_t>(i * n + l)] +=
                ait[static_cast<std::size_t>(i * n + k)] * e[static_cast<std::size_t>(l * n + k)];
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t l = 0; l < n; ++l)
            s += t[static_cast<std::size_t>(i * n + l)] * ait[static_cast<std::size_t>(l * n + j)];
          const auto ij = static_cast<std::size_t>(i * n + j);
          own[ij] = m_det * ait[ij] + std::fabs(det) * s;
        }
    } else {
      if (n > kMaxSingularBound)
        throw Unsupported(
            fmt::format("{}: the backward bound of a singular {} x {} matrix (up to {} x {})",
                        c.node.label(), n, n, kMaxSingularBound, kMaxSingularBound));
      std::vector<double> moved = a;
      for (std::size_t kl = 0; kl < nn; ++kl) {
        moved[kl] = 1;
        const auto one = cofactors(moved, n);
        moved[kl] = 0;
        const auto zero = cofactors(moved, n);
        moved[kl] = a[kl];
        for (std::size_t ij = 0; ij < nn; ++ij) own[ij] += std::fabs(one[ij] - zero[ij]) * e[kl];
      }
    }
    for (std::size_t ij = 0; ij < nn; ++ij) mag.push_back(gb * (own[ij] + 2 * std::fabs(cof[ij])));
  }
  return {mag};
}

}  // namespace

void register_det_ops(OpRegistry& r) {
  r.op("Det", Family::linear, det_in<double>)
      .vjp(det_vjp)
      .error(error_models::condition(
          det_magnitude, "kappa(3M) * sum |cof(A)| (|L||U|) (LU's backward error, first order)", 2))
      .backward_error(
          det_vjp_magnitude,
          "|g| (m_det |A^-T| + |det| |A^-T| E^T |A^-T| + 2 |cof|), E = kappa(3M) |L||U| "
          "(g det A^-T from perturbed LUs, first order); a singular A: sum_kl |d cof / "
          "d a_kl| E_kl, M <= 8")
      .float32(
          [](const KernelContext& c, const Tensors& in, SumOrder) { return det_in<float>(c, in); },
          "an LU factorization with partial pivoting in float32, the product of U's diagonal",
          "none within the LU; the product of the pivots may overflow or underflow where the "
          "determinant does not (scale the rows, or sum logarithms)")
      .cases({{11, {case_input::floats({3, 3})}}, {11, {case_input::floats({2, 4, 4})}}});
}

}  // namespace metaop
