// Det (opset 11): the determinant of each square matrix of [..., M, M], by LU factorization with
// partial pivoting. The error model is first order in an LU's backward error: a float32 LU gives
// the exact determinant of A + dA with |dA| <= gamma(3M) |L||U| (Higham, Accuracy and Stability
// of Numerical Algorithms, 2nd ed., Thm 9.3), and d det = sum_ij cof(A)_ij dA_ij, so the kernel
// may be off by kappa(3M) * sum_ij |cof(A)_ij| (|L||U|)_ij units of u. The VJP is g * cof(A).
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

Magnitudes det_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                         const AccumulationBound& bound) {
  Matrices m = matrices(c, in[0]);
  require_small(c, m.n);
  const auto v = in[0].to_f64();
  std::vector<double> mag;
  for (std::int64_t b = 0; b < m.count; ++b) {
    std::vector<double> a = matrix(v, b, m.n), lu = a;
    std::vector<std::int64_t> perm;
    lu_det(lu, m.n, &perm);
    const auto cof = cofactors(a, m.n);
    // (|L||U|)_ij of P A = L U, charged to the row of A that pivot row i came from.
    double sum = 0;
    for (std::int64_t i = 0; i < m.n; ++i)
      for (std::int64_t j = 0; j < m.n; ++j) {
        double lu_ij = 0;
        for (std::int64_t k = 0; k <= std::min(i, j); ++k) {
          double l = k == i ? 1.0 : std::fabs(lu[static_cast<std::size_t>(i * m.n + k)]);
          lu_ij += l * std::fabs(lu[static_cast<std::size_t>(k * m.n + j)]);
        }
        const auto row = perm[static_cast<std::size_t>(i)];
        sum += std::fabs(cof[static_cast<std::size_t>(row * m.n + j)]) * lu_ij;
      }
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

}  // namespace

void register_det_ops(OpRegistry& r) {
  r.op("Det", Family::linear, det_in<double>)
      .vjp(det_vjp)
      .error(error_models::condition(
          det_magnitude, "kappa(3M) * sum |cof(A)| (|L||U|) (LU's backward error, first order)", 2))
      .float32(
          [](const KernelContext& c, const Tensors& in, SumOrder) { return det_in<float>(c, in); },
          "an LU factorization with partial pivoting in float32, the product of U's diagonal",
          "none within the LU; the product of the pivots may overflow or underflow where the "
          "determinant does not (scale the rows, or sum logarithms)")
      .cases({{11, {case_input::floats({3, 3})}}, {11, {case_input::floats({2, 4, 4})}}});
}

}  // namespace metaop
