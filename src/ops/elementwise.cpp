// Element-wise meta operators: unary math and activations, broadcasting binary arithmetic,
// comparisons and logic, variadic Min/Max/Mean/Sum, Where, Clip, Cast and friends.
// Each reference computes in float64 on exactly widened inputs and rounds once to the output.
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

double nan_max(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
}
double nan_min(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
}

// Broadcasting n-ary map: out[i] = f(in0[map0[i]], in1[map1[i]], ...).
Tensor broadcast_apply(const KernelContext& c, const std::vector<const Tensor*>& ins,
                       DType out_dtype, const std::function<double(const double*)>& f) {
  std::vector<Shape> shapes;
  for (auto* t : ins) shapes.push_back(t->shape());
  Shape out = broadcast_shapes(c, shapes);
  std::int64_t n = shape_numel(out);
  std::vector<std::vector<double>> vals;
  std::vector<std::vector<std::int64_t>> maps;
  for (auto* t : ins) {
    vals.push_back(t->to_f64());
    maps.push_back(t->shape() == out ? std::vector<std::int64_t>{}
                                     : broadcast_map(t->shape(), out));
  }
  std::vector<double> res(n), args(ins.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < ins.size(); ++k)
      args[k] = vals[k][maps[k].empty() ? i : maps[k][i]];
    res[i] = f(args.data());
  }
  return Tensor::from_f64(res, out, out_dtype);
}

void check_same_dtype(const KernelContext& c, const Tensors& in) {
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != in[0].dtype())
      fail("{}: input #{} is {} but input #0 is {}", c.node.label(), i, dtype_name(in[i].dtype()),
           dtype_name(in[0].dtype()));
}

// Before opset 7, binary ops broadcast only with broadcast=1, aligning B with A's dims
// starting at `axis` (default: trailing dims). Returns B reshaped for numpy broadcasting.
Tensor legacy_broadcast(const KernelContext& c, const Tensor& a, const Tensor& b) {
  if (c.node.attr_i("broadcast", 0) == 0) {
    if (a.shape() != b.shape())
      fail("{}: shapes {} and {} differ and broadcast=0 (opset {})", c.node.label(),
           shape_str(a.shape()), shape_str(b.shape()), c.opset);
    return b;
  }
  std::int64_t axis = c.node.attr_i("axis", a.rank() - b.rank());
  if (axis < 0) axis += a.rank();
  if (axis < 0 || axis + b.rank() > a.rank())
    fail("{}: cannot align {} with {} at axis {}", c.node.label(), shape_str(b.shape()),
         shape_str(a.shape()), axis);
  Shape s(static_cast<std::size_t>(axis), 1);
  s.insert(s.end(), b.shape().begin(), b.shape().end());
  s.resize(static_cast<std::size_t>(a.rank()), 1);
  return b.reshaped(s);
}

using BinaryFn = std::function<double(double, double)>;
enum class Out { Same, Bool };

void add_binary(OpRegistry& r, const std::string& type,
                std::function<BinaryFn(const KernelContext&, DType)> make, Out out = Out::Same,
                bool same_dtype = true) {
  r.add({type, "elementwise", [=](const KernelContext& c, const Tensors& in) {
           const Tensor& a = input(c, in, 0);
           Tensor b = input(c, in, 1);
           if (same_dtype) check_same_dtype(c, in);
           if (c.opset < 7) b = legacy_broadcast(c, a, b);
           BinaryFn f = make(c, a.dtype());
           DType dt = out == Out::Bool ? DType::Bool : a.dtype();
           return Tensors{
               broadcast_apply(c, {&a, &b}, dt, [&](const double* v) { return f(v[0], v[1]); })};
         }});
}

void add_binary(OpRegistry& r, const std::string& type, BinaryFn f, Out out = Out::Same) {
  add_binary(
      r, type, [f](const KernelContext&, DType) { return f; }, out);
}

void add_variadic(OpRegistry& r, const std::string& type, BinaryFn combine, bool mean = false) {
  r.add({type, "elementwise", [=](const KernelContext& c, const Tensors& in) {
           if (in.empty()) fail("{}: needs at least one input", c.node.label());
           check_same_dtype(c, in);
           std::vector<const Tensor*> ins;
           for (const auto& t : in) ins.push_back(&t);
           std::size_t n = ins.size();
           return Tensors{broadcast_apply(c, ins, in[0].dtype(), [&](const double* v) {
             double acc = v[0];
             for (std::size_t k = 1; k < n; ++k) acc = combine(acc, v[k]);
             return mean ? acc / static_cast<double>(n) : acc;
           })};
         }});
}

// --- gradients

// Variadic Max / Min at a tie: the output's gradient may go to any of the tied inputs, or be
// split among them.
SubgradientFn variadic_tie_subgradient() {
  return [](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    const Shape& os = out[0].shape();
    auto g = grad_of(grads, out, 0), y = out[0].to_f64();
    std::vector<std::vector<double>> vals(in.size());
    std::vector<std::vector<std::int64_t>> maps(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) {
      vals[k] = in[k].to_f64();
      maps[k] = broadcast_map(in[k].shape(), os);
    }
    std::vector<std::vector<double>> lo(in.size(), std::vector<double>(g.size(), 0.0)), hi = lo;
    bool any = false;
    for (std::size_t i = 0; i < g.size(); ++i) {
      int tied = 0;
      for (std::size_t k = 0; k < in.size(); ++k) tied += vals[k][maps[k][i]] == y[i];
      bool first = true;
      for (std::size_t k = 0; k < in.size(); ++k) {
        if (vals[k][maps[k][i]] != y[i]) continue;
        if (tied > 1) {
          lo[k][i] = std::min(0.0, g[i]);
          hi[k][i] = std::max(0.0, g[i]);
        } else if (first) {
          lo[k][i] = hi[k][i] = g[i];
        }
        first = false;
      }
      any = any || tied > 1;
    }
    if (!any) return sets;
    for (std::size_t k = 0; k < in.size(); ++k)
      if (is_floating(in[k].dtype()))
        sets[k] = {
            unbroadcast(lo[k], os, in[k].shape()), unbroadcast(hi[k], os, in[k].shape()), {}};
    return sets;
  };
}

// (dy/da, dy/db) of a broadcasting binary op at (a, b), y = f(a, b).
using BinaryDeriv = std::function<std::pair<double, double>(double a, double b, double y)>;

void binary_vjp(OpRegistry& r, const std::string& type, BinaryDeriv d) {
  r.set_vjp(type, [d](const KernelContext& c, const Tensors& in, const Tensors& out,
                      const Tensors& grads) {
    if (c.opset < 7)
      throw Unsupported(c.node.label() + ": no reference VJP for legacy broadcasting (opset < 7)");
    const Tensor &a = in[0], &b = in[1];
    const Shape& os = out[0].shape();
    auto va = a.to_f64(), vb = b.to_f64(), y = out[0].to_f64(), g = grad_of(grads, out, 0);
    auto ma = broadcast_map(a.shape(), os), mb = broadcast_map(b.shape(), os);
    std::vector<double> ga(g.size()), gb(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      auto [da, db] = d(va[ma[i]], vb[mb[i]], y[i]);
      ga[i] = g[i] == 0 ? 0 : g[i] * da;
      gb[i] = g[i] == 0 ? 0 : g[i] * db;
    }
    Tensors r(in.size());
    if (is_floating(a.dtype())) r[0] = grad_like(unbroadcast(ga, os, a.shape()), a);
    if (is_floating(b.dtype())) r[1] = grad_like(unbroadcast(gb, os, b.shape()), b);
    return r;
  });
}

// --- danger zones (beyond the shapes ops/danger.h builds)

// Sites of a broadcasting binary op whose output is 0 exactly because an input is 0 there (no
// rounding can make them nonzero, so they cannot underflow).
danger::ExactZero zero_operand() {
  return [](const KernelContext&, const Tensors& in, const Tensors& out) {
    const Shape& os = out[0].shape();
    std::vector<bool> exact(static_cast<std::size_t>(shape_numel(os)), false);
    for (std::size_t k = 0; k < 2 && k < in.size(); ++k) {
      auto v = in[k].to_f64();
      auto m = broadcast_map(in[k].shape(), os);
      for (std::size_t i = 0; i < exact.size(); ++i)
        if (v[static_cast<std::size_t>(m[i])] == 0) exact[i] = true;
    }
    return exact;
  };
}

// Pow's base (input 0) where pow(a, b) is NaN (a < 0, b not an integer) or inf (a = 0, b < 0).
DangerZone pow_domain() {
  DangerZone z;
  z.kind = DangerKind::PowDomain;
  z.index = 0;
  z.condition = "negative base with a non-integer exponent (NaN), or 0 to a negative power (inf)";
  struct Sites {
    std::vector<double> a, b;
    std::vector<std::int64_t> ma, mb;
  };
  auto sites = [](const Tensors& in, const Tensors& out) {
    Sites s{in[0].to_f64(), in[1].to_f64(), broadcast_map(in[0].shape(), out[0].shape()),
            broadcast_map(in[1].shape(), out[0].shape())};
    return s;
  };
  // Below 0 means strictly below: the largest float32 under 0 is -2^-149.
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto dist = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b) || std::isinf(b)) return inf;
    bool integral = std::nearbyint(b) == b;
    if (integral) return b < 0 ? std::fabs(a) : inf;
    return b < 0 ? std::max(0.0, a) : std::max(0.0, a + std::ldexp(1.0, -149));
  };
  z.distances = [sites, dist](const KernelContext&, const Tensors& in, const Tensors& out) {
    Sites s = sites(in, out);
    ZoneDistances r;
    r.element = s.ma;
    for (std::size_t i = 0; i < s.ma.size(); ++i)
      r.distance.push_back(dist(s.a[s.ma[i]], s.b[s.mb[i]]));
    r.slope = [s](std::size_t site) {
      std::vector<double> g(s.a.size(), 0.0);
      double a = s.a[s.ma[site]], b = s.b[s.mb[site]];
      bool by_magnitude = std::nearbyint(b) == b;
      g[static_cast<std::size_t>(s.ma[site])] =
          by_magnitude ? (a > 0 ? 1.0 : (a < 0 ? -1.0 : 0.0)) : 1.0;
      return g;
    };
    return r;
  };
  z.describe = [sites, dist](const KernelContext&, const Tensors& in, const Tensors& out,
                             std::size_t site) {
    Sites s = sites(in, out);
    double a = s.a[s.ma[site]], b = s.b[s.mb[site]];
    if (dist(a, b) > 0) return fmt::format("base {:.9g}, exponent {:.9g}", a, b);
    if (a == 0) return fmt::format("0 to the negative power {:.9g}", b);
    return fmt::format("negative base {:.9g} with non-integer exponent {:.9g}", a, b);
  };
  return z;
}

void register_elementwise_vjps(OpRegistry& r) {
  binary_vjp(r, "Add", [](double, double, double) { return std::pair{1.0, 1.0}; });
  binary_vjp(r, "Sub", [](double, double, double) { return std::pair{1.0, -1.0}; });
  binary_vjp(r, "Mul", [](double a, double b, double) { return std::pair{b, a}; });
  binary_vjp(r, "Div", [](double a, double b, double) { return std::pair{1 / b, -a / (b * b)}; });
  binary_vjp(r, "Pow", [](double a, double b, double y) {
    return std::pair{b == 0 ? 0.0 : b * std::pow(a, b - 1), a > 0 ? std::log(a) * y : 0.0};
  });
  binary_vjp(r, "PRelu", [](double x, double s, double) {
    return x < 0 ? std::pair{s, x} : std::pair{1.0, 0.0};
  });
  binary_vjp(r, "Mod", [](double a, double b, double) {
    return std::pair{1.0, -std::trunc(a / b)};
  });

  // Variadic Sum, Mean, Max, Min: each input gets its share, summed back over broadcasting;
  // Max and Min send it to the first input that equals the result.
  for (const char* t : {"Sum", "Mean", "Max", "Min"}) {
    std::string op = t;
    r.set_vjp(
        t, [op](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
          const Shape& os = out[0].shape();
          auto g = grad_of(grads, out, 0), y = out[0].to_f64();
          std::vector<std::vector<double>> parts(in.size(), std::vector<double>(g.size(), 0.0));
          std::vector<std::vector<double>> vals(in.size());
          std::vector<std::vector<std::int64_t>> maps(in.size());
          for (std::size_t k = 0; k < in.size(); ++k) {
            vals[k] = in[k].to_f64();
            maps[k] = broadcast_map(in[k].shape(), os);
          }
          for (std::size_t i = 0; i < g.size(); ++i) {
            if (op == "Sum" || op == "Mean") {
              for (auto& p : parts)
                p[i] = op == "Sum" ? g[i] : g[i] / static_cast<double>(in.size());
              continue;
            }
            for (std::size_t k = 0; k < in.size(); ++k)
              if (vals[k][maps[k][i]] == y[i]) {
                parts[k][i] = g[i];
                break;
              }
          }
          Tensors res(in.size());
          for (std::size_t k = 0; k < in.size(); ++k)
            if (is_floating(in[k].dtype()))
              res[k] = grad_like(unbroadcast(parts[k], os, in[k].shape()), in[k]);
          return res;
        });
  }
  r.set_vjp("Where",
            [](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
              const Shape& os = out[0].shape();
              auto g = grad_of(grads, out, 0), cond = in[0].to_f64();
              auto mc = broadcast_map(in[0].shape(), os);
              std::vector<double> gx(g.size()), gy(g.size());
              for (std::size_t i = 0; i < g.size(); ++i) (cond[mc[i]] != 0 ? gx : gy)[i] = g[i];
              Tensors res(in.size());
              if (is_floating(in[1].dtype()))
                res[1] = grad_like(unbroadcast(gx, os, in[1].shape()), in[1]);
              if (is_floating(in[2].dtype()))
                res[2] = grad_like(unbroadcast(gy, os, in[2].shape()), in[2]);
              return res;
            });
  r.set_subgradient("Max", variadic_tie_subgradient());
  r.set_subgradient("Min", variadic_tie_subgradient());
  // PRelu at x = 0: dx anywhere between the slope and 1.
  r.set_subgradient("PRelu", [](const KernelContext&, const Tensors& in, const Tensors& out,
                                const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    const Shape& os = out[0].shape();
    if (in[0].shape() != os) return sets;
    auto x = in[0].to_f64(), s = in[1].to_f64(), g = grad_of(grads, out, 0);
    auto ms = broadcast_map(in[1].shape(), os);
    GradientSet set;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i] != 0) continue;
      if (set.lo.empty()) set.lo.assign(x.size(), NAN), set.hi.assign(x.size(), NAN);
      double p = g[i] * s[ms[i]], q = g[i];
      set.lo[i] = std::min(p, q);
      set.hi[i] = std::max(p, q);
    }
    sets[0] = std::move(set);
    return sets;
  });
  r.set_vjp("Clip", [](const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads) {
    auto [lo, hi] = clip_bounds(c, in);
    auto x = in[0].to_f64(), g = grad_of(grads, out, 0);
    std::vector<double> gx(g.size(), 0.0);
    double glo = 0, ghi = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (x[i] < lo)
        glo += g[i];
      else if (x[i] > hi)
        ghi += g[i];
      else
        gx[i] = g[i];
    }
    Tensors res(in.size());
    if (is_floating(in[0].dtype())) res[0] = grad_like(gx, in[0]);
    if (c.opset >= 11 && has_input(in, 1)) res[1] = grad_like({glo}, in[1]);
    if (c.opset >= 11 && has_input(in, 2)) res[2] = grad_like({ghi}, in[2]);
    return res;
  });
  // At x equal to a bound, the gradient may stay with x or go to the bound (when it is an input).
  r.set_subgradient("Clip", [](const KernelContext& c, const Tensors& in, const Tensors& out,
                               const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    auto [lo, hi] = clip_bounds(c, in);
    if (!(lo <= hi) || !is_floating(in[0].dtype())) return sets;
    auto x = in[0].to_f64(), g = grad_of(grads, out, 0);
    GradientSet sx;
    std::array<double, 2> blo{}, bhi{};  // interval of the lower and upper bound's gradient
    bool any = false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      int b = x[i] < lo ? 0 : (x[i] > hi ? 1 : -1);
      if (b >= 0) {
        blo[b] += g[i];
        bhi[b] += g[i];
      }
      if (x[i] != lo && x[i] != hi) continue;
      if (!any) sx.lo.assign(x.size(), NAN), sx.hi.assign(x.size(), NAN);
      any = true;
      sx.lo[i] = std::min(0.0, g[i]);
      sx.hi[i] = std::max(0.0, g[i]);
      int side = x[i] == lo ? 0 : 1;
      blo[side] += std::min(0.0, g[i]);
      bhi[side] += std::max(0.0, g[i]);
    }
    if (!any) return sets;
    sets[0] = std::move(sx);
    for (int b = 0; b < 2; ++b)
      if (c.opset >= 11 && has_input(in, 1 + b) && is_floating(in[1 + b].dtype()))
        sets[1 + b] = {{blo[b]}, {bhi[b]}, {}};
    return sets;
  });
  r.set_vjp("Dropout", [](const KernelContext& c, const Tensors& in, const Tensors& out,
                          const Tensors& grads) {
    Tensors res(in.size());
    auto g = grad_of(grads, out, 0);
    auto [ratio, training] = dropout_mode(c, in);
    if (training && ratio > 0) {
      auto keep = dropout_mask(c, in[0].numel(), ratio);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = keep[i] ? g[i] / (1 - ratio) : 0.0;
    }
    res[0] = grad_like(g, in[0]);
    return res;
  });
  // Cast between floating types: the gradient passes through.
  for (const char* t : {"Cast", "CastLike"})
    r.set_vjp(
        t, [](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
          Tensors res(in.size());
          if (is_floating(in[0].dtype()) && is_floating(out[0].dtype()))
            res[0] = grad_like(grad_of(grads, out, 0), in[0]);
          return res;
        });
}

}  // namespace

ClipBounds clip_bounds(const KernelContext& c, const Tensors& in) {
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (c.opset < 11) {
    lo = c.node.attr_f("min", lo);
    hi = c.node.attr_f("max", hi);
  } else {
    if (has_input(in, 1)) lo = in[1].f64_at(0);
    if (has_input(in, 2)) hi = in[2].f64_at(0);
  }
  return {lo, hi};
}

std::vector<bool> dropout_mask(const KernelContext& c, std::int64_t n, double ratio) {
  if (!c.node.has_attr("metaop_dropout_seed"))
    throw Unsupported(fmt::format(
        "{}: training-mode dropout with ratio {} draws a random mask; the reference draws it only "
        "from a seed the training loop sets (so that every plan gets the same mask)",
        c.node.label(), ratio));
  std::mt19937_64 rng(static_cast<std::uint64_t>(c.node.attr_i("metaop_dropout_seed")));
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<bool> keep(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = u(rng) >= ratio;
  return keep;
}

DropoutMode dropout_mode(const KernelContext& c, const Tensors& in) {
  if (c.opset < 12) return {c.node.attr_f("ratio", 0.5), false};
  return {has_input(in, 1) ? in[1].f64_at(0) : 0.5, has_input(in, 2) && in[2].f64_at(0) != 0};
}

void register_elementwise_ops(OpRegistry& r) {
  register_unary_ops(r);

  r.add({"IsNaN", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           auto v = x.to_f64();
           for (auto& e : v) e = std::isnan(e);
           return Tensors{Tensor::from_f64(v, x.shape(), DType::Bool)};
         }});
  r.add({"IsInf", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           bool pos = c.node.attr_i("detect_positive", 1),
                neg = c.node.attr_i("detect_negative", 1);
           auto v = x.to_f64();
           for (auto& e : v) e = std::isinf(e) && ((e > 0 && pos) || (e < 0 && neg));
           return Tensors{Tensor::from_f64(v, x.shape(), DType::Bool)};
         }});

  // --- binary arithmetic
  add_binary(r, "Add", [](double a, double b) { return a + b; });
  add_binary(r, "Sub", [](double a, double b) { return a - b; });
  add_binary(r, "Mul", [](double a, double b) { return a * b; });
  add_binary(r, "Div", [](const KernelContext&, DType t) {
    // Integer division truncates toward zero (the conversion to int does the truncation).
    (void)t;
    return BinaryFn([](double a, double b) { return a / b; });
  });
  add_binary(
      r, "Pow",
      [](const KernelContext&, DType) {
        return BinaryFn([](double a, double b) { return std::pow(a, b); });
      },
      Out::Same, /*same_dtype=*/false);
  add_binary(r, "Mod", [](const KernelContext& c, DType t) {
    bool fmod = c.node.attr_i("fmod", 0) != 0;
    if (!fmod && is_floating(t))
      fail("{}: fmod=0 is not allowed for floating-point inputs", c.node.label());
    return BinaryFn([fmod](double a, double b) {
      double m = std::fmod(a, b);
      if (!fmod && m != 0 && ((m < 0) != (b < 0))) m += b;  // sign of the divisor, like Python
      return m;
    });
  });
  r.add({"PRelu", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           Tensor s = input(c, in, 1);
           // Before opset 7 a 1-D slope holds one value per channel (axis 1).
           if (c.opset < 7 && s.rank() == 1 && x.rank() > 2 && s.numel() == x.dim(1)) {
             Shape sh(static_cast<std::size_t>(x.rank() - 1), 1);
             sh[0] = s.numel();
             s = s.reshaped(sh);
           }
           return Tensors{broadcast_apply(c, {&x, &s}, x.dtype(), [](const double* v) {
             return v[0] < 0 ? v[0] * v[1] : v[0];
           })};
         }});

  // --- comparisons and logic
  add_binary(
      r, "Equal", [](double a, double b) { return double(a == b); }, Out::Bool);
  add_binary(
      r, "Less", [](double a, double b) { return double(a < b); }, Out::Bool);
  add_binary(
      r, "LessOrEqual", [](double a, double b) { return double(a <= b); }, Out::Bool);
  add_binary(
      r, "Greater", [](double a, double b) { return double(a > b); }, Out::Bool);
  add_binary(
      r, "GreaterOrEqual", [](double a, double b) { return double(a >= b); }, Out::Bool);
  add_binary(
      r, "And", [](double a, double b) { return double(a != 0 && b != 0); }, Out::Bool);
  add_binary(
      r, "Or", [](double a, double b) { return double(a != 0 || b != 0); }, Out::Bool);
  add_binary(
      r, "Xor", [](double a, double b) { return double((a != 0) != (b != 0)); }, Out::Bool);

  // --- variadic
  add_variadic(r, "Max", nan_max);
  add_variadic(r, "Min", nan_min);
  add_variadic(r, "Sum", [](double a, double b) { return a + b; });
  add_variadic(
      r, "Mean", [](double a, double b) { return a + b; }, /*mean=*/true);

  r.add({"Where", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& cond = input(c, in, 0);
           const Tensor& x = input(c, in, 1);
           const Tensor& y = input(c, in, 2);
           return Tensors{broadcast_apply(c, {&cond, &x, &y}, x.dtype(),
                                          [](const double* v) { return v[0] != 0 ? v[1] : v[2]; })};
         }});

  r.add({"Clip", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           auto [lo, hi] = clip_bounds(c, in);
           auto v = x.to_f64();
           for (auto& e : v)
             if (!std::isnan(e)) e = std::min(std::max(e, lo), hi);
           return Tensors{Tensor::from_f64(v, x.shape(), x.dtype())};
         }});

  r.add({"Cast", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           auto to = c.node.attr_i("to");
           auto dt = dtype_from_onnx(static_cast<int>(to));
           if (!dt)
             throw Unsupported(fmt::format("{}: cast to {} is not supported", c.node.label(),
                                           onnx_type_name(static_cast<int>(to))));
           return Tensors{x.to(*dt)};
         }});
  r.add({"CastLike", "elementwise", [](const KernelContext& c, const Tensors& in) {
           return Tensors{input(c, in, 0).to(input(c, in, 1).dtype())};
         }});

  r.add({"Dropout", "elementwise", [](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           auto [ratio, training] = dropout_mode(c, in);
           Tensor mask(DType::Bool, x.shape());
           if (!training || ratio == 0) {
             for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = true;
             return Tensors{x, mask};
           }
           auto keep = dropout_mask(c, x.numel(), ratio);
           auto v = x.to_f64();
           for (std::size_t i = 0; i < v.size(); ++i) {
             mask.data<bool>()[i] = keep[i];
             v[i] = keep[i] ? v[i] / (1 - ratio) : 0.0;
           }
           return Tensors{Tensor::from_f64(v, x.shape(), x.dtype()), mask};
         }});

  register_elementwise_vjps(r);

  // --- error models
  using namespace error_models;
  for (const char* t :
       {"IsNaN", "IsInf", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or",
        "Xor", "Max", "Min", "Where", "Clip", "Cast", "CastLike", "Dropout", "Mod"})
    r.set_error_model(t, exact());
  // IEEE basic operations are correctly rounded (0.5 ulp) and the reference rounds once more.
  for (const char* t : {"Add", "Sub", "Mul", "PRelu"})
    r.set_error_model(t, ulp(1, "1 ulp (correctly rounded)"));
  r.set_error_model("Div", ulp(2, "2 ulp (correctly rounded, or x * (1/y))"));
  r.set_error_model("Pow", ulp(4, "4 ulp (elementary function)"));
  auto count_inputs = [](const KernelContext&, const Tensors& in) {
    return static_cast<double>(in.size());
  };
  r.set_error_model("Sum", accumulation(count_inputs, "kappa(#inputs) * sum|x_k|", 1));
  r.set_error_model("Mean", accumulation(count_inputs, "kappa(#inputs) * mean|x_k|", 2));

  // --- domains: data inputs and critical points
  for (const char* t : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Equal", "Less",
                        "LessOrEqual", "Greater", "GreaterOrEqual", "Max", "Min", "Sum", "Mean"})
    r.set_domain(t, {{0, 1, 2}, [t](const Node&) {
                       std::string op = t;
                       if (op == "Div" || op == "Mod") return std::vector<double>{0, 1, -1};
                       if (op == "Pow") return std::vector<double>{0, 1, -1, 0.5, 2};
                       return std::vector<double>{0};
                     }});
  using namespace danger;
  r.set_danger("Div", {divisor(1, 0,
                               "divisor reaches 0, or gets small enough for the quotient "
                               "to overflow")});
  r.set_danger("Mod", {divisor(1, -2, "divisor reaches 0 (NaN)")});
  r.set_danger("Mul", {output_overflow(),
                       output_underflow("product of nonzero factors rounds to 0", zero_operand())});
  // PRelu with a slope above 1 scales like a product.
  for (const char* t : {"Add", "Sub", "Sum", "PRelu"}) r.set_danger(t, {output_overflow()});
  r.set_danger("Pow", {pow_domain(), output_overflow(),
                       output_underflow("nonzero power rounds to 0", zero_operand())});
  r.set_domain("Where", {{1, 2}, {}});
  r.set_domain("Clip", {{0}, [](const Node&) { return std::vector<double>{0, 6, -1, 1}; }});
  // A cast to float16 or bfloat16 overflows where the value exceeds the type's range.
  DangerZone narrowing = output_overflow();
  narrowing.applies = [](const Node& n) {
    auto to = dtype_from_onnx(static_cast<int>(n.attr_i("to", 0)));
    return to && (*to == DType::Float16 || *to == DType::BFloat16);
  };
  r.set_danger("Cast", {narrowing});
}

}  // namespace metaop
