#pragma once
// Attribute and parameter decoding that framework bindings share with the reference kernels,
// so that every binding reads a node the same way (the opset-dependent rules live here once).
#include <vector>

#include "ops/registry.h"

namespace metaop {

// Reduce*: normalized axes (all when none are given), noop_with_empty_axes and keepdims.
struct ReduceAxes {
  std::vector<std::int64_t> axes;
  bool noop = false;
  bool keepdims = true;
};
ReduceAxes reduce_axes(const KernelContext& c, const Tensors& in, std::int64_t rank);
// A Reduce* node's groups over input 0 (x): each element's group, the number of groups, the
// elements per group (the reduced dims' product, also for an empty x) and the output's shape.
struct ReduceLayout {
  bool noop = false;  // noop_with_empty_axes: the output is x
  std::vector<std::int64_t> map;
  std::int64_t groups = 0, count = 0;
  Shape out_shape;
};
ReduceLayout reduce_layout(const KernelContext& c, const Tensors& in);

// Split: the axis and each output's length along it (the `split` attribute before opset 13, the
// input from 13; without either, equal parts, and from opset 18 `num_outputs` parts of
// ceil(len / num_outputs), the last one shorter). Fails naming the node when they do not fit.
struct SplitSizes {
  std::int64_t axis = 0;
  std::vector<std::int64_t> sizes;
};
SplitSizes split_sizes(const KernelContext& c, const Tensors& in, const Shape& x);

// Resize from opset 18: the features that a binding whose own resizing reads sizes and scales
// for every axis does not follow (axes, keep_aspect_ratio_policy other than stretch, antialias),
// named for its Unsupported; empty when the node uses none.
std::string resize_newer_features(const KernelContext& c);

// Softmax, LogSoftmax, Hardmax: the input viewed as [outer, n, inner], softmax over n
// (before opset 13, n is every dim from `axis` on and inner is 1).
struct AxisSplit {
  std::int64_t axis = 0, outer = 1, n = 1, inner = 1;
};
AxisSplit softmax_split(const KernelContext& c, const Shape& s);

// BatchNormalization: training mode (attribute from opset 14; before, extra outputs mean it).
bool batch_norm_training(const KernelContext& c);

// Clip: bounds from attributes (before opset 11) or inputs; where none is given, the input
// dtype's lowest and largest finite values (ONNX's numeric_limits::lowest() and max()).
struct ClipBounds {
  double lo, hi;
};
ClipBounds clip_bounds(const KernelContext& c, const Tensors& in);

// Dropout: ratio (attribute before opset 12, else input) and whether it is in training mode.
struct DropoutMode {
  double ratio;
  bool training;
};
DropoutMode dropout_mode(const KernelContext& c, const Tensors& in);
// Training-mode Dropout's keep mask, drawn from the node's `metaop_dropout_seed` attribute (set by
// the training loop each step, so that every plan gets the same mask); Unsupported without it.
std::vector<bool> dropout_mask(const KernelContext& c, std::int64_t n, double ratio);

// Squeeze / Unsqueeze (and others): `axes` from input i from `input_from_opset`, else attribute.
std::vector<std::int64_t> axes_arg(const KernelContext& c, const Tensors& in, std::size_t i,
                                   int input_from_opset);

}  // namespace metaop
