// ATen kernels of the convolution, pooling, normalization and shape meta operators.
#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/acos.h>
#include <ATen/ops/acosh.h>
#include <ATen/ops/add.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/argmin.h>
#include <ATen/ops/asin.h>
#include <ATen/ops/asinh.h>
#include <ATen/ops/atan.h>
#include <ATen/ops/atanh.h>
#include <ATen/ops/avg_pool1d.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/avg_pool3d.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ceil.h>
#include <ATen/ops/celu.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/cosh.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/div.h>
#include <ATen/ops/einsum.h>
#include <ATen/ops/elu.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/erf.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/fmod.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/hardswish.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/instance_norm.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/isposinf.h>
#include <ATen/ops/le.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/log.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/logical_xor.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/max_pool1d.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool3d.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/nll_loss_nd.h>
#include <ATen/ops/one_hot.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/pixel_shuffle.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/prelu.h>
#include <ATen/ops/prod.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/reflection_pad1d.h>
#include <ATen/ops/reflection_pad2d.h>
#include <ATen/ops/reflection_pad3d.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/replication_pad1d.h>
#include <ATen/ops/replication_pad2d.h>
#include <ATen/ops/replication_pad3d.h>
#include <ATen/ops/round.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/scatter_reduce.h>
#include <ATen/ops/selu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/sinh.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/softplus.h>
#include <ATen/ops/split_with_sizes.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tan.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/threshold.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/triu.h>
#include <ATen/ops/upsample_bicubic2d.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <ATen/ops/upsample_nearest2d.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "bindings/torch/aten_convert.h"
#include "bindings/torch/torch_kernels.h"
#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/window.h"

namespace metaop::torch_kernels {

std::vector<std::int64_t> torch_pads(const Window& w) {
  std::vector<std::int64_t> p;
  for (int j = 2; j >= 3 - w.nsp; --j) {
    p.push_back(w.pb[j]);
    p.push_back(w.pe[j]);
  }
  return p;
}

std::vector<std::int64_t> spatial(const std::array<std::int64_t, 3>& a, int nsp) {
  return std::vector<std::int64_t>(a.end() - nsp, a.end());
}

namespace {

bool symmetric(const Window& w) {
  return w.pb == w.pe;
}

ATs conv(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const at::Tensor& w = c.in(1);
  Shape ks(c.raw[1].shape().begin() + 2, c.raw[1].shape().end());
  Window g = window_geometry(c.k, c.raw[0].shape(), attr_ints_or(c.k, "kernel_shape", ks), false);
  at::Tensor xi = x;
  std::vector<std::int64_t> pad = spatial(g.pb, g.nsp);
  if (!symmetric(g)) {
    xi = at::constant_pad_nd(x, torch_pads(g), 0);
    pad.assign(g.nsp, 0);
  }
  at::Tensor b = c.has(2) ? c.x[2] : at::Tensor();
  return {at::convolution(xi, w, b, spatial(g.s, g.nsp), pad, spatial(g.d, g.nsp), false,
                          std::vector<std::int64_t>(g.nsp, 0), attr_i(c.k, "group"))};
}

ATs conv_transpose(const Ctx& c) {
  Window g = conv_transpose_geometry(c.k, c.raw[0].shape(), c.raw[1].shape());
  // Full transposed convolution (no padding), then crop the pads: ATen's padding is symmetric
  // and bounded, ONNX's need not be.
  std::vector<std::int64_t> out_pad(g.nsp, 0);
  at::Tensor b = c.has(2) ? c.x[2] : at::Tensor();
  at::Tensor y =
      at::convolution(c.in(0), c.in(1), b, spatial(g.s, g.nsp), std::vector<std::int64_t>(g.nsp, 0),
                      spatial(g.d, g.nsp), true, spatial(g.extra, g.nsp), attr_i(c.k, "group"));
  for (int i = 0; i < g.nsp; ++i) {
    int j = 3 - g.nsp + i;
    std::int64_t full = y.size(2 + i);
    if (g.pb[j] < 0 || g.pb[j] + g.out[j] > full)
      c.unsupported("output_shape larger than the full transposed convolution");
    y = y.narrow(2 + i, g.pb[j], g.out[j]);
  }
  return {y};
}

ATs max_pool(const Ctx& c) {
  const Node& n = c.node();
  // storage_order from opset 8, ceil_mode from 10
  if (attr_i_or(c.k, "storage_order", 0) != 0) c.unsupported("storage_order=1");
  bool ceil_mode = attr_i_or(c.k, "ceil_mode", 0) != 0;
  Window g = window_geometry(c.k, c.raw[0].shape(), n.attr_ints("kernel_shape"), ceil_mode);
  at::Tensor x = c.in(0);
  auto k = spatial(g.k, g.nsp), s = spatial(g.s, g.nsp), d = spatial(g.d, g.nsp);
  std::vector<std::int64_t> p = spatial(g.pb, g.nsp);
  bool fits = symmetric(g);
  for (int i = 0; i < g.nsp; ++i) fits &= p[i] * 2 <= k[i];
  if (!fits) {
    if (ceil_mode) c.unsupported("ceil_mode with asymmetric or large pads");
    x = at::constant_pad_nd(x, torch_pads(g), -std::numeric_limits<double>::infinity());
    p.assign(g.nsp, 0);
  }
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
    if (g.nsp != 2 || !fits) c.unsupported("Indices output other than 2-D unpadded-or-symmetric");
    auto [y, idx] = at::max_pool2d_with_indices(x, k, s, p, d, ceil_mode);
    // ATen indexes within each (n, c) plane; ONNX over the whole tensor.
    std::int64_t plane = x.size(2) * x.size(3);
    auto base =
        at::arange(x.size(0) * x.size(1), idx.options()).reshape({x.size(0), x.size(1), 1, 1}) *
        plane;
    return {y, idx + base};
  }
  if (g.nsp == 1) return {at::max_pool1d(x, k, s, p, d, ceil_mode)};
  if (g.nsp == 2) return {at::max_pool2d(x, k, s, p, d, ceil_mode)};
  return {at::max_pool3d(x, k, s, p, d, ceil_mode)};
}

ATs avg_pool(const Ctx& c) {
  const Node& n = c.node();
  // ceil_mode from opset 10, count_include_pad from 7
  bool ceil_mode = attr_i_or(c.k, "ceil_mode", 0) != 0,
       include = attr_i_or(c.k, "count_include_pad", 0) != 0;
  Window g = window_geometry(c.k, c.raw[0].shape(), n.attr_ints("kernel_shape"), ceil_mode);
  if (g.d != std::array<std::int64_t, 3>{1, 1, 1}) c.unsupported("dilated average pooling");
  at::Tensor x = c.in(0);
  auto k = spatial(g.k, g.nsp), s = spatial(g.s, g.nsp);
  std::vector<std::int64_t> p = spatial(g.pb, g.nsp);
  bool fits = symmetric(g);
  for (int i = 0; i < g.nsp; ++i) fits &= p[i] * 2 <= k[i];
  if (!fits) {
    if (!include || ceil_mode) c.unsupported("asymmetric or large pads without count_include_pad");
    x = at::constant_pad_nd(x, torch_pads(g), 0);
    p.assign(g.nsp, 0);
  }
  if (g.nsp == 1) return {at::avg_pool1d(x, k, s, p, ceil_mode, include)};
  if (g.nsp == 2) return {at::avg_pool2d(x, k, s, p, ceil_mode, include)};
  return {at::avg_pool3d(x, k, s, p, ceil_mode, include)};
}

std::vector<std::int64_t> spatial_dims(const at::Tensor& x) {
  std::vector<std::int64_t> d(x.dim() - 2);
  std::iota(d.begin(), d.end(), 2);
  return d;
}

}  // namespace

// Convolutions and pooling.
void add_conv_pool(TorchTable& t) {
  t.add("Conv", TorchOp{conv});
  t.add("ConvTranspose", TorchOp{conv_transpose});
  t.add("MaxPool", TorchOp{max_pool});
  t.add("AveragePool", TorchOp{avg_pool});
  t.add("GlobalAveragePool",
        TorchOp{[](const Ctx& c) { return ATs{at::mean(c.in(0), spatial_dims(c.in(0)), true)}; }});
  t.add("GlobalMaxPool",
        TorchOp{[](const Ctx& c) { return ATs{at::amax(c.in(0), spatial_dims(c.in(0)), true)}; }});
}

// Normalizations.
void add_normalization(TorchTable& t) {
  t.add("BatchNormalization",
        TorchOp{[](const Ctx& c) {
                  const Node& n = c.node();
                  double eps = attr_f(c.k, "epsilon");
                  if (batch_norm_training(c.k)) {
                    // ATen's own running-stat update uses the unbiased variance;
                    // ONNX's uses the batch's (population) variance. So ATen
                    // normalizes with the batch statistics and the running statistics
                    // are blended here from the ones it saved.
                    auto [y, mean, invstd] = at::native_batch_norm(
                        c.in(0), c.in(1), c.in(2), at::Tensor(), at::Tensor(), true, 0.0, eps);
                    double mom = attr_f(c.k, "momentum");
                    at::Tensor var = invstd.pow(-2) - eps;
                    ATs out{y};
                    if (n.outputs.size() > 1)
                      out.push_back(c.in(3) * mom + mean.detach() * (1 - mom));
                    if (n.outputs.size() > 2)
                      out.push_back(c.in(4) * mom + var.detach() * (1 - mom));
                    return out;
                  }
                  return ATs{at::batch_norm(c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), false, 0.0,
                                            eps, false)};
                },
                true,
                {3, 4}});  // running mean and variance: statistics, not differentiated
  t.add("InstanceNormalization", TorchOp{[](const Ctx& c) {
          return ATs{at::instance_norm(c.in(0), c.in(1), c.in(2), at::Tensor(), at::Tensor(), true,
                                       0.0, attr_f(c.k, "epsilon"), false)};
        }});
  t.add(
      "LayerNormalization", TorchOp{[](const Ctx& c) {
        // ONNX computes in stash_type and casts Y back to X's type: ATen's kernel runs in that
        // type.
        auto stash = to_aten(
            dtype_from_onnx(static_cast<int>(attr_i(c.k, "stash_type"))).value_or(DType::Float32));
        const at::Tensor& x_in = c.in(0);
        bool wider = at::elementSize(stash) > static_cast<std::size_t>(x_in.element_size());
        at::Tensor x = wider ? x_in.to(stash) : x_in;
        std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
        std::vector<std::int64_t> norm_shape(x.sizes().begin() + axis, x.sizes().end());
        at::Tensor w = c.in(1).expand(norm_shape).contiguous();
        at::Tensor b = c.has(2) ? c.x[2].expand(norm_shape).contiguous() : at::Tensor();
        if (wider) {
          w = w.to(stash);
          if (b.defined()) b = b.to(stash);
        }
        auto [y, mean, rstd] = at::native_layer_norm(x, norm_shape, w, b, attr_f(c.k, "epsilon"));
        std::vector<std::int64_t> stat(x.sizes().begin(), x.sizes().end());
        for (std::size_t d = static_cast<std::size_t>(axis); d < stat.size(); ++d) stat[d] = 1;
        return ATs{y.to(x_in.scalar_type()), mean.reshape(stat).to(stash),
                   rstd.reshape(stat).to(stash)};
      }});
  // ONNX has no epsilon: x / ||x||_p, as normalize(x, p, axis) with eps 0.
  t.add("LpNormalization", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t p = attr_i(c.k, "p");
          if (p != 1 && p != 2) c.unsupported(fmt::format("p = {}", p));
          std::vector<std::int64_t> axis{norm_axis(c.k, attr_i(c.k, "axis"), x.dim())};
          return ATs{x / at::linalg_vector_norm(x, static_cast<double>(p), axis, true)};
        }});
}

// Shape, data movement, Resize, Dropout.
void add_shape(TorchTable& t) {
  t.add("Reshape", TorchOp{[](const Ctx& c) {
          if (c.k.opset < 5) c.unsupported("Reshape-1 (shape attribute)");
          auto shape = c.raw[1].to_i64();
          bool allowzero = attr_i_or(c.k, "allowzero", 0) != 0;  // from opset 14
          for (std::size_t i = 0; i < shape.size(); ++i)
            if (shape[i] == 0 && !allowzero) shape[i] = c.in(0).size(static_cast<std::int64_t>(i));
          return ATs{c.in(0).reshape(shape)};
        }});
  t.add("Flatten", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t axis = attr_i(c.k, "axis");
          if (axis < 0) axis += x.dim();
          std::int64_t a = 1;
          for (std::int64_t d = 0; d < axis; ++d) a *= x.size(d);
          return ATs{x.reshape({a, a ? x.numel() / a : 0})};
        }});
  t.add("Transpose", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::vector<std::int64_t> perm(x.dim());
          std::iota(perm.rbegin(), perm.rend(), 0);
          perm = attr_ints_or(c.k, "perm", perm);
          return ATs{x.permute(perm).contiguous()};
        }});
  t.add("Squeeze", TorchOp{[](const Ctx& c) {
          auto axes = norm_axes(c.k, axes_arg(c.k, c.raw, 1, 13), c.in(0).dim());
          if (axes.empty()) return ATs{c.in(0).squeeze()};
          std::sort(axes.rbegin(), axes.rend());
          at::Tensor y = c.in(0);
          for (auto a : axes) y = y.squeeze(a);
          return ATs{y};
        }});
  t.add("Unsqueeze", TorchOp{[](const Ctx& c) {
          auto axes = axes_arg(c.k, c.raw, 1, 13);
          axes = norm_axes(c.k, axes, c.in(0).dim() + static_cast<std::int64_t>(axes.size()));
          std::sort(axes.begin(), axes.end());
          at::Tensor y = c.in(0);
          for (auto a : axes) y = y.unsqueeze(a);
          return ATs{y};
        }});
  t.add("Concat", TorchOp{[](const Ctx& c) {
          return ATs{at::cat(c.x, norm_axis(c.k, c.node().attr_i("axis"), c.in(0).dim()))};
        }});
  t.add("Split", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          auto [axis, sizes] = split_sizes(c.k, c.raw, c.raw[0].shape());
          auto parts = at::split_with_sizes(x, sizes, axis);
          return ATs(parts.begin(), parts.end());
        }});
  t.add("Slice", TorchOp{[](const Ctx& c) {
          if (c.k.opset < 10) c.unsupported("Slice-1 (attribute form)");
          at::Tensor y = c.in(0);
          auto starts = c.raw[1].to_i64(), ends = c.raw[2].to_i64();
          std::vector<std::int64_t> axes(starts.size()), steps(starts.size(), 1);
          std::iota(axes.begin(), axes.end(), 0);
          if (c.has(3)) axes = c.raw[3].to_i64();
          if (c.has(4)) steps = c.raw[4].to_i64();
          axes = norm_axes(c.k, axes, y.dim());
          for (std::size_t i = 0; i < axes.size(); ++i) {
            if (steps[i] <= 0) c.unsupported("non-positive step");
            std::int64_t dim = y.size(axes[i]), s = starts[i], e = ends[i];
            if (s < 0) s += dim;
            if (e < 0) e = std::max<std::int64_t>(e + dim, -1);
            s = std::clamp<std::int64_t>(s, 0, dim);
            e = std::clamp<std::int64_t>(e, 0, dim);
            y = y.slice(axes[i], s, std::max(s, e), steps[i]);
          }
          return ATs{y.contiguous()};
        }});
  t.add("Gather", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
          at::Tensor idx = c.in(1).to(at::kLong);
          idx = at::where(idx < 0, idx + x.size(axis), idx);
          at::Tensor y = at::index_select(x, axis, idx.reshape({-1}));
          std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().begin() + axis);
          shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
          shape.insert(shape.end(), x.sizes().begin() + axis + 1, x.sizes().end());
          return ATs{y.reshape(shape)};
        }});
  t.add("GatherElements", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
          at::Tensor idx = c.in(1).to(at::kLong);
          idx = at::where(idx < 0, idx + x.size(axis), idx);
          return ATs{at::gather(x, axis, idx)};
        }});
  t.add("ScatterElements", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
          at::Tensor idx = c.in(1).to(at::kLong);
          idx = at::where(idx < 0, idx + x.size(axis), idx);
          std::string red = attr_s_or(c.k, "reduction", "none");  // from opset 16
          if (red == "none") return ATs{at::scatter(x, axis, idx, c.in(2))};
          static const std::map<std::string, std::string> names = {
              {"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
          return ATs{at::scatter_reduce(x, axis, idx, c.in(2), names.at(red), true)};
        }});
  t.add("Expand", TorchOp{[](const Ctx& c) {
          Shape os = broadcast_shapes(c.k, {c.raw[0].shape(), c.raw[1].to_i64()});
          return ATs{c.in(0).expand(os).contiguous()};
        }});
  t.add("Tile", TorchOp{[](const Ctx& c) { return ATs{c.in(0).repeat(c.raw[1].to_i64())}; }});
  t.add("Pad", TorchOp{[](const Ctx& c) {
          if (c.k.opset < 11) c.unsupported("Pad-2 (attribute form)");
          if (c.has(3)) c.unsupported("axes input");
          const at::Tensor& x = c.in(0);
          auto pads = c.raw[1].to_i64();
          std::string mode = attr_s(c.k, "mode");
          std::int64_t r = x.dim();
          std::vector<std::int64_t> tp;  // last dim first
          for (std::int64_t d = r - 1; d >= 0; --d) {
            tp.push_back(pads[d]);
            tp.push_back(pads[d + r]);
          }
          if (mode == "constant") {
            double v = c.has(2) && c.raw[2].numel() ? c.raw[2].f64_at(0) : 0.0;
            return ATs{at::constant_pad_nd(x, tp, v)};
          }
          // reflect / edge: ATen pads the last 1-3 dims of a [N, C, ...] tensor.
          std::int64_t padded = 0;
          for (std::int64_t d = 0; d < r; ++d)
            if (pads[d] || pads[d + r]) padded = std::max(padded, r - d);
          if (padded > 3 || r - padded < 2 || r > 5)
            c.unsupported(mode + " padding of the first two dims");
          std::int64_t nsp = r - 2;
          tp.resize(static_cast<std::size_t>(2 * nsp));
          if (mode == "reflect") {
            if (nsp == 1) return ATs{at::reflection_pad1d(x, tp)};
            if (nsp == 2) return ATs{at::reflection_pad2d(x, tp)};
            return ATs{at::reflection_pad3d(x, tp)};
          }
          if (mode == "edge") {
            if (nsp == 1) return ATs{at::replication_pad1d(x, tp)};
            if (nsp == 2) return ATs{at::replication_pad2d(x, tp)};
            return ATs{at::replication_pad3d(x, tp)};
          }
          c.unsupported("pad mode " + mode);
        }});
  t.add("DepthToSpace", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t b = c.node().attr_i("blocksize");
          // mode from opset 11
          if (attr_s_or(c.k, "mode", "DCR") == "CRD") return ATs{at::pixel_shuffle(x, b)};
          std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
          return ATs{x.reshape({N, b, b, C / (b * b), H, W})
                         .permute({0, 3, 4, 1, 5, 2})
                         .reshape({N, C / (b * b), H * b, W * b})};
        }});
  t.add("SpaceToDepth", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t b = c.node().attr_i("blocksize");
          std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
          return ATs{x.reshape({N, C, H / b, b, W / b, b})
                         .permute({0, 3, 5, 1, 2, 4})
                         .reshape({N, C * b * b, H / b, W / b})};
        }});
  t.add("Trilu", TorchOp{[](const Ctx& c) {
          std::int64_t k = c.has(1) ? c.raw[1].to_i64().at(0) : 0;
          return ATs{attr_i(c.k, "upper") ? at::triu(c.in(0), k) : at::tril(c.in(0), k)};
        }});
  t.add("Resize", TorchOp{[](const Ctx& c) {
          if (c.k.opset < 11) c.unsupported("Resize-10");
          if (std::string f = resize_newer_features(c.k); !f.empty()) c.unsupported(f);
          const at::Tensor& x = c.in(0);
          if (x.dim() != 4) c.unsupported("only 4-D inputs");
          std::string mode = attr_s(c.k, "mode"),
                      coord = attr_s(c.k, "coordinate_transformation_mode");
          std::vector<double> scales = c.has(2) ? c.raw[2].to_f64() : std::vector<double>{};
          std::vector<std::int64_t> sizes =
              c.has(3) ? c.raw[3].to_i64() : std::vector<std::int64_t>{};
          std::vector<std::int64_t> out(4);
          std::vector<double> sc(4);
          for (int d = 0; d < 4; ++d) {
            sc[d] = sizes.empty()
                        ? scales.at(d)
                        : static_cast<double>(sizes.at(d)) / static_cast<double>(x.size(d));
            out[d] = sizes.empty() ? static_cast<std::int64_t>(
                                         std::floor(static_cast<double>(x.size(d)) * scales[d]))
                                   : sizes[d];
          }
          if (out[0] != x.size(0) || out[1] != x.size(1))
            c.unsupported("resizing the batch or channel dims");
          std::vector<std::int64_t> hw{out[2], out[3]};
          c10::optional<double> sh, sw;
          if (sizes.empty()) {
            sh = sc[2];
            sw = sc[3];
          }
          if (mode == "nearest") {
            if (coord != "asymmetric" || attr_s(c.k, "nearest_mode") != "floor")
              c.unsupported("nearest other than asymmetric + floor (ATen's nearest)");
            return ATs{at::upsample_nearest2d(x, hw, sh, sw)};
          }
          bool align;
          if (coord == "align_corners")
            align = true;
          else if (coord == "half_pixel" || coord == "pytorch_half_pixel")
            align = false;
          else
            c.unsupported("coordinate_transformation_mode " + coord);
          if (align) {
            // ONNX's align_corners divides by in * scale - 1, ATen's by out - 1: equal only when
            // in * scale is a whole number.
            for (int d = 2; d < 4 && sizes.empty(); ++d)
              if (static_cast<double>(x.size(d)) * sc[d] != static_cast<double>(out[d]))
                c.unsupported("align_corners with a fractional in * scale");
            sh = sw = c10::nullopt;
          }
          // At an output size of 1 ONNX samples coordinate 0 (pytorch_half_pixel) or the centre.
          if (out[2] == 1 || out[3] == 1) c.unsupported(coord + " to an output size of 1");
          if (mode == "linear") return ATs{at::upsample_bilinear2d(x, hw, align, sh, sw)};
          if (mode == "cubic") {
            if (attr_f(c.k, "cubic_coeff_a") != -0.75 || attr_i(c.k, "exclude_outside"))
              c.unsupported("cubic with a != -0.75 or exclude_outside");
            return ATs{at::upsample_bicubic2d(x, hw, align, sh, sw)};
          }
          c.unsupported("mode " + mode);
        }});
  t.add("Dropout", TorchOp{[](const Ctx& c) {
          auto [ratio, training] = dropout_mode(c.k, c.raw);
          if (training && ratio > 0) c.unsupported("training-mode dropout (random mask)");
          return ATs{c.in(0).clone(), at::ones_like(c.in(0), at::kBool)};
        }});
}

}  // namespace metaop::torch_kernels
