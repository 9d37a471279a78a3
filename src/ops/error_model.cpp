#include "ops/error_model.h"

#include <bit>
#include <cfloat>
#include <cmath>

#include "ops/registry.h"

namespace metaop {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::Float64:
      return std::ldexp(1.0, -53);
    case DType::Float16:
      return std::ldexp(1.0, -11);
    case DType::BFloat16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

double smallest_normal(DType t) {
  switch (t) {
    case DType::Float64:
      return DBL_MIN;
    case DType::Float16:
      return std::ldexp(1.0, -14);
    default:  // float32, and bfloat16 (float32's exponent range)
      return FLT_MIN;
  }
}

double ulp_of(double x, DType t) {
  x = std::fabs(x);
  if (!std::isfinite(x)) return 0;
  double tiny = smallest_normal(t), u2 = 2 * unit_roundoff(t);  // u2: spacing at 1
  if (x < tiny) return tiny * u2;                               // subnormal spacing
  // 2^floor(log2 x): x's exponent bits alone (x is a normal double here), times the spacing at 1.
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000ULL) * u2;
}

Tensors absolute_f64(const Tensors& ts) {
  Tensors r = ts;
  for (auto& t : r) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    auto v = t.to_f64();
    for (auto& x : v) x = std::fabs(x);
    t = Tensor::from_f64(v, t.shape(), DType::Float64);
  }
  return r;
}

namespace error_models {

ErrorModel exact(std::string why) {
  return {std::move(why), 0, {}, true, {}, 4, {}};
}

ErrorModel data_movement() {
  return {"exact, bit for bit (data movement)", 0, {}, false, {}, 4, {}};
}

ErrorModel ulp(double ulps, std::string doc) {
  if (doc.empty()) doc = fmt::format("{:g} ulp", ulps);
  return {std::move(doc), ulps, {}, true, {}, 4, {}};
}

ErrorModel accumulation(const TermCount& terms, std::string doc, double ulps) {
  MagnitudeFn m = [terms](const KernelContext& c, const Tensors& in, const Tensors& ref,
                          const AccumulationBound& bound) {
    const MetaOp* op = OpRegistry::instance().find(c.node.op_type);
    Tensors abs_out = op->reference(c, absolute_f64(in));
    double k = bound.kappa(terms(c, in));
    Magnitudes out(ref.size());
    for (std::size_t o = 0; o < ref.size() && o < abs_out.size(); ++o) {
      if (!ref[o].defined() || !is_floating(ref[o].dtype())) continue;
      out[o] = abs_out[o].to_f64();
      for (auto& x : out[o]) x = k * std::fabs(x);
    }
    return out;
  };
  return {std::move(doc), ulps, std::move(m), true, {}, 4, {}};
}

ErrorModel condition(MagnitudeFn magnitude, std::string doc, double ulps) {
  return {std::move(doc), ulps, std::move(magnitude), true, {}, 4, {}};
}

}  // namespace error_models

std::vector<std::vector<double>> tolerances(const MetaOp& op, const KernelContext& ctx,
                                            const Tensors& inputs, const Tensors& reference,
                                            const AccumulationBound& bound) {
  if (!op.error.declared()) fail("{}: meta op {} has no error model", ctx.node.label(), op.type);
  Magnitudes mag;
  if (op.error.magnitude) mag = op.error.magnitude(ctx, inputs, reference, bound);
  std::vector<std::vector<double>> tol(reference.size());
  for (std::size_t o = 0; o < reference.size(); ++o) {
    const Tensor& r = reference[o];
    if (!r.defined() || !is_floating(r.dtype())) continue;
    DType dt = r.dtype();
    double u = unit_roundoff(dt), tiny = smallest_normal(dt);
    auto rv = r.to_f64();
    auto& t = tol[o];
    t.resize(rv.size());
    const std::vector<double>* m = o < mag.size() && mag[o].size() == rv.size() ? &mag[o] : nullptr;
    for (std::size_t i = 0; i < rv.size(); ++i) {
      double v = op.error.ulps * ulp_of(rv[i], dt) + (op.error.flush_ok ? tiny : 0);
      if (m) v += u * (*m)[i] + tiny;
      // A magnitude that is not a number (infinities among the terms) bounds nothing: any
      // finite error is accepted there. Where the reference is NaN, the result must be NaN.
      t[i] = std::isnan(v) ? (std::isnan(rv[i]) ? 0 : INFINITY) : v;
    }
  }
  return tol;
}

}  // namespace metaop
