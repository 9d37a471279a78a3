// Attribute and parameter decoding shared by the reference kernels and the framework bindings
// (ops/params.h): the opset-dependent rules, once.
#include "ops/params.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ops/kernel_util.h"

namespace metaop {

ReduceAxes reduce_axes(const KernelContext& c, const Tensors& in, std::int64_t rank) {
  // ReduceSum takes its axes as an input from opset 13, the other reductions from opset 18.
  bool from_input = c.node.op_type == "ReduceSum"
                        ? c.opset >= 13
                        : c.opset >= 18 && c.node.op_type.starts_with("Reduce");
  std::vector<std::int64_t> axes;
  if (from_input) {
    if (has_input(in, 1)) axes = in[1].to_i64();
  } else {
    axes = attr_ints_or(c, "axes", {});  // no schema default: all axes
  }
  ReduceAxes r;
  // noop_with_empty_axes: ReduceSum from opset 13 (the others from 18).
  r.noop = axes.empty() && attr_i_or(c, "noop_with_empty_axes", 0) != 0;
  r.keepdims = attr_i(c, "keepdims") != 0;
  if (axes.empty()) {
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  r.axes = norm_axes(c, axes, rank);
  return r;
}

ReduceLayout reduce_layout(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto [axes, noop, keepdims] = reduce_axes(c, in, x.rank());
  ReduceLayout l;
  if (noop) {
    l.noop = true;
    return l;
  }
  auto [kept, map] = groups_over(x.shape(), axes);
  l.map = std::move(map);
  l.groups = shape_numel(kept);
  l.count = l.groups ? x.numel() / l.groups : 0;
  if (x.numel() == 0) {
    l.count = 1;
    for (auto a : axes) l.count *= x.shape()[a];
  }
  for (std::int64_t d = 0; d < x.rank(); ++d)
    if (keepdims || std::find(axes.begin(), axes.end(), d) == axes.end())
      l.out_shape.push_back(kept[d]);
  return l;
}

std::string resize_newer_features(const KernelContext& c) {
  if (c.node.op_type != "Resize" || c.opset < 18) return {};
  std::vector<std::string> used;
  if (c.node.has_attr("axes")) used.push_back("axes");
  if (attr_s_or(c, "keep_aspect_ratio_policy", "stretch") != "stretch")
    used.push_back("keep_aspect_ratio_policy " + attr_s(c, "keep_aspect_ratio_policy"));
  if (attr_i_or(c, "antialias", 0) != 0) used.push_back("antialias");
  std::string s;
  for (const auto& u : used) s += (s.empty() ? "Resize-18 " : ", ") + u;
  return s;
}

SplitSizes split_sizes(const KernelContext& c, const Tensors& in, const Shape& x) {
  const auto rank = static_cast<std::int64_t>(x.size());
  SplitSizes r;
  // Split-1 gives axis no default; split has none (equal parts).
  r.axis = norm_axis(c, attr_i_or(c, "axis", 0), rank);
  r.sizes = c.opset >= 13 ? (has_input(in, 1) ? in[1].to_i64() : std::vector<std::int64_t>{})
                          : attr_ints_or(c, "split", {});
  const auto n = static_cast<std::int64_t>(c.node.outputs.size());
  const std::int64_t len = x[static_cast<std::size_t>(r.axis)];
  if (r.sizes.empty() && c.opset >= 18 && c.node.has_attr("num_outputs")) {
    std::int64_t k = c.node.attr_i("num_outputs");
    if (k != n) fail("{}: num_outputs = {} but the node has {} outputs", c.node.label(), k, n);
    std::int64_t part = k > 0 ? (len + k - 1) / k : 0;
    for (std::int64_t i = 0; i < k; ++i)
      r.sizes.push_back(std::clamp(len - i * part, std::int64_t{0}, part));
  } else if (r.sizes.empty()) {
    if (len % n)
      fail("{}: axis {} of size {} does not split evenly into {} outputs", c.node.label(), r.axis,
           len, n);
    r.sizes.assign(static_cast<std::size_t>(n), len / n);
  }
  if (static_cast<std::int64_t>(r.sizes.size()) != n ||
      std::accumulate(r.sizes.begin(), r.sizes.end(), std::int64_t{0}) != len ||
      std::any_of(r.sizes.begin(), r.sizes.end(), [](auto s) { return s < 0; }))
    fail("{}: split {} does not fit axis {} of size {} into {} outputs", c.node.label(),
         shape_str(r.sizes), r.axis, len, n);
  return r;
}

AxisSplit softmax_split(const KernelContext& c, const Shape& s) {
  std::int64_t rank = static_cast<std::int64_t>(s.size());
  AxisSplit v;
  // Before opset 13 the input is coerced to 2-D [prod(d < axis), prod(d >= axis)].
  bool coerce = c.opset < 13;
  v.axis = norm_axis(c, attr_i(c, "axis"), rank);
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

bool batch_norm_training(const KernelContext& c) {
  return c.opset >= 14 ? attr_i(c, "training_mode") != 0
                       : (c.opset >= 9 && c.node.outputs.size() > 1);
}

ClipBounds clip_bounds(const KernelContext& c, const Tensors& in) {
  // Without a bound ONNX names the dtype's extremes (numeric_limits::lowest() and max(); the
  // attributes' defaults before opset 11 are float32's), not infinities: -inf clips to lowest.
  double hi = has_input(in, 0) && is_floating(in[0].dtype())
                  ? largest_finite(in[0].dtype())
                  : std::numeric_limits<double>::infinity(),
         lo = -hi;
  if (c.opset < 11) {
    lo = attr_f_or(c, "min", lo);
    hi = attr_f_or(c, "max", hi);
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
  if (c.opset < 12) return {attr_f(c, "ratio"), false};
  return {has_input(in, 1) ? in[1].f64_at(0) : 0.5, has_input(in, 2) && in[2].f64_at(0) != 0};
}

std::vector<std::int64_t> axes_arg(const KernelContext& c, const Tensors& in, std::size_t i,
                                   int input_from_opset) {
  if (c.opset >= input_from_opset)
    return has_input(in, i) ? in[i].to_i64() : std::vector<std::int64_t>{};
  return attr_ints_or(c, "axes", {});
}

}  // namespace metaop
