// Detection meta operators: NonMaxSuppression. Its output is indices: a framework is judged to
// the box, and triage's float32 twin computes the intersections over union in float32, so a box
// kept or suppressed by a float32 rounding at the threshold is a float32-limit, not a defect.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

}  // namespace

void register_detection_ops(OpRegistry& r) {
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
}

}  // namespace metaop
