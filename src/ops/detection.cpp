// Detection meta operators: NonMaxSuppression. Its output is indices: a framework is judged to
// the box, and triage's float32 twin computes the intersections over union in float32, so a box
// kept or suppressed by a float32 rounding at the threshold is a float32-limit, not a defect.
//
// RoiAlign (opsets 10, 16): each region of interest [x1, y1, x2, y2] of rois, scaled by
// spatial_scale (and moved by -0.5 under half_pixel; output_half_pixel, opset 10's only mode, makes
// a region at least 1 x 1 instead), is cut into output_height x output_width bins; each bin
// averages (or takes the max of) a grid of bilinearly interpolated samples, sampling_ratio per side
// or ceil(region / bins) where it is 0. The text leaves the sample's edge cases to its reference
// evaluator, which follows Caffe2's and ONNX Runtime's kernel: a sample past -1 or past the
// image's size contributes 0 (and still counts), one in [-1, 0) is clamped to 0, one past the last
// pixel reads the last one; max mode takes, per sample, the largest of the four weighted corners
// (w_k * v_k), not the interpolated value. The error model: the sum's kappa(4 count + 1) sum|w v|
// / count, plus each sample's coordinate errors (8 roundings of its terms' magnitudes per axis)
// times the corners' sum|v|, the interpolation's slope bound.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops/conventions.h"
#include "ops/kernel_util.h"

namespace metaop {

namespace {

// A box as two corners, lo <= hi on each axis.
template <typename T>
struct Box {
  T y1, x1, y2, x2;
};

// Box i of `b` (4 values from `at`): [y1, x1, y2, x2] with any diagonal pair of corners, or
// (center_point_box) [x_center, y_center, width, height].
template <typename T>
Box<T> box_at(const std::vector<double>& b, std::size_t at, bool center) {
  auto v = [&](std::size_t k) { return static_cast<T>(b[at + k]); };
  if (center) {
    T xc = v(0), yc = v(1), w = v(2), h = v(3);
    return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
  }
  return {std::min(v(0), v(2)), std::min(v(1), v(3)), std::max(v(0), v(2)), std::max(v(1), v(3))};
}

// Intersection over union in T; a box of no area overlaps nothing (IoU 0). A product that
// overflows or underflows T where its factors are not 0 (an area, the intersection) makes the
// IoU NaN: the type's limit, not the definition's.
template <typename T>
T iou(const Box<T>& a, const Box<T>& b) {
  const T ha = a.y2 - a.y1, wa = a.x2 - a.x1, hb = b.y2 - b.y1, wb = b.x2 - b.x1;
  if (!(ha > 0) || !(wa > 0) || !(hb > 0) || !(wb > 0)) return 0;
  const T area_a = ha * wa, area_b = hb * wb;
  T h = std::max(T(0), std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  T w = std::max(T(0), std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  T inter = h * w;
  auto lost = [](T product, T x, T y) {
    return !std::isfinite(product) || (product == 0 && x > 0 && y > 0);
  };
  if (lost(area_a, ha, wa) || lost(area_b, hb, wb) || lost(inter, h, w))
    return std::numeric_limits<T>::quiet_NaN();
  return inter / (area_a + area_b - inter);
}

// The boxes of one batch and class that suppression keeps, in the order they are kept:
// `order` is the candidates by descending score; a box goes unless its IoU with one kept before
// it is strictly greater than `iou_threshold`; at most `max_boxes`.
template <typename T>
std::vector<std::int64_t> keep_boxes(const std::vector<Box<T>>& bx,
                                     const std::vector<std::int64_t>& order, double max_boxes,
                                     T iou_threshold, std::int64_t b, std::int64_t k) {
  std::vector<std::int64_t> kept;
  for (std::int64_t i : order) {
    if (static_cast<double>(kept.size()) >= max_boxes) break;
    bool suppressed = false;
    for (std::int64_t j : kept) {
      const T overlap = iou(bx[static_cast<std::size_t>(i)], bx[static_cast<std::size_t>(j)]);
      // The IoU of finite boxes is in [0, 1]: a NaN or infinity is the type's overflow or
      // underflow (float64 has neither for float32 boxes).
      if (!std::isfinite(overlap))
        throw Float32Lost(fmt::format("the IoU of boxes {} and {} (batch {}, class {}) is {}", i, j,
                                      b, k, static_cast<double>(overlap)));
      if (overlap > iou_threshold) {
        suppressed = true;
        break;
      }
    }
    if (!suppressed) kept.push_back(i);
  }
  return kept;
}

// Per batch and class: the boxes whose score is not below score_threshold, by descending score
// (ties: the lower index first), each kept unless its IoU with a box kept before it is strictly
// greater than iou_threshold, up to max_output_boxes_per_class (0 or absent: none). T: the type
// the IoUs are computed and compared in (double for the reference, float for the twin);
// `drop_at_threshold`: a score equal to score_threshold removes the box too (the convention
// below).
template <typename T>
Tensors non_max_suppression(const KernelContext& c, const Tensors& in,
                            bool drop_at_threshold = false) {
  const Tensor &boxes = input(c, in, 0), &scores = input(c, in, 1);
  if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 ||
      scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    fail("{}: boxes {} and scores {}: [batches, boxes, 4] and [batches, classes, boxes]",
         c.node.label(), shape_str(boxes.shape()), shape_str(scores.shape()));
  auto scalar = [&](std::size_t k, double absent) {
    if (!has_input(in, k)) return absent;
    if (in[k].numel() != 1)
      fail("{}: input #{} has {} elements: one value", c.node.label(), k, in[k].numel());
    return in[k].f64_at(0);
  };
  const double max_boxes = scalar(2, 0);
  const T iou_threshold = static_cast<T>(scalar(3, 0));
  const bool has_score_threshold = has_input(in, 4);
  const T score_threshold = static_cast<T>(scalar(4, 0));
  const bool center = attr_i(c, "center_point_box") != 0;
  const std::int64_t batches = boxes.dim(0), n = boxes.dim(1), classes = scores.dim(1);
  const auto bv = boxes.to_f64(), sv = scores.to_f64();
  std::vector<std::int64_t> out;
  for (std::int64_t b = 0; b < batches; ++b) {
    std::vector<Box<T>> bx;
    for (std::int64_t i = 0; i < n; ++i)
      bx.push_back(box_at<T>(bv, static_cast<std::size_t>((b * n + i) * 4), center));
    for (std::int64_t k = 0; k < classes; ++k) {
      const std::size_t base = static_cast<std::size_t>((b * classes + k) * n);
      auto score = [&](std::int64_t i) {
        return static_cast<T>(sv[base + static_cast<std::size_t>(i)]);
      };
      std::vector<std::int64_t> order;
      for (std::int64_t i = 0; i < n; ++i)
        if (!has_score_threshold ||
            (drop_at_threshold ? score(i) > score_threshold : !(score(i) < score_threshold)))
          order.push_back(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t p, std::int64_t q) { return score(p) > score(q); });
      const auto kept = keep_boxes(bx, order, max_boxes, iou_threshold, b, k);
      for (std::int64_t i : kept) out.insert(out.end(), {b, k, i});
    }
  }
  const auto selected = static_cast<std::int64_t>(out.size() / 3);
  return {Tensor::from_i64(out, {selected, 3})};
}

// NaN scores, NaN or infinite boxes and boxes of negative width or height (center_point_box)
// have no order or overlap the text defines: refused for every binding.
Undefined nms_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    for (std::size_t k = 0; k < 2 && k < in.size(); ++k) {
      if (!in[k].defined()) continue;
      auto v = in[k].to_f64();
      for (std::size_t i = 0; i < v.size(); ++i)
        if (std::isnan(v[i]) || (k == 0 && std::isinf(v[i])))
          return fmt::format("{}: {} is {} at {}: no {} is defined for it", node.label(),
                             k == 0 ? "boxes" : "scores", v[i], i, k == 0 ? "overlap" : "order");
    }
    // [x_center, y_center, width, height]: a negative width or height is no box (frameworks
    // read it as an empty box or as its mirror image).
    auto it = node.attrs.find("center_point_box");
    if (it != node.attrs.end() && it->second.i != 0 && !in.empty() && in[0].defined()) {
      auto b = in[0].to_f64();
      for (std::size_t i = 2; i < b.size(); i += 4)
        if (b[i] < 0 || b[i + 1] < 0)
          return fmt::format(
              "{}: box {} has width {} and height {}: no box is defined for a "
              "negative size",
              node.label(), i / 4, b[i], b[i + 1]);
    }
    return "";
  };
  return u;
}

// A score equal to score_threshold: the text removes the boxes whose score is less than the
// threshold (so keeps this one), ONNX's reference evaluator those whose score is not greater
// (and removes it), as ONNX Runtime does. Explains a finding whose outputs are exactly those of
// the second reading.
Convention score_at_threshold() {
  return {"score-at-threshold",
          "the text removes boxes whose score is less than score_threshold; ONNX's reference "
          "evaluator also removes those whose score equals it",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors& got,
             const std::vector<std::vector<bool>>&) {
            if (!has_input(in, 4) || got.empty() || !got[0].defined()) return false;
            Tensor other = non_max_suppression<double>(c, in, true)[0];
            return other.shape() == got[0].shape() && other.to_i64() == got[0].to_i64();
          }};
}

// The first batch index outside [0, N), named in words; empty when all are inside.
std::string bad_batch_index(const std::vector<std::int64_t>& idx, std::int64_t N) {
  for (std::size_t i = 0; i < idx.size(); ++i)
    if (idx[i] < 0 || idx[i] >= N)
      return fmt::format("batch_indices[{}] is {}, outside X's batch of {}", i, idx[i], N);
  return "";
}

struct RoiSpec {
  std::int64_t N = 0, C = 0, H = 0, W = 0, rois = 0, out_h = 1, out_w = 1, ratio = 0;
  double scale = 1;
  bool half_pixel = false, max = false;
  bool max_of_samples = false;  // max mode's other reading (roi_max_pooling)
  std::vector<double> x, boxes;
  std::vector<std::int64_t> batch;
};

RoiSpec roi_spec(const KernelContext& c, const Tensors& in) {
  const Tensor &X = input(c, in, 0), &R = input(c, in, 1), &B = input(c, in, 2);
  require_float(c, X, "X");
  require_float(c, R, "rois");
  RoiSpec s;
  if (X.rank() != 4) fail("{}: X of shape {}: [N, C, H, W]", c.node.label(), shape_str(X.shape()));
  if (R.rank() != 2 || R.dim(1) != 4 || B.rank() != 1 || B.dim(0) != R.dim(0))
    fail("{}: rois {} and batch_indices {} must be [num_rois, 4] and [num_rois]", c.node.label(),
         shape_str(R.shape()), shape_str(B.shape()));
  s.N = X.dim(0), s.C = X.dim(1), s.H = X.dim(2), s.W = X.dim(3), s.rois = R.dim(0);
  s.out_h = attr_i(c, "output_height");
  s.out_w = attr_i(c, "output_width");
  s.ratio = attr_i(c, "sampling_ratio");
  s.scale = attr_f(c, "spatial_scale");
  if (s.out_h < 1 || s.out_w < 1 || s.ratio < 0)
    fail(
        "{}: output_height {}, output_width {} and sampling_ratio {}: the first two must be "
        "positive, the last at least 0",
        c.node.label(), s.out_h, s.out_w, s.ratio);
  // Opset 10 has no coordinate_transformation_mode: it behaves as output_half_pixel.
  const std::string mode = attr_s_or(c, "coordinate_transformation_mode", "output_half_pixel");
  if (mode != "half_pixel" && mode != "output_half_pixel")
    fail("{}: coordinate_transformation_mode '{}' is not half_pixel or output_half_pixel",
         c.node.label(), mode);
  s.half_pixel = mode == "half_pixel";
  const std::string pool = attr_s(c, "mode");
  if (pool != "avg" && pool != "max") fail("{}: mode '{}' is not avg or max", c.node.label(), pool);
  s.max = pool == "max";
  s.x = X.to_f64();
  s.boxes = R.to_f64();
  s.batch = B.to_i64();
  if (std::string bad = bad_batch_index(s.batch, s.N); !bad.empty())
    fail("{}: {}", c.node.label(), bad);
  return s;
}

// A region's bins and sampling grid, in number type T.
template <typename T>
struct Region {
  T start_h = 0, start_w = 0, bin_h = 0, bin_w = 0;
  std::int64_t grid_h = 0, grid_w = 0;
  double count = 1;
};

// The largest sampling grid a region may take (bins times samples): past it the adaptive grid of
// a huge region is refused rather than looped over.
constexpr double kMaxRoiSamples = 1e7;

template <typename T>
Region<T> region(const KernelContext& c, const RoiSpec& s, std::int64_t n) {
  const T offset = s.half_pixel ? T(0.5) : T(0);
  const T scale = static_cast<T>(s.scale);
  auto box = [&](int k) { return static_cast<T>(s.boxes[static_cast<std::size_t>(4 * n + k)]); };
  Region<T> r;
  r.start_w = box(0) * scale - offset;
  r.start_h = box(1) * scale - offset;
  T width = box(2) * scale - offset - r.start_w, height = box(3) * scale - offset - r.start_h;
  if (!s.half_pixel) {  // malformed regions made 1 x 1
    width = std::max(width, T(1));
    height = std::max(height, T(1));
  }
  r.bin_h = height / static_cast<T>(s.out_h);
  r.bin_w = width / static_cast<T>(s.out_w);
  auto grid = [&](T bin) {
    const double g =
        s.ratio > 0 ? static_cast<double>(s.ratio) : std::ceil(static_cast<double>(bin));
    if (!(g * static_cast<double>(s.out_h * s.out_w) <= kMaxRoiSamples))
      throw Unsupported(fmt::format(
          "{}: region {} takes {} samples per bin side (sampling_ratio 0 samples ceil(region / "
          "bins)): more than the {:g} samples per region the reference takes",
          c.node.label(), n, g, kMaxRoiSamples));
    return static_cast<std::int64_t>(std::max(g, 0.0));  // a negative size samples nothing
  };
  r.grid_h = grid(r.bin_h);
  r.grid_w = grid(r.bin_w);
  r.count = std::max<double>(static_cast<double>(r.grid_h * r.grid_w), 1.0);
  return r;
}

// One axis of a sample: its two pixels and weights, or none (past the image: contributes 0).
template <typename T>
struct Tap {
  bool inside = false;
  std::int64_t lo = 0, hi = 0;
  T w_lo = 0, w_hi = 0;
};

template <typename T>
Tap<T> tap(T v, std::int64_t len) {
  Tap<T> t;
  if (v < T(-1) || v > static_cast<T>(len)) return t;
  t.inside = true;
  v = std::max(v, T(0));
  t.lo = static_cast<std::int64_t>(v);
  if (t.lo >= len - 1) {
    t.lo = t.hi = len - 1;
    v = static_cast<T>(t.lo);
  } else {
    t.hi = t.lo + 1;
  }
  t.w_hi = v - static_cast<T>(t.lo);
  t.w_lo = T(1) - t.w_hi;
  return t;
}

// A bin's samples: each one's taps (shared by the channels) and coordinate error (units of u).
template <typename T>
struct BinSamples {
  std::vector<std::pair<Tap<T>, Tap<T>>> taps;
  std::vector<double> coord;
};

template <typename T>
BinSamples<T> bin_samples(const RoiSpec& s, const Region<T>& r, std::int64_t ph, std::int64_t pw) {
  auto mag = [](T a, T b, T c) {
    return std::fabs(static_cast<double>(a)) + std::fabs(static_cast<double>(b)) +
           std::fabs(static_cast<double>(c)) + 1;
  };
  BinSamples<T> b;
  const T h = static_cast<T>(ph) * r.bin_h, w = static_cast<T>(pw) * r.bin_w;
  for (std::int64_t iy = 0; iy < r.grid_h; ++iy) {
    const T dh = (static_cast<T>(iy) + T(0.5)) * r.bin_h / static_cast<T>(r.grid_h);
    for (std::int64_t ix = 0; ix < r.grid_w; ++ix) {
      const T dw = (static_cast<T>(ix) + T(0.5)) * r.bin_w / static_cast<T>(r.grid_w);
      b.taps.emplace_back(tap(r.start_h + h + dh, s.H), tap(r.start_w + w + dw, s.W));
      b.coord.push_back(8 * (mag(r.start_h, h, dh) + mag(r.start_w, w, dw)));
    }
  }
  return b;
}

// One sample of one channel plane: its value (the interpolated one, or in max mode the largest
// weighted corner unless max_of_samples), the sum of its terms' magnitudes and of its pixels'.
template <typename T>
struct Sample {
  T value = 0;
  double terms = 0, pixels = 0;
};

template <typename T>
Sample<T> sample(const RoiSpec& s, const double* plane, const Tap<T>& ty, const Tap<T>& tx) {
  Sample<T> out;
  if (!ty.inside || !tx.inside) return out;  // past the image: contributes 0
  const std::int64_t ys[2] = {ty.lo, ty.hi}, xs[2] = {tx.lo, tx.hi};
  const T wy[2] = {ty.w_lo, ty.w_hi}, wx[2] = {tx.w_lo, tx.w_hi};
  T sum = 0, best = 0;
  for (int i = 0; i < 4; ++i) {
    const double p = plane[ys[i / 2] * s.W + xs[i % 2]];
    const T t = wy[i / 2] * wx[i % 2] * static_cast<T>(p);
    sum += t;
    best = i == 0 ? t : std::max(best, t);
    out.terms += std::fabs(static_cast<double>(t));
    out.pixels += std::fabs(p);
  }
  out.value = s.max && !s.max_of_samples ? best : sum;
  return out;
}

// The pooling in number type T; with `err`, each output's first-order bound (units of u).
template <typename T>
Tensors roi_align_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                      std::vector<double>* err, bool max_of_samples = false) {
  RoiSpec s = roi_spec(c, in);
  s.max_of_samples = max_of_samples;
  const Shape out_shape{s.rois, s.C, s.out_h, s.out_w};
  std::vector<double> y(static_cast<std::size_t>(shape_numel(out_shape)), 0.0);
  if (err) err->assign(y.size(), 0.0);
  const auto plane = static_cast<std::size_t>(s.H * s.W);
  std::size_t at = 0;  // (region, channel, row, column) in order
  for (std::int64_t n = 0; n < s.rois; ++n) {
    const Region<T> r = region<T>(c, s, n);
    const auto b = static_cast<std::size_t>(s.batch[static_cast<std::size_t>(n)]);
    std::vector<BinSamples<T>> bins;
    for (std::int64_t ph = 0; ph < s.out_h; ++ph)
      for (std::int64_t pw = 0; pw < s.out_w; ++pw) bins.push_back(bin_samples(s, r, ph, pw));
    for (std::int64_t ch = 0; ch < s.C; ++ch) {
      const double* x =
          s.x.data() + (b * static_cast<std::size_t>(s.C) + static_cast<std::size_t>(ch)) * plane;
      for (const auto& bin : bins) {
        T acc = 0;
        double abs = 0, e_max = 0;
        for (std::size_t k = 0; k < bin.taps.size(); ++k) {
          const Sample<T> v = sample(s, x, bin.taps[k].first, bin.taps[k].second);
          acc = !s.max ? acc + v.value : k == 0 ? v.value : std::max(acc, v.value);
          const double moved = bin.coord[k] * v.pixels;  // the coordinates' errors
          abs += v.terms + moved;
          if (err && s.max)
            e_max =
                std::max(e_max, bound->kappa(2) * std::fabs(static_cast<double>(v.value)) + moved);
        }
        y[at] =
            s.max ? static_cast<double>(acc) : static_cast<double>(acc / static_cast<T>(r.count));
        if (err)
          (*err)[at] =
              s.max ? e_max
                    : bound->kappa(static_cast<double>(4 * bin.taps.size() + 1)) * abs / r.count;
        ++at;
      }
    }
  }
  return {Tensor::from_f64(y, out_shape, in[0].dtype())};
}

// Regions whose corners are NaN or infinite sample nowhere the text defines; a batch index outside
// X's batch names no image; under half_pixel (which does not make regions at least 1 x 1) a region
// of size 0 or less on an axis gets an adaptive grid (sampling_ratio 0: ceil(size / bins)) of no
// samples, whose average or max the text does not define: refused for every binding.
Undefined roi_align_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.size() < 3 || !in[0].defined() || !in[1].defined() || !in[2].defined()) return "";
    const auto b = in[1].to_f64();
    for (std::size_t i = 0; i < b.size(); ++i)
      if (!std::isfinite(b[i]))
        return fmt::format("{}: rois holds {} at {} (region {}): no region is defined by it",
                           node.label(), b[i], i, i / 4);
    if (std::string bad = bad_batch_index(in[2].to_i64(), in[0].rank() > 0 ? in[0].dim(0) : 0);
        !bad.empty())
      return node.label() + ": " + bad;
    auto attr = node.attrs.find("coordinate_transformation_mode");
    auto ratio = node.attrs.find("sampling_ratio");
    auto scale = node.attrs.find("spatial_scale");
    if (attr == node.attrs.end() || attr->second.s != "half_pixel" ||
        (ratio != node.attrs.end() && ratio->second.i != 0))
      return "";
    const double k = scale != node.attrs.end() ? scale->second.f : 1.0;
    for (std::size_t i = 0; i + 3 < b.size(); i += 4) {
      const double w = b[i + 2] * k - b[i] * k, h = b[i + 3] * k - b[i + 1] * k;
      if (!(w > 0 && h > 0))
        return fmt::format(
            "{}: region {} is {} x {} (half_pixel, sampling_ratio 0): its adaptive sampling grid, "
            "ceil(size / bins) per side, has no samples, and the text defines no average or max "
            "of none",
            node.label(), i / 4, w, h);
    }
    return "";
  };
  return u;
}

// Max mode: the text names it and says no more. ONNX's reference evaluator, like ONNX Runtime's
// and Caffe2's kernel, takes for each sample the largest of its four weighted corners (w_k v_k); a
// kernel may as well take the max of the interpolated samples. Explains a finding of max mode when
// every element outside the model is that other reading's value, to 64 float32 ulps of X's largest
// magnitude.
Convention roi_max_pooling() {
  return {"roi-max-pooling",
          "mode 'max' is named and not defined: ONNX's reference evaluator (and ONNX Runtime) "
          "take per sample the largest weighted corner w_k v_k, others the largest interpolated "
          "sample",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            if (attr_s(c, "mode") != "max" || got.empty() || !got[0].defined() || bad.empty())
              return false;
            double scale = 0;
            for (double v : in[0].to_f64()) scale = std::max(scale, std::fabs(v));
            return other_reading_explains(roi_align_run<double>(c, in, nullptr, nullptr, true)[0],
                                          got, bad, 64 * std::ldexp(1.0, -23) * scale, false);
          }};
}

}  // namespace

void register_detection_ops(OpRegistry& r) {
  using case_input::floats;
  // Overlapping boxes at IoUs about the threshold, both box formats, two classes.
  const CaseInput boxes{{1, 6, 4}, DType::Float32, {}, 0, 4};
  const CaseInput scores{{1, 2, 6}, DType::Float32, {}, 0, 1};
  r.op("NonMaxSuppression", Family::reduce,
       [](const KernelContext& c, const Tensors& in) { return non_max_suppression<double>(c, in); })
      .error(error_models::exact("exact: indices of boxes, the IoUs computed in float64"))
      .domain(Domain({0, 1}))
      .undefined(nms_undefined())
      .conventions({score_at_threshold()})
      .float32(
          [](const KernelContext& c, const Tensors& in, SumOrder) {
            return non_max_suppression<float>(c, in);
          },
          "each IoU computed and compared with the threshold",
          "the boxes rescaled before their areas are formed (a side past about 1.8e19 overflows "
          "float32 when squared, one below about 1e-19 underflows)")
      .cases({{11,
               {boxes, scores, case_input::ints({1}, {3}),
                CaseInput{{1}, DType::Float32, {}, 0.3, 0.3},
                CaseInput{{1}, DType::Float32, {}, 0.2, 0.2}}},
              {11,
               {boxes, scores, case_input::ints({1}, {6}),
                CaseInput{{1}, DType::Float32, {}, 0.5, 0.5}},
               {{"center_point_box", Attribute::of_int(1)}}}});
  const AccumulationBound* none = nullptr;
  auto roi_attrs = [](const char* mode, const char* pool, std::int64_t ratio, double scale) {
    return std::map<std::string, Attribute>{
        {"coordinate_transformation_mode", Attribute::of_string(mode)},
        {"mode", Attribute::of_string(pool)},
        {"output_height", Attribute::of_int(3)},
        {"output_width", Attribute::of_int(2)},
        {"sampling_ratio", Attribute::of_int(ratio)},
        {"spatial_scale", Attribute::of_float(scale)}};
  };
  // Regions inside, across and past the image's edges (x1, y1, x2, y2 in X's pixels at scale 1).
  const CaseInput regions{
      {4, 4}, DType::Float32, {0, 0, 5, 6, 1, 2, 6, 4, -2, 3, 2, 9, 4, 1, 4, 2}};
  r.op("RoiAlign", Family::pool,
       [none](const KernelContext& c, const Tensors& in) {
         return roi_align_run<double>(c, in, none, nullptr);
       })
      .error(error_models::condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            roi_align_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "avg: kappa(4 samples + 1) sum|w v| / samples + sum over samples of 8 (|start| + "
          "|bin offset| + |sample offset| + 1) per axis times the corners' sum|v|; max: the "
          "largest such term of one sample"))
      .domain(Domain({0}))
      .undefined(roi_align_undefined())
      .conventions({roi_max_pooling()})
      .float32([none](const KernelContext& c, const Tensors& in,
                      SumOrder) { return roi_align_run<float>(c, in, none, nullptr); },
               "the region, bins, sample coordinates, bilinear weights and the bin's sum in "
               "float32",
               "none needed beyond the sum's order")
      .cases({{16,
               {floats({2, 3, 6, 7}), regions, case_input::ints({4}, {0, 1, 1, 0})},
               roi_attrs("half_pixel", "avg", 2, 1.0)},
              {16,
               {floats({1, 2, 8, 8}), floats({3, 4}, 0, 14), case_input::ints({3}, {0, 0, 0})},
               roi_attrs("output_half_pixel", "avg", 0, 0.5)},
              {16,
               {floats({2, 2, 5, 5}), regions, case_input::ints({4}, {1, 0, 1, 1})},
               roi_attrs("half_pixel", "max", 2, 1.0)},
              {10,
               {floats({1, 2, 6, 6}), regions, case_input::ints({4}, {0, 0, 0, 0})},
               {{"output_height", Attribute::of_int(2)}, {"output_width", Attribute::of_int(2)}}}});
}

}  // namespace metaop
