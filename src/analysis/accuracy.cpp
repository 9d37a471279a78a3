#include "analysis/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ops/params.h"

namespace metaop {

std::string describe_worst(const Score& s, const Tensors& reference,
                           const std::vector<std::string>& names, const std::string& binding) {
  if (!s.mismatch.empty()) return s.mismatch;
  if (s.worst_index < 0 || s.worst_output >= reference.size()) return "";
  std::string name = s.worst_output < names.size() ? names[s.worst_output] : "";
  return fmt::format(
      "{}{}: {} {:.9g}, reference {:.9g}, tolerance {:.3g}; {} of {} over, {} non-finite "
      "mismatches",
      name, index_str(reference[s.worst_output].shape(), s.worst_index), binding, s.worst_got,
      s.worst_ref, s.worst_tol, s.over, s.elements, s.nonfinite);
}

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
    auto g = got[o].to_f64(), r = ref[o].to_f64();
    const std::vector<double>* t = o < tol.size() && tol[o].size() == r.size() ? &tol[o] : nullptr;
    bool floating = is_floating(ref[o].dtype());
    s.elements += static_cast<std::int64_t>(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) {
      double key;
      bool rf = std::isfinite(r[i]), gf = std::isfinite(g[i]);
      if (!rf || !gf) {
        bool same = (std::isnan(r[i]) && std::isnan(g[i])) || r[i] == g[i];
        if (same) continue;
        // An exact result at a singularity (a pole, inf - inf) where the op's condition is
        // infinite: rounding may land on any non-finite value.
        if (!rf && !gf && t && std::isinf((*t)[i])) continue;
        ++s.nonfinite;
        if (rf) ++s.new_nonfinite;
        s.score = INFINITY;
        key = INFINITY;
      } else {
        double err = std::fabs(g[i] - r[i]);
        if (err == 0) continue;
        s.max_abs_err = std::max(s.max_abs_err, err);
        if (floating) s.max_ulp_err = std::max(s.max_ulp_err, err / ulp_of(r[i], ref[o].dtype()));
        double bound = t ? (*t)[i] : 0;
        double sc = bound > 0 ? err / bound : INFINITY;
        if (sc > 1) ++s.over;
        s.score = std::max(s.score, sc);
        key = sc;
      }
      if (key > worst_key) {
        worst_key = key;
        s.worst_output = o;
        s.worst_index = static_cast<std::int64_t>(i);
        s.worst_ref = r[i];
        s.worst_got = g[i];
        s.worst_tol = t ? (*t)[i] : 0;
      }
    }
  }
  return s;
}

LocalCheck check_local(const Node& node, std::int64_t opset, const Tensors& inputs,
                       const Tensors& got, const AccumulationBound& bound) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) throw Unsupported(node.label() + ": no meta operator");
  KernelContext ctx{node, opset};
  LocalCheck c;
  c.reference = op->reference(ctx, inputs);
  c.score = score_outputs(got, c.reference, tolerances(*op, ctx, inputs, c.reference, bound));
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

// What the generic bound misses, per op kind: element-wise derivatives computed through the
// result (1 - y^2, y (1 - y), 1 + y^2 ...) carry u |g| (1 + |y| + y^2); softmax's sum(g y) and
// log-softmax's sum(g) are n-term sums; and at a kink (an element-wise op's critical point) or a
// tie (selections), any subgradient is right: no judgement there.
void backward_slack(const MetaOp& op, const KernelContext& c, const Tensors& in, const Tensors& out,
                    const Tensors& grads, const AccumulationBound& bound, std::size_t input,
                    std::vector<double>& m) {
  if (grads.empty() || !grads[0].defined() || input >= in.size() || !in[input].defined()) return;
  auto g = grads[0].to_f64(), y = out[0].to_f64();
  const Tensor& x = in[input];
  if (op.family == "elementwise" && x.numel() == grads[0].numel()) {
    auto xv = x.to_f64();
    std::vector<double> crit;
    if (op.domain.critical && in.size() == 1) crit = op.domain.critical(c.node);
    for (std::size_t j = 0; j < m.size(); ++j) {
      m[j] += 4 * std::fabs(g[j]) * (1 + std::fabs(y[j]) + y[j] * y[j]);
      for (double k : crit)
        if (xv[j] == k) m[j] = INFINITY;
    }
  }
  if (c.node.op_type == "Softmax" || c.node.op_type == "LogSoftmax") {
    auto [axis, outer, n, inner] = softmax_split(c, x.shape());
    (void)axis;
    double kappa = bound.kappa(static_cast<double>(n));
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        auto at = [&](std::int64_t j) { return static_cast<std::size_t>((o * n + j) * inner + i); };
        double s = 0;
        for (std::int64_t j = 0; j < n; ++j)
          s += std::fabs(g[at(j)]) * (c.node.op_type == "Softmax" ? std::fabs(y[at(j)]) : 1.0);
        for (std::int64_t j = 0; j < n; ++j) {
          double p = c.node.op_type == "Softmax" ? std::fabs(y[at(j)]) : std::exp(y[at(j)]);
          m[at(j)] += (kappa + 4) * (p * s + std::fabs(g[at(j)]) * (p + 1));
        }
      }
  }
  static const std::set<std::string> selections = {"ReduceMax", "ReduceMin", "MaxPool",
                                                   "GlobalMaxPool", "TopK"};
  if (selections.count(c.node.op_type) && input == 0) {
    auto xv = x.to_f64();
    std::map<double, int> seen;
    for (double v : xv) ++seen[v];
    for (std::size_t j = 0; j < m.size(); ++j)
      if (seen[xv[j]] > 1) m[j] = INFINITY;
  }
}

LocalCheck check_local_backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                const Tensors& outputs, const Tensors& output_grads,
                                const Tensors& got, const AccumulationBound& bound) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) throw Unsupported(node.label() + ": no reference VJP");
  KernelContext ctx{node, opset};
  LocalCheck c;
  c.reference = op->vjp(ctx, inputs, outputs, output_grads);
  Tensors mag, mag_same;
  Magnitudes own;
  if (op->error.backward) {
    own = op->error.backward(ctx, inputs, outputs, output_grads, bound);
  } else {
    mag = op->vjp(ctx, absolute_f64(inputs), outputs, absolute_f64(output_grads));
    // At the inputs themselves too: selections (max pooling, min, top-k) pick the same elements.
    mag_same = op->vjp(ctx, inputs, outputs, absolute_f64(output_grads));
  }
  Tensors count;
  try {
    count = op->vjp(ctx, ones_like(inputs), ones_like(outputs), ones_like(output_grads));
  } catch (const std::exception&) {
  }
  double largest = 1;
  for (const auto& g : output_grads)
    if (g.defined()) largest = std::max(largest, static_cast<double>(g.numel()));
  std::vector<std::vector<double>> tol(c.reference.size());
  for (std::size_t i = 0; i < c.reference.size(); ++i) {
    const Tensor& r = c.reference[i];
    if (!r.defined() || !is_floating(r.dtype())) continue;
    auto rv = r.to_f64();
    if (op->error.backward) {
      double u = unit_roundoff(r.dtype()), tiny = smallest_normal(r.dtype());
      tol[i].resize(rv.size());
      for (std::size_t j = 0; j < rv.size(); ++j) {
        double m = i < own.size() && j < own[i].size() ? own[i][j] : INFINITY;
        double t = 4 * ulp_of(rv[j], r.dtype()) + u * m + tiny;
        tol[i][j] = std::isnan(t) ? (std::isnan(rv[j]) ? 0 : INFINITY) : t;
      }
      continue;
    }
    auto m = mag.at(i).to_f64();
    if (i < mag_same.size() && mag_same[i].defined()) {
      auto ms = mag_same[i].to_f64();
      for (std::size_t j = 0; j < m.size(); ++j) m[j] = std::fabs(m[j]) + std::fabs(ms[j]);
    }
    backward_slack(*op, ctx, inputs, outputs, output_grads, bound, i, m);
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
  c.score = score_outputs(got, c.reference, tol);
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
