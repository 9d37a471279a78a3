#include "ops/conventions.h"

#include <cmath>

#include "ops/kernel_util.h"
#include "ops/window.h"

namespace metaop {

namespace {

bool has_nan(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return false;
  for (double v : t.to_f64())
    if (std::isnan(v)) return true;
  return false;
}

// Element `flat` of `s` as a multi-index.
std::vector<std::int64_t> unflatten(const Shape& s, std::int64_t flat) {
  std::vector<std::int64_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? flat % s[d] : 0;
    flat = s[d] ? flat / s[d] : 0;
  }
  return idx;
}

// Whether the slice of x through multi-index `idx` along `axis` (and, with `to_end`, every
// dimension after it) holds a NaN.
bool slice_has_nan(const Tensor& x, const std::vector<double>& xv,
                   const std::vector<std::int64_t>& idx, std::int64_t axis, bool to_end) {
  std::int64_t rank = x.rank();
  IndexIter it(x.shape());
  for (std::int64_t f = 0; f < x.numel(); ++f, it.next()) {
    bool in_slice = true;
    for (std::int64_t d = 0; d < rank && in_slice; ++d)
      in_slice = d == axis || (to_end && d > axis) || it.idx()[d] == idx[d];
    if (in_slice && std::isnan(xv[static_cast<std::size_t>(f)])) return true;
  }
  return false;
}

// Whether floating tensor t broadcasts (numpy rules) to `out`.
bool broadcasts_to(const Tensor& t, const Shape& out) {
  if (!t.defined() || !is_floating(t.dtype()) || t.shape().size() > out.size()) return false;
  std::size_t off = out.size() - t.shape().size();
  for (std::size_t d = 0; d < t.shape().size(); ++d)
    if (t.shape()[d] != 1 && t.shape()[d] != out[d + off]) return false;
  return true;
}

}  // namespace

Convention nan_propagation() {
  return {"nan-propagation",
          "the ONNX text defines the op by comparisons, maxima or minima, which NaN fails, and "
          "does not say whether NaN takes that branch or propagates",
          [](const KernelContext& c, const Tensors& in, const Tensors& ref, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            bool any_nan = false;
            for (const auto& t : in) any_nan = any_nan || has_nan(t);
            if (!any_nan) return false;
            // An element-wise op's element sees its own inputs only: there the choice explains
            // an element whose inputs (broadcast) hold a NaN. A reduction, pool or softmax row
            // sees many: there it explains an element that is NaN on one side only.
            const MetaOp* op = OpRegistry::instance().find(c.node.op_type);
            bool elementwise = op && op->family == Family::elementwise;
            for (std::size_t o = 0; o < bad.size(); ++o) {
              if (bad[o].empty()) continue;
              auto r = ref[o].to_f64(), g = got[o].to_f64();
              std::vector<std::pair<std::vector<double>, std::vector<std::int64_t>>> operands;
              if (elementwise)
                for (const auto& t : in)
                  if (broadcasts_to(t, ref[o].shape()))
                    operands.emplace_back(t.to_f64(), broadcast_map(t.shape(), ref[o].shape()));
              for (std::size_t i = 0; i < bad[o].size(); ++i) {
                if (!bad[o][i]) continue;
                bool explained = !elementwise && std::isnan(r[i]) != std::isnan(g[i]);
                for (const auto& [x, map] : operands)
                  explained = explained || std::isnan(x[map[i]]);
                if (!explained) return false;
              }
            }
            return true;
          }};
}

bool other_reading_explains(const Tensor& other, const Tensors& got,
                            const std::vector<std::vector<bool>>& bad, double tol,
                            bool nan_matches) {
  if (got.empty() || !got[0].defined() || bad.empty() || other.shape() != got[0].shape())
    return false;
  const auto a = other.to_f64(), g = got[0].to_f64();
  bool any = false;
  for (std::size_t i = 0; i < bad[0].size() && i < g.size(); ++i) {
    if (!bad[0][i]) continue;
    any = true;
    if (!(std::fabs(a[i] - g[i]) <= tol || (nan_matches && std::isnan(a[i]) && std::isnan(g[i]))))
      return false;
  }
  return any;
}

Convention nan_selection() {
  return {"nan-selection",
          "the ONNX text orders the values without saying where NaN goes, so which index is "
          "selected when NaN takes part is left open",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            if (in.empty() || !has_nan(in[0])) return false;
            const Tensor& x = in[0];
            std::int64_t rank = x.rank();
            std::int64_t axis = attr_i(c, "axis");
            if (axis < 0) axis += rank;
            if (axis < 0 || axis >= rank) return false;
            // Hardmax before opset 13 selects over the dimensions from `axis` on, flattened.
            bool to_end = c.node.op_type == "Hardmax" && c.opset < 13;
            auto xv = x.to_f64();
            for (std::size_t o = 0; o < bad.size() && o < got.size(); ++o) {
              for (std::size_t i = 0; i < bad[o].size(); ++i) {
                if (!bad[o][i]) continue;
                auto idx = unflatten(got[o].shape(), static_cast<std::int64_t>(i));
                if (static_cast<std::int64_t>(idx.size()) == rank - 1)
                  idx.insert(idx.begin() + axis, 0);
                if (static_cast<std::int64_t>(idx.size()) != rank ||
                    !slice_has_nan(x, xv, idx, axis, to_end))
                  return false;
              }
            }
            return true;
          }};
}

Convention padded_infinities() {
  return {"padded-infinities",
          "the ONNX text pads the input with zeros, so a padded tap times an infinite weight is "
          "0 x inf = NaN; it does not say whether a kernel may skip padded taps, which add "
          "nothing to a finite sum",
          [](const KernelContext& c, const Tensors& in, const Tensors& ref, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            if (in.size() < 2 || !in[0].defined() || !in[1].defined() || ref.empty() ||
                got.empty() || bad.empty())
              return false;
            bool infinite_weight = false;
            for (double w : in[1].to_f64()) infinite_weight = infinite_weight || std::isinf(w);
            if (!infinite_weight) return false;
            const Shape& ws = in[1].shape();
            Window g = window_geometry(
                c, in[0].shape(), attr_ints_or(c, "kernel_shape", Shape(ws.begin() + 2, ws.end())),
                false);
            auto r = ref[0].to_f64(), k = got[0].to_f64();
            bool any = false;
            for (std::size_t i = 0; i < bad[0].size(); ++i) {
              if (!bad[0][i]) continue;
              any = true;
              if (!std::isnan(r[i]) || std::isnan(k[i])) return false;
              auto idx = unflatten(ref[0].shape(), static_cast<std::int64_t>(i));
              bool padded = false;
              for (int d = 3 - g.nsp; d < 3; ++d) {
                std::int64_t o = idx[idx.size() - static_cast<std::size_t>(3 - d)];
                std::int64_t first = o * g.s[d] - g.pb[d], last = first + (g.k[d] - 1) * g.d[d];
                padded = padded || first < 0 || last >= g.in[d];
              }
              if (!padded) return false;
            }
            return any;
          }};
}

bool nonfinite_explains(const Tensors& in, const Tensors& ref, const Tensors& got,
                        const std::vector<std::vector<bool>>& bad, bool (*held)(double),
                        const std::function<bool(std::size_t, double, double)>& explained) {
  if (in.empty() || !in[0].defined() || ref.empty() || got.empty() || bad.empty()) return false;
  bool any_held = false;
  for (double v : in[0].to_f64()) any_held = any_held || held(v);
  if (!any_held) return false;
  auto r = ref[0].to_f64(), k = got[0].to_f64();
  if (k.size() != r.size()) return false;
  bool any = false;
  for (std::size_t i = 0; i < bad[0].size(); ++i) {
    if (!bad[0][i]) continue;
    any = true;
    if (!explained(i, r[i], k[i])) return false;
  }
  return any;
}

Convention transform_infinities() {
  return {
      "transform-infinities",
      "the ONNX text defines the transform as a sum of products by complex twiddles; with an "
      "infinite input, whether an output is +inf, -inf or NaN depends on which twiddle parts "
      "are exactly 0 and on the order of the operations, which it does not fix",
      [](const KernelContext&, const Tensors& in, const Tensors& ref, const Tensors& got,
         const std::vector<std::vector<bool>>& bad) {
        return nonfinite_explains(
            in, ref, got, bad, [](double v) { return !std::isfinite(v); },
            [](std::size_t, double r, double k) { return !std::isfinite(r) && !std::isfinite(k); });
      }};
}

Convention zero_weight_infinities() {
  return {"zero-weight-infinities",
          "the ONNX text defines the interpolation as the weighted sum of the taps, where a tap "
          "of weight 0 on an infinite pixel is 0 x inf = NaN; it does not say whether a kernel "
          "may skip such a tap",
          [](const KernelContext&, const Tensors& in, const Tensors& ref, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            return nonfinite_explains(
                in, ref, got, bad, [](double v) { return std::isinf(v); },
                [](std::size_t, double r, double k) { return std::isnan(r) && std::isinf(k); });
          }};
}

}  // namespace metaop
