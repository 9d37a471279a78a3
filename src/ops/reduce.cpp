// Reductions and along-axis meta operators: Reduce*, ArgMax/ArgMin, TopK, CumSum (the softmax
// family is in softmax.cpp). The forward kernels and gradients come first, then one block per op
// declaring its reference, VJP, error model, domain and danger zones together.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Reduction {
  double init;
  std::function<double(double, double)> step;          // acc, x -> acc
  std::function<double(double, std::int64_t)> finish;  // acc, count -> y
};

Tensors reduce(const KernelContext& c, const Tensors& in, const Reduction& red) {
  const Tensor& x = input(c, in, 0);
  ReduceLayout l = reduce_layout(c, in);
  if (l.noop) return {x};
  auto vx = x.to_f64();
  std::vector<double> acc(static_cast<std::size_t>(l.groups), red.init);
  for (std::int64_t i = 0; i < x.numel(); ++i) acc[l.map[i]] = red.step(acc[l.map[i]], vx[i]);
  for (auto& a : acc) a = red.finish(a, l.count);
  // An empty set's -inf (ReduceMax) or +inf (ReduceMin) in a type without infinities: the type's
  // least or greatest value (ReduceMax-20: false < true for bool).
  if (!is_floating(x.dtype()))
    for (auto& a : acc)
      if (std::isinf(a)) a = a < 0 ? integer_lowest(x.dtype()) : integer_largest(x.dtype());
  return {Tensor::from_f64(acc, l.out_shape, x.dtype())};
}

double id(double a, std::int64_t) {
  return a;
}

// The input elements of each output element of a Reduce* node (flat indices), for its danger
// zones.
std::vector<std::vector<std::int64_t>> reduction_members(const KernelContext& c,
                                                         const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto [axes, noop, keepdims] = reduce_axes(c, in, x.rank());
  std::vector<std::vector<std::int64_t>> groups;
  if (noop) {
    for (std::int64_t i = 0; i < x.numel(); ++i) groups.push_back({i});
    return groups;
  }
  auto [kept, map] = groups_over(x.shape(), axes);
  groups.resize(static_cast<std::size_t>(shape_numel(kept)));
  for (std::int64_t i = 0; i < x.numel(); ++i)
    groups[static_cast<std::size_t>(map[i])].push_back(i);
  return groups;
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
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  bool keepdims = attr_i(c, "keepdims") != 0,
       last = attr_i_or(c, "select_last_index", 0) != 0;  // from opset 12
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
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  bool largest = attr_i_or(c, "largest", 1) != 0;  // from opset 11; before, the largest
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
  bool exclusive = attr_i(c, "exclusive") != 0, reverse = attr_i(c, "reverse") != 0;
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
  auto [kept, map] = groups_over(x.shape(), ra.axes);
  return {false, std::move(map),
          static_cast<double>(x.numel()) / std::max<double>(1, shape_numel(kept))};
}

// A reduction's gradient, element by element: d(element) gets g[group] * dy/dx, where the
// derivative sees the element, its group's result y and the group's element count.
using ReduceDeriv = std::function<double(double x, double y, double n)>;

ReferenceVjp reduce_vjp(const ReduceDeriv& d) {
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
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
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
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
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

// ReduceL1 (|x| at 0) and ReduceL2 (the norm of an all-zero group): any value within the unit
// ball times the group's gradient.
SubgradientFn norm_subgradient(bool l1) {
  return [l1](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
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
  };
}

// CumSum is linear; its adjoint is the cumulative sum the other way.
Tensors cumsum_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads) {
  Node flipped = c.node;
  flipped.attrs["reverse"] = Attribute::of_int(attr_i(c, "reverse") ? 0 : 1);
  Tensor g = Tensor::from_f64(grad_of(grads, out, 0), out[0].shape(), DType::Float64);
  auto gx = cumsum(KernelContext{flipped, c.opset}, {g, in[1]})[0].to_f64();
  Tensors r(in.size());
  r[0] = grad_like(gx, in[0]);
  return r;
}

// Stable: log(sum(exp(x - max))) + max, with max from a first reduction.
Tensors reduce_log_sum_exp(const KernelContext& c, const Tensors& in) {
  auto mx = reduce(c, in, {-kInf, [](double a, double x) { return std::max(a, x); }, id})[0];
  const Tensor& x = input(c, in, 0);
  auto axes = reduce_axes(c, in, x.rank()).axes;
  auto [kept, map] = groups_over(x.shape(), axes);
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
}

// ---- error models

// The number of elements each output element reduces.
double reduced_count(const KernelContext& c, const Tensors& in) {
  const Tensor& x = in[0];
  auto ra = reduce_axes(c, in, x.rank());
  if (ra.noop) return 1.0;
  double n = 1;
  for (auto a : ra.axes) n *= static_cast<double>(x.shape()[a]);
  return n;
}

// log of an n-term sum: absolute error kappa(n) * sum|x| / |sum x|.
Magnitudes reduce_log_sum_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                                    const AccumulationBound& bound) {
  auto sum_abs =
      OpRegistry::instance().find("ReduceSum")->reference(c, absolute_f64(in))[0].to_f64();
  auto y = ref[0].to_f64();
  double k = bound.kappa(reduced_count(c, in));
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = k * sum_abs[i] / std::exp(y[i]) + 2 * std::fabs(y[i]);
  Magnitudes m;
  m.push_back(std::move(y));
  return m;
}

// GCC 12 reports a free of a non-heap pointer in this function's inlined vector destructors (a
// false positive of -Wfree-nonheap-object, GCC bug 108088; AddressSanitizer runs it clean).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
// m + log(sum exp(x - m)): the same terms as LogSoftmax, per reduced group.
Magnitudes reduce_log_sum_exp_magnitude(const KernelContext& c, const Tensors& in,
                                        const Tensors& ref, const AccumulationBound& bound) {
  const Tensor& x = in[0];
  auto axes = reduce_axes(c, in, x.rank()).axes;
  auto [kept, map] = groups_over(x.shape(), axes);
  auto vx = x.to_f64();
  Magnitudes mags(1, ref[0].to_f64());
  auto& y = mags[0];
  std::vector<double> m(y.size(), -kInf);
  std::vector<double> wsum(y.size(), 0.0);
  for (std::int64_t i = 0; i < x.numel(); ++i) m[map[i]] = std::max(m[map[i]], vx[i]);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    double p = std::isfinite(y[map[i]]) ? std::exp(vx[i] - y[map[i]]) : 0;
    if (p > 0) wsum[map[i]] += p * (std::fabs(vx[i]) + std::fabs(m[map[i]]));
  }
  double k = bound.kappa(reduced_count(c, in));
  for (std::size_t g = 0; g < y.size(); ++g)
    y[g] = std::fabs(m[g]) + wsum[g] + k + 2 * std::fabs(y[g]);
  return mags;
}
#pragma GCC diagnostic pop

// ReduceLogSumExp's gradient, g exp(x - y), as a kernel computes it from its own output y: the
// argument x - y carries y's forward error (the forward magnitude C_y plus its 4 ulp, at most
// 8|y|, units of u) and its own rounding u|x - y|, which exp turns into relative errors of the
// gradient; the product with g rounds once more (docs/error-models.md, "ReduceLogSumExp
// backward"). Without the |x - y| term, a correct kernel scored up to 8 at logit spreads of 3 to
// 30 (x - y rounded in float32 before exp).
Magnitudes reduce_log_sum_exp_vjp_magnitude(const KernelContext& c, const Tensors& in,
                                            const Tensors& out, const Tensors& grads,
                                            const AccumulationBound& bound) {
  Magnitudes m(in.size());
  const Tensor& x = in[0];
  if (!is_floating(x.dtype())) return m;
  auto [noop, map, n] = reduce_groups(c, in);
  auto g = grad_of(grads, out, 0), vx = x.to_f64(), y = out[0].to_f64();
  m[0].resize(vx.size());
  if (noop) {
    for (std::size_t i = 0; i < vx.size(); ++i) m[0][i] = std::fabs(g[i]);
    return m;
  }
  Magnitudes fwd = reduce_log_sum_exp_magnitude(c, in, out, bound);
  for (std::size_t i = 0; i < vx.size(); ++i) {
    auto k = static_cast<std::size_t>(map[i]);
    double d = std::exp(vx[i] - y[k]);
    m[0][i] =
        g[k] == 0 || !std::isfinite(d)
            ? 0
            : std::fabs(g[k]) * d * (std::fabs(vx[i] - y[k]) + fwd[0][k] + 8 * std::fabs(y[k]) + 2);
  }
  return m;
}

double cumsum_length(const KernelContext& c, const Tensors& in) {
  const Tensor& x = in[0];
  auto axis = in[1].to_f64().at(0);
  auto a = norm_axis(c, static_cast<std::int64_t>(axis), x.rank());
  return static_cast<double>(x.shape()[a]);
}

// A product of nonzero terms may round to 0; a group with a zero factor is exactly 0.
std::vector<bool> product_has_zero(const KernelContext& c, const Tensors& in, const Tensors&) {
  auto v = in[0].to_f64();
  std::vector<bool> exact;
  for (const auto& g : reduction_members(c, in)) {
    bool zero = false;
    for (auto e : g) zero |= v[e] == 0;
    exact.push_back(zero);
  }
  return exact;
}

ReferenceForward reduction(const Reduction& red) {
  return [red](const KernelContext& c, const Tensors& in) { return reduce(c, in, red); };
}

double nan_max(double a, double x) {
  return std::isnan(a) || std::isnan(x) ? NAN : std::max(a, x);
}
double nan_min(double a, double x) {
  return std::isnan(a) || std::isnan(x) ? NAN : std::min(a, x);
}
double add(double a, double x) {
  return a + x;
}
double add_square(double a, double x) {
  return a + x * x;
}

void register_norm_reductions(OpRegistry& r);

// The Reduce* ops: one value per group of the reduced axes (the norms and log-sums below).
void register_reductions(OpRegistry& r) {
  using namespace error_models;
  r.op("ReduceSum", Family::reduce, reduction({0.0, add, id}))
      .vjp(reduce_vjp([](double, double, double) { return 1.0; }))
      .error(accumulation(reduced_count, "kappa(n) * sum|x|, 1 ulp", 1))
      .danger({danger::output_overflow()})
      .cases({{13, {case_input::floats({2, 3, 4}), case_input::ints({1}, {1})}}})
      .explain({.form = ExplainForm::reduce, .cancellation = true, .telling = true});

  r.op("ReduceMean", Family::reduce,
       reduction({0.0, add, [](double a, std::int64_t n) { return a / static_cast<double>(n); }}))
      .vjp(reduce_vjp([](double, double, double n) { return 1 / n; }))
      .error(accumulation(reduced_count, "kappa(n) * mean|x|, 2 ulp"))
      .explain({.form = ExplainForm::reduce, .cancellation = true, .mean = true, .telling = true});

  r.op("ReduceMax", Family::reduce, reduction({-kInf, nan_max, id}))
      .vjp(reduce_select_vjp())
      .subgradient(reduce_select_subgradient)
      .error(exact())
      .cases({{13, {case_input::whole({2, 3, 4, 5})}, {{"axes", Attribute::of_ints({3})}}}})
      .explain({.form = ExplainForm::reduce});

  r.op("ReduceMin", Family::reduce, reduction({kInf, nan_min, id}))
      .vjp(reduce_select_vjp())
      .subgradient(reduce_select_subgradient)
      .error(exact())
      .cases({{13, {case_input::whole({2, 3, 4, 5})}, {{"axes", Attribute::of_ints({1})}}}})
      .explain({.form = ExplainForm::reduce});

  r.op("ReduceProd", Family::reduce, reduction({1.0, [](double a, double x) { return a * x; }, id}))
      .vjp(reduce_prod_vjp)
      .error(accumulation(reduced_count, "kappa(n) * |y|, 2 ulp"))
      .danger({danger::output_overflow(),
               danger::output_underflow("product of nonzero terms rounds to 0", product_has_zero)})
      .explain({.form = ExplainForm::reduce});

  register_norm_reductions(r);
}

// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp.
void register_norm_reductions(OpRegistry& r) {
  using namespace error_models;
  // exp of the inputs overflows float32 above 88.72 (without the max subtracted).
  auto exp_domain = [](const KernelContext&) { return std::vector<double>{0, 88.7228, 100, -100}; };

  r.op("ReduceL1", Family::reduce,
       reduction({0.0, [](double a, double x) { return a + std::fabs(x); }, id}))
      .vjp(reduce_vjp([](double x, double, double) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }))
      .subgradient(norm_subgradient(true))
      .error(accumulation(reduced_count, "kappa(n) * |y|, 1 ulp", 1))
      .danger({danger::output_overflow()})
      .explain({.form = ExplainForm::reduce});

  r.op("ReduceL2", Family::reduce,
       reduction({0.0, add_square, [](double a, std::int64_t) { return std::sqrt(a); }}))
      .vjp(reduce_vjp([](double x, double y, double) { return y > 0 ? x / y : 0.0; }))
      .subgradient(norm_subgradient(false))
      .error(accumulation(reduced_count, "kappa(n) * |y|, 4 ulp", 4))
      .danger({danger::output_overflow()})
      .explain({.form = ExplainForm::reduce});

  r.op("ReduceSumSquare", Family::reduce, reduction({0.0, add_square, id}))
      .vjp(reduce_vjp([](double x, double, double) { return 2 * x; }))
      .error(accumulation(reduced_count, "kappa(n) * |y|, 2 ulp"))
      .danger({danger::output_overflow()})
      .explain({.form = ExplainForm::reduce});

  r.op("ReduceLogSum", Family::reduce,
       reduction({0.0, add, [](double a, std::int64_t) { return std::log(a); }}))
      .vjp(reduce_vjp([](double, double y, double) { return std::exp(-y); }))
      .error(condition(reduce_log_sum_magnitude, "kappa(n) * sum|x| / |sum x| + 2|y|, 4 ulp"))
      .domain({{0},
               [](const KernelContext&) {
                 return std::vector<double>{0, 1};
               }})
      .danger({danger::group_sum_below_zero(DangerKind::LogDomain, 0, reduction_members,
                                            "sum reaches 0 (-inf) or below (NaN)")})
      .explain({.form = ExplainForm::reduce});

  // Subtracts the maximum: finite for every finite input.
  r.op("ReduceLogSumExp", Family::reduce, reduce_log_sum_exp)
      .vjp(reduce_vjp([](double x, double y, double) { return std::exp(x - y); }))
      .error(condition(reduce_log_sum_exp_magnitude,
                       "|m| + sum_j p_j (|x_j| + |m|) + kappa(n) + 2|y|, 4 ulp"))
      .backward_error(reduce_log_sum_exp_vjp_magnitude,
                      "|g| exp(x - y) (|x - y| + C_y + 8|y| + 2), C_y the forward's magnitude")
      .domain({{0}, exp_domain})
      .faults({"nomax"})
      .cases({{13, {case_input::floats({2, 3, 4})}, {{"axes", Attribute::of_ints({1})}}}})
      .explain({.form = ExplainForm::reduce});
}

// The ops along one axis that select or accumulate rather than reduce it to a value.
void register_axis_ops(OpRegistry& r) {
  using namespace error_models;
  r.op("ArgMax", Family::reduce, [](const KernelContext& c, const Tensors& in) {
     return arg_reduce(c, in, true);
   }).error(exact());

  r.op("ArgMin", Family::reduce, [](const KernelContext& c, const Tensors& in) {
     return arg_reduce(c, in, false);
   }).error(exact());

  r.op("TopK", Family::reduce, topk)
      .vjp(topk_vjp)
      .subgradient(topk_subgradient)
      .error(exact())
      .cases({{13, {case_input::whole({2, 3, 4, 5}), case_input::ints({1}, {3})}, {}, 2}});

  r.op("CumSum", Family::reduce, cumsum)
      .vjp(cumsum_vjp)
      .error(accumulation(cumsum_length, "kappa(axis length) * cumsum(|x|), 1 ulp", 1))
      .danger({danger::output_overflow()})
      .cases({{13, {case_input::floats({2, 3, 4}), case_input::ints({}, {1})}}});
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  register_reductions(r);
  register_axis_ops(r);
  register_softmax_ops(r);
}

}  // namespace metaop
