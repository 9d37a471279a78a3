// LibTorch binding. Each meta op maps to ATen calls with ONNX attributes translated faithfully;
// where ATen has no kernel with the op's semantics (an attribute value, a padding it cannot
// express), the op throws Unsupported and the engine falls back to the reference.
#include "bindings/torch/torch_binding.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
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
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cstring>
#include <functional>
#include <map>
#include <numeric>

#include "bindings/torch/aten_convert.h"
#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/window.h"

namespace metaop {

namespace {

using ATs = std::vector<at::Tensor>;

// What an op's ATen implementation sees of a node.
struct Ctx {
  const KernelContext& k;
  const Tensors& raw;  // metaop inputs (for reading axes, shapes, scalars)
  const ATs& x;        // the same inputs as ATen tensors
  const Node& node() const { return k.node; }
  const at::Tensor& in(std::size_t i) const {
    if (i >= x.size() || !x[i].defined()) fail("{}: missing required input #{}", k.node.label(), i);
    return x[i];
  }
  bool has(std::size_t i) const { return i < x.size() && x[i].defined(); }
  [[noreturn]] void unsupported(const std::string& why) const {
    throw Unsupported(fmt::format("{}: torch binding: {}", k.node.label(), why));
  }
};

using Fn = std::function<ATs(const Ctx&)>;
struct TorchOp {
  Fn fn;
  bool differentiable = true;
  std::vector<std::size_t> no_grad_inputs = {};  // inputs ATen refuses to differentiate
};

std::vector<std::int64_t> spatial(const std::array<std::int64_t, 3>& a, int nsp) {
  return std::vector<std::int64_t>(a.end() - nsp, a.end());
}

// Pads for at::constant_pad_nd: last dim first, (begin, end) pairs.
std::vector<std::int64_t> torch_pads(const Window& w) {
  std::vector<std::int64_t> p;
  for (int j = 2; j >= 3 - w.nsp; --j) {
    p.push_back(w.pb[j]);
    p.push_back(w.pe[j]);
  }
  return p;
}

bool symmetric(const Window& w) {
  return w.pb == w.pe;
}

ATs conv(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const at::Tensor& w = c.in(1);
  Shape ks(c.raw[1].shape().begin() + 2, c.raw[1].shape().end());
  Window g = window_geometry(c.k, c.raw[0].shape(), c.node().attr_ints("kernel_shape", ks), false);
  at::Tensor xi = x;
  std::vector<std::int64_t> pad = spatial(g.pb, g.nsp);
  if (!symmetric(g)) {
    xi = at::constant_pad_nd(x, torch_pads(g), 0);
    pad.assign(g.nsp, 0);
  }
  at::Tensor b = c.has(2) ? c.x[2] : at::Tensor();
  return {at::convolution(xi, w, b, spatial(g.s, g.nsp), pad, spatial(g.d, g.nsp), false,
                          std::vector<std::int64_t>(g.nsp, 0), c.node().attr_i("group", 1))};
}

ATs conv_transpose(const Ctx& c) {
  Window g = conv_transpose_geometry(c.k, c.raw[0].shape(), c.raw[1].shape());
  // Full transposed convolution (no padding), then crop the pads: ATen's padding is symmetric
  // and bounded, ONNX's need not be.
  std::vector<std::int64_t> out_pad(g.nsp, 0);
  at::Tensor b = c.has(2) ? c.x[2] : at::Tensor();
  at::Tensor y = at::convolution(c.in(0), c.in(1), b, spatial(g.s, g.nsp),
                                 std::vector<std::int64_t>(g.nsp, 0), spatial(g.d, g.nsp), true,
                                 spatial(g.extra, g.nsp), c.node().attr_i("group", 1));
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
  if (n.attr_i("storage_order", 0) != 0) c.unsupported("storage_order=1");
  bool ceil_mode = n.attr_i("ceil_mode", 0) != 0;
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
  bool ceil_mode = n.attr_i("ceil_mode", 0) != 0, include = n.attr_i("count_include_pad", 0) != 0;
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

ATs reduce(const Ctx& c,
           const std::function<at::Tensor(const at::Tensor&, at::IntArrayRef, bool)>& f) {
  auto r = reduce_axes(c.k, c.raw, c.in(0).dim());
  if (r.noop) return {c.in(0)};
  return {f(c.in(0), r.axes, r.keepdims)};
}

at::Tensor prod_dims(const at::Tensor& x, at::IntArrayRef dims, bool keep) {
  std::vector<std::int64_t> d(dims.begin(), dims.end());
  std::sort(d.rbegin(), d.rend());
  at::Tensor y = x;
  for (auto a : d) y = at::prod(y, a, keep);
  return y;
}

ATs softmax_like(const Ctx& c, int kind) {
  const at::Tensor& x = c.in(0);
  AxisSplit v = softmax_split(c.k, c.raw[0].shape());
  at::Tensor x3 = x.reshape({v.outer, v.n, v.inner});
  at::Tensor y;
  if (kind == 0)
    y = at::softmax(x3, 1);
  else if (kind == 1)
    y = at::log_softmax(x3, 1);
  else
    y = at::one_hot(at::argmax(x3, 1), v.n).permute({0, 2, 1}).to(x.scalar_type());
  return {y.reshape(x.sizes())};
}

ATs unary(const Ctx& c, at::Tensor (*f)(const at::Tensor&)) {
  return {f(c.in(0))};
}

// Binary ops: ONNX numpy broadcasting is ATen's; before opset 7 broadcasting was explicit.
void check_modern(const Ctx& c) {
  if (c.k.opset < 7) c.unsupported("legacy broadcast semantics (opset < 7)");
}

std::map<std::string, TorchOp> make_ops() {
  std::map<std::string, TorchOp> m;
  auto U = [&](const char* name, at::Tensor (*f)(const at::Tensor&), bool diff = true) {
    m[name] = {[f](const Ctx& c) { return unary(c, f); }, diff};
  };
  U("Neg", at::neg);
  U("Abs", at::abs);
  U("Sign", at::sign, false);
  U("Exp", at::exp);
  U("Log", at::log);
  U("Sqrt", at::sqrt);
  U("Reciprocal", at::reciprocal);
  U("Erf", at::erf);
  U("Sin", at::sin);
  U("Cos", at::cos);
  U("Tan", at::tan);
  U("Asin", at::asin);
  U("Acos", at::acos);
  U("Atan", at::atan);
  U("Sinh", at::sinh);
  U("Cosh", at::cosh);
  U("Asinh", at::asinh);
  U("Acosh", at::acosh);
  U("Atanh", at::atanh);
  U("Floor", at::floor, false);
  U("Ceil", at::ceil, false);
  U("Round", at::round, false);
  U("Relu", at::relu);
  U("Sigmoid", at::sigmoid);
  U("Tanh", at::tanh);
  U("HardSwish", at::hardswish);
  U("Not", at::logical_not, false);
  U("IsNaN", at::isnan, false);
  m["Softplus"] = {[](const Ctx& c) { return ATs{at::softplus(c.in(0), 1, 20)}; }};
  m["Softsign"] = {[](const Ctx& c) { return ATs{c.in(0) / (at::abs(c.in(0)) + 1)}; }};
  m["Identity"] = {[](const Ctx& c) { return ATs{c.in(0).clone()}; }};
  m["LeakyRelu"] = {
      [](const Ctx& c) { return ATs{at::leaky_relu(c.in(0), c.node().attr_f("alpha", 0.01))}; }};
  m["Elu"] = {[](const Ctx& c) { return ATs{at::elu(c.in(0), c.node().attr_f("alpha", 1.0))}; }};
  m["Selu"] = {[](const Ctx& c) {
    // ATen's selu has fixed constants; other alpha/gamma go through elu's alpha and scale.
    double a = c.node().attr_f("alpha", 1.67326319217681884765625),
           g = c.node().attr_f("gamma", 1.05070102214813232421875);
    if (a == 1.67326319217681884765625 && g == 1.05070102214813232421875)
      return ATs{at::selu(c.in(0))};
    return ATs{at::elu(c.in(0), a, g)};
  }};
  m["Celu"] = {[](const Ctx& c) { return ATs{at::celu(c.in(0), c.node().attr_f("alpha", 1.0))}; }};
  m["HardSigmoid"] = {[](const Ctx& c) {
    return ATs{
        at::clamp(c.in(0) * c.node().attr_f("alpha", 0.2) + c.node().attr_f("beta", 0.5), 0, 1)};
  }};
  m["ThresholdedRelu"] = {
      [](const Ctx& c) { return ATs{at::threshold(c.in(0), c.node().attr_f("alpha", 1.0), 0)}; }};
  m["IsInf"] = {[](const Ctx& c) {
                  bool pos = c.node().attr_i("detect_positive", 1),
                       neg = c.node().attr_i("detect_negative", 1);
                  if (pos && neg) return ATs{at::isinf(c.in(0))};
                  if (pos) return ATs{at::isposinf(c.in(0))};
                  if (neg) return ATs{at::isneginf(c.in(0))};
                  return ATs{at::zeros_like(c.in(0), at::kBool)};
                },
                false};

  auto B = [&](const char* name, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f,
               bool diff = true) {
    m[name] = {[f](const Ctx& c) {
                 check_modern(c);
                 return ATs{f(c.in(0), c.in(1))};
               },
               diff};
  };
  B("Add", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); });
  B("Sub", [](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); });
  B("Mul", [](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); });
  B("Div", [](const at::Tensor& a, const at::Tensor& b) {
    return at::isFloatingType(a.scalar_type()) ? at::div(a, b) : at::div(a, b, "trunc");
  });
  B("Pow",
    [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b).to(a.scalar_type()); });
  B(
      "Equal", [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }, false);
  B(
      "Less", [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }, false);
  B(
      "LessOrEqual", [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }, false);
  B(
      "Greater", [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }, false);
  B(
      "GreaterOrEqual", [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); },
      false);
  B(
      "And", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }, false);
  B(
      "Or", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }, false);
  B(
      "Xor", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); }, false);
  m["Mod"] = {[](const Ctx& c) {
                bool fmod = c.node().attr_i("fmod", 0) != 0;
                return ATs{fmod ? at::fmod(c.in(0), c.in(1)) : at::remainder(c.in(0), c.in(1))};
              },
              false};
  m["PRelu"] = {[](const Ctx& c) {
    check_modern(c);
    const at::Tensor& x = c.in(0);
    const at::Tensor& s = c.in(1);
    // ATen's prelu takes one slope or one per channel (dim 1); other broadcasts are not its op.
    bool per_channel = x.dim() >= 2 && s.numel() == x.size(1) &&
                       (s.dim() == 1 ? x.dim() == 2 || s.numel() == 1 : s.size(0) == x.size(1)) &&
                       s.dim() <= x.dim() - 1;
    if (s.numel() == 1 || per_channel) return ATs{at::prelu(x, s.reshape({s.numel()}))};
    c.unsupported("slope shape is neither one value nor one per channel");
  }};
  auto V = [&](const char* name, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f,
               bool mean) {
    m[name] = {[f, mean](const Ctx& c) {
      at::Tensor acc = c.in(0);
      for (std::size_t i = 1; i < c.x.size(); ++i) acc = f(acc, c.in(i));
      if (mean) acc = acc / static_cast<double>(c.x.size());
      if (c.x.size() == 1) acc = acc.clone();
      return ATs{acc};
    }};
  };
  V(
      "Max", [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }, false);
  V(
      "Min", [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }, false);
  V(
      "Sum", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, false);
  V(
      "Mean", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, true);
  m["Where"] = {[](const Ctx& c) { return ATs{at::where(c.in(0), c.in(1), c.in(2))}; }};
  m["Clip"] = {[](const Ctx& c) {
    auto bounds = clip_bounds(c.k, c.raw);
    c10::optional<at::Scalar> lo, hi;  // an infinite bound is no bound
    if (!std::isinf(bounds.lo)) lo = bounds.lo;
    if (!std::isinf(bounds.hi)) hi = bounds.hi;
    if (!lo && !hi) return ATs{c.in(0).clone()};
    // A double bound promotes integer inputs to float in ATen; the result keeps x's dtype.
    return ATs{at::clamp(c.in(0), lo, hi).to(c.in(0).scalar_type())};
  }};
  m["Cast"] = {[](const Ctx& c) {
                 auto dt = dtype_from_onnx(static_cast<int>(c.node().attr_i("to")));
                 if (!dt) c.unsupported("cast target type");
                 return ATs{c.in(0).to(to_aten(*dt))};
               },
               false};
  m["CastLike"] = {[](const Ctx& c) { return ATs{c.in(0).to(c.in(1).scalar_type())}; }, false};

  // --- linear
  m["MatMul"] = {[](const Ctx& c) { return ATs{at::matmul(c.in(0), c.in(1))}; }};
  m["Gemm"] = {[](const Ctx& c) {
    const Node& n = c.node();
    at::Tensor a = n.attr_i("transA", 0) ? c.in(0).t() : c.in(0);
    at::Tensor b = n.attr_i("transB", 0) ? c.in(1).t() : c.in(1);
    at::Tensor y = at::matmul(a, b);
    double alpha = n.attr_f("alpha", 1.0), beta = n.attr_f("beta", 1.0);
    if (alpha != 1.0) y = y * alpha;
    if (c.has(2)) y = beta != 1.0 ? y + c.x[2] * beta : y + c.x[2];
    return ATs{y};
  }};
  m["Einsum"] = {[](const Ctx& c) { return ATs{at::einsum(c.node().attr_s("equation"), c.x)}; }};

  // --- conv, pool
  m["Conv"] = {conv};
  m["ConvTranspose"] = {conv_transpose};
  m["MaxPool"] = {max_pool};
  m["AveragePool"] = {avg_pool};
  m["GlobalAveragePool"] = {
      [](const Ctx& c) { return ATs{at::mean(c.in(0), spatial_dims(c.in(0)), true)}; }};
  m["GlobalMaxPool"] = {
      [](const Ctx& c) { return ATs{at::amax(c.in(0), spatial_dims(c.in(0)), true)}; }};

  // --- normalization
  m["BatchNormalization"] = {[](const Ctx& c) {
                               const Node& n = c.node();
                               double eps = n.attr_f("epsilon", 1e-5);
                               if (batch_norm_training(c.k)) {
                                 // ATen's own running-stat update uses the unbiased variance;
                                 // ONNX's uses the batch's (population) variance. So ATen
                                 // normalizes with the batch statistics and the running statistics
                                 // are blended here from the ones it saved.
                                 auto [y, mean, invstd] =
                                     at::native_batch_norm(c.in(0), c.in(1), c.in(2), at::Tensor(),
                                                           at::Tensor(), true, 0.0, eps);
                                 double mom = n.attr_f("momentum", 0.9);
                                 at::Tensor var = invstd.pow(-2) - eps;
                                 ATs out{y};
                                 if (n.outputs.size() > 1)
                                   out.push_back(c.in(3) * mom + mean.detach() * (1 - mom));
                                 if (n.outputs.size() > 2)
                                   out.push_back(c.in(4) * mom + var.detach() * (1 - mom));
                                 return out;
                               }
                               return ATs{at::batch_norm(c.in(0), c.in(1), c.in(2), c.in(3),
                                                         c.in(4), false, 0.0, eps, false)};
                             },
                             true,
                             {3, 4}};  // running mean and variance: statistics, not differentiated
  m["InstanceNormalization"] = {[](const Ctx& c) {
    return ATs{at::instance_norm(c.in(0), c.in(1), c.in(2), at::Tensor(), at::Tensor(), true, 0.0,
                                 c.node().attr_f("epsilon", 1e-5), false)};
  }};
  m["LayerNormalization"] = {[](const Ctx& c) {
    // ONNX computes in stash_type and casts Y back to X's type: ATen's kernel runs in that type.
    auto stash = to_aten(dtype_from_onnx(static_cast<int>(c.node().attr_i("stash_type", 1)))
                             .value_or(DType::Float32));
    const at::Tensor& x_in = c.in(0);
    bool wider = at::elementSize(stash) > static_cast<std::size_t>(x_in.element_size());
    at::Tensor x = wider ? x_in.to(stash) : x_in;
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", -1), x.dim());
    std::vector<std::int64_t> norm_shape(x.sizes().begin() + axis, x.sizes().end());
    at::Tensor w = c.in(1).expand(norm_shape).contiguous();
    at::Tensor b = c.has(2) ? c.x[2].expand(norm_shape).contiguous() : at::Tensor();
    if (wider) {
      w = w.to(stash);
      if (b.defined()) b = b.to(stash);
    }
    auto [y, mean, rstd] =
        at::native_layer_norm(x, norm_shape, w, b, c.node().attr_f("epsilon", 1e-5));
    std::vector<std::int64_t> stat(x.sizes().begin(), x.sizes().end());
    for (std::size_t d = static_cast<std::size_t>(axis); d < stat.size(); ++d) stat[d] = 1;
    return ATs{y.to(x_in.scalar_type()), mean.reshape(stat).to(stash),
               rstd.reshape(stat).to(stash)};
  }};

  // --- reductions
  using ReduceFn = at::Tensor (*)(const at::Tensor&, at::IntArrayRef, bool);
  auto R = [&](const char* name, ReduceFn f) {
    m[name] = {[f](const Ctx& c) { return reduce(c, f); }};
  };
  R("ReduceSum", [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::sum(x, d, k); });
  R("ReduceMean", [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::mean(x, d, k); });
  R("ReduceMax", [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::amax(x, d, k); });
  R("ReduceMin", [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::amin(x, d, k); });
  R("ReduceProd", prod_dims);
  R("ReduceL1", [](const at::Tensor& x, at::IntArrayRef d, bool k) {
    return at::linalg_vector_norm(x, 1, d, k);
  });
  R("ReduceL2", [](const at::Tensor& x, at::IntArrayRef d, bool k) {
    return at::linalg_vector_norm(x, 2, d, k);
  });
  R("ReduceSumSquare",
    [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::sum(x * x, d, k); });
  R("ReduceLogSum",
    [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::log(at::sum(x, d, k)); });
  R("ReduceLogSumExp",
    [](const at::Tensor& x, at::IntArrayRef d, bool k) { return at::logsumexp(x, d, k); });
  auto arg = [](bool is_max) {
    return TorchOp{[is_max](const Ctx& c) {
                     const at::Tensor& x = c.in(0);
                     std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", 0), x.dim());
                     bool keep = c.node().attr_i("keepdims", 1) != 0;
                     if (c.node().attr_i("select_last_index", 0)) {
                       at::Tensor f = x.flip({axis});
                       at::Tensor i =
                           is_max ? at::argmax(f, axis, keep) : at::argmin(f, axis, keep);
                       return ATs{(x.size(axis) - 1) - i};
                     }
                     return ATs{is_max ? at::argmax(x, axis, keep) : at::argmin(x, axis, keep)};
                   },
                   false};
  };
  m["ArgMax"] = arg(true);
  m["ArgMin"] = arg(false);
  m["TopK"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t k = c.k.opset >= 10 ? c.raw[1].to_i64().at(0) : c.node().attr_i("k");
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", -1), x.dim());
    auto [v, i] = at::topk(x, k, axis, c.node().attr_i("largest", 1) != 0, true);
    return ATs{v, i};
  }};
  m["CumSum"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = norm_axis(c.k, c.raw[1].to_i64().at(0), x.dim());
    bool exclusive = c.node().attr_i("exclusive", 0) != 0,
         reverse = c.node().attr_i("reverse", 0) != 0;
    at::Tensor xi = reverse ? x.flip({axis}) : x;
    // Exclusive: the sum of the elements before, i.e. cumsum of the input shifted by one (not
    // cumsum - x, which cancels catastrophically next to a large element).
    if (exclusive && xi.size(axis) > 0) {
      std::vector<std::int64_t> pad(2 * static_cast<std::size_t>(xi.dim() - axis), 0);
      pad[pad.size() - 2] = 1;  // one zero before, along `axis`
      xi = at::constant_pad_nd(xi, pad).narrow(axis, 0, xi.size(axis));
    }
    at::Tensor y = at::cumsum(xi, axis);
    return ATs{reverse ? y.flip({axis}) : y};
  }};
  m["Softmax"] = {[](const Ctx& c) { return softmax_like(c, 0); }};
  m["LogSoftmax"] = {[](const Ctx& c) { return softmax_like(c, 1); }};
  m["Hardmax"] = {[](const Ctx& c) { return softmax_like(c, 2); }, false};

  // --- shape and data movement
  m["Reshape"] = {[](const Ctx& c) {
    if (c.k.opset < 5) c.unsupported("Reshape-1 (shape attribute)");
    auto shape = c.raw[1].to_i64();
    bool allowzero = c.node().attr_i("allowzero", 0) != 0;
    for (std::size_t i = 0; i < shape.size(); ++i)
      if (shape[i] == 0 && !allowzero) shape[i] = c.in(0).size(static_cast<std::int64_t>(i));
    return ATs{c.in(0).reshape(shape)};
  }};
  m["Flatten"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = c.node().attr_i("axis", 1);
    if (axis < 0) axis += x.dim();
    std::int64_t a = 1;
    for (std::int64_t d = 0; d < axis; ++d) a *= x.size(d);
    return ATs{x.reshape({a, a ? x.numel() / a : 0})};
  }};
  m["Transpose"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::vector<std::int64_t> perm(x.dim());
    std::iota(perm.rbegin(), perm.rend(), 0);
    perm = c.node().attr_ints("perm", perm);
    return ATs{x.permute(perm).contiguous()};
  }};
  m["Squeeze"] = {[](const Ctx& c) {
    auto axes = norm_axes(c.k, axes_arg(c.k, c.raw, 1, 13), c.in(0).dim());
    if (axes.empty()) return ATs{c.in(0).squeeze()};
    std::sort(axes.rbegin(), axes.rend());
    at::Tensor y = c.in(0);
    for (auto a : axes) y = y.squeeze(a);
    return ATs{y};
  }};
  m["Unsqueeze"] = {[](const Ctx& c) {
    auto axes = axes_arg(c.k, c.raw, 1, 13);
    axes = norm_axes(c.k, axes, c.in(0).dim() + static_cast<std::int64_t>(axes.size()));
    std::sort(axes.begin(), axes.end());
    at::Tensor y = c.in(0);
    for (auto a : axes) y = y.unsqueeze(a);
    return ATs{y};
  }};
  m["Concat"] = {[](const Ctx& c) {
    return ATs{at::cat(c.x, norm_axis(c.k, c.node().attr_i("axis"), c.in(0).dim()))};
  }};
  m["Split"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", 0), x.dim());
    std::vector<std::int64_t> sizes =
        c.k.opset >= 13 ? (c.has(1) ? c.raw[1].to_i64() : std::vector<std::int64_t>{})
                        : c.node().attr_ints("split", {});
    auto n = static_cast<std::int64_t>(c.node().outputs.size());
    if (sizes.empty()) sizes.assign(n, x.size(axis) / n);
    auto parts = at::split_with_sizes(x, sizes, axis);
    return ATs(parts.begin(), parts.end());
  }};
  m["Slice"] = {[](const Ctx& c) {
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
  }};
  m["Gather"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", 0), x.dim());
    at::Tensor idx = c.in(1).to(at::kLong);
    idx = at::where(idx < 0, idx + x.size(axis), idx);
    at::Tensor y = at::index_select(x, axis, idx.reshape({-1}));
    std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().begin() + axis);
    shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
    shape.insert(shape.end(), x.sizes().begin() + axis + 1, x.sizes().end());
    return ATs{y.reshape(shape)};
  }};
  m["GatherElements"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", 0), x.dim());
    at::Tensor idx = c.in(1).to(at::kLong);
    idx = at::where(idx < 0, idx + x.size(axis), idx);
    return ATs{at::gather(x, axis, idx)};
  }};
  m["ScatterElements"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis", 0), x.dim());
    at::Tensor idx = c.in(1).to(at::kLong);
    idx = at::where(idx < 0, idx + x.size(axis), idx);
    std::string red = c.node().attr_s("reduction", "none");
    if (red == "none") return ATs{at::scatter(x, axis, idx, c.in(2))};
    static const std::map<std::string, std::string> names = {
        {"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
    return ATs{at::scatter_reduce(x, axis, idx, c.in(2), names.at(red), true)};
  }};
  m["Expand"] = {[](const Ctx& c) {
    Shape os = broadcast_shapes(c.k, {c.raw[0].shape(), c.raw[1].to_i64()});
    return ATs{c.in(0).expand(os).contiguous()};
  }};
  m["Tile"] = {[](const Ctx& c) { return ATs{c.in(0).repeat(c.raw[1].to_i64())}; }};
  m["Pad"] = {[](const Ctx& c) {
    if (c.k.opset < 11) c.unsupported("Pad-2 (attribute form)");
    if (c.has(3)) c.unsupported("axes input");
    const at::Tensor& x = c.in(0);
    auto pads = c.raw[1].to_i64();
    std::string mode = c.node().attr_s("mode", "constant");
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
  }};
  m["DepthToSpace"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t b = c.node().attr_i("blocksize");
    if (c.node().attr_s("mode", "DCR") == "CRD") return ATs{at::pixel_shuffle(x, b)};
    std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    return ATs{x.reshape({N, b, b, C / (b * b), H, W})
                   .permute({0, 3, 4, 1, 5, 2})
                   .reshape({N, C / (b * b), H * b, W * b})};
  }};
  m["SpaceToDepth"] = {[](const Ctx& c) {
    const at::Tensor& x = c.in(0);
    std::int64_t b = c.node().attr_i("blocksize");
    std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    return ATs{x.reshape({N, C, H / b, b, W / b, b})
                   .permute({0, 3, 5, 1, 2, 4})
                   .reshape({N, C * b * b, H / b, W / b})};
  }};
  m["Trilu"] = {[](const Ctx& c) {
    std::int64_t k = c.has(1) ? c.raw[1].to_i64().at(0) : 0;
    return ATs{c.node().attr_i("upper", 1) ? at::triu(c.in(0), k) : at::tril(c.in(0), k)};
  }};
  m["Resize"] = {[](const Ctx& c) {
    const Node& n = c.node();
    if (c.k.opset < 11) c.unsupported("Resize-10");
    const at::Tensor& x = c.in(0);
    if (x.dim() != 4) c.unsupported("only 4-D inputs");
    std::string mode = n.attr_s("mode", "nearest"),
                coord = n.attr_s("coordinate_transformation_mode", "half_pixel");
    std::vector<double> scales = c.has(2) ? c.raw[2].to_f64() : std::vector<double>{};
    std::vector<std::int64_t> sizes = c.has(3) ? c.raw[3].to_i64() : std::vector<std::int64_t>{};
    std::vector<std::int64_t> out(4);
    std::vector<double> sc(4);
    for (int d = 0; d < 4; ++d) {
      sc[d] = sizes.empty() ? scales.at(d)
                            : static_cast<double>(sizes.at(d)) / static_cast<double>(x.size(d));
      out[d] =
          sizes.empty()
              ? static_cast<std::int64_t>(std::floor(static_cast<double>(x.size(d)) * scales[d]))
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
      if (coord != "asymmetric" || n.attr_s("nearest_mode", "round_prefer_floor") != "floor")
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
      if (n.attr_f("cubic_coeff_a", -0.75) != -0.75 || n.attr_i("exclude_outside", 0))
        c.unsupported("cubic with a != -0.75 or exclude_outside");
      return ATs{at::upsample_bicubic2d(x, hw, align, sh, sw)};
    }
    c.unsupported("mode " + mode);
  }};
  m["Dropout"] = {[](const Ctx& c) {
    auto [ratio, training] = dropout_mode(c.k, c.raw);
    if (training && ratio > 0) c.unsupported("training-mode dropout (random mask)");
    return ATs{c.in(0).clone(), at::ones_like(c.in(0), at::kBool)};
  }};

  // --- losses
  auto nll = [](const Ctx& c, const at::Tensor& logp) {
    const Node& n = c.node();
    std::string red = n.attr_s("reduction", "mean");
    std::int64_t r = red == "none" ? 0 : red == "mean" ? 1 : 2;  // at::Reduction
    // ATen always has an ignore_index; without one in the node, use a class no target has.
    std::int64_t ignore = n.has_attr("ignore_index") ? n.attr_i("ignore_index")
                                                     : std::numeric_limits<std::int64_t>::min();
    at::Tensor w = c.has(2) ? c.x[2] : at::Tensor();
    return at::nll_loss_nd(logp, c.in(1).to(at::kLong), w, r, ignore);
  };
  m["NegativeLogLikelihoodLoss"] = {[nll](const Ctx& c) { return ATs{nll(c, c.in(0))}; }};
  m["SoftmaxCrossEntropyLoss"] = {[nll](const Ctx& c) {
    at::Tensor logp = at::log_softmax(c.in(0), 1);
    if (c.node().outputs.size() > 1) return ATs{nll(c, logp), logp};
    return ATs{nll(c, logp)};
  }};
  return m;
}

const std::map<std::string, TorchOp>& ops() {
  static const auto table = make_ops();
  return table;
}

}  // namespace

namespace {
// ATen's one-time warnings (e.g. "scatter_reduce() is in beta") would otherwise go to stderr
// through glog in the middle of our output.
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::SourceLocation&, const std::string&, const bool) override {}
};
}  // namespace

TorchBinding::TorchBinding() {
  static QuietWarnings quiet;
  c10::Warning::set_warning_handler(&quiet);
  set_threads(1);
}

void TorchBinding::set_threads(int n) {
  at::set_num_threads(n);
}

Support TorchBinding::supports(const std::string& op_type) const {
  Support s;
  auto it = ops().find(op_type);
  if (it == ops().end()) {
    s.reason = "no ATen mapping";
    return s;
  }
  s.forward = true;
  s.backward = it->second.differentiable;
  s.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  return s;
}

namespace {

ATs run_op(const Node& node, std::int64_t opset, const Tensors& inputs, const ATs& x) {
  auto it = ops().find(node.op_type);
  if (it == ops().end()) throw Unsupported(node.label() + ": torch binding has no " + node.op_type);
  KernelContext k{node, opset};
  try {
    return it->second.fn(Ctx{k, inputs, x});
  } catch (const c10::Error& e) {
    // ATen refuses: a dtype without a CPU kernel (float16 ops), a shape it does not take...
    std::string msg = e.what_without_backtrace();
    auto nl = msg.find('\n');
    throw Unsupported(fmt::format("{}: ATen: {}", node.label(), msg.substr(0, nl)));
  }
}

}  // namespace

Tensors TorchBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  at::NoGradGuard no_grad;
  ATs x;
  for (const auto& t : inputs) x.push_back(to_aten(t));
  ATs y = run_op(node, opset, inputs, x);
  Tensors out;
  for (const auto& t : y) out.push_back(from_aten(t, node.label()));
  return out;
}

Tensors TorchBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                               const Tensors&, const Tensors& output_grads) {
  auto it = ops().find(node.op_type);
  if (it == ops().end() || !it->second.differentiable)
    throw Unsupported(node.label() + ": torch binding has no backward for " + node.op_type);
  at::AutoGradMode grad_mode(true);
  ATs x, wrt;
  std::vector<std::size_t> wrt_index;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor t = to_aten(inputs[i]);
    const auto& skip = it->second.no_grad_inputs;
    if (t.defined() && at::isFloatingType(t.scalar_type()) &&
        std::find(skip.begin(), skip.end(), i) == skip.end()) {
      t.set_requires_grad(true);
      wrt.push_back(t);
      wrt_index.push_back(i);
    }
    x.push_back(t);
  }
  ATs y = run_op(node, opset, inputs, x);
  ATs outs, gouts;
  for (std::size_t i = 0; i < y.size() && i < output_grads.size(); ++i) {
    if (!output_grads[i].defined() || !y[i].defined()) continue;
    if (!y[i].requires_grad()) {
      if (!at::isFloatingType(y[i].scalar_type())) continue;  // indices, masks
      throw Unsupported(fmt::format("{}: ATen does not differentiate output #{} '{}'", node.label(),
                                    i, i < node.outputs.size() ? node.outputs[i] : ""));
    }
    outs.push_back(y[i]);
    gouts.push_back(to_aten(output_grads[i]));
  }
  Tensors grads(inputs.size());
  if (outs.empty() || wrt.empty()) return grads;
  auto g = torch::autograd::grad(outs, wrt, gouts, false, false, true);
  // An input ATen took as a plain number (Clip bounds, the Pad value) gets no gradient: it is
  // left undefined, which says "not differentiated", rather than a false zero.
  for (std::size_t j = 0; j < wrt.size(); ++j)
    if (g[j].defined()) grads[wrt_index[j]] = from_aten(g[j], node.label());
  return grads;
}

}  // namespace metaop
