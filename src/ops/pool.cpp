// Pooling meta operators: MaxPool (with indices), AveragePool, LpPool, the global pools and
// MaxRoiPool. Every pool is the same walk over windows (for_each_window, or the whole spatial
// extent for the global pools, or a region's bins) with a reducer per kind; its VJP sends each
// output's gradient back along the same taps.
//
// MaxRoiPool (opsets 1, 22) is Fast R-CNN's region-of-interest pooling, and the ONNX text says no
// more than its output's shape. The reference follows that layer as Caffe wrote it and ONNX
// Runtime, OpenVINO and torchvision run it: a region [batch_id, x1, y1, x2, y2] of rois is scaled
// by spatial_scale and rounded to pixels half away from zero; it spans (end - start + 1) pixels
// per axis, at least 1; bin ph of pooled_shape[0] covers the rows [start + floor(ph * height /
// pooled), start + ceil((ph + 1) * height / pooled)) clipped to the image, and likewise for
// columns; a bin's output is the largest element it covers (the first NaN, as MaxPool's), 0 for a
// bin that covers none. The bin edges are computed exactly in integers; the float32 evaluation
// computes them as the layer writes them (bin_size = height / pooled, then floor(ph * bin_size),
// ceil((ph + 1) * bin_size) in float32), whose roundings can move an edge by a pixel.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/conventions.h"
#include "ops/danger.h"
#include "ops/vjp_util.h"
#include "ops/window.h"

namespace metaop {

namespace {

// One window of one (sample, channel) plane: its output position, the flat positions (within
// the plane) of its taps inside the input, and how many of its positions lie inside the input
// plus pads (count_include_pad).
struct WindowTaps {
  std::int64_t out = 0;  // flat output index within the plane
  std::vector<std::int64_t> taps;
  std::int64_t padded = 0;
};

template <typename F>
void for_each_window(const Window& w, F&& f) {
  WindowTaps t;
  for (std::int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (std::int64_t o1 = 0; o1 < w.out[1]; ++o1)
      for (std::int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        t.out = (o0 * w.out[1] + o1) * w.out[2] + o2;
        t.taps.clear();
        t.padded = 0;
        for (std::int64_t k0 = 0; k0 < w.k[0]; ++k0)
          for (std::int64_t k1 = 0; k1 < w.k[1]; ++k1)
            for (std::int64_t k2 = 0; k2 < w.k[2]; ++k2) {
              std::int64_t i[3] = {o0 * w.s[0] - w.pb[0] + k0 * w.d[0],
                                   o1 * w.s[1] - w.pb[1] + k1 * w.d[1],
                                   o2 * w.s[2] - w.pb[2] + k2 * w.d[2]};
              bool inside = true, in_pads = true;
              for (int d = 0; d < 3; ++d) {
                inside &= i[d] >= 0 && i[d] < w.in[d];
                in_pads &= i[d] >= -w.pb[d] && i[d] < w.in[d] + w.pe[d];
              }
              t.padded += in_pads;
              if (inside) t.taps.push_back((i[0] * w.in[1] + i[1]) * w.in[2] + i[2]);
            }
        f(t);
      }
}

// ---- the reducers: a window's taps (values xc[t]) to its output, and the output's gradient
// back to the taps.

// Max: the largest tap; the first NaN wins (numpy's argmax), and gives the index.
struct MaxReducer {
  double value = 0;
  std::int64_t arg = -1;  // -1: an empty window
  bool nan = false;
  void run(const double* xc, const std::vector<std::int64_t>& taps) {
    double acc = -std::numeric_limits<double>::infinity();
    arg = -1;
    nan = false;
    for (auto t : taps) {
      double v = xc[t];
      if (std::isnan(v) ? !nan : (!nan && (v > acc || arg < 0))) {
        nan = nan || std::isnan(v);
        acc = v;
        arg = t;
      }
    }
    value = nan ? NAN : acc;
  }
};

double average(const double* xc, const WindowTaps& w, bool include_pad) {
  double acc = 0;
  for (auto t : w.taps) acc += xc[t];
  return acc /
         static_cast<double>(include_pad ? w.padded : static_cast<std::int64_t>(w.taps.size()));
}

double lp_norm(const double* xc, const std::vector<std::int64_t>& taps, double p) {
  double acc = 0;
  for (auto t : taps) acc += std::pow(std::fabs(xc[t]), p);
  return std::pow(acc, 1.0 / p);
}

// d y / d x_t of y = (sum |x|^p)^(1/p): |x_t|^(p-1) sign(x_t) / y^(p-1) (none where y = 0).
void lp_backward(const double* xc, const std::vector<std::int64_t>& taps, double p, double y,
                 double g, double* gi) {
  if (!(y > 0)) return;
  for (auto t : taps)
    gi[t] += g * std::pow(std::fabs(xc[t]), p - 1) * (xc[t] < 0 ? -1 : 1) / std::pow(y, p - 1);
}

// The flat index MaxPool's Indices output gives for tap `flat` of plane `nc`: row-major over the
// whole tensor, or (storage_order=1) column-major within the image.
std::int64_t max_index(const Window& w, std::int64_t nc, std::int64_t flat, bool col_major) {
  if (col_major) {
    std::int64_t i2 = flat % w.in[2], i1 = (flat / w.in[2]) % w.in[1],
                 i0 = flat / (w.in[1] * w.in[2]);
    flat = w.nsp == 1 ? i2 : (w.nsp == 2 ? i2 * w.in[1] + i1 : (i2 * w.in[1] + i1) * w.in[0] + i0);
  }
  return nc * w.in_size() + flat;
}

// Max's subgradient candidates in one window: the taps equal to its maximum, as flat indices
// into the whole input (`base`: the plane's first element).
void add_max_ties(TieCollector& ties, const double* xc, const std::vector<std::int64_t>& taps,
                  double value, std::int64_t base, double g) {
  std::vector<std::int64_t> cand;
  for (auto tap : taps)
    if (xc[tap] == value) cand.push_back(base + tap);
  ties.add(cand, g);
}

enum class PoolKind { Max, Avg, Lp };

// The pool's forward; with `gout`, also the VJP into `gin`; with `ties` (Max), the candidates of
// each window for the subgradient set: the taps equal to its maximum. `float32`: the VJP's
// terms (g, g / n) and their sums over overlapping windows in float32 (the VJP's float32 twin).
Tensors window_pool(const KernelContext& c, const Tensors& in, PoolKind kind,
                    const std::vector<double>* gout, std::vector<double>* gin, TieCollector* ties,
                    bool float32) {
  // Adds a term to a gradient element (in float32, the sum of two float32 values rounded once).
  auto add = [float32](double& acc, double term) {
    acc = float32 ? static_cast<float>(acc + static_cast<float>(term)) : acc + term;
  };
  const Tensor& x = input(c, in, 0);
  const Node& node = c.node;
  // Only some pools and opsets have these (ceil_mode: MaxPool and AveragePool from opset 10,
  // count_include_pad: AveragePool from 7, storage_order: MaxPool from 8); 0 where absent.
  bool ceil_mode = attr_i_or(c, "ceil_mode", 0) != 0;
  Window w = window_geometry(c, x.shape(), node.attr_ints("kernel_shape"), ceil_mode);
  bool include_pad = attr_i_or(c, "count_include_pad", 0) != 0;
  double p = kind == PoolKind::Lp ? static_cast<double>(attr_i(c, "p")) : 0.0;
  bool col_major = attr_i_or(c, "storage_order", 0) == 1;
  std::int64_t NC = x.dim(0) * x.dim(1), P = w.out_size();
  auto vx = x.to_f64();
  std::vector<double> out(static_cast<std::size_t>(NC * P));
  std::vector<std::int64_t> idx(kind == PoolKind::Max ? out.size() : 0);
  for (std::int64_t nc = 0; nc < NC; ++nc) {
    const double* xc = vx.data() + nc * w.in_size();
    double* gi = gin ? gin->data() + nc * w.in_size() : nullptr;
    for_each_window(w, [&](const WindowTaps& t) {
      std::int64_t o = nc * P + t.out;
      double g = gout ? (*gout)[o] : 0;
      if (kind == PoolKind::Max) {
        MaxReducer m;
        m.run(xc, t.taps);
        out[o] = m.value;
        idx[o] = max_index(w, nc, m.arg < 0 ? 0 : m.arg, col_major);
        if (gi && m.arg >= 0) add(gi[m.arg], g);
        if (ties && !m.nan) add_max_ties(*ties, xc, t.taps, m.value, nc * w.in_size(), g);
      } else if (kind == PoolKind::Avg) {
        out[o] = average(xc, t, include_pad);
        double n =
            static_cast<double>(include_pad ? t.padded : static_cast<std::int64_t>(t.taps.size()));
        double term = float32 ? static_cast<float>(g) / static_cast<float>(n) : g / n;
        if (gi)
          for (auto tap : t.taps) add(gi[tap], term);
      } else {
        out[o] = lp_norm(xc, t.taps, p);
        if (gi) lp_backward(xc, t.taps, p, out[o], g, gi);
      }
    });
  }
  Shape os = w.out_shape(x.dim(0), x.dim(1));
  Tensors res{Tensor::from_f64(out, os, x.dtype())};
  if (kind == PoolKind::Max && node.outputs.size() > 1) res.push_back(Tensor::from_i64(idx, os));
  return res;
}

Tensors pool(const KernelContext& c, const Tensors& in, PoolKind kind,
             const std::vector<double>* gout = nullptr, std::vector<double>* gin = nullptr,
             TieCollector* ties = nullptr) {
  return window_pool(c, in, kind, gout, gin, ties, false);
}

// MaxPool's and AveragePool's VJP in float32 (triage of backward findings).
Float32VjpEvaluate pool_vjp_f32(PoolKind kind) {
  return [kind](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
                SumOrder) {
    std::vector<double> gout = grad_of(grads, out, 0);
    std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
    window_pool(c, in, kind, &gout, &gin, nullptr, true);
    Tensors r(in.size());
    r[0] = grad_like(gin, in[0]);
    return r;
  };
}

// The global pools: one window of the whole spatial extent per (sample, channel).
Tensors global_pool(const KernelContext& c, const Tensors& in, PoolKind kind,
                    const std::vector<double>* gout = nullptr, std::vector<double>* gin = nullptr,
                    TieCollector* ties = nullptr) {
  const Tensor& x = input(c, in, 0);
  if (x.rank() < 3)
    fail("{}: input must be [N, C, spatial...], got {}", c.node.label(), shape_str(x.shape()));
  std::int64_t NC = x.dim(0) * x.dim(1), S = x.numel() / std::max<std::int64_t>(NC, 1);
  double p = kind == PoolKind::Lp ? static_cast<double>(attr_i(c, "p")) : 0.0;
  auto vx = x.to_f64();
  std::vector<double> out(static_cast<std::size_t>(NC));
  WindowTaps all;
  for (std::int64_t j = 0; j < S; ++j) all.taps.push_back(j);
  all.padded = S;
  for (std::int64_t i = 0; i < NC; ++i) {
    const double* xc = vx.data() + i * S;
    double g = gout ? (*gout)[i] : 0;
    double* gi = gin ? gin->data() + i * S : nullptr;
    if (kind == PoolKind::Max) {
      MaxReducer m;
      m.run(xc, all.taps);
      out[i] = m.value;
      if (gi && m.arg >= 0) gi[m.arg] += g;
      if (ties && !m.nan) add_max_ties(*ties, xc, all.taps, m.value, i * S, g);
    } else if (kind == PoolKind::Avg) {
      out[i] = average(xc, all, false);
      if (gi)
        for (std::int64_t j = 0; j < S; ++j) gi[j] += g / static_cast<double>(S);
    } else {
      out[i] = lp_norm(xc, all.taps, p);
      if (gi) lp_backward(xc, all.taps, p, out[i], g, gi);
    }
  }
  Shape os(x.shape().begin(), x.shape().begin() + 2);
  os.resize(x.shape().size(), 1);
  return {Tensor::from_f64(out, os, x.dtype())};
}

using PoolFn = Tensors (*)(const KernelContext&, const Tensors&, PoolKind,
                           const std::vector<double>*, std::vector<double>*, TieCollector*);

ReferenceForward pool_forward(PoolFn run, PoolKind kind) {
  return [run, kind](const KernelContext& c, const Tensors& in) {
    return run(c, in, kind, nullptr, nullptr, nullptr);
  };
}

ReferenceVjp pool_vjp(PoolFn run, PoolKind kind) {
  return [run, kind](const KernelContext& c, const Tensors& in, const Tensors& out,
                     const Tensors& grads) {
    std::vector<double> gout = grad_of(grads, out, 0);
    std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
    run(c, in, kind, &gout, &gin, nullptr);
    Tensors r(in.size());
    r[0] = grad_like(gin, in[0]);
    return r;
  };
}

// At a tie for a window's maximum, its gradient may go to any of the tied elements.
SubgradientFn max_pool_subgradient(PoolFn run) {
  return
      [run](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        std::vector<GradientSet> sets(in.size());
        std::vector<double> gout = grad_of(grads, out, 0);
        std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
        TieCollector ties(gin.size());
        run(c, in, PoolKind::Max, &gout, &gin, &ties);
        sets[0] = ties.finish();
        return sets;
      };
}

// Terms per output: the kernel's size, or the whole spatial extent.
double window_terms(const KernelContext& c, const Tensors&) {
  double n = 1;
  for (auto k : attr_ints_or(c, "kernel_shape", {})) n *= static_cast<double>(k);
  return n;
}

double spatial_terms(const KernelContext&, const Tensors& in) {
  const Tensor& x = in[0];
  return static_cast<double>(x.numel()) /
         static_cast<double>(std::max<std::int64_t>(1, x.dim(0) * x.dim(1)));
}

// (sum |x|^p)^(1/p): positive terms, so the sum's relative error carries to |y| (/p), plus the
// powers' few ULPs: (kappa(n) + 8) |y|.
MagnitudeFn lp_magnitude(const error_models::TermCount& terms) {
  return [terms](const KernelContext& c, const Tensors& in, const Tensors& ref,
                 const AccumulationBound& bound) {
    double k = bound.kappa(terms(c, in)) + 8;
    auto y = ref[0].to_f64();
    for (auto& v : y) v = k * std::fabs(v);
    return Magnitudes{y};
  };
}

void register_max_pools(OpRegistry& r) {
  r.op("MaxPool", Family::pool, pool_forward(pool, PoolKind::Max))
      .error(error_models::exact())
      .vjp(pool_vjp(pool, PoolKind::Max))
      .vjp_float32(pool_vjp_f32(PoolKind::Max),
                   "each window's g to its largest element, summed where windows overlap",
                   "a wider accumulator for the overlapping windows")
      .subgradient(max_pool_subgradient(pool))
      .faults({"offbyone"})
      .cases({{13,
               {case_input::whole({2, 3, 4, 5})},
               {{"kernel_shape", Attribute::of_ints({2, 2})},
                {"strides", Attribute::of_ints({1, 1})}}}});
  r.op("GlobalMaxPool", Family::pool, pool_forward(global_pool, PoolKind::Max))
      .error(error_models::exact())
      .vjp(pool_vjp(global_pool, PoolKind::Max))
      .subgradient(max_pool_subgradient(global_pool))
      .cases({{13, {case_input::whole({2, 3, 4, 5})}}});
}

// MaxRoiPool's bin [lo, hi) of `p` among `bins` over `size` pixels from `start`, clipped to
// [0, limit): exact in integers (T = double), or as Caffe's layer computes it in float32.
template <typename T>
std::pair<std::int64_t, std::int64_t> roi_bin_edges(std::int64_t p, std::int64_t bins,
                                                    std::int64_t size, std::int64_t start,
                                                    std::int64_t limit) {
  std::int64_t lo = 0, hi = 0;
  if constexpr (std::is_same_v<T, double>) {
    lo = p * size / bins;
    hi = ((p + 1) * size + bins - 1) / bins;
  } else {
    const T bin = static_cast<T>(size) / static_cast<T>(bins);
    lo = static_cast<std::int64_t>(std::floor(static_cast<T>(p) * bin));
    hi = static_cast<std::int64_t>(std::ceil(static_cast<T>(p + 1) * bin));
  }
  return {std::clamp<std::int64_t>(lo + start, 0, limit),
          std::clamp<std::int64_t>(hi + start, 0, limit)};
}

// MaxRoiPool's forward in number type T (double: the reference, the bin edges in integers;
// float: the float32 evaluation, the coordinates' products and the bin edges in float32); with
// `gout`, its VJP into `gin`; with `ties`, each bin's maximal elements. `half_even` rounds the
// scaled coordinates half to even instead of away from zero (roi_rounding's other reading).
template <typename T>
Tensors max_roi_pool(const KernelContext& c, const Tensors& in, bool half_even = false,
                     const std::vector<double>* gout = nullptr, std::vector<double>* gin = nullptr,
                     TieCollector* ties = nullptr) {
  const Tensor &x = input(c, in, 0), &r = input(c, in, 1);
  require_float(c, x, "X");
  require_float(c, r, "rois");
  const std::string& at = c.node.label();
  if (x.rank() != 4) fail("{}: X of shape {}: [N, C, H, W]", at, shape_str(x.shape()));
  if (r.rank() != 2 || r.dim(1) != 5)
    fail("{}: rois of shape {}: [num_rois, 5]", at, shape_str(r.shape()));
  const auto pooled = attr_ints(c, "pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    fail("{}: pooled_shape [{}]: two positive sizes", at, fmt::join(pooled, ", "));
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), R = r.dim(0);
  const std::int64_t PH = pooled[0], PW = pooled[1], plane = H * W;
  const T scale = static_cast<T>(attr_f(c, "spatial_scale"));
  const auto vx = x.to_f64(), vr = r.to_f64();
  auto pixel = [&](double v) {
    // Past 2^40 pixels a corner is off any image either way: clamped so that the conversion
    // to an integer stays defined (and the region's size cannot overflow).
    const T scaled = std::clamp<T>(static_cast<T>(v) * scale, T(-0x1p40), T(0x1p40));
    return static_cast<std::int64_t>(half_even ? std::nearbyint(scaled) : std::round(scaled));
  };
  std::vector<double> out(static_cast<std::size_t>(R * C * PH * PW), 0.0);
  std::vector<std::int64_t> taps;
  for (std::int64_t n = 0; n < R; ++n) {
    const double* roi = vr.data() + n * 5;
    const double b = roi[0];
    if (!(b >= 0 && b < static_cast<double>(N) && b == std::floor(b)))
      fail("{}: rois[{}] names batch {}, not an image of X's batch of {}", at, n, b, N);
    const std::int64_t x1 = pixel(roi[1]), y1 = pixel(roi[2]), x2 = pixel(roi[3]),
                       y2 = pixel(roi[4]);
    const std::int64_t rh = std::max<std::int64_t>(y2 - y1 + 1, 1),
                       rw = std::max<std::int64_t>(x2 - x1 + 1, 1);
    for (std::int64_t ph = 0; ph < PH; ++ph) {
      const auto [h0, h1] = roi_bin_edges<T>(ph, PH, rh, y1, H);
      for (std::int64_t pw = 0; pw < PW; ++pw) {
        const auto [w0, w1] = roi_bin_edges<T>(pw, PW, rw, x1, W);
        taps.clear();
        for (std::int64_t h = h0; h < h1; ++h)
          for (std::int64_t w = w0; w < w1; ++w) taps.push_back(h * W + w);
        if (taps.empty()) continue;  // covers no pixel: 0
        for (std::int64_t ch = 0; ch < C; ++ch) {
          const std::int64_t base = (static_cast<std::int64_t>(b) * C + ch) * plane;
          const std::int64_t o = ((n * C + ch) * PH + ph) * PW + pw;
          MaxReducer m;
          m.run(vx.data() + base, taps);
          out[static_cast<std::size_t>(o)] = m.value;
          const double g = gout ? (*gout)[static_cast<std::size_t>(o)] : 0;
          if (gin) (*gin)[static_cast<std::size_t>(base + m.arg)] += g;
          if (ties && !m.nan) add_max_ties(*ties, vx.data() + base, taps, m.value, base, g);
        }
      }
    }
  }
  return {Tensor::from_f64(out, {R, C, PH, PW}, x.dtype())};
}

// Regions the text gives no pixels for: a corner that is NaN or infinite, a batch_id that is not
// an image of X's batch (ONNX Runtime truncates a fraction). Coordinates whose scaled value is
// past 2^31 are defined (the region is clipped to the image) but C kernels convert them to int
// (undefined behaviour): framework bindings decline them.
Undefined max_roi_pool_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.size() < 2 || !in[0].defined() || !in[1].defined() || in[0].rank() != 4) return "";
    const auto r = in[1].to_f64();
    const double n = static_cast<double>(in[0].dim(0));
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!std::isfinite(r[i]))
        return fmt::format("{}: rois holds {} at {} (region {}): no region is defined by it",
                           node.label(), r[i], i, i / 5);
      if (i % 5 == 0 && !(r[i] >= 0 && r[i] < n && r[i] == std::floor(r[i])))
        return fmt::format("{}: region {} names batch {}, not an image of X's batch of {}",
                           node.label(), i / 5, r[i], n);
    }
    return "";
  };
  u.crashes = [](const Node& node, const Tensors& in) -> std::string {
    if (in.size() < 2 || !in[1].defined()) return "";
    auto scale = node.attrs.find("spatial_scale");
    const double k = scale != node.attrs.end() ? scale->second.f : 1.0;
    const auto r = in[1].to_f64();
    for (std::size_t i = 0; i < r.size(); ++i)
      if (i % 5 != 0 && std::fabs(r[i] * k) >= 0x1p31)
        return fmt::format("{}: rois[{}] is {}, past 2^31 pixels once scaled by {}", node.label(),
                           i, r[i], k);
    return "";
  };
  return u;
}

// The rounding of a region's scaled corners to pixels: the text says nothing. Caffe's layer, ONNX
// Runtime and OpenVINO round half away from zero (C's round); a kernel may round half to even.
// Explains a finding when every element outside the model is that other reading's value.
Convention roi_rounding() {
  return {"roi-rounding",
          "the text does not say how a region's scaled corners become pixels: Fast R-CNN's layer "
          "(and ONNX Runtime) rounds half away from zero, others half to even",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            if (got.empty() || !got[0].defined() || bad.empty()) return false;
            return other_reading_explains(max_roi_pool<double>(c, in, true)[0], got, bad, 0, true);
          }};
}

void register_roi_pool(OpRegistry& r) {
  using case_input::floats;
  auto attrs = [](std::int64_t h, std::int64_t w, double scale) {
    return std::map<std::string, Attribute>{{"pooled_shape", Attribute::of_ints({h, w})},
                                            {"spatial_scale", Attribute::of_float(scale)}};
  };
  // Regions [batch_id, x1, y1, x2, y2]: inside, across the edges, past the image (every bin
  // empty), one pixel, and reversed corners (forced to 1 x 1).
  const CaseInput regions{{5, 5}, DType::Float32, {0, 0, 0, 6,  5,  1,  2,  1, 9, 8, 0, -3, -2,
                                                   3, 2, 1, 12, 12, 15, 14, 0, 4, 4, 4, 4}};
  const CaseInput scaled{
      {3, 5}, DType::Float32, {1, 3, 5, 21, 19, 0, 0, 0, 31, 31, 1, 9, 2, 14, 30}};
  r.op("MaxRoiPool", Family::pool,
       [](const KernelContext& c, const Tensors& in) { return max_roi_pool<double>(c, in); })
      .error(error_models::exact("exact: each output is one element of X"))
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        std::vector<double> gout = grad_of(grads, out, 0);
        std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
        max_roi_pool<double>(c, in, false, &gout, &gin);
        Tensors g(in.size());
        g[0] = grad_like(gin, in[0]);
        return g;
      })
      .subgradient(
          [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
            std::vector<GradientSet> sets(in.size());
            std::vector<double> gout = grad_of(grads, out, 0);
            std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
            TieCollector ties(gin.size());
            max_roi_pool<double>(c, in, false, &gout, &gin, &ties);
            sets[0] = ties.finish();
            return sets;
          })
      .domain(Domain({0}))
      .inputs(InputRoles::keeping({1}))
      .undefined(max_roi_pool_undefined())
      .conventions({nan_propagation(), roi_rounding()})
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return max_roi_pool<float>(c, in); },
               "the scaled corners (x * spatial_scale) and the bin edges (floor(p * bin_size), "
               "ceil((p + 1) * bin_size), bin_size = size / pooled) in float32",
               "the bin edges in integers: floor(p * size / pooled), ceil((p + 1) * size / pooled)")
      .cases({{16, {floats({2, 3, 8, 10}), regions}, attrs(3, 2, 1.0)},
              {16, {case_input::whole({2, 2, 8, 8}), scaled}, attrs(2, 3, 0.25)},
              {16,
               {floats({1, 1, 7, 7}), CaseInput{{1, 5}, DType::Float32, {0, 0, 0, 6, 6}}},
               attrs(3, 3, 1.0)}});
}

void register_average_pools(OpRegistry& r) {
  using error_models::accumulation;
  r.op("AveragePool", Family::pool, pool_forward(pool, PoolKind::Avg))
      .error(accumulation(window_terms, "kappa(prod(kernel)) * avg(|x|), 2 ulp"))
      .vjp(pool_vjp(pool, PoolKind::Avg))
      .vjp_float32(pool_vjp_f32(PoolKind::Avg),
                   "each window's g / n to its elements, summed where windows overlap",
                   "a wider accumulator for the overlapping windows")
      .faults({"offbyone"});
  r.op("GlobalAveragePool", Family::pool, pool_forward(global_pool, PoolKind::Avg))
      .error(accumulation(spatial_terms, "kappa(spatial size) * mean(|x|), 2 ulp"))
      .vjp(pool_vjp(global_pool, PoolKind::Avg));
}

void register_lp_pools(OpRegistry& r) {
  using error_models::condition;
  r.op("LpPool", Family::pool, pool_forward(pool, PoolKind::Lp))
      .error(condition(lp_magnitude(window_terms), "(kappa(prod(kernel)) + 8) * |y|, 4 ulp"))
      .vjp(pool_vjp(pool, PoolKind::Lp))
      .danger({danger::output_overflow()})
      .faults({"offbyone"})
      .cases({{13,
               {case_input::floats({2, 3, 4, 5})},
               {{"kernel_shape", Attribute::of_ints({2, 2})}, {"p", Attribute::of_int(3)}}}});
  r.op("GlobalLpPool", Family::pool, pool_forward(global_pool, PoolKind::Lp))
      .error(condition(lp_magnitude(spatial_terms), "(kappa(spatial) + 8) * |y|, 4 ulp"))
      .vjp(pool_vjp(global_pool, PoolKind::Lp))
      .danger({danger::output_overflow()})
      .cases({{13, {case_input::floats({2, 3, 4, 5})}, {{"p", Attribute::of_int(2)}}}});
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  register_max_pools(r);
  register_average_pools(r);
  register_lp_pools(r);
  register_roi_pool(r);
}

}  // namespace metaop
