#include "analysis/core/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "ops/params.h"

namespace metaop {

std::string describe_worst(const Score& s, const Tensors& reference,
                           const std::vector<std::string>& names, const std::string& binding,
                           const std::string& inputs) {
  if (!s.mismatch.empty()) return s.mismatch;
  if (s.worst_index < 0 || s.worst_output >= reference.size()) return "";
  std::string name = s.worst_output < names.size() ? names[s.worst_output] : "";
  return fmt::format(
      "{}{}{}: {} {:.9g}, reference {:.9g}, error {:.3g}, tolerance {:.3g}; {} of {} elements "
      "over tolerance{}{}",
      name, index_str(reference[s.worst_output].shape(), s.worst_index),
      s.note.empty() ? "" : " (" + s.note + ")", binding, s.worst_got, s.worst_ref,
      std::fabs(s.worst_got - s.worst_ref), s.worst_tol, s.over, s.elements,
      s.nonfinite ? fmt::format(", {} non-finite mismatches", s.nonfinite) : "",
      inputs.empty() ? "" : "; inputs there: " + inputs);
}

std::string describe_inputs(const Node& node, const Tensors& in, const Tensor& out,
                            std::int64_t index) {
  std::vector<std::string> parts;
  for (std::size_t k = 0; k < in.size() && k < node.inputs.size(); ++k) {
    if (!in[k].defined()) continue;
    const Tensor& t = in[k];
    if (t.numel() == out.numel() && index >= 0) {
      parts.push_back(
          fmt::format("{} = {:.9g}", node.inputs[k], t.to_f64()[static_cast<std::size_t>(index)]));
    } else if (t.numel() <= 4) {
      parts.push_back(fmt::format("{} = [{:.6g}]", node.inputs[k], fmt::join(t.to_f64(), ", ")));
    } else {
      auto v = t.to_f64();
      auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      parts.push_back(
          fmt::format("{} {} in [{:.6g}, {:.6g}]", node.inputs[k], shape_str(t.shape()), *lo, *hi));
    }
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string describe_worst(const Node& node, const Score& s, const Tensors& in,
                           const Tensors& reference, const std::string& binding) {
  bool at = s.mismatch.empty() && s.worst_index >= 0 && s.worst_output < reference.size();
  return describe_worst(
      s, reference, node.outputs, binding,
      at ? describe_inputs(node, in, reference[s.worst_output], s.worst_index) : "");
}

FindingKind score_kind(const Score& s) {
  return s.nonfinite ? FindingKind::Nonfinite : FindingKind::Accuracy;
}

namespace {

// One element's share of the score: its rank among the mismatches (non-finite ones rank above any
// finite score), or nothing when it agrees with the reference. `tol`: its tolerance (0: none).
std::optional<double> score_element(double g, double r, double tol, DType dtype, bool floating,
                                    Score& s) {
  bool rf = std::isfinite(r), gf = std::isfinite(g);
  if (!rf || !gf) {
    bool same = (std::isnan(r) && std::isnan(g)) || r == g;
    if (same) return std::nullopt;
    // An exact result at a singularity (a pole, inf - inf) where the op's condition is
    // infinite: rounding may land on any non-finite value.
    if (!rf && !gf && std::isinf(tol)) return std::nullopt;
    ++s.nonfinite;
    if (rf) ++s.new_nonfinite;
    s.score = INFINITY;
    return INFINITY;
  }
  double err = std::fabs(g - r);
  if (err == 0) return std::nullopt;
  s.max_abs_err = std::max(s.max_abs_err, err);
  if (floating) s.max_ulp_err = std::max(s.max_ulp_err, err / ulp_of(r, dtype));
  double sc = tol > 0 ? err / tol : INFINITY;
  if (sc > 1) ++s.over;
  s.score = std::max(s.score, sc);
  return sc;
}

// Output o (of the reference's shape and dtype) into s; its worst element becomes s's when it
// ranks above `worst_key`.
void score_output(std::size_t o, const Tensor& got, const Tensor& ref,
                  const std::vector<std::vector<double>>& tol, Score& s, double& worst_key) {
  auto g = got.to_f64(), r = ref.to_f64();
  const std::vector<double>* t = o < tol.size() && tol[o].size() == r.size() ? &tol[o] : nullptr;
  bool floating = is_floating(ref.dtype());
  s.elements += static_cast<std::int64_t>(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    double ti = t ? (*t)[i] : 0;
    std::optional<double> key = score_element(g[i], r[i], ti, ref.dtype(), floating, s);
    if (!key || !(*key > worst_key)) continue;
    worst_key = *key;
    s.worst_output = o;
    s.worst_index = static_cast<std::int64_t>(i);
    s.worst_ref = r[i];
    s.worst_got = g[i];
    s.worst_tol = ti;
  }
}

}  // namespace

Score score_outputs(const Tensors& got, const Tensors& ref,
                    const std::vector<std::vector<double>>& tol) {
  Score s;
  double worst_key = -1;  // non-finite mismatches rank above any finite score
  for (std::size_t o = 0; o < ref.size() && o < got.size(); ++o) {
    if (!ref[o].defined() || !got[o].defined()) continue;
    if (got[o].shape() != ref[o].shape() || got[o].dtype() != ref[o].dtype()) {
      s.mismatch = fmt::format("output #{}: {} {} but the reference has {} {}", o,
                               dtype_name(got[o].dtype()), shape_str(got[o].shape()),
                               dtype_name(ref[o].dtype()), shape_str(ref[o].shape()));
      s.score = INFINITY;
      continue;
    }
    score_output(o, got[o], ref[o], tol, s, worst_key);
  }
  return s;
}

std::vector<std::vector<bool>> bad_elements(const Tensors& got, const Tensors& ref,
                                            const std::vector<std::vector<double>>& tol) {
  std::vector<std::vector<bool>> bad(ref.size());
  for (std::size_t o = 0; o < ref.size() && o < got.size(); ++o) {
    if (!ref[o].defined() || !got[o].defined() || got[o].shape() != ref[o].shape() ||
        got[o].dtype() != ref[o].dtype())
      continue;
    auto g = got[o].to_f64(), r = ref[o].to_f64();
    const std::vector<double>* t = o < tol.size() && tol[o].size() == r.size() ? &tol[o] : nullptr;
    bool floating = is_floating(ref[o].dtype());
    bad[o].resize(r.size());
    Score scratch;
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::optional<double> key =
          score_element(g[i], r[i], t ? (*t)[i] : 0, ref[o].dtype(), floating, scratch);
      bad[o][i] = key && *key > 1;
    }
  }
  return bad;
}

LocalCheck check_local(const Node& node, std::int64_t opset, const Tensors& inputs,
                       const Tensors& got, const AccumulationBound& bound) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) throw Unsupported(node.label() + ": no meta operator");
  KernelContext ctx{node, opset};
  LocalCheck c;
  c.reference = op->reference(ctx, inputs);
  c.tol = tolerances(*op, ctx, inputs, c.reference, bound);
  c.score = score_outputs(got, c.reference, c.tol);
  return c;
}

namespace {

Tensors ones_like(const Tensors& ts) {
  Tensors r = ts;
  for (auto& t : r)
    if (t.defined() && is_floating(t.dtype()))
      t = Tensor::from_f64(std::vector<double>(t.numel(), 1.0), t.shape(), DType::Float64);
  return r;
}

}  // namespace

namespace {

// The generic backward bound, for ops without their own: gradient element j is a sum of n_j
// products of output gradients and inputs (or constants), whose rounding is at most
// kappa(n_j) u sum|terms| (Higham's dot-product bound); sum|terms| is the VJP run on |inputs| and
// |output gradients|, plus the VJP at the inputs themselves with |output gradients|
// (selections pick the same elements there, where |x| may pick others); n_j is the VJP of
// all-ones gradients at all-ones inputs where that is finite (exact for convolutions, products
// and broadcasts), else the size of the largest output gradient.
std::vector<std::vector<double>> generic_backward_tolerances(
    const MetaOp& op, const KernelContext& ctx, const Tensors& inputs, const Tensors& outputs,
    const Tensors& output_grads, const Tensors& reference, const AccumulationBound& bound) {
  Tensors mag = op.vjp(ctx, absolute_f64(inputs), outputs, absolute_f64(output_grads));
  Tensors mag_same = op.vjp(ctx, inputs, outputs, absolute_f64(output_grads));
  Tensors count;
  try {
    count = op.vjp(ctx, ones_like(inputs), ones_like(outputs), ones_like(output_grads));
  } catch (const std::exception&) {
  }
  double largest = 1;
  for (const auto& g : output_grads)
    if (g.defined()) largest = std::max(largest, static_cast<double>(g.numel()));
  std::vector<std::vector<double>> tol(reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const Tensor& r = reference[i];
    if (!r.defined() || !is_floating(r.dtype())) continue;
    auto rv = r.to_f64();
    auto m = mag.at(i).to_f64();
    if (i < mag_same.size() && mag_same[i].defined()) {
      auto ms = mag_same[i].to_f64();
      for (std::size_t j = 0; j < m.size(); ++j) m[j] = std::fabs(m[j]) + std::fabs(ms[j]);
    }
    std::vector<double> n(rv.size(), largest);
    if (i < count.size() && count[i].defined()) {
      auto cv = count[i].to_f64();
      for (std::size_t j = 0; j < cv.size(); ++j)
        if (std::isfinite(cv[j])) n[j] = std::clamp(std::fabs(cv[j]), 1.0, largest);
    }
    double u = unit_roundoff(r.dtype()), tiny = smallest_normal(r.dtype());
    tol[i].resize(rv.size());
    for (std::size_t j = 0; j < rv.size(); ++j) {
      double t = 4 * ulp_of(rv[j], r.dtype()) + u * bound.kappa(n[j]) * std::fabs(m[j]) + tiny;
      tol[i][j] = std::isnan(t) ? (std::isnan(rv[j]) ? 0 : INFINITY) : t;
    }
  }
  return tol;
}

// An op's own backward bound: ulps + u * C_j per gradient element (C from its VjpMagnitudeFn).
std::vector<std::vector<double>> own_backward_tolerances(
    const MetaOp& op, const KernelContext& ctx, const Tensors& inputs, const Tensors& outputs,
    const Tensors& output_grads, const Tensors& reference, const AccumulationBound& bound) {
  Magnitudes own = op.error.backward(ctx, inputs, outputs, output_grads, bound);
  std::vector<std::vector<double>> tol(reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const Tensor& r = reference[i];
    if (!r.defined() || !is_floating(r.dtype())) continue;
    auto rv = r.to_f64();
    double u = unit_roundoff(r.dtype()), tiny = smallest_normal(r.dtype());
    tol[i].resize(rv.size());
    for (std::size_t j = 0; j < rv.size(); ++j) {
      double m = i < own.size() && j < own[i].size() ? own[i][j] : INFINITY;
      double t = op.error.backward_ulps * ulp_of(rv[j], r.dtype()) + u * m + tiny;
      tol[i][j] = std::isnan(t) ? (std::isnan(rv[j]) ? 0 : INFINITY) : t;
    }
  }
  return tol;
}

// Where the gradient is not unique (kinks, ties), any value of the op's subgradient set is
// right: the reference becomes the middle of each element's interval and the tolerance grows by
// its half-width. Groups whose sum is fixed are checked after the element-wise score.
void judge_subgradients(const std::vector<GradientSet>& sets, Tensors& reference,
                        std::vector<std::vector<double>>& tol) {
  for (std::size_t i = 0; i < sets.size() && i < reference.size(); ++i) {
    const GradientSet& s = sets[i];
    if (s.lo.empty() || !reference[i].defined() || !is_floating(reference[i].dtype())) continue;
    auto rv = reference[i].to_f64();
    if (s.lo.size() != rv.size() || s.hi.size() != rv.size() || tol[i].size() != rv.size())
      fail("internal: subgradient set of input #{} has {} elements, the gradient {}", i,
           s.lo.size(), rv.size());
    for (std::size_t j = 0; j < rv.size(); ++j) {
      if (std::isnan(s.lo[j]) || std::isnan(s.hi[j])) continue;
      double mid = (s.lo[j] + s.hi[j]) / 2;
      rv[j] = mid;
      // The half-width, and the rounding of the middle to the gradient's dtype.
      tol[i][j] += (s.hi[j] - s.lo[j]) / 2 + ulp_of(mid, reference[i].dtype());
    }
    reference[i] = Tensor::from_f64(rv, reference[i].shape(), reference[i].dtype());
  }
}

// A group's gradient may be shared out in any way, but its sum is that of the reference's
// (within the sum of its elements' tolerances).
void judge_group_sums(const std::vector<GradientSet>& sets, const Tensors& got,
                      const Tensors& original, const std::vector<std::vector<double>>& tol0,
                      Score& score) {
  for (std::size_t i = 0; i < sets.size() && i < original.size() && i < got.size(); ++i) {
    const GradientSet& s = sets[i];
    if (s.group.empty() || !got[i].defined() || !original[i].defined()) continue;
    if (got[i].shape() != original[i].shape()) continue;  // a shape mismatch is scored already
    auto g = got[i].to_f64(), r = original[i].to_f64();
    std::map<std::int64_t, std::array<double, 4>> sums;  // got, reference, tolerance, first
    for (std::size_t j = 0; j < r.size() && j < s.group.size(); ++j) {
      if (s.group[j] < 0) continue;
      auto [it, fresh] = sums.try_emplace(s.group[j], std::array<double, 4>{0, 0, 0, 0});
      if (fresh) it->second[3] = static_cast<double>(j);
      it->second[0] += g[j];
      it->second[1] += r[j];
      it->second[2] += tol0[i][j];
    }
    for (const auto& [id, v] : sums) {
      double err = std::fabs(v[0] - v[1]);
      if (!(err > v[2])) continue;
      double sc = v[2] > 0 ? err / v[2] : INFINITY;
      ++score.over;
      if (sc > score.score || std::isnan(sc)) {
        score.score = std::isnan(sc) ? INFINITY : sc;
        score.worst_output = i;
        score.worst_index = static_cast<std::int64_t>(v[3]);
        score.worst_got = v[0];
        score.worst_ref = v[1];
        score.worst_tol = v[2];
        score.note =
            "the sum over the tied elements from here (a tie's gradient given to more "
            "than one of them, or lost)";
      }
    }
  }
}

}  // namespace

LocalCheck check_local_backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                const Tensors& outputs, const Tensors& output_grads,
                                const Tensors& got, const AccumulationBound& bound) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) throw Unsupported(node.label() + ": no reference VJP");
  KernelContext ctx{node, opset};
  LocalCheck c;
  c.reference = op->vjp(ctx, inputs, outputs, output_grads);
  auto tol = op->error.backward ? own_backward_tolerances(*op, ctx, inputs, outputs, output_grads,
                                                          c.reference, bound)
                                : generic_backward_tolerances(*op, ctx, inputs, outputs,
                                                              output_grads, c.reference, bound);
  std::vector<GradientSet> sets;
  if (op->subgradient) sets = op->subgradient(ctx, inputs, outputs, output_grads);
  Tensors original = c.reference;
  auto tol0 = tol;
  judge_subgradients(sets, c.reference, tol);
  c.score = score_outputs(got, c.reference, tol);
  judge_group_sums(sets, got, original, tol0, c.score);
  c.tol = std::move(tol);
  return c;
}

Drift drift(const Tensor& got, const Tensor& ref) {
  Drift d;
  if (!got.defined() || !ref.defined() || got.shape() != ref.shape()) {
    d.max_abs_err = d.rel = INFINITY;
    return d;
  }
  auto g = got.to_f64(), r = ref.to_f64();
  double scale = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    bool rf = std::isfinite(r[i]), gf = std::isfinite(g[i]);
    if (!rf || !gf) {
      if (!((std::isnan(r[i]) && std::isnan(g[i])) || r[i] == g[i])) ++d.nonfinite;
      continue;
    }
    scale = std::max(scale, std::fabs(r[i]));
    d.max_abs_err = std::max(d.max_abs_err, std::fabs(g[i] - r[i]));
  }
  d.rel = scale > 0 ? d.max_abs_err / scale : (d.max_abs_err > 0 ? INFINITY : 0);
  return d;
}

}  // namespace metaop
