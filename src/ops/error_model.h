#pragma once
// Error models: for each meta operator, how far a *correct* implementation in the output's
// precision (float32, float16, bfloat16) may land from the exact result on the same inputs.
// The tolerance of output element i is
//
//   tol_i = ulps * ulp(|r_i|) + u * C_i + tiny
//
// with r the reference result, u the unit roundoff of the output dtype (2^-24 for float32),
// C_i the op's rounding-error magnitude (empty for pure ULP models) and tiny the smallest
// normal number of the dtype (flushing subnormals to zero is not a defect). The scoring that
// uses it lives in src/analysis/accuracy; the models are declared next to each op in its family
// file and documented in docs/error-models.md.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/danger.h"
#include "tensor/tensor.h"

namespace metaop {

struct KernelContext {
  const Node& node;
  std::int64_t opset;
};

using Tensors = std::vector<Tensor>;
struct MetaOp;

// How the accumulated rounding error of a sum of n terms grows: `Rigorous` is Higham's
// worst-case gamma_n ~ n*u; `Probabilistic` is Higham & Mary's (SIAM J. Sci. Comput. 2019)
// lambda*sqrt(n)*u, which holds with probability at least 1 - 2n*exp(-lambda^2/2) when
// rounding errors are independent (lambda = 10: failure odds below 1e-17 per element). The
// rigorous bound always holds, so the probabilistic one never exceeds it (below n = 100 the
// worst case is the smaller).
struct AccumulationBound {
  enum Kind { Probabilistic, Rigorous } kind = Probabilistic;
  double lambda = 10;
  // kappa(n): multiple of u * sum|terms| that bounds the error of an n-term sum of products
  // (n roundings of products and sums, and the result's own).
  double kappa(double n) const {
    if (n < 1) n = 1;
    return kind == Rigorous ? n + 1 : std::min(n, lambda * std::sqrt(n)) + 1;
  }
};

// C_i for each output (outer: output index; an empty vector means "ULPs only" for it).
using Magnitudes = std::vector<std::vector<double>>;
using MagnitudeFn =
    std::function<Magnitudes(const KernelContext&, const Tensors& inputs, const Tensors& reference,
                             const AccumulationBound& bound)>;

// Input domain: which inputs carry data values (the others are shapes, indices, statistics or
// parameters and keep their test values); the points where the op changes behaviour for a
// given node -- branch points, thresholds, poles, the edges of its domain, overflow thresholds
// of float32 -- which `metaop probe` feeds exactly and one ULP on either side (`critical`: edge
// values, most of them smooth points); and, apart from those, the true kinks of an element-wise
// op: the points where its derivative jumps, where the backward judgement accepts any value
// between the one-sided derivatives (the subgradient set) and only those.
struct Domain {
  using Points = std::function<std::vector<double>(const KernelContext&)>;
  Domain() = default;
  Domain(std::vector<int> data, Points critical_points = {}, Points kink_points = {})
      : data_inputs(std::move(data)),
        critical(std::move(critical_points)),
        kinks(std::move(kink_points)) {}
  std::vector<int> data_inputs{0};  // empty: the op has no data input to probe
  Points critical;
  Points kinks;
  // Where finite inputs give NaN/INF (or the zeros that do it downstream), for `metaop expose`;
  // declared with OpRegistry::set_danger next to set_domain.
  DangerZones danger;
};

// Magnitudes of a VJP's rounding error per input gradient element, in units of u (kappa
// included), for ops whose VJP on absolute values does not bound its terms (normalizations).
using VjpMagnitudeFn =
    std::function<Magnitudes(const KernelContext&, const Tensors& inputs, const Tensors& outputs,
                             const Tensors& output_grads, const AccumulationBound& bound)>;

struct ErrorModel {
  std::string doc;  // one line, for `metaop ops` and docs/error-models.md
  double ulps = 0;  // 0: the op is exact (data movement, comparisons, max/min)
  MagnitudeFn magnitude;
  // Whether a subnormal result may come out as zero (flush-to-zero arithmetic); false for
  // data movement, which must copy every bit.
  bool flush_ok = true;
  VjpMagnitudeFn backward;  // empty: the generic bound (src/analysis/accuracy)
  // With `backward`: the ULPs of the exact gradient added to u * C_i (the rounding of the
  // reference itself, and of the kernel's last operation where C_i leaves it out).
  double backward_ulps = 4;
  std::string backward_doc;  // one line: how `backward` is derived (empty: the generic bound)
  bool declared() const { return !doc.empty(); }
};

namespace error_models {

// Bit-exact: every correct implementation returns the reference (rounded once) exactly.
// (Subnormal results may be flushed to zero.)
ErrorModel exact(std::string why = "exact (no rounding beyond the result's)");
// Copies values: bit for bit, subnormals and NaN payload signs included.
ErrorModel data_movement();
// A few ULPs of the exact result: correctly rounded arithmetic (1) or libm-quality functions.
ErrorModel ulp(double ulps, std::string doc = {});
// A sum of n(ctx, inputs) terms per output element: C_i = kappa(n) * |op(|inputs|)|_i, the op
// re-run on absolute values of its floating inputs (|A| @ |B| for a product, conv(|x|, |w|)+|b|
// for a convolution).
using TermCount = std::function<double(const KernelContext&, const Tensors& inputs)>;
ErrorModel accumulation(const TermCount& terms, std::string doc, double ulps = 2);
// Composite ops: C_i from the op's own first-order condition (written per op).
ErrorModel condition(MagnitudeFn magnitude, std::string doc, double ulps = 4);

}  // namespace error_models

// The floating tensors replaced by their absolute values in float64 (the others as they are):
// what the accumulation bounds run their op on.
Tensors absolute_f64(const Tensors& ts);

// Per-element tolerances of `reference` (the op's outputs) for `ctx` and `inputs`; one vector
// per output, empty for outputs that are not floating point (those must match exactly).
std::vector<std::vector<double>> tolerances(const MetaOp& op, const KernelContext& ctx,
                                            const Tensors& inputs, const Tensors& reference,
                                            const AccumulationBound& bound = {});

// Unit roundoff and spacing helpers for a floating dtype.
double unit_roundoff(DType t);
double smallest_normal(DType t);
double ulp_of(double x, DType t);  // spacing of dtype t at |x| (subnormal spacing near zero)

}  // namespace metaop
