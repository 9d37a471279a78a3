// Reductions and along-axis meta operators: Reduce*, ArgMax/ArgMin, TopK, CumSum, and the
// softmax family (Softmax, LogSoftmax, Hardmax).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

ReduceAxes reduce_axes(const KernelContext& c, const Tensors& in, std::int64_t rank) {
  // ReduceSum takes its axes as an input from opset 13 (the others from opset 18).
  bool from_input = c.node.op_type == "ReduceSum" && c.opset >= 13;
  std::vector<std::int64_t> axes;
  if (from_input) {
    if (has_input(in, 1)) axes = in[1].to_i64();
  } else {
    axes = c.node.attr_ints("axes", {});
  }
  ReduceAxes r;
  r.noop = axes.empty() && c.node.attr_i("noop_with_empty_axes", 0) != 0;
  r.keepdims = c.node.attr_i("keepdims", 1) != 0;
  if (axes.empty()) {
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  r.axes = norm_axes(c, axes, rank);
  return r;
}

AxisSplit softmax_split(const KernelContext& c, const Shape& s) {
  std::int64_t rank = static_cast<std::int64_t>(s.size());
  AxisSplit v;
  // Before opset 13 the input is coerced to 2-D [prod(d < axis), prod(d >= axis)].
  bool coerce = c.opset < 13;
  v.axis = norm_axis(c, c.node.attr_i("axis", coerce ? 1 : -1), rank);
  for (std::int64_t d = 0; d < rank; ++d) {
    if (d < v.axis)
      v.outer *= s[d];
    else if (d == v.axis || coerce)
      v.n *= s[d];
    else
      v.inner *= s[d];
  }
  return v;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Reduction {
  double init;
  std::function<double(double, double)> step;          // acc, x -> acc
  std::function<double(double, std::int64_t)> finish;  // acc, count -> y
};

Tensors reduce(const KernelContext& c, const Tensors& in, const Reduction& red) {
  const Tensor& x = input(c, in, 0);
  auto [axes, noop, keepdims] = reduce_axes(c, in, x.rank());
  if (noop) return {x};
  Shape kept = x.shape();
  for (auto a : axes) kept[a] = 1;
  auto map = broadcast_map(kept, x.shape());
  std::int64_t groups = shape_numel(kept);
  std::int64_t count = groups ? x.numel() / groups : 0;
  if (x.numel() == 0) {
    count = 1;
    for (auto a : axes) count *= x.shape()[a];
  }
  auto vx = x.to_f64();
  std::vector<double> acc(static_cast<std::size_t>(groups), red.init);
  for (std::int64_t i = 0; i < x.numel(); ++i) acc[map[i]] = red.step(acc[map[i]], vx[i]);
  for (auto& a : acc) a = red.finish(a, count);
  Shape os;
  for (std::int64_t d = 0; d < x.rank(); ++d)
    if (keepdims || std::find(axes.begin(), axes.end(), d) == axes.end()) os.push_back(kept[d]);
  return {Tensor::from_f64(acc, os, x.dtype())};
}

void add_reduce(OpRegistry& r, const std::string& type, Reduction red) {
  r.add({type, "reduce",
         [red](const KernelContext& c, const Tensors& in) { return reduce(c, in, red); }});
}

double id(double a, std::int64_t) {
  return a;
}

// Views x as [outer, n, inner] around `axis`.
struct AxisView {
  std::int64_t outer = 1, n = 1, inner = 1;
  AxisView(const Shape& s, std::int64_t axis) {
    for (std::size_t d = 0; d < s.size(); ++d)
      (static_cast<std::int64_t>(d) < axis    ? outer
       : static_cast<std::int64_t>(d) == axis ? n
                                              : inner) *= s[d];
  }
  std::int64_t at(std::int64_t o, std::int64_t j, std::int64_t i) const {
    return (o * n + j) * inner + i;
  }
};

Tensors arg_reduce(const KernelContext& c, const Tensors& in, bool is_max) {
  const Tensor& x = input(c, in, 0);
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", 0), x.rank());
  bool keepdims = c.node.attr_i("keepdims", 1) != 0,
       last = c.node.attr_i("select_last_index", 0) != 0;
  AxisView v(x.shape(), axis);
  auto vx = x.to_f64();
  std::vector<std::int64_t> out(static_cast<std::size_t>(v.outer * v.inner));
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < v.n; ++j) {
        double a = vx[v.at(o, j, i)], b = vx[v.at(o, best, i)];
        // numpy's argmax/argmin (ONNX's reference): NaN wins over any number, the first NaN
        // (the last one with select_last_index).
        bool better = std::isnan(a) || std::isnan(b)
                          ? std::isnan(a) && (!std::isnan(b) || last)
                          : (is_max ? (a > b || (last && a == b)) : (a < b || (last && a == b)));
        if (better) best = j;
      }
      out[o * v.inner + i] = best;
    }
  Shape os = x.shape();
  if (keepdims)
    os[axis] = 1;
  else
    os.erase(os.begin() + axis);
  return {Tensor::from_i64(out, os)};
}

Tensors topk(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::int64_t k = c.opset >= 10 ? input(c, in, 1).to_i64().at(0) : c.node.attr_i("k");
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  bool largest = c.node.attr_i("largest", 1) != 0;
  AxisView v(x.shape(), axis);
  if (k < 0 || k > v.n)
    fail("{}: k = {} but axis {} has {} elements", c.node.label(), k, axis, v.n);
  auto vx = x.to_f64();
  Shape os = x.shape();
  os[axis] = k;
  std::vector<double> vals(static_cast<std::size_t>(v.outer * k * v.inner));
  std::vector<std::int64_t> idx(vals.size());
  std::vector<std::int64_t> order(v.n);
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        double va = vx[v.at(o, a, i)], vb = vx[v.at(o, b, i)];
        return largest ? va > vb : va < vb;  // ties keep the lower index first
      });
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t dst = (o * k + j) * v.inner + i;
        vals[dst] = vx[v.at(o, order[j], i)];
        idx[dst] = order[j];
      }
    }
  return {Tensor::from_f64(vals, os, x.dtype()), Tensor::from_i64(idx, os)};
}

Tensors cumsum(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::int64_t axis = norm_axis(c, input(c, in, 1).to_i64().at(0), x.rank());
  bool exclusive = c.node.attr_i("exclusive", 0) != 0, reverse = c.node.attr_i("reverse", 0) != 0;
  AxisView v(x.shape(), axis);
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      double acc = 0;
      for (std::int64_t t = 0; t < v.n; ++t) {
        std::int64_t j = reverse ? v.n - 1 - t : t;
        double xv = vx[v.at(o, j, i)];
        if (!exclusive) acc += xv;
        y[v.at(o, j, i)] = acc;
        if (exclusive) acc += xv;
      }
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

Tensors softmax(const KernelContext& c, const Tensors& in, SoftmaxKind kind) {
  const Tensor& x = input(c, in, 0);
  if (kind != SoftmaxKind::Hardmax) require_float(c, x, "input");
  auto [axis, outer, n, inner] = softmax_split(c, x.shape());
  (void)axis;
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
      double m = -kInf;
      std::int64_t arg = 0;
      for (std::int64_t j = 0; j < n; ++j)  // numpy's argmax: the first NaN wins
        if (std::isnan(vx[at(j)]) ? !std::isnan(m) : vx[at(j)] > m) {
          m = vx[at(j)];
          arg = j;
        }
      if (kind == SoftmaxKind::Hardmax) {
        for (std::int64_t j = 0; j < n; ++j) y[at(j)] = j == arg ? 1.0 : 0.0;
        continue;
      }
      double s = 0;
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(vx[at(j)] - m);
      for (std::int64_t j = 0; j < n; ++j)
        y[at(j)] = kind == SoftmaxKind::Softmax ? std::exp(vx[at(j)] - m) / s
                                                : vx[at(j)] - m - std::log(s);
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

}  // namespace

// First-order error magnitude of Softmax / LogSoftmax: x_j - m is rounded (u |x_j - m|, which
// scales p_j relatively), the n-term sum S adds kappa(n), and log S, the final subtraction or
// division a few more roundings. LogSoftmax may subtract m + log S in one step (torch does),
// whose rounding is u (|m| + |log S|); softmax's exp(x_j - m) / S has no such term.
std::vector<double> softmax_magnitude(const std::vector<double>& vx, const AxisSplit& split,
                                      double kappa, bool log) {
  auto [axis, outer, n, inner] = split;
  (void)axis;
  std::vector<double> mag(vx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
      double m = -kInf;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, vx[at(j)]);
      if (!std::isfinite(m)) m = 0;
      double s = 0, wsum = 0;
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(vx[at(j)] - m);
      // Each term's own rounding: |x_j - m| for softmax, |x_j| + |m| where log-softmax rounds
      // m + log S.
      auto own = [&](std::int64_t j) {
        return log ? std::fabs(vx[at(j)]) + std::fabs(m) : std::fabs(vx[at(j)] - m);
      };
      for (std::int64_t j = 0; j < n; ++j)
        if (double p = std::exp(vx[at(j)] - m) / s; p > 0) wsum += p * own(j);
      for (std::int64_t j = 0; j < n; ++j) {
        double p = std::exp(vx[at(j)] - m) / s;
        double common = own(j) + wsum + kappa;
        mag[at(j)] = !log ? p * (common + 4)
                          : common + 2 * std::fabs(std::log(s)) + 2 * std::fabs(vx[at(j)] - m);
      }
    }
  return mag;
}

namespace {

// --- gradients

// Each element's group (its output element) under the node's reduce axes; `noop` when the node
// reduces nothing (noop_with_empty_axes), then the gradient passes through.
struct ReduceGroups {
  bool noop = false;
  std::vector<std::int64_t> map;  // element -> group
  double n = 1;                   // elements per group
};

ReduceGroups reduce_groups(const KernelContext& c, const Tensors& in) {
  const Tensor& x = in[0];
  auto ra = reduce_axes(c, in, x.rank());
  if (ra.noop) return {true, {}, 1};
  Shape kept = x.shape();
  for (auto a : ra.axes) kept[a] = 1;
  return {false, broadcast_map(kept, x.shape()),
          static_cast<double>(x.numel()) / std::max<double>(1, shape_numel(kept))};
}

// A reduction's gradient, element by element: d(element) gets g[group] * dy/dx, where the
// derivative sees the element, its group's result y and the group's element count.
using ReduceDeriv = std::function<double(double x, double y, double n)>;

ReferenceVjp reduce_vjp(ReduceDeriv d) {
  return [d](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
    const Tensor& x = in[0];
    Tensors r(in.size());
    auto [noop, map, n] = reduce_groups(c, in);
    auto g = grad_of(grads, out, 0), vx = x.to_f64(), y = out[0].to_f64();
    if (noop) {
      r[0] = grad_like(g, x);
      return r;
    }
    std::vector<double> gx(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      double gg = g[map[i]];
      gx[i] = gg == 0 ? 0 : gg * d(vx[i], y[map[i]], n);
    }
    r[0] = grad_like(gx, x);
    return r;
  };
}

// Max/Min: the gradient goes to the first element equal to the result in each group.
ReferenceVjp reduce_select_vjp() {
  return [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
    const Tensor& x = in[0];
    Tensors r(in.size());
    auto groups = reduce_groups(c, in);
    const auto& map = groups.map;
    auto g = grad_of(grads, out, 0), vx = x.to_f64(), y = out[0].to_f64();
    if (groups.noop) {
      r[0] = grad_like(g, x);
      return r;
    }
    std::vector<double> gx(vx.size(), 0.0);
    std::vector<bool> taken(y.size(), false);
    for (std::size_t i = 0; i < vx.size(); ++i)
      if (!taken[map[i]] && (vx[i] == y[map[i]] || (std::isnan(vx[i]) && std::isnan(y[map[i]])))) {
        taken[map[i]] = true;
        gx[i] = g[map[i]];
      }
    r[0] = grad_like(gx, x);
    return r;
  };
}

// ReduceProd: the product of the other elements (exact with zeros in the group).
Tensors reduce_prod_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                        const Tensors& grads) {
  const Tensor& x = in[0];
  Tensors r(in.size());
  auto groups = reduce_groups(c, in);
  const auto& map = groups.map;
  auto g = grad_of(grads, out, 0), vx = x.to_f64();
  if (groups.noop) {
    r[0] = grad_like(g, x);
    return r;
  }
  std::vector<double> nonzero(g.size(), 1.0), zeros(g.size(), 0.0);
  for (std::size_t i = 0; i < vx.size(); ++i) {
    if (vx[i] == 0)
      zeros[map[i]] += 1;
    else
      nonzero[map[i]] *= vx[i];
  }
  std::vector<double> gx(vx.size());
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = map[i];
    double others =
        zeros[k] == 0 ? nonzero[k] / vx[i] : (zeros[k] == 1 && vx[i] == 0 ? nonzero[k] : 0.0);
    gx[i] = g[k] * others;
  }
  r[0] = grad_like(gx, x);
  return r;
}

// Softmax: dx = y (g - sum(g y)); LogSoftmax: dx = g - exp(y) sum(g).
ReferenceVjp softmax_vjp(SoftmaxKind kind) {
  return
      [kind](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        const Tensor& x = in[0];
        auto [axis, outer, n, inner] = softmax_split(c, x.shape());
        (void)axis;
        auto g = grad_of(grads, out, 0), y = out[0].to_f64();
        std::vector<double> gx(g.size());
        for (std::int64_t o = 0; o < outer; ++o)
          for (std::int64_t i = 0; i < inner; ++i) {
            auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
            double s = 0;
            for (std::int64_t j = 0; j < n; ++j)
              s += kind == SoftmaxKind::Softmax ? g[at(j)] * y[at(j)] : g[at(j)];
            for (std::int64_t j = 0; j < n; ++j)
              gx[at(j)] = kind == SoftmaxKind::Softmax ? y[at(j)] * (g[at(j)] - s)
                                                       : g[at(j)] - std::exp(y[at(j)]) * s;
          }
        Tensors r(in.size());
        r[0] = grad_like(gx, x);
        return r;
      };
}

// Backward rounding of the softmax family, derived once (docs/error-models.md). Softmax:
// dx_j = y_j (g_j - s), s = sum_k g_k y_k: the products and the n-term sum carry kappa(n) u S
// (S = sum_k |g_k y_k|), the difference u (|g_j| + S), the last product u |dx_j|; so
// C_j = |y_j| ((kappa(n) + 2) S + 2 |g_j|). LogSoftmax: dx_j = g_j - p_j G, p_j = exp(y_j),
// G = sum_k g_k: the sum carries kappa(n) u sum|g|, exp(y_j) 4 ulp, the product and the
// difference one rounding each; so C_j = p_j (kappa(n) sum|g| + 6 |G|) + |g_j|.
Magnitudes softmax_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                 const Tensors& grads, const AccumulationBound& bound,
                                 SoftmaxKind kind) {
  auto [axis, outer, n, inner] = softmax_split(c, in[0].shape());
  (void)axis;
  auto g = grad_of(grads, out, 0), y = out[0].to_f64();
  double k = bound.kappa(static_cast<double>(n));
  Magnitudes m(in.size());
  m[0].resize(g.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return static_cast<std::size_t>((o * n + j) * inner + i); };
      double sum_abs = 0, sum = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        double t = kind == SoftmaxKind::Softmax ? g[at(j)] * y[at(j)] : g[at(j)];
        sum_abs += std::fabs(t);
        sum += t;
      }
      for (std::int64_t j = 0; j < n; ++j) {
        double gj = std::fabs(g[at(j)]);
        m[0][at(j)] = kind == SoftmaxKind::Softmax
                          ? std::fabs(y[at(j)]) * ((k + 2) * sum_abs + 2 * gj)
                          : std::exp(y[at(j)]) * (k * sum_abs + 6 * std::fabs(sum)) + gj;
      }
    }
  return m;
}

// ReduceMax / ReduceMin: each group's gradient goes to one of the elements equal to its result.
std::vector<GradientSet> reduce_select_subgradient(const KernelContext& c, const Tensors& in,
                                                   const Tensors& out, const Tensors& grads) {
  std::vector<GradientSet> sets(in.size());
  auto groups = reduce_groups(c, in);
  if (groups.noop || !is_floating(in[0].dtype())) return sets;
  auto g = grad_of(grads, out, 0), vx = in[0].to_f64(), y = out[0].to_f64();
  std::vector<std::vector<std::int64_t>> cand(y.size());
  for (std::size_t i = 0; i < vx.size(); ++i)
    if (vx[i] == y[groups.map[i]]) cand[groups.map[i]].push_back(static_cast<std::int64_t>(i));
  TieCollector t(vx.size());
  for (std::size_t o = 0; o < y.size(); ++o)
    if (!cand[o].empty()) t.add(cand[o], g[o]);
  sets[0] = t.finish();
  return sets;
}

// TopK: the values equal to a selected one may trade places; each takes one of the gradients of
// the outputs holding that value, or none when more elements than outputs hold it.
std::vector<GradientSet> topk_subgradient(const KernelContext& c, const Tensors& in,
                                          const Tensors& out, const Tensors& grads) {
  std::vector<GradientSet> sets(in.size());
  const Tensor& x = in[0];
  if (!is_floating(x.dtype())) return sets;
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  AxisView v(x.shape(), axis);
  std::int64_t k = out[0].shape()[axis], n = x.shape()[axis];
  auto g = grad_of(grads, out, 0), vx = x.to_f64(), vals = out[0].to_f64();
  GradientSet s{std::vector<double>(vx.size(), 0.0), std::vector<double>(vx.size(), 0.0),
                std::vector<std::int64_t>(vx.size(), -1)};
  bool any = false;
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      std::map<double, std::vector<std::int64_t>> outputs_of;  // selected value -> positions
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t p = (o * k + j) * v.inner + i;
        if (!std::isnan(vals[p])) outputs_of[vals[p]].push_back(p);
      }
      for (const auto& [value, pos] : outputs_of) {
        std::vector<std::int64_t> holders;
        for (std::int64_t j = 0; j < n; ++j)
          if (vx[v.at(o, j, i)] == value) holders.push_back(v.at(o, j, i));
        if (holders.empty()) continue;
        if (holders.size() == 1 && pos.size() == 1) {
          s.lo[holders[0]] = s.hi[holders[0]] = g[pos[0]];
          continue;
        }
        any = true;
        // Each holder takes one of these outputs' gradients, or none when there are more
        // holders than outputs; together they take all of them.
        double lo = holders.size() > pos.size() ? 0.0 : INFINITY, hi = -lo;
        for (auto p : pos) {
          lo = std::min(lo, g[p]);
          hi = std::max(hi, g[p]);
        }
        for (auto e : holders) {
          s.lo[e] = lo;
          s.hi[e] = hi;
          s.group[e] = holders[0];
        }
      }
    }
  if (any) sets[0] = std::move(s);
  return sets;
}

// TopK: each value's gradient goes to the element its index names.
Tensors topk_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                 const Tensors& grads) {
  const Tensor& x = in[0];
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  AxisView v(x.shape(), axis);
  std::int64_t k = out[0].shape()[axis];
  auto g = grad_of(grads, out, 0);
  auto idx = out[1].to_i64();
  std::vector<double> gx(static_cast<std::size_t>(x.numel()), 0.0);
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t j = 0; j < k; ++j)
      for (std::int64_t i = 0; i < v.inner; ++i) {
        std::int64_t src = (o * k + j) * v.inner + i;
        gx[v.at(o, idx[src], i)] += g[src];
      }
  Tensors res(in.size());
  res[0] = grad_like(gx, x);
  return res;
}

void register_reduce_vjps(OpRegistry& r) {
  r.set_vjp("TopK", topk_vjp);
  // Piecewise constant in its input.
  r.set_vjp("Hardmax", [](const KernelContext&, const Tensors& in, const Tensors&, const Tensors&) {
    Tensors res(in.size());
    res[0] = grad_like(std::vector<double>(static_cast<std::size_t>(in[0].numel()), 0.0), in[0]);
    return res;
  });
  r.set_vjp("ReduceSum", reduce_vjp([](double, double, double) { return 1.0; }));
  r.set_vjp("ReduceMean", reduce_vjp([](double, double, double n) { return 1 / n; }));
  r.set_vjp("ReduceL1", reduce_vjp([](double x, double, double) {
              return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
            }));
  r.set_vjp("ReduceL2", reduce_vjp([](double x, double y, double) { return y > 0 ? x / y : 0.0; }));
  r.set_vjp("ReduceSumSquare", reduce_vjp([](double x, double, double) { return 2 * x; }));
  r.set_vjp("ReduceLogSum", reduce_vjp([](double, double y, double) { return std::exp(-y); }));
  r.set_vjp("ReduceLogSumExp",
            reduce_vjp([](double x, double y, double) { return std::exp(x - y); }));
  r.set_vjp("ReduceMax", reduce_select_vjp());
  r.set_vjp("ReduceMin", reduce_select_vjp());
  r.set_subgradient("ReduceMax", reduce_select_subgradient);
  r.set_subgradient("ReduceMin", reduce_select_subgradient);
  r.set_subgradient("TopK", topk_subgradient);
  // |x| at 0 (ReduceL1), and the norm of an all-zero group (ReduceL2): any value within the
  // unit ball times the group's gradient.
  for (const char* t : {"ReduceL1", "ReduceL2"}) {
    bool l1 = std::string(t) == "ReduceL1";
    r.set_subgradient(t, [l1](const KernelContext& c, const Tensors& in, const Tensors& out,
                              const Tensors& grads) {
      std::vector<GradientSet> sets(in.size());
      auto groups = reduce_groups(c, in);
      if (groups.noop || !is_floating(in[0].dtype())) return sets;
      auto g = grad_of(grads, out, 0), vx = in[0].to_f64(), y = out[0].to_f64();
      GradientSet s;
      for (std::size_t i = 0; i < vx.size(); ++i) {
        auto k = groups.map[i];
        if (!(l1 ? vx[i] == 0 : y[k] == 0)) continue;
        if (s.lo.empty()) s.lo.assign(vx.size(), NAN), s.hi.assign(vx.size(), NAN);
        s.lo[i] = -std::fabs(g[k]);
        s.hi[i] = std::fabs(g[k]);
      }
      sets[0] = std::move(s);
      return sets;
    });
  }
  r.set_vjp("ReduceProd", reduce_prod_vjp);
  r.set_vjp("Softmax", softmax_vjp(SoftmaxKind::Softmax));
  r.set_vjp("LogSoftmax", softmax_vjp(SoftmaxKind::LogSoftmax));
  // CumSum is linear; its adjoint is the cumulative sum the other way.
  r.set_vjp("CumSum", [](const KernelContext& c, const Tensors& in, const Tensors& out,
                         const Tensors& grads) {
    Node flipped = c.node;
    flipped.attrs["reverse"] = Attribute::of_int(c.node.attr_i("reverse", 0) ? 0 : 1);
    Tensor g = Tensor::from_f64(grad_of(grads, out, 0), out[0].shape(), DType::Float64);
    auto gx = cumsum(KernelContext{flipped, c.opset}, {g, in[1]})[0].to_f64();
    Tensors r(in.size());
    r[0] = grad_like(gx, in[0]);
    return r;
  });
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  auto sum = [](double a, double x) { return a + x; };
  add_reduce(r, "ReduceSum", {0.0, sum, id});
  add_reduce(r, "ReduceMean",
             {0.0, sum, [](double a, std::int64_t n) { return a / static_cast<double>(n); }});
  add_reduce(
      r, "ReduceMax",
      {-kInf,
       [](double a, double x) { return std::isnan(a) || std::isnan(x) ? NAN : std::max(a, x); },
       id});
  add_reduce(
      r, "ReduceMin",
      {kInf,
       [](double a, double x) { return std::isnan(a) || std::isnan(x) ? NAN : std::min(a, x); },
       id});
  add_reduce(r, "ReduceProd", {1.0, [](double a, double x) { return a * x; }, id});
  add_reduce(r, "ReduceL1", {0.0, [](double a, double x) { return a + std::fabs(x); }, id});
  add_reduce(r, "ReduceL2",
             {0.0, [](double a, double x) { return a + x * x; },
              [](double a, std::int64_t) { return std::sqrt(a); }});
  add_reduce(r, "ReduceSumSquare", {0.0, [](double a, double x) { return a + x * x; }, id});
  add_reduce(r, "ReduceLogSum", {0.0, sum, [](double a, std::int64_t) { return std::log(a); }});
  r.add(
      {"ReduceLogSumExp", "reduce", [](const KernelContext& c, const Tensors& in) {
         // Stable: log(sum(exp(x - max))) + max, with max from a first reduction.
         auto mx = reduce(c, in, {-kInf, [](double a, double x) { return std::max(a, x); }, id})[0];
         const Tensor& x = input(c, in, 0);
         auto axes = reduce_axes(c, in, x.rank()).axes;
         Shape kept = x.shape();
         for (auto a : axes) kept[a] = 1;
         auto map = broadcast_map(kept, x.shape());
         auto m = mx.to_f64();
         auto vx = x.to_f64();
         std::vector<double> s(m.size(), 0.0);
         for (std::int64_t i = 0; i < x.numel(); ++i) {
           double mm = std::isfinite(m[map[i]]) ? m[map[i]] : 0.0;
           s[map[i]] += std::exp(vx[i] - mm);
         }
         for (std::size_t g = 0; g < s.size(); ++g)
           s[g] = std::log(s[g]) + (std::isfinite(m[g]) ? m[g] : 0.0);
         return Tensors{Tensor::from_f64(s, mx.shape(), x.dtype())};
       }});
  r.add({"ArgMax", "reduce",
         [](const KernelContext& c, const Tensors& in) { return arg_reduce(c, in, true); }});
  r.add({"ArgMin", "reduce",
         [](const KernelContext& c, const Tensors& in) { return arg_reduce(c, in, false); }});
  r.add({"TopK", "reduce", topk});
  r.add({"CumSum", "reduce", cumsum});
  r.add({"Softmax", "reduce", [](const KernelContext& c, const Tensors& in) {
           return softmax(c, in, SoftmaxKind::Softmax);
         }});
  r.add({"LogSoftmax", "reduce", [](const KernelContext& c, const Tensors& in) {
           return softmax(c, in, SoftmaxKind::LogSoftmax);
         }});
  r.add({"Hardmax", "reduce", [](const KernelContext& c, const Tensors& in) {
           return softmax(c, in, SoftmaxKind::Hardmax);
         }});

  register_reduce_vjps(r);

  using namespace error_models;
  for (const char* t : {"ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "Hardmax"})
    r.set_error_model(t, exact());
  // exp of the inputs overflows float32 above 88.72 (without the max subtracted).
  for (const char* t : {"Softmax", "LogSoftmax", "ReduceLogSumExp"})
    r.set_domain(t, {{0}, [](const Node&) { return std::vector<double>{0, 88.7228, 100, -100}; }});
  r.set_domain("ReduceLogSum", {{0}, [](const Node&) { return std::vector<double>{0, 1}; }});
  auto reduced = [](const KernelContext& c, const Tensors& in) {
    const Tensor& x = in[0];
    auto ra = reduce_axes(c, in, x.rank());
    if (ra.noop) return 1.0;
    double n = 1;
    for (auto a : ra.axes) n *= static_cast<double>(x.shape()[a]);
    return n;
  };
  r.set_error_model("ReduceSum", accumulation(reduced, "kappa(n) * sum|x|, 1 ulp", 1));
  r.set_error_model("ReduceMean", accumulation(reduced, "kappa(n) * mean|x|, 2 ulp"));
  r.set_error_model("ReduceL1", accumulation(reduced, "kappa(n) * |y|, 1 ulp", 1));
  r.set_error_model("ReduceSumSquare", accumulation(reduced, "kappa(n) * |y|, 2 ulp"));
  r.set_error_model("ReduceL2", accumulation(reduced, "kappa(n) * |y|, 4 ulp", 4));
  r.set_error_model("ReduceProd", accumulation(reduced, "kappa(n) * |y|, 2 ulp"));
  r.set_error_model("ReduceLogSum",
                    condition(
                        [reduced](const KernelContext& c, const Tensors& in, const Tensors& ref,
                                  const AccumulationBound& bound) {
                          // log of an n-term sum: absolute error kappa(n) * sum|x| / |sum x|.
                          auto sum_abs = OpRegistry::instance()
                                             .find("ReduceSum")
                                             ->reference(c, absolute_f64(in))[0]
                                             .to_f64();
                          auto y = ref[0].to_f64();
                          double k = bound.kappa(reduced(c, in));
                          for (std::size_t i = 0; i < y.size(); ++i)
                            y[i] = k * sum_abs[i] / std::exp(y[i]) + 2 * std::fabs(y[i]);
                          return Magnitudes{y};
                        },
                        "kappa(n) * sum|x| / |sum x| + 2|y|, 4 ulp"));
  r.set_error_model("CumSum", accumulation(
                                  [](const KernelContext& c, const Tensors& in) {
                                    const Tensor& x = in[0];
                                    auto axis = in[1].to_f64().at(0);
                                    auto a =
                                        norm_axis(c, static_cast<std::int64_t>(axis), x.rank());
                                    return static_cast<double>(x.shape()[a]);
                                  },
                                  "kappa(axis length) * cumsum(|x|), 1 ulp", 1));
  r.set_error_model("Softmax", condition(
                                   [](const KernelContext& c, const Tensors& in, const Tensors&,
                                      const AccumulationBound& bound) {
                                     AxisSplit split = softmax_split(c, in[0].shape());
                                     return Magnitudes{softmax_magnitude(
                                         in[0].to_f64(), split,
                                         bound.kappa(static_cast<double>(split.n)), false)};
                                   },
                                   "p_i * (|x_i - m| + sum_j p_j |x_j - m| + kappa(n) + 4)"
                                   " with m = max x, 4 ulp"));
  r.set_error_model(
      "LogSoftmax",
      condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            AxisSplit split = softmax_split(c, in[0].shape());
            return Magnitudes{softmax_magnitude(in[0].to_f64(), split,
                                                bound.kappa(static_cast<double>(split.n)), true)};
          },
          "|x_i| + |m| + sum_j p_j (|x_j| + |m|) + kappa(n) + 2 |log S| + 2 |y_i|, 4 ulp"));
  r.set_backward_error_model(
      "Softmax",
      [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
         const AccumulationBound& bound) {
        return softmax_vjp_magnitude(c, in, out, grads, bound, SoftmaxKind::Softmax);
      },
      "|y_j| ((kappa(n) + 2) sum_k |g_k y_k| + 2|g_j|), 1 ulp", 1);
  r.set_backward_error_model(
      "LogSoftmax",
      [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
         const AccumulationBound& bound) {
        return softmax_vjp_magnitude(c, in, out, grads, bound, SoftmaxKind::LogSoftmax);
      },
      "exp(y_j) (kappa(n) sum|g| + 6|sum g|) + |g_j|, 1 ulp", 1);
  r.set_error_model("ReduceLogSumExp",
                    condition(
                        [reduced](const KernelContext& c, const Tensors& in, const Tensors& ref,
                                  const AccumulationBound& bound) {
                          // m + log(sum exp(x - m)): the same terms as LogSoftmax, per reduced
                          // group.
                          const Tensor& x = in[0];
                          auto axes = reduce_axes(c, in, x.rank()).axes;
                          Shape kept = x.shape();
                          for (auto a : axes) kept[a] = 1;
                          auto map = broadcast_map(kept, x.shape());
                          auto vx = x.to_f64();
                          auto y = ref[0].to_f64();
                          std::vector<double> m(y.size(), -kInf), wsum(y.size(), 0.0);
                          for (std::int64_t i = 0; i < x.numel(); ++i)
                            m[map[i]] = std::max(m[map[i]], vx[i]);
                          for (std::int64_t i = 0; i < x.numel(); ++i) {
                            double p = std::isfinite(y[map[i]]) ? std::exp(vx[i] - y[map[i]]) : 0;
                            if (p > 0)
                              wsum[map[i]] += p * (std::fabs(vx[i]) + std::fabs(m[map[i]]));
                          }
                          double k = bound.kappa(reduced(c, in));
                          for (std::size_t g = 0; g < y.size(); ++g)
                            y[g] = std::fabs(m[g]) + wsum[g] + k + 2 * std::fabs(y[g]);
                          return Magnitudes{y};
                        },
                        "|m| + sum_j p_j (|x_j| + |m|) + kappa(n) + 2|y|, 4 ulp"));
}

}  // namespace metaop
