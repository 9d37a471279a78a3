// Resize (and the older Upsample): separable N-d interpolation. For each axis and output
// coordinate we list the input taps and their weights (nearest, linear or cubic, with every
// ONNX coordinate transformation); the output is the tensor product of the per-axis taps.
// Resize-18's antialias stretches the linear or cubic kernel by 1 / scale when downsampling: the
// taps are the 2 ceil(1 / scale) (linear) or 2 ceil(2 / scale) (cubic) pixels around x, weighted
// by the kernel at scale (pixel - x) and normalized to sum 1, as ONNX's reference evaluator does
// (upsampling keeps the plain kernel).
#include <cmath>
#include <numeric>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

struct Tap {
  std::int64_t index;
  double weight;
};

struct AxisTaps {
  std::vector<std::vector<Tap>> taps;  // per output coordinate
  std::vector<bool> outside;           // tf_crop_and_resize: extrapolate
  // Per output coordinate: how far (units of u) a coordinate computed in the output precision
  // may land from the exact one (0 where the axis is not resized: the taps are then exact).
  std::vector<double> coord_err;
};

struct ResizeParams {
  std::string mode = "nearest", coord = "half_pixel", nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false, antialias = false;
  bool f32 = false;  // the float32 twin: coordinates, weights and sums in float32
};

// `out` is the resized length before rounding (in * scale when scales are given), as the ONNX
// reference uses it in align_corners and tf_crop_and_resize; `out_int` the output's length. In
// number type T (double for the reference, float for the float32 twin).
template <typename T>
T original_coord(const ResizeParams& p, T x, T scale, std::int64_t in_len, T out,
                 std::int64_t out_int, T roi_start, T roi_end) {
  const std::string& m = p.coord;
  const T in = static_cast<T>(in_len), half = T(0.5);
  if (m == "half_pixel") return (x + half) / scale - half;
  if (m == "half_pixel_symmetric") {  // Resize-19: half_pixel centred on the input's middle
    T adjustment = static_cast<T>(out_int) / out, center = in / 2;
    return center * (1 - adjustment) + (x + half) / scale - half;
  }
  if (m == "pytorch_half_pixel") return out > 1 ? (x + half) / scale - half : T(0);
  if (m == "align_corners") return out == 1 ? T(0) : x * (in - 1) / (out - 1);
  if (m == "asymmetric") return x / scale;
  if (m == "tf_half_pixel_for_nn") return (x + half) / scale;
  if (m == "tf_crop_and_resize")
    return out > 1 ? roi_start * (in - 1) + x * (roi_end - roi_start) * (in - 1) / (out - 1)
                   : half * (roi_start + roi_end) * (in - 1);
  throw Unsupported("coordinate_transformation_mode '" + m + "'");
}

std::int64_t nearest_index(const ResizeParams& p, double x) {
  const std::string& m = p.nearest_mode;
  if (m == "floor") return static_cast<std::int64_t>(std::floor(x));
  if (m == "ceil") return static_cast<std::int64_t>(std::ceil(x));
  double f = std::floor(x);
  if (x - f == 0.5) return static_cast<std::int64_t>(m == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<std::int64_t>(std::round(x));
}

// The antialiased taps of coordinate x at a scale s <= 1: the kernel (triangle, or Keys' cubic
// with cubic_a) of half-width 1 or 2 stretched by 1 / s, normalized. Whole-number x: the taps
// start left of it (the extra one on the right would have weight 0).
template <typename T>
std::vector<std::pair<std::int64_t, T>> antialias_taps(const ResizeParams& p, T x, T s) {
  const bool linear = p.mode == "linear";
  const auto A = static_cast<T>(p.cubic_a);
  auto kernel = [linear, A](T t) {
    t = std::fabs(t);
    if (linear) return std::max(T(0), 1 - t);
    if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
    return t < 2 ? ((A * t - 5 * A) * t + 8 * A) * t - 4 * A : T(0);
  };
  const auto start = static_cast<std::int64_t>(std::floor((linear ? T(-1) : T(-2)) / s)) + 1;
  const std::int64_t n = 2 - 2 * start;
  const T f = std::floor(x);
  const std::int64_t first = static_cast<std::int64_t>(f) + (x == f ? 0 : 1) - n / 2;
  std::vector<std::pair<std::int64_t, T>> w;
  T sum = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const T v = kernel(s * (static_cast<T>(first + k) - x));
    w.emplace_back(first + k, v);
    sum += v;
  }
  for (auto& [i, v] : w) v /= sum;
  return w;
}

// The taps and weights of coordinate x (linear, cubic or antialiased), with exclude_outside's
// renormalization, in number type T.
template <typename T>
std::vector<std::pair<std::int64_t, T>> tap_weights(const ResizeParams& p, T x, T scale,
                                                    std::int64_t in) {
  const T f = std::floor(x), r = x - f;
  const auto base = static_cast<std::int64_t>(f);
  std::vector<std::pair<std::int64_t, T>> w;
  if (p.antialias && (p.mode == "linear" || p.mode == "cubic")) {
    w = antialias_taps<T>(p, x, std::min(scale, T(1)));
  } else if (p.mode == "linear") {
    w = {{base, 1 - r}, {base + 1, r}};
  } else if (p.mode == "cubic") {
    const auto A = static_cast<T>(p.cubic_a);
    auto far = [A](T d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };  // 1 < d < 2
    auto near = [A](T d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };       // d <= 1
    w = {{base - 1, far(r + 1)}, {base, near(r)}, {base + 1, near(1 - r)}, {base + 2, far(2 - r)}};
  } else {
    throw Unsupported("resize mode '" + p.mode + "'");
  }
  if (!p.exclude_outside) return w;
  T sum = 0;
  for (auto& [i, wt] : w) {
    if (i < 0 || i >= in) wt = 0;
    sum += wt;
  }
  for (auto& [i, wt] : w) wt /= sum;
  return w;
}

AxisTaps axis_taps(const ResizeParams& p, std::int64_t in, std::int64_t out, double scale,
                   double rs, double re) {
  AxisTaps a;
  a.taps.resize(out);
  a.outside.assign(out, false);
  a.coord_err.assign(out, 0.0);
  bool resized = in != out || scale != 1.0 || p.coord == "tf_crop_and_resize";
  auto clampi = [in](std::int64_t i) { return std::clamp<std::int64_t>(i, 0, in - 1); };
  for (std::int64_t o = 0; o < out; ++o) {
    const double x = p.f32 ? static_cast<double>(original_coord<float>(
                                 p, static_cast<float>(o), static_cast<float>(scale), in,
                                 static_cast<float>(in) * static_cast<float>(scale), out,
                                 static_cast<float>(rs), static_cast<float>(re)))
                           : original_coord<double>(p, static_cast<double>(o), scale, in,
                                                    static_cast<double>(in) * scale, out, rs, re);
    if (p.coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in - 1))) {
      a.outside[o] = true;
      continue;
    }
    auto& t = a.taps[o];
    if (p.mode == "nearest") {
      t.push_back({clampi(nearest_index(p, x)), 1.0});
      continue;
    }
    // (o + 1/2) / scale - 1/2 and its kin: two or three roundings of magnitude |x| + 1/2, one
    // more when the scale itself is a rounded out / in.
    if (resized) a.coord_err[o] = 4 * (std::fabs(x) + 1);
    if (p.f32) {
      for (const auto& [i, wt] :
           tap_weights<float>(p, static_cast<float>(x), static_cast<float>(scale), in))
        if (wt != 0) t.push_back({clampi(i), static_cast<double>(wt)});
    } else {
      for (const auto& [i, wt] : tap_weights<double>(p, x, scale, in))
        if (wt != 0) t.push_back({clampi(i), wt});
    }
  }
  return a;
}

// The rounding magnitudes of resizing (units of u, before kappa and the weights' slope), per
// output element for the forward, per input element for the backward:
//   abs:   sum over taps of |w| |x| (forward) or |w| |g| (backward);
//   coord: sum over taps of e |x| (or e |g|), e the summed coordinate errors of the taps' axes:
//          a coordinate off by e u moves each weight by at most slope * e u;
//   terms: taps per output element (forward) or terms per input element (backward).
struct ResizeMagnitudes {
  std::vector<double> abs, coord, terms;
};

// Resize's attributes and inputs: the sizes, or else the scales, and the region of interest.
struct ResizeSpec {
  ResizeParams p;
  std::vector<double> scales, roi;
  std::vector<std::int64_t> sizes;
  // Resize-18: the axes that scales, sizes and roi name (empty: all), and how sizes keep the
  // aspect ratio.
  std::vector<std::int64_t> axes;
  std::string keep_aspect = "stretch";
};

ResizeSpec resize_spec(const KernelContext& c, const Tensors& in) {
  const Node& n = c.node;
  ResizeSpec s;
  s.p.mode = attr_s(c, "mode");
  if (n.op_type == "Upsample" || c.opset < 11) {
    // Upsample and Resize-10: scales only, asymmetric coordinates, nearest rounds down.
    s.p.coord = "asymmetric";
    s.p.nearest_mode = "floor";
    if (n.op_type == "Upsample" && c.opset < 9)
      s.scales = n.attr_floats("scales");
    else
      s.scales = input(c, in, 1).to_f64();
  } else {
    s.p.coord = attr_s(c, "coordinate_transformation_mode");
    s.p.nearest_mode = attr_s(c, "nearest_mode");
    s.p.cubic_a = attr_f(c, "cubic_coeff_a");
    s.p.exclude_outside = attr_i(c, "exclude_outside") != 0;
    s.p.extrapolation = attr_f(c, "extrapolation_value");
    if (has_input(in, 1)) s.roi = in[1].to_f64();
    if (has_input(in, 2)) s.scales = in[2].to_f64();
    if (has_input(in, 3)) s.sizes = in[3].to_i64();
    if (c.opset >= 18) {
      s.p.antialias = attr_i_or(c, "antialias", 0) != 0;
      s.axes = attr_ints_or(c, "axes", {});
      s.keep_aspect = attr_s_or(c, "keep_aspect_ratio_policy", "stretch");
    }
  }
  if (s.p.mode == "bilinear") s.p.mode = "linear";
  return s;
}

// The taps of every axis: the output length and scale from the sizes when given, else from the
// scales (the length rounded down).
std::vector<AxisTaps> resize_axes(const KernelContext& c, const Shape& xs, const ResizeSpec& s,
                                  Shape& os) {
  auto r = static_cast<std::int64_t>(xs.size());
  // The axes that sizes, scales and roi name (Resize-18's `axes`; all of them before), and
  // those three spread over every axis (the others keep their length, scale 1, roi [0, 1]).
  std::vector<std::int64_t> named(static_cast<std::size_t>(r));
  std::iota(named.begin(), named.end(), 0);
  if (!s.axes.empty()) named = norm_axes(c, s.axes, r);
  const auto k = static_cast<std::int64_t>(named.size());
  std::vector<double> roi(static_cast<std::size_t>(2 * r), 0.0);
  std::fill(roi.begin() + r, roi.end(), 1.0);
  if (s.roi.size() == static_cast<std::size_t>(2 * k))
    for (std::int64_t i = 0; i < k; ++i) {
      roi[named[i]] = s.roi[i];
      roi[named[i] + r] = s.roi[i + k];
    }
  os = xs;
  std::vector<double> sc(r, 1.0);
  if (!s.sizes.empty()) {
    if (static_cast<std::int64_t>(s.sizes.size()) != k)
      fail("{}: sizes {} for {} axes", c.node.label(), shape_str(s.sizes), k);
    for (std::int64_t i = 0; i < k; ++i) {
      os[named[i]] = s.sizes[i];
      sc[named[i]] = static_cast<double>(s.sizes[i]) / static_cast<double>(xs[named[i]]);
    }
    // keep_aspect_ratio_policy: one scale for the named axes, the smallest (not_larger) or the
    // largest (not_smaller), and lengths round(scale * length), halves up.
    if (s.keep_aspect != "stretch") {
      if (s.keep_aspect != "not_larger" && s.keep_aspect != "not_smaller")
        fail("{}: keep_aspect_ratio_policy '{}'", c.node.label(), s.keep_aspect);
      double one = sc[named[0]];
      for (auto d : named)
        one = s.keep_aspect == "not_larger" ? std::min(one, sc[d]) : std::max(one, sc[d]);
      for (auto d : named) {
        sc[d] = one;
        os[d] = static_cast<std::int64_t>(std::floor(one * static_cast<double>(xs[d]) + 0.5));
      }
    }
  } else {
    if (static_cast<std::int64_t>(s.scales.size()) != k)
      fail("{}: {} scales for {} axes", c.node.label(), s.scales.size(), k);
    for (std::int64_t i = 0; i < k; ++i) {
      sc[named[i]] = s.scales[i];
      os[named[i]] =
          static_cast<std::int64_t>(std::floor(static_cast<double>(xs[named[i]]) * s.scales[i]));
    }
  }
  std::vector<AxisTaps> axes;
  axes.reserve(static_cast<std::size_t>(r));
  for (std::int64_t d = 0; d < r; ++d)
    axes.push_back(axis_taps(s.p, xs[d], os[d], sc[d], roi[d], roi[d + r]));
  return axes;
}

// What one output element's sum reads and feeds: the input and its strides, and optionally the
// output gradient with the input gradient it accumulates into, and the rounding magnitudes.
struct TapSum {
  const std::vector<AxisTaps>& axes;
  const std::vector<double>& vx;
  const std::vector<std::int64_t>& xs;
  const std::vector<double>* gout;
  std::vector<double>* gin;
  ResizeMagnitudes* mag;
};

// Output element i at multi-index `idx`: the sum over the tensor product of its axes' taps (an
// odometer over tap positions), its gradient sent back along the same taps, its magnitudes. The
// weights' products and the sum in T (float: the float32 twin, which has no gradient).
template <typename T>
double sum_taps(const TapSum& s, std::int64_t i, const std::vector<std::int64_t>& idx,
                std::vector<std::size_t>& k) {
  auto r = static_cast<std::int64_t>(idx.size());
  T acc = 0;
  std::fill(k.begin(), k.end(), 0);
  double e = 0;  // the coordinate errors of this output element's axes
  if (s.mag)
    for (std::int64_t d = 0; d < r; ++d) e += s.axes[d].coord_err[idx[d]];
  while (true) {
    T w = 1;
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < r; ++d) {
      const Tap& t = s.axes[d].taps[idx[d]][k[d]];
      w *= static_cast<T>(t.weight);
      off += t.index * s.xs[d];
    }
    acc += w * static_cast<T>(s.vx[off]);
    if (s.gout) (*s.gin)[off] += static_cast<double>(w) * (*s.gout)[i];
    if (s.mag) {
      double v = s.gout ? std::fabs((*s.gout)[i]) : std::fabs(s.vx[off]);
      auto at = static_cast<std::size_t>(s.gout ? off : i);
      s.mag->abs[at] += std::fabs(static_cast<double>(w)) * v;
      s.mag->coord[at] += e * v;
      s.mag->terms[at] += 1;
    }
    std::int64_t d = r - 1;
    for (; d >= 0; --d) {
      if (++k[d] < s.axes[d].taps[idx[d]].size()) break;
      k[d] = 0;
    }
    if (d < 0) break;
  }
  return static_cast<double>(acc);
}

// With `gout`, also accumulates the VJP into `gin`: resizing is linear in X, each output element
// a weighted sum of taps, so the gradient flows back along the same taps and weights. With
// `mag`, the rounding magnitudes of the forward (no `gout`) or of the backward.
Tensors resize(const KernelContext& c, const Tensors& in, const std::vector<double>* gout = nullptr,
               std::vector<double>* gin = nullptr, ResizeMagnitudes* mag = nullptr,
               bool f32 = false) {
  const Tensor& x = input(c, in, 0);
  ResizeSpec spec = resize_spec(c, in);
  spec.p.f32 = f32;
  std::int64_t r = x.rank();
  Shape os;
  std::vector<AxisTaps> axes = resize_axes(c, x.shape(), spec, os);
  auto vx = x.to_f64();
  auto xs = strides_of(x.shape());
  std::int64_t total = shape_numel(os);
  std::vector<double> y(static_cast<std::size_t>(total));
  if (mag) {
    std::size_t n = gout ? vx.size() : y.size();
    mag->abs.assign(n, 0.0);
    mag->coord.assign(n, 0.0);
    mag->terms.assign(n, 0.0);
  }
  TapSum sum{axes, vx, xs, gout, gin, mag};
  IndexIter it(os);
  std::vector<std::size_t> k(r);
  for (std::int64_t i = 0; i < total; ++i, it.next()) {
    bool outside = false;
    for (std::int64_t d = 0; d < r; ++d) outside |= axes[d].outside[it.idx()[d]];
    y[i] = outside ? spec.p.extrapolation
           : f32   ? sum_taps<float>(sum, i, it.idx(), k)
                   : sum_taps<double>(sum, i, it.idx(), k);
  }
  return {Tensor::from_f64(y, os, x.dtype())};
}

Tensors resize_reference(const KernelContext& c, const Tensors& in) {
  return resize(c, in);
}

Tensors resize_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads) {
  auto gout = grad_of(grads, out, 0);
  std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
  resize(c, in, &gout, &gin);
  Tensors r(in.size());
  r[0] = grad_like(gin, in[0]);
  return r;
}

// Interpolation sums T taps per output element (2^d linear, 4^d cubic): kappa(T) sum|w x|;
// coordinates computed in the output precision move each weight by at most slope * e u
// (slope = max |dw/dr|: 1 linear, 1.35 cubic with a = -0.75, bounded by 1.5 here; e the
// coordinate's error, ~4(|x_orig| + 1) per resized axis), so slope * sum e |x|. The backward
// sends each output gradient along the same taps: kappa(terms) sum|w g| + slope * sum e |g|.
double weight_slope(const KernelContext& c) {
  return attr_s(c, "mode") == "cubic" ? 1.5 : 1.0;
}

Magnitudes resize_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                            const AccumulationBound& bound) {
  std::string mode = attr_s(c, "mode");
  if (mode == "nearest" || !ref[0].defined()) return {{}};
  ResizeMagnitudes m;
  resize(c, in, nullptr, nullptr, &m);
  std::vector<double> out(m.abs.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = bound.kappa(m.terms[i]) * m.abs[i] + weight_slope(c) * m.coord[i];
  return {out};
}

Magnitudes resize_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                                const Tensors& grads, const AccumulationBound& bound) {
  Magnitudes m(in.size());
  auto gout = grad_of(grads, out, 0);
  std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
  ResizeMagnitudes rm;
  resize(c, in, &gout, &gin, &rm);
  bool nearest = attr_s(c, "mode") == "nearest";
  m[0].resize(gin.size());
  for (std::size_t j = 0; j < gin.size(); ++j)
    m[0][j] = bound.kappa(rm.terms[j]) * rm.abs[j] + (nearest ? 0 : weight_slope(c) * rm.coord[j]);
  return m;
}

constexpr const char* kResizeDoc =
    "nearest: exact; linear/cubic: kappa(taps) sum|w x| + slope sum e|x| (e: the taps' "
    "coordinate errors, 4(|x_orig| + 1) per resized axis; slope 1 linear, 1.5 cubic), 4 ulp";
constexpr const char* kResizeBackwardDoc =
    "kappa(terms) sum|w g| + slope sum e|g| over the output elements each input feeds, 4 ulp";

}  // namespace

void register_resize_ops(OpRegistry& r) {
  using error_models::condition;

  // Besides the ONNX node tests (of Debian's ONNX 1.12, without Resize-18): antialiased
  // downsampling, linear and cubic, to sizes that stretch the kernel to 4 to 12 taps (scales
  // 5/9 and 3/8), no roi and no scales (empty inputs).
  auto antialias = [](const char* mode) {
    return std::map<std::string, Attribute>{{"mode", Attribute::of_string(mode)},
                                            {"antialias", Attribute::of_int(1)}};
  };
  const CaseInput none{{0}, DType::Float32, {}, 0, 0};
  const std::vector<CaseInput> downsample{case_input::floats({1, 2, 9, 8}), none, none,
                                          case_input::ints({4}, {1, 2, 5, 3})};
  r.op("Resize", Family::shape, resize_reference)
      .vjp(resize_vjp)
      .error(condition(resize_magnitude, kResizeDoc))
      .backward_error(resize_vjp_magnitude, kResizeBackwardDoc)
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return resize(c, in, nullptr, nullptr, nullptr, true); },
               "the coordinates, the taps' weights and their sum in float32",
               "none needed beyond the sum's order")
      .inputs(InputRoles::keeping({1, 2}))
      .faults({"offbyone"})
      .cases({{18, downsample, antialias("linear")}, {18, downsample, antialias("cubic")}});

  // The older Upsample: Resize with scales only, asymmetric coordinates (see resize()).
  r.op("Upsample", Family::shape, resize_reference)
      .vjp(resize_vjp)
      .error(condition(resize_magnitude, kResizeDoc))
      .backward_error(resize_vjp_magnitude, kResizeBackwardDoc)
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return resize(c, in, nullptr, nullptr, nullptr, true); },
               "the coordinates, the taps' weights and their sum in float32",
               "none needed beyond the sum's order")
      .inputs(InputRoles::keeping({1}));
}

}  // namespace metaop
