// GridSample and AffineGrid, the spatial transformer's pair. GridSample (opsets 16, 20, 22): X [N,
// C, D1 ... Dr] sampled at the normalized coordinates of grid [N, O1 ... Ok, r] (the last dimension
// in reverse order of X's spatial ones: x, y, z), by nearest, (bi/tri)linear or cubic interpolation
// (Keys, alpha = -0.75), with zeros, border or reflection padding and align_corners, as the ONNX
// text and its reference define them: the continuous coordinate is clamped (border) or reflected
// (reflection) into the borders first, then each tap's index is fetched with the padding mode. The
// interpolation is separable: an output is the sum over the taps' tensor product of the weights'
// product times the tap's pixel. One pass over the number type: the reference in double, the
// float32 twin (triage) in float; the error model is Resize's (kappa(taps) sum|w p| plus the
// weights' slope times the coordinates' errors, 4 (|x| + 1) per axis). The VJP covers X and the
// grid. AffineGrid (opset 20) and DeformConv (opsets 19, 22) below.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

// GCC 12 at -O2 reports a false -Wfree-nonheap-object on the std::vector<double> locals of the
// backward bound (GCC bug 108088, as in ops/shape.cpp); they are ordinary heap allocations.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif

namespace metaop {

namespace {

struct GridSpec {
  Shape x_shape, out_shape;
  std::int64_t N = 0, C = 0, r = 0, outs = 0;  // outs: output positions per (n, c)
  std::string mode, padding;
  bool align = false;
  std::vector<double> x, grid;
};

GridSpec grid_spec(const KernelContext& c, const Tensors& in) {
  const Tensor &X = input(c, in, 0), &G = input(c, in, 1);
  require_float(c, X, "input X");
  require_float(c, G, "grid");
  GridSpec s;
  s.x_shape = X.shape();
  s.r = X.rank() - 2;
  if (s.r < 1 || G.rank() != s.r + 2 || G.shape().back() != s.r || G.shape()[0] != s.x_shape[0])
    fail("{}: grid {} does not fit X {} (it must be [N, spatial..., {}])", c.node.label(),
         shape_str(G.shape()), shape_str(s.x_shape), s.r);
  s.N = s.x_shape[0];
  s.C = s.x_shape[1];
  s.out_shape = {s.N, s.C};
  s.outs = 1;
  for (std::int64_t d = 1; d <= s.r; ++d) {
    s.out_shape.push_back(G.shape()[d]);
    s.outs *= G.shape()[d];
  }
  s.mode = attr_s(c, "mode");
  if (s.mode == "bilinear") s.mode = "linear";  // opset 16's names
  if (s.mode == "bicubic") s.mode = "cubic";
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    fail("{}: mode '{}' is not nearest, linear or cubic", c.node.label(), s.mode);
  s.padding = attr_s(c, "padding_mode");
  if (s.padding != "zeros" && s.padding != "border" && s.padding != "reflection")
    fail("{}: padding_mode '{}' is not zeros, border or reflection", c.node.label(), s.padding);
  s.align = attr_i(c, "align_corners") != 0;
  s.x = X.to_f64();
  s.grid = G.to_f64();
  return s;
}

// Reflects v into [lo, hi] by the nearer border, as often as it takes; with `sign`, the
// derivative of the result in v (+1 or -1).
template <typename T>
T reflect(T v, T lo, T hi, T* sign = nullptr) {
  const T range = hi - lo;
  if (range <= 0) return lo;
  if (v < lo) {
    T dx = lo - v;
    auto n = static_cast<std::int64_t>(dx / range);
    T rem = dx - static_cast<T>(n) * range;
    if (sign) *sign = n % 2 == 0 ? T(-1) : T(1);
    return n % 2 == 0 ? lo + rem : hi - rem;
  }
  if (v > hi) {
    T dx = v - hi;
    auto n = static_cast<std::int64_t>(dx / range);
    T rem = dx - static_cast<T>(n) * range;
    if (sign) *sign = n % 2 == 0 ? T(-1) : T(1);
    return n % 2 == 0 ? hi - rem : lo + rem;
  }
  return v;
}

// Keys' cubic convolution weights (alpha = -0.75) of the taps at -1, 0, 1, 2 from the floor,
// and their derivatives in t.
template <typename T>
std::array<T, 4> cubic_weights(T t) {
  const T a = T(-0.75);
  auto near = [a](T x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto far = [a](T x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

// The rounding bounds (units of u, absolute) of cubic_weights' and cubic_slopes' Horner forms
// at t as a float32 kernel evaluates them: each partial result's magnitude (one rounding each),
// plus the argument's rounding (t + 1, 1 - t, 2 - t) times the polynomial's slope there.
std::array<double, 4> cubic_weight_errors(double t) {
  const double a = -0.75;
  auto near = [a](double x, double arg) {
    const double p1 = (a + 2) * x, p2 = p1 - (a + 3), p3 = p2 * x, p4 = p3 * x;
    const double slope = (3 * (a + 2) * x - 2 * (a + 3)) * x;
    return std::fabs(p1) + std::fabs(p2) + std::fabs(p3) + std::fabs(p4) + std::fabs(p4 + 1) +
           arg * std::fabs(slope * x);
  };
  auto far = [a](double x) {
    const double q1 = a * x, q2 = q1 - 5 * a, q3 = q2 * x, q4 = q3 + 8 * a, q5 = q4 * x;
    const double slope = (3 * a * x - 10 * a) * x + 8 * a;
    return std::fabs(q1) + std::fabs(q2) + std::fabs(q3) + std::fabs(q4) + std::fabs(q5) +
           std::fabs(q5 - 4 * a) + std::fabs(slope * x);
  };
  return {far(t + 1), near(t, 0), near(1 - t, 1), far(2 - t)};
}

std::array<double, 4> cubic_slope_errors(double t) {
  const double a = -0.75;
  auto near = [a](double x, double arg) {
    const double s1 = 3 * (a + 2) * x, s2 = s1 - 2 * (a + 3), s3 = s2 * x;
    return 2 * std::fabs(s1) + std::fabs(s2) + std::fabs(s3) +
           arg * std::fabs((6 * (a + 2) * x - 2 * (a + 3)) * x);
  };
  auto far = [a](double x) {
    const double s1 = 3 * a * x, s2 = s1 - 10 * a, s3 = s2 * x, s4 = s3 + 8 * a;
    return 2 * std::fabs(s1) + std::fabs(s2) + std::fabs(s3) + std::fabs(s4) +
           std::fabs((6 * a * x - 10 * a) * x);
  };
  return {far(t + 1), near(t, 0), near(1 - t, 1), far(2 - t)};
}

template <typename T>
std::array<T, 4> cubic_slopes(T t) {
  const T a = T(-0.75);
  auto near = [a](T x) { return (3 * (a + 2) * x - 2 * (a + 3)) * x; };
  auto far = [a](T x) { return (3 * a * x - 10 * a) * x + 8 * a; };
  return {far(t + 1), near(t), -near(1 - t), -far(2 - t)};
}

// One axis of one output: the taps' indices (-1: a zero of the padding) and weights.
template <typename T>
struct Axis {
  std::vector<std::int64_t> index;
  std::vector<T> weight;
  std::vector<T> slope;  // each weight's derivative along the grid coordinate (the VJP's)
  // For the backward bound (T = double): each weight's and slope's own rounding bound as a
  // float32 kernel evaluates them (units of u, absolute), and x's extra error where padding
  // reflected it.
  std::vector<double> weight_err, slope_err;
  double reflect_err = 0;
};

template <typename T>
Axis<T> axis_taps(const GridSpec& s, T g, std::int64_t L) {
  const T len = static_cast<T>(L);
  double reflect_err = 0;
  T x = s.align ? (g + 1) / 2 * (len - 1) : ((g + 1) * len - 1) / 2;
  T dxdg = s.align ? (len - 1) / 2 : len / 2;  // x's derivative in g
  const T lo = s.align ? T(0) : T(-0.5), hi = s.align ? len - 1 : len - T(0.5);
  if (s.mode == "nearest") x = std::nearbyint(x);  // half to even, as the reference's rint
  if (x < lo || x > hi) {
    if (s.padding == "border") {
      x = std::clamp(x, T(0), len - 1);
      dxdg = 0;
    }
    if (s.padding == "reflection") {
      T sign = 1;
      const T before = x;
      x = reflect(x, lo, hi, &sign);
      dxdg *= sign;
      // lo - v (or v - hi), n range, their difference and the border's sum: four roundings.
      reflect_err = 4 * (std::fabs(static_cast<double>(before)) + static_cast<double>(len));
    }
  }
  // A tap's index with the padding mode: outside X, zeros give -1, border the nearest edge,
  // reflection the index reflected into the borders (then truncated, as the reference).
  auto fetch = [&](std::int64_t i) -> std::int64_t {
    if (i >= 0 && i < L) return i;
    if (s.padding == "zeros") return -1;
    if (s.padding == "border") return std::clamp<std::int64_t>(i, 0, L - 1);
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(reflect(static_cast<T>(i), lo, hi)),
                                    0, L - 1);
  };
  Axis<T> a;
  a.reflect_err = reflect_err;
  if (s.mode == "nearest") {
    a.index = {fetch(static_cast<std::int64_t>(x))};
    a.weight = {T(1)};
    a.slope = {T(0)};
    a.weight_err = {0.0};
    a.slope_err = {0.0};
    return a;
  }
  const T x0 = std::floor(x), t = x - x0;
  const auto i0 = static_cast<std::int64_t>(x0);
  if (s.mode == "linear") {
    a.index = {fetch(i0), fetch(i0 + 1)};
    a.weight = {1 - t, t};
    a.slope = {-dxdg, dxdg};
    if constexpr (std::is_same_v<T, double>) {
      a.weight_err = {std::fabs(1 - t), 0.0};
      a.slope_err = {0.0, 0.0};
    }
  } else {
    auto w = cubic_weights(t), d = cubic_slopes(t);
    a.index = {fetch(i0 - 1), fetch(i0), fetch(i0 + 1), fetch(i0 + 2)};
    a.weight = {w.begin(), w.end()};
    for (T v : d) a.slope.push_back(v * dxdg);
    if constexpr (std::is_same_v<T, double>) {
      const auto we = cubic_weight_errors(t), se = cubic_slope_errors(t);
      a.weight_err = {we.begin(), we.end()};
      for (std::size_t k = 0; k < 4; ++k)
        a.slope_err.push_back((se[k] + std::fabs(d[k])) * std::fabs(dxdg));  // and the product
    }
  }
  return a;
}

// Tap k of the axes' tensor product (the last axis varies fastest): each axis's choice into
// `pick` and X's flat index from `base` (n and the channel's offset), or -1 where a tap reads a
// padding zero.
template <typename T>
std::int64_t decode_tap(const std::vector<Axis<T>>& axes, std::size_t k, std::int64_t base,
                        const std::vector<std::int64_t>& xs, std::vector<std::size_t>& pick) {
  pick.resize(axes.size());
  std::int64_t at = base;
  bool zero = false;
  for (std::size_t d = axes.size(); d-- > 0;) {
    const auto& a = axes[d];
    pick[d] = k % a.index.size();
    k /= a.index.size();
    zero = zero || a.index[pick[d]] < 0;
    at += a.index[pick[d]] * xs[d + 2];
  }
  return zero ? -1 : at;
}

// The sampling in number type T; with `err`, each output's first-order bound (units of u).
template <typename T>
Tensors grid_sample_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                        std::vector<double>* err) {
  GridSpec s = grid_spec(c, in);
  std::vector<double> y(static_cast<std::size_t>(shape_numel(s.out_shape)));
  if (err) err->assign(y.size(), 0.0);
  const auto xs = strides_of(s.x_shape);
  const double slope = s.mode == "cubic" ? 1.5 : 1.0;
  std::vector<Axis<T>> axes(static_cast<std::size_t>(s.r));
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t o = 0; o < s.outs; ++o) {
      double coord_err = 0;  // sum over the axes of 4 (|x| + 1)
      for (std::int64_t d = 0; d < s.r; ++d) {
        // grid's last dimension lists x (the last spatial axis) first.
        const double g = s.grid[static_cast<std::size_t>((n * s.outs + o) * s.r + (s.r - 1 - d))];
        axes[static_cast<std::size_t>(d)] = axis_taps<T>(s, static_cast<T>(g), s.x_shape[d + 2]);
        coord_err += 4 * (std::fabs((g + 1) / 2 * static_cast<double>(s.x_shape[d + 2])) + 1);
      }
      std::size_t taps = 1;
      for (const auto& a : axes) taps *= a.index.size();
      std::vector<std::size_t> pick;
      for (std::int64_t ch = 0; ch < s.C; ++ch) {
        T acc = 0;
        double abs = 0, pix = 0;
        for (std::size_t k = 0; k < taps; ++k) {
          const std::int64_t at = decode_tap(axes, k, n * xs[0] + ch * xs[1], xs, pick);
          if (at < 0) continue;
          T w = 1;
          for (std::size_t d = axes.size(); d-- > 0;) w *= axes[d].weight[pick[d]];
          const double p = s.x[static_cast<std::size_t>(at)];
          acc += w * static_cast<T>(p);
          abs += std::fabs(static_cast<double>(w) * p);
          pix += std::fabs(p);
        }
        const auto out = static_cast<std::size_t>((n * s.C + ch) * s.outs + o);
        y[out] = static_cast<double>(acc);
        if (err && s.mode != "nearest")
          (*err)[out] = bound->kappa(static_cast<double>(taps)) * abs + slope * coord_err * pix;
      }
    }
  return {Tensor::from_f64(y, s.out_shape, in[0].dtype())};
}

// The VJP: X gathers each output's gradient times the tap's weight (padding zeros none); the
// grid, along each axis, the gradient times the tap's pixel times that axis's weight slope and
// the other axes' weights. Nearest sampling is piecewise constant in the grid; border padding's
// clamp is too where it clamps.
Tensors grid_sample_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                        const Tensors& grads) {
  GridSpec s = grid_spec(c, in);
  auto gy = grad_of(grads, out, 0);
  std::vector<double> dx(s.x.size(), 0.0), dgrid(s.grid.size(), 0.0);
  const auto xs = strides_of(s.x_shape);
  std::vector<Axis<double>> axes(static_cast<std::size_t>(s.r));
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t o = 0; o < s.outs; ++o) {
      const auto g0 = static_cast<std::size_t>((n * s.outs + o) * s.r);
      for (std::int64_t d = 0; d < s.r; ++d)
        axes[static_cast<std::size_t>(d)] = axis_taps<double>(
            s, s.grid[g0 + static_cast<std::size_t>(s.r - 1 - d)], s.x_shape[d + 2]);
      std::size_t taps = 1;
      for (const auto& a : axes) taps *= a.index.size();
      std::vector<std::size_t> pick;
      for (std::int64_t ch = 0; ch < s.C; ++ch) {
        const double g = gy[static_cast<std::size_t>((n * s.C + ch) * s.outs + o)];
        for (std::size_t k = 0; k < taps; ++k) {
          const std::int64_t at = decode_tap(axes, k, n * xs[0] + ch * xs[1], xs, pick);
          if (at < 0) continue;
          double w = 1;
          for (std::size_t d = axes.size(); d-- > 0;) w *= axes[d].weight[pick[d]];
          dx[static_cast<std::size_t>(at)] += w * g;
          const double p = s.x[static_cast<std::size_t>(at)];
          for (std::int64_t d = 0; d < s.r; ++d) {
            double dw = axes[static_cast<std::size_t>(d)].slope[pick[static_cast<std::size_t>(d)]];
            for (std::int64_t e = 0; e < s.r; ++e)
              if (e != d)
                dw *= axes[static_cast<std::size_t>(e)].weight[pick[static_cast<std::size_t>(e)]];
            dgrid[g0 + static_cast<std::size_t>(s.r - 1 - d)] += g * p * dw;
          }
        }
      }
    }
  return {grad_like(dx, in[0]), grad_like(dgrid, in[1])};
}

// The backward bound (units of u), along the VJP: each tap's weight product w is off by its
// factors' slopes in x times x's error (4 (|x| + 1) per axis, as the forward's, more where
// reflection moved it) plus each factor's own evaluation (Horner's partial results for cubic)
// and one rounding per product; X's gradient sums w g over the outputs that read a pixel (kappa of
// their number); the grid's sums g p dw over the taps and channels (kappa(taps C)), dw off by the
// slope's own change with x (cubic: Keys' weights' second derivatives are at most 4.5 in t) and the
// other factors' errors.
// One output position's taps for the bound: the axes, x's bound per axis (ex) and |dx/dg|.
struct TapBounds {
  std::vector<Axis<double>> axes;
  std::vector<double> ex, dxdg;
  bool cubic = false;
  std::vector<std::size_t> pick;  // the tap: one weight per axis

  double weight(std::size_t d) const { return axes[d].weight[pick[d]]; }
  // Factor d's error: its slope in x times x's bound, and its own evaluation's.
  double factor_err(std::size_t d) const {
    const double slope_x = dxdg[d] != 0 ? std::fabs(axes[d].slope[pick[d]] / dxdg[d]) : 0.0;
    return slope_x * ex[d] + axes[d].weight_err[pick[d]];
  }
  // The product of |weights| but axes d and e's.
  double others(std::size_t d, std::size_t e = SIZE_MAX) const {
    double w = 1;
    for (std::size_t f = 0; f < axes.size(); ++f)
      if (f != d && f != e) w *= std::fabs(weight(f));
    return w;
  }
  // The weight product w and its bound.
  std::pair<double, double> product() const {
    double w = 1, ew = 0;
    for (std::size_t d = 0; d < axes.size(); ++d) {
      w *= weight(d);
      ew += factor_err(d) * others(d);
    }
    return {w, ew + static_cast<double>(axes.size()) * std::fabs(w)};
  }
  // Axis d's factor of the grid gradient, dw = slope_d prod_{e != d} w_e, and its bound: the
  // other factors' errors, the slope's change with x (Keys' weights' second derivatives are at
  // most 4.5 in t) and its evaluation, r + 1 roundings.
  std::pair<double, double> grid_factor(std::size_t d) const {
    const double slope = axes[d].slope[pick[d]];
    double signed_others = 1, e = 0;
    for (std::size_t f = 0; f < axes.size(); ++f)
      if (f != d) {
        signed_others *= weight(f);
        e += std::fabs(slope) * factor_err(f) * others(d, f);
      }
    const double curve = cubic ? 4.5 * dxdg[d] : 0.0;
    e += (curve * ex[d] + axes[d].slope_err[pick[d]]) * std::fabs(signed_others);
    const double dw = slope * signed_others;
    return {dw, e + (static_cast<double>(axes.size()) + 1) * std::fabs(dw)};
  }
};

// The taps of output position o of batch n.
TapBounds tap_bounds(const GridSpec& s, std::size_t g0) {
  const auto r = static_cast<std::size_t>(s.r);
  TapBounds t;
  t.axes.resize(r);
  t.ex.resize(r);
  t.dxdg.resize(r);
  t.cubic = s.mode == "cubic";
  for (std::size_t d = 0; d < r; ++d) {
    const double g = s.grid[g0 + r - 1 - d];
    const auto L = static_cast<double>(s.x_shape[d + 2]);
    t.axes[d] = axis_taps<double>(s, g, s.x_shape[d + 2]);
    t.ex[d] = 4 * (std::fabs((g + 1) / 2 * L) + 1) + t.axes[d].reflect_err;
    t.dxdg[d] = s.align ? (L - 1) / 2 : L / 2;  // |dx/dg| before any clamp or reflection
  }
  return t;
}

Magnitudes grid_sample_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                     const Tensors& grads, const AccumulationBound& bound) {
  GridSpec s = grid_spec(c, in);
  auto gy = grad_of(grads, out, 0);
  std::vector<double> dx_abs(s.x.size(), 0.0), dx_err(s.x.size(), 0.0), dx_n(s.x.size(), 0.0);
  std::vector<double> dg(s.grid.size(), 0.0);
  const auto xs = strides_of(s.x_shape);
  const auto r = static_cast<std::size_t>(s.r);
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t o = 0; o < s.outs; ++o) {
      const auto g0 = static_cast<std::size_t>((n * s.outs + o) * s.r);
      TapBounds t = tap_bounds(s, g0);
      std::size_t taps = 1;
      for (const auto& a : t.axes) taps *= a.index.size();
      const double kt = bound.kappa(static_cast<double>(taps * static_cast<std::size_t>(s.C)));
      std::vector<double> g_abs(r, 0.0), g_err(r, 0.0);
      for (std::int64_t ch = 0; ch < s.C; ++ch) {
        const double g = gy[static_cast<std::size_t>((n * s.C + ch) * s.outs + o)];
        for (std::size_t k = 0; k < taps; ++k) {
          const std::int64_t at = decode_tap(t.axes, k, n * xs[0] + ch * xs[1], xs, t.pick);
          if (at < 0) continue;
          const auto A = static_cast<std::size_t>(at);
          const auto [w, ew] = t.product();
          dx_abs[A] += std::fabs(w * g);
          dx_err[A] += std::fabs(g) * ew;
          dx_n[A] += 1;
          for (std::size_t d = 0; d < r; ++d) {
            const auto [dw, edw] = t.grid_factor(d);
            g_abs[d] += std::fabs(g * s.x[A] * dw);
            g_err[d] += std::fabs(g * s.x[A]) * edw;
          }
        }
      }
      for (std::size_t d = 0; d < r; ++d) dg[g0 + r - 1 - d] = kt * g_abs[d] + g_err[d];
    }
  std::vector<double> dx(s.x.size());
  for (std::size_t k = 0; k < dx.size(); ++k) dx[k] = bound.kappa(dx_n[k]) * dx_abs[k] + dx_err[k];
  return {dx, dg};
}

// ---- AffineGrid (opset 20): the sampling grid of an affine map, theta [N, 2, 3] (or [N, 3, 4])
// applied to the normalized coordinates (x, y[, z], 1) of an output of size [N, C, H, W] (or
// [N, C, D, H, W]): -1 + (2i + 1) / L, or with align_corners -1 + 2i / (L - 1) (-1 for L = 1).
struct AffineSpec {
  std::int64_t N = 0, r = 0, points = 1;
  Shape spatial, out_shape;
  bool align = false;
  std::vector<double> theta;
};

AffineSpec affine_spec(const KernelContext& c, const Tensors& in) {
  const Tensor& theta = input(c, in, 0);
  require_float(c, theta, "theta");
  const auto size = input(c, in, 1).to_i64();
  AffineSpec s;
  s.r = static_cast<std::int64_t>(size.size()) - 2;
  if ((s.r != 2 && s.r != 3) || theta.shape() != Shape{size[0], s.r, s.r + 1})
    fail("{}: theta {} does not fit size [{}] (it must be [N, 2, 3] for 2-D, [N, 3, 4] for 3-D)",
         c.node.label(), shape_str(theta.shape()), fmt::join(size, ", "));
  s.N = size[0];
  s.spatial.assign(size.begin() + 2, size.end());
  for (auto d : s.spatial) {
    if (d < 0) fail("{}: size [{}] has a negative length", c.node.label(), fmt::join(size, ", "));
    s.points *= d;
  }
  s.out_shape = {s.N};
  s.out_shape.insert(s.out_shape.end(), s.spatial.begin(), s.spatial.end());
  s.out_shape.push_back(s.r);
  s.align = attr_i(c, "align_corners") != 0;
  s.theta = theta.to_f64();
  return s;
}

// The normalized coordinates (x, y[, z], 1) of point p (row-major over the spatial lengths).
std::vector<double> affine_base(const AffineSpec& s, std::int64_t p) {
  std::vector<double> b(static_cast<std::size_t>(s.r + 1), 1.0);
  for (std::int64_t d = s.r - 1; d >= 0; --d) {
    const std::int64_t L = s.spatial[static_cast<std::size_t>(d)], i = p % L;
    p /= L;
    const double v =
        s.align ? (L > 1 ? -1 + 2.0 * static_cast<double>(i) / static_cast<double>(L - 1) : -1.0)
                : -1 + (2.0 * static_cast<double>(i) + 1) / static_cast<double>(L);
    b[static_cast<std::size_t>(s.r - 1 - d)] = v;  // x: the last spatial axis
  }
  return b;
}

// The grid in number type T; with `err`, each element's bound kappa(r + 1) sum|theta b| + 5
// sum|theta| over the coordinates: a coordinate computed in float32 as -1 + i step (or
// (2i + 1) / L - 1) is up to 5 u off, however near 0 it is (the step's and the product's roundings
// are relative to i step, up to 2).
template <typename T>
Tensors affine_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                   std::vector<double>* err) {
  AffineSpec s = affine_spec(c, in);
  std::vector<double> y(static_cast<std::size_t>(shape_numel(s.out_shape)));
  if (err) err->assign(y.size(), 0.0);
  const auto k = static_cast<std::size_t>(s.r + 1);
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t p = 0; p < s.points; ++p) {
      const auto b = affine_base(s, p);
      for (std::int64_t row = 0; row < s.r; ++row) {
        T acc = 0;
        double abs = 0, coords = 0;
        for (std::size_t j = 0; j < k; ++j) {
          const double t = s.theta[static_cast<std::size_t>((n * s.r + row)) * k + j];
          acc += static_cast<T>(t) * static_cast<T>(b[j]);
          abs += std::fabs(t * b[j]);
          if (j + 1 < k) coords += std::fabs(t);
        }
        const auto o = static_cast<std::size_t>((n * s.points + p) * s.r + row);
        y[o] = static_cast<double>(acc);
        if (err) (*err)[o] = bound->kappa(static_cast<double>(k)) * abs + 5 * coords;
      }
    }
  return {Tensor::from_f64(y, s.out_shape, in[0].dtype())};
}

// theta's gradient: each row gathers the output gradient times the base coordinates.
Tensors affine_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads) {
  AffineSpec s = affine_spec(c, in);
  auto g = grad_of(grads, out, 0);
  std::vector<double> dtheta(s.theta.size(), 0.0);
  const auto k = static_cast<std::size_t>(s.r + 1);
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t p = 0; p < s.points; ++p) {
      const auto b = affine_base(s, p);
      for (std::int64_t row = 0; row < s.r; ++row)
        for (std::size_t j = 0; j < k; ++j)
          dtheta[static_cast<std::size_t>(n * s.r + row) * k + j] +=
              g[static_cast<std::size_t>((n * s.points + p) * s.r + row)] * b[j];
    }
  Tensors res(in.size());
  res[0] = grad_like(dtheta, in[0]);
  return res;
}

// theta's gradient's bound (units of u): each element sums g b over the points, kappa of their
// number times sum|g b|, and each coordinate b is up to 5 u off in float32 (as the forward's):
// 5 sum|g| where b is a coordinate, none for the constant 1.
Magnitudes affine_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                const Tensors& grads, const AccumulationBound& bound) {
  AffineSpec s = affine_spec(c, in);
  auto g = grad_of(grads, out, 0);
  std::vector<double> abs(s.theta.size(), 0.0), coord(s.theta.size(), 0.0);
  const auto k = static_cast<std::size_t>(s.r + 1);
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t p = 0; p < s.points; ++p) {
      const auto b = affine_base(s, p);
      for (std::int64_t row = 0; row < s.r; ++row)
        for (std::size_t j = 0; j < k; ++j) {
          const double gv = g[static_cast<std::size_t>((n * s.points + p) * s.r + row)];
          const auto at = static_cast<std::size_t>(n * s.r + row) * k + j;
          abs[at] += std::fabs(gv * b[j]);
          if (j + 1 < k) coord[at] += 5 * std::fabs(gv);
        }
    }
  const double kp = bound.kappa(static_cast<double>(s.points));
  for (std::size_t i = 0; i < abs.size(); ++i) abs[i] = kp * abs[i] + coord[i];
  return {abs};
}

// ---- DeformConv (opsets 19, 22), 2-D: a convolution whose taps are moved by per-position offsets
// and scaled by an optional mask. Output (n, o, i, j) is B[o] plus, over the input channels c of
// o's group and the taps (a, b), W[o, c, a, b] mask[n, g, a, b, i, j] x(n, c, p), where p =
// (i s_h - pad_top + a d_h + off_h, j s_w - pad_left + b d_w + off_w) in pixels, g = c's offset
// group, the offsets read from [N, G kH kW 2, oH, oW] as (g, a, b, {h, w}) and x(p) is X's
// bilinear interpolation with zeros outside (GridSample's, align_corners, which ONNX's reference
// evaluator calls). The error model: kappa(terms) sum|w m v| over the taps' four neighbours, plus
// each tap's coordinate error (2 roundings of |p| per axis) times |W m| and its neighbours' sum|x|.
struct DeformSpec {
  std::int64_t N = 0, C = 0, H = 0, W = 0, O = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  std::int64_t group = 1, offset_group = 1;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  std::vector<double> x, w, off, bias, mask;
};

DeformSpec deform_spec(const KernelContext& c, const Tensors& in) {
  const Tensor &X = input(c, in, 0), &Wt = input(c, in, 1), &Off = input(c, in, 2);
  require_float(c, X, "X");
  if (X.rank() != 4)
    throw Unsupported(fmt::format("{}: X of rank {}: DeformConv is supported in 2-D (rank 4)",
                                  c.node.label(), X.rank()));
  if (Wt.rank() != 4 || Off.rank() != 4)
    fail("{}: W {} and offset {} must be of rank 4", c.node.label(), shape_str(Wt.shape()),
         shape_str(Off.shape()));
  DeformSpec s;
  s.N = X.dim(0), s.C = X.dim(1), s.H = X.dim(2), s.W = X.dim(3);
  s.O = Wt.dim(0), s.kh = Wt.dim(2), s.kw = Wt.dim(3);
  s.oh = Off.dim(2), s.ow = Off.dim(3);
  s.group = attr_i(c, "group");
  s.offset_group = attr_i(c, "offset_group");
  const auto ks = attr_ints_or(c, "kernel_shape", {s.kh, s.kw});
  const auto st = attr_ints_or(c, "strides", {1, 1});
  const auto dl = attr_ints_or(c, "dilations", {1, 1});
  const auto pd = attr_ints_or(c, "pads", {0, 0, 0, 0});
  if (ks != std::vector<std::int64_t>{s.kh, s.kw} || st.size() != 2 || dl.size() != 2 ||
      pd.size() != 4)
    fail("{}: kernel_shape, strides, dilations and pads do not fit a 2-D kernel of W {}",
         c.node.label(), shape_str(Wt.shape()));
  s.sh = st[0], s.sw = st[1], s.dh = dl[0], s.dw = dl[1], s.pt = pd[0], s.pl = pd[1];
  if (s.group < 1 || s.offset_group < 1 || s.C % s.group || s.O % s.group ||
      Wt.dim(1) * s.group != s.C || s.C % s.offset_group)
    fail("{}: X {} and W {} do not fit group {} and offset_group {}", c.node.label(),
         shape_str(X.shape()), shape_str(Wt.shape()), s.group, s.offset_group);
  const std::int64_t eh = (s.kh - 1) * s.dh + 1, ew = (s.kw - 1) * s.dw + 1;
  if (Off.dim(0) != s.N || Off.dim(1) != s.offset_group * s.kh * s.kw * 2 ||
      s.oh != (s.H + pd[0] + pd[2] - eh) / s.sh + 1 ||
      s.ow != (s.W + pd[1] + pd[3] - ew) / s.sw + 1)
    fail("{}: offset {} does not fit X {}, the kernel and offset_group {}", c.node.label(),
         shape_str(Off.shape()), shape_str(X.shape()), s.offset_group);
  s.x = X.to_f64();
  s.w = Wt.to_f64();
  s.off = Off.to_f64();
  if (has_input(in, 3)) s.bias = input(c, in, 3).to_f64();
  if (has_input(in, 4)) s.mask = input(c, in, 4).to_f64();
  if ((!s.bias.empty() && static_cast<std::int64_t>(s.bias.size()) != s.O) ||
      (!s.mask.empty() && static_cast<std::int64_t>(s.mask.size()) !=
                              s.N * s.offset_group * s.kh * s.kw * s.oh * s.ow))
    fail("{}: B must have {} values and mask [N, offset_group kH kW, oH, oW]", c.node.label(), s.O);
  return s;
}

// X's plane `plane` interpolated at (y, x) in number type T, zeros outside: the value and, for the
// error model, sum |w v| and sum |v| over the neighbours that count.
template <typename T>
struct Bilinear {
  T value = 0;
  double terms = 0, pixels = 0;
};

template <typename T>
Bilinear<T> bilinear(const DeformSpec& s, const double* plane, T y, T x) {
  Bilinear<T> b;
  const T y0 = std::floor(y), x0 = std::floor(x);
  const T ly = y - y0, lx = x - x0;
  const auto iy = static_cast<std::int64_t>(y0), ix = static_cast<std::int64_t>(x0);
  for (int k = 0; k < 4; ++k) {
    const std::int64_t r = iy + k / 2, col = ix + k % 2;
    if (r < 0 || r >= s.H || col < 0 || col >= s.W) continue;
    const T w = (k / 2 ? ly : T(1) - ly) * (k % 2 ? lx : T(1) - lx);
    const double v = plane[r * s.W + col];
    b.value += w * static_cast<T>(v);
    b.terms += std::fabs(static_cast<double>(w) * v);
    b.pixels += std::fabs(v);
  }
  return b;
}

// The convolution in number type T; with `err`, each output's first-order bound (units of u).
template <typename T>
Tensors deform_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                   std::vector<double>* err) {
  const DeformSpec s = deform_spec(c, in);
  const Shape out_shape{s.N, s.O, s.oh, s.ow};
  std::vector<double> y(static_cast<std::size_t>(shape_numel(out_shape)));
  if (err) err->assign(y.size(), 0.0);
  const std::int64_t cg = s.C / s.group, og = s.O / s.group, cog = s.C / s.offset_group;
  const std::int64_t taps = s.kh * s.kw, plane = s.H * s.W, pos = s.oh * s.ow;
  std::size_t at = 0;
  for (std::int64_t n = 0; n < s.N; ++n)
    for (std::int64_t o = 0; o < s.O; ++o)
      for (std::int64_t i = 0; i < s.oh; ++i)
        for (std::int64_t j = 0; j < s.ow; ++j, ++at) {
          T acc = s.bias.empty() ? T(0) : static_cast<T>(s.bias[static_cast<std::size_t>(o)]);
          double abs = s.bias.empty() ? 0 : std::fabs(s.bias[static_cast<std::size_t>(o)]);
          double moved = 0;
          const std::int64_t g = o / og;
          for (std::int64_t ci = 0; ci < cg; ++ci) {
            const std::int64_t ch = g * cg + ci, og_idx = ch / cog;
            const double* xp = s.x.data() + (n * s.C + ch) * plane;
            for (std::int64_t t = 0; t < taps; ++t) {
              const std::int64_t a = t / s.kw, b = t % s.kw;
              const std::int64_t oc = (n * s.offset_group + og_idx) * taps + t;  // (n, g, a, b)
              const double off_h = s.off[static_cast<std::size_t>((2 * oc) * pos + i * s.ow + j)];
              const double off_w =
                  s.off[static_cast<std::size_t>((2 * oc + 1) * pos + i * s.ow + j)];
              const T py = static_cast<T>(i * s.sh - s.pt + a * s.dh) + static_cast<T>(off_h);
              const T px = static_cast<T>(j * s.sw - s.pl + b * s.dw) + static_cast<T>(off_w);
              const Bilinear<T> v = bilinear(s, xp, py, px);
              const double m =
                  s.mask.empty() ? 1.0 : s.mask[static_cast<std::size_t>(oc * pos + i * s.ow + j)];
              const double wt =
                  s.w[static_cast<std::size_t>(((o * cg + ci) * s.kh + a) * s.kw + b)];
              acc += static_cast<T>(wt) * static_cast<T>(m) * v.value;
              abs += std::fabs(wt * m) * v.terms;
              moved +=
                  std::fabs(wt * m) * v.pixels * 2 *
                  (std::fabs(static_cast<double>(py)) + std::fabs(static_cast<double>(px)) + 2);
            }
          }
          y[at] = static_cast<double>(acc);
          if (err) (*err)[at] = bound->kappa(static_cast<double>(6 * cg * taps + 1)) * abs + moved;
        }
  return {Tensor::from_f64(y, out_shape, in[0].dtype())};
}
void register_deform_conv(OpRegistry& r) {
  using case_input::floats;
  const AccumulationBound* none = nullptr;
  r.op("DeformConv", Family::conv,
       [none](const KernelContext& c, const Tensors& in) {
         return deform_run<double>(c, in, none, nullptr);
       })
      .error(error_models::condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            deform_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "kappa(6 taps + 1) sum|W m w v| over the taps' bilinear neighbours, plus sum |W m| "
          "sum|v| 2 (|p_h| + |p_w| + 2) (the tap coordinates' roundings), 4 ulp"))
      .inputs(InputRoles{{0, 2, 4}})
      .float32([none](const KernelContext& c, const Tensors& in,
                      SumOrder) { return deform_run<float>(c, in, none, nullptr); },
               "the tap coordinates, bilinear weights and the sum over channels and taps in "
               "float32",
               "none needed beyond the sum's order")
      // Offsets of about a pixel, some taps moved past the border; a mask and a bias; groups.
      .cases(
          {{19, {floats({1, 2, 5, 5}), floats({3, 2, 3, 3}), floats({1, 18, 3, 3}, -1.5, 1.5)}},
           {19,
            {floats({2, 4, 4, 5}), floats({4, 2, 2, 2}), floats({2, 16, 5, 6}, -1, 1), floats({4}),
             floats({2, 2 * 4, 5, 6}, 0, 1)},
            {{"group", Attribute::of_int(2)},
             {"offset_group", Attribute::of_int(2)},
             {"pads", Attribute::of_ints({1, 1, 1, 1})}}},
           {22,
            {floats({1, 1, 6, 6}), floats({2, 1, 2, 2}), floats({1, 8, 2, 2}, -0.7, 0.7)},
            {{"strides", Attribute::of_ints({2, 2})}, {"dilations", Attribute::of_ints({2, 2})}}}});
}

}  // namespace

void register_grid_sample_ops(OpRegistry& r) {
  using case_input::floats;
  const AccumulationBound* none = nullptr;
  auto modes = [](const char* mode, const char* padding, int align) {
    return std::map<std::string, Attribute>{{"mode", Attribute::of_string(mode)},
                                            {"padding_mode", Attribute::of_string(padding)},
                                            {"align_corners", Attribute::of_int(align)}};
  };
  r.op("GridSample", Family::linear,
       [none](const KernelContext& c, const Tensors& in) {
         return grid_sample_run<double>(c, in, none, nullptr);
       })
      .vjp(grid_sample_vjp)
      .error(error_models::condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            grid_sample_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "nearest: exact; linear/cubic: kappa(taps) sum|w p| + slope sum|p| sum_axes 4(|x| + 1) "
          "(the coordinates' errors; slope 1 linear, 1.5 cubic), 4 ulp"))
      .backward_error(grid_sample_vjp_magnitude,
                      "X: kappa(readers) sum|w g| + |g| (sum_axes |dw/dx| 4(|x| + 1) + 2r|w|); "
                      "grid: kappa(taps C) sum|g p dw| + |g p| (the slopes' and weights' changes "
                      "with x's error, r + 1 roundings)")
      .float32([none](const KernelContext& c, const Tensors& in,
                      SumOrder) { return grid_sample_run<float>(c, in, none, nullptr); },
               "the coordinates, weights and the weighted sum of the taps in float32",
               "none needed beyond the sum's order")
      // The grid holds coordinates within [-1, 1] and a little past them (padding).
      .cases({{20,
               {floats({2, 3, 5, 6}), floats({2, 4, 3, 2}, -1.2, 1.2)},
               modes("linear", "zeros", 0)},
              {20,
               {floats({1, 2, 5, 4}), floats({1, 3, 3, 2}, -1.3, 1.3)},
               modes("cubic", "reflection", 1)},
              {16,
               {floats({1, 2, 4, 4}), floats({1, 2, 5, 2}, -1.5, 1.5)},
               modes("bilinear", "border", 1)},
              {20,
               {floats({1, 2, 3, 4, 5}), floats({1, 2, 2, 3, 3}, -1.1, 1.1)},
               modes("linear", "zeros", 1)}});
  r.op("AffineGrid", Family::linear,
       [none](const KernelContext& c, const Tensors& in) {
         return affine_run<double>(c, in, none, nullptr);
       })
      .vjp(affine_vjp)
      .error(error_models::condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            affine_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "kappa(r + 1) sum|theta b| + 5 sum|theta| over the coordinates (b: the normalized "
          "coordinates, each up to 5 u off in float32), 4 ulp"))
      .backward_error(affine_vjp_magnitude,
                      "kappa(points) sum|g b| + 5 sum|g| for a coordinate's column (b up to 5 u "
                      "off in float32)")
      .float32([none](const KernelContext& c, const Tensors& in,
                      SumOrder) { return affine_run<float>(c, in, none, nullptr); },
               "theta times the normalized coordinates, in float32", "none needed")
      .cases({{20, {floats({2, 2, 3}), case_input::ints({4}, {2, 3, 4, 5})}},
              {20,
               {floats({1, 3, 4}), case_input::ints({5}, {1, 2, 2, 3, 4})},
               {{"align_corners", Attribute::of_int(1)}}}});
  register_deform_conv(r);
}

}  // namespace metaop
