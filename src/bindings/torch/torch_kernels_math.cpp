// ATen kernels of the element-wise, linear, reduction, softmax and loss meta operators.
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_make_per_channel_quantized_tensor.h>
#include <ATen/ops/_make_per_tensor_quantized_tensor.h>
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
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/bitwise_left_shift.h>
#include <ATen/ops/bitwise_not.h>
#include <ATen/ops/bitwise_or.h>
#include <ATen/ops/bitwise_right_shift.h>
#include <ATen/ops/bitwise_xor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ceil.h>
#include <ATen/ops/celu.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/cosh.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/dequantize.h>
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
#include <ATen/ops/int_repr.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/isposinf.h>
#include <ATen/ops/le.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/linalg_det.h>
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
#include <ATen/ops/quantize_per_channel.h>
#include <ATen/ops/quantize_per_tensor.h>
#include <ATen/ops/quantize_per_tensor_dynamic.h>
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
#include <ATen/ops/scalar_tensor.h>
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

namespace {

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

}  // namespace

// Element-wise: unary math and activations, binary arithmetic, comparisons, variadic ops.
void add_elementwise(TorchTable& t) {
  auto U = [&](const char* name, at::Tensor (*f)(const at::Tensor&), bool diff = true,
               std::source_location loc = std::source_location::current()) {
    t.add(name, TorchOp{[f](const Ctx& c) { return unary(c, f); }, diff}, loc);
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
  {
    TorchOp op{[](const Ctx& c) { return unary(c, at::logical_not); }, false};
    op.dtypes = {DType::Bool};
    t.add("Not", std::move(op));
  }
  U("IsNaN", at::isnan, false);
  t.add("Softplus", TorchOp{[](const Ctx& c) { return ATs{at::softplus(c.in(0), 1, 20)}; }});
  t.add("Softsign", TorchOp{[](const Ctx& c) { return ATs{c.in(0) / (at::abs(c.in(0)) + 1)}; }});
  t.add("Identity", TorchOp{[](const Ctx& c) { return ATs{c.in(0).clone()}; }});
  t.add("LeakyRelu",
        TorchOp{[](const Ctx& c) { return ATs{at::leaky_relu(c.in(0), attr_f(c.k, "alpha"))}; }});
  t.add("Elu", TorchOp{[](const Ctx& c) { return ATs{at::elu(c.in(0), attr_f(c.k, "alpha"))}; }});
  t.add("Selu", TorchOp{[](const Ctx& c) {
          // ATen's selu has fixed constants; other alpha/gamma go through elu's alpha and scale.
          double a = attr_f(c.k, "alpha"), g = attr_f(c.k, "gamma");
          if (a == 1.67326319217681884765625 && g == 1.05070102214813232421875)
            return ATs{at::selu(c.in(0))};
          return ATs{at::elu(c.in(0), a, g)};
        }});
  t.add("Celu", TorchOp{[](const Ctx& c) { return ATs{at::celu(c.in(0), attr_f(c.k, "alpha"))}; }});
  t.add("HardSigmoid", TorchOp{[](const Ctx& c) {
          return ATs{at::clamp(c.in(0) * attr_f(c.k, "alpha") + attr_f(c.k, "beta"), 0, 1)};
        }});
  t.add("ThresholdedRelu",
        TorchOp{[](const Ctx& c) { return ATs{at::threshold(c.in(0), attr_f(c.k, "alpha"), 0)}; }});
  t.add("IsInf", TorchOp{[](const Ctx& c) {
                           bool pos = attr_i(c.k, "detect_positive"),
                                neg = attr_i(c.k, "detect_negative");
                           if (pos && neg) return ATs{at::isinf(c.in(0))};
                           if (pos) return ATs{at::isposinf(c.in(0))};
                           if (neg) return ATs{at::isneginf(c.in(0))};
                           return ATs{at::zeros_like(c.in(0), at::kBool)};
                         },
                         false});

  // The arithmetic and comparisons take the integer types too (Equal bool as well); ATen has
  // kernels for all of them.
  const std::vector<DType> integers{DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                                    DType::UInt8};
  const std::vector<DType> numbers{DType::Float32,  DType::Float64, DType::Float16,
                                   DType::BFloat16, DType::Int8,    DType::Int16,
                                   DType::Int32,    DType::Int64,   DType::UInt8};
  const std::vector<DType> numbers_and_bool{
      DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8,
      DType::Int16,   DType::Int32,   DType::Int64,   DType::UInt8,    DType::Bool};
  auto B = [&](const char* name, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f,
               bool diff = true, std::source_location loc = std::source_location::current()) {
    TorchOp op{[f](const Ctx& c) {
                 check_modern(c);
                 return ATs{f(c.in(0), c.in(1))};
               },
               diff};
    op.dtypes = std::string(name) == "Equal" ? numbers_and_bool : numbers;
    t.add(name, std::move(op), loc);
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
  // The bitwise ops take integers only, so they claim the integer types ATen has kernels for
  // (BitShift: the unsigned ones, of which LibTorch 1.13 has uint8 alone).
  auto I = [&](const char* name, Fn f, std::vector<DType> dtypes,
               std::source_location loc = std::source_location::current()) {
    TorchOp op{std::move(f), false};
    op.dtypes = std::move(dtypes);
    t.add(name, std::move(op), loc);
  };
  // The logical ops take bool alone (opset 7 on: before it, broadcasting was explicit).
  I("And",
    [](const Ctx& c) {
      check_modern(c);
      return ATs{at::logical_and(c.in(0), c.in(1))};
    },
    {DType::Bool});
  I("Or",
    [](const Ctx& c) {
      check_modern(c);
      return ATs{at::logical_or(c.in(0), c.in(1))};
    },
    {DType::Bool});
  I("Xor",
    [](const Ctx& c) {
      check_modern(c);
      return ATs{at::logical_xor(c.in(0), c.in(1))};
    },
    {DType::Bool});
  I(
      "BitwiseAnd", [](const Ctx& c) { return ATs{at::bitwise_and(c.in(0), c.in(1))}; }, integers);
  I(
      "BitwiseOr", [](const Ctx& c) { return ATs{at::bitwise_or(c.in(0), c.in(1))}; }, integers);
  I(
      "BitwiseXor", [](const Ctx& c) { return ATs{at::bitwise_xor(c.in(0), c.in(1))}; }, integers);
  I(
      "BitwiseNot", [](const Ctx& c) { return ATs{at::bitwise_not(c.in(0))}; }, integers);
  I("BitShift",
    [](const Ctx& c) {
      const std::string dir = attr_s(c.k, "direction");
      if (dir != "LEFT" && dir != "RIGHT")
        c.unsupported(fmt::format("direction '{}': LEFT or RIGHT", dir));
      return ATs{dir == "LEFT" ? at::bitwise_left_shift(c.in(0), c.in(1))
                               : at::bitwise_right_shift(c.in(0), c.in(1))};
    },
    {DType::UInt8});
  // Mod: ATen's remainder (the divisor's sign, fmod=0) and fmod (the dividend's), on the floating
  // and the integer types.
  I(
      "Mod",
      [](const Ctx& c) {
        bool fmod = attr_i(c.k, "fmod") != 0;
        return ATs{fmod ? at::fmod(c.in(0), c.in(1)) : at::remainder(c.in(0), c.in(1))};
      },
      numbers);
  t.add("PRelu", TorchOp{[](const Ctx& c) {
          check_modern(c);
          const at::Tensor& x = c.in(0);
          const at::Tensor& s = c.in(1);
          // ATen's prelu takes one slope or one per channel (dim 1); other broadcasts are not its
          // op.
          bool per_channel =
              x.dim() >= 2 && s.numel() == x.size(1) &&
              (s.dim() == 1 ? x.dim() == 2 || s.numel() == 1 : s.size(0) == x.size(1)) &&
              s.dim() <= x.dim() - 1;
          if (s.numel() == 1 || per_channel) return ATs{at::prelu(x, s.reshape({s.numel()}))};
          c.unsupported("slope shape is neither one value nor one per channel");
        }});
  auto V = [&](const char* name, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f,
               bool mean, std::source_location loc = std::source_location::current()) {
    t.add(name, TorchOp{[f, mean](const Ctx& c) {
            at::Tensor acc = c.in(0);
            for (std::size_t i = 1; i < c.x.size(); ++i) acc = f(acc, c.in(i));
            if (mean) acc = acc / static_cast<double>(c.x.size());
            if (c.x.size() == 1) acc = acc.clone();
            return ATs{acc};
          }},
          loc);
  };
  V(
      "Max", [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }, false);
  V(
      "Min", [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }, false);
  V(
      "Sum", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, false);
  V(
      "Mean", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, true);
  t.add("Where", TorchOp{[](const Ctx& c) { return ATs{at::where(c.in(0), c.in(1), c.in(2))}; }});
  t.add("Clip", TorchOp{[](const Ctx& c) {
          auto bounds = clip_bounds(c.k, c.raw);
          c10::optional<at::Scalar> lo, hi;  // an infinite bound is no bound
          if (!std::isinf(bounds.lo)) lo = bounds.lo;
          if (!std::isinf(bounds.hi)) hi = bounds.hi;
          if (!lo && !hi) return ATs{c.in(0).clone()};
          // A double bound promotes integer inputs to float in ATen; the result keeps x's dtype.
          return ATs{at::clamp(c.in(0), lo, hi).to(c.in(0).scalar_type())};
        }});
  t.add("Cast", TorchOp{[](const Ctx& c) {
                          auto dt = dtype_from_onnx(static_cast<int>(c.node().attr_i("to")));
                          if (!dt) c.unsupported("cast target type");
                          return ATs{c.in(0).to(to_aten(*dt))};
                        },
                        false});
  t.add("CastLike",
        TorchOp{[](const Ctx& c) { return ATs{c.in(0).to(c.in(1).scalar_type())}; }, false});
}

// MatMul, Gemm, Einsum.
void add_linear(TorchTable& t) {
  t.add("MatMul", TorchOp{[](const Ctx& c) { return ATs{at::matmul(c.in(0), c.in(1))}; }});
  // Its backward is judged with Det's own bound (g det A^-T from perturbed LUs, ops/det.cpp).
  t.add("Det", TorchOp{[](const Ctx& c) { return ATs{at::linalg_det(c.in(0))}; }});
  t.add("Gemm", TorchOp{[](const Ctx& c) {
          at::Tensor a = attr_i(c.k, "transA") ? c.in(0).t() : c.in(0);
          at::Tensor b = attr_i(c.k, "transB") ? c.in(1).t() : c.in(1);
          at::Tensor y = at::matmul(a, b);
          double alpha = attr_f(c.k, "alpha"), beta = attr_f(c.k, "beta");
          if (alpha != 1.0) y = y * alpha;
          if (c.has(2)) y = beta != 1.0 ? y + c.x[2] * beta : y + c.x[2];
          return ATs{y};
        }});
  t.add("Einsum",
        TorchOp{[](const Ctx& c) { return ATs{at::einsum(c.node().attr_s("equation"), c.x)}; }});
}

// Reductions, arg-max/min, TopK, CumSum and the softmax family.
void add_reductions(TorchTable& t) {
  using ReduceFn = at::Tensor (*)(const at::Tensor&, at::IntArrayRef, bool);
  auto R = [&](const char* name, ReduceFn f,
               std::source_location loc = std::source_location::current()) {
    t.add(name, TorchOp{[f](const Ctx& c) { return reduce(c, f); }}, loc);
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
                     std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
                     bool keep = attr_i(c.k, "keepdims") != 0;
                     if (attr_i_or(c.k, "select_last_index", 0)) {  // from opset 12
                       at::Tensor f = x.flip({axis});
                       at::Tensor i =
                           is_max ? at::argmax(f, axis, keep) : at::argmin(f, axis, keep);
                       return ATs{(x.size(axis) - 1) - i};
                     }
                     return ATs{is_max ? at::argmax(x, axis, keep) : at::argmin(x, axis, keep)};
                   },
                   false};
  };
  t.add("ArgMax", arg(true));
  t.add("ArgMin", arg(false));
  t.add("TopK", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t k = c.k.opset >= 10 ? c.raw[1].to_i64().at(0) : c.node().attr_i("k");
          std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
          // largest from opset 11; before, the largest
          auto [v, i] = at::topk(x, k, axis, attr_i_or(c.k, "largest", 1) != 0, true);
          return ATs{v, i};
        }});
  t.add("CumSum", TorchOp{[](const Ctx& c) {
          const at::Tensor& x = c.in(0);
          std::int64_t axis = norm_axis(c.k, c.raw[1].to_i64().at(0), x.dim());
          bool exclusive = attr_i(c.k, "exclusive") != 0, reverse = attr_i(c.k, "reverse") != 0;
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
        }});
  t.add("Softmax", TorchOp{[](const Ctx& c) { return softmax_like(c, 0); }});
  t.add("LogSoftmax", TorchOp{[](const Ctx& c) { return softmax_like(c, 1); }});
  t.add("Hardmax", TorchOp{[](const Ctx& c) { return softmax_like(c, 2); }, false});
}

// Losses.
void add_losses(TorchTable& t) {
  auto nll = [](const Ctx& c, const at::Tensor& logp) {
    const Node& n = c.node();
    std::string red = attr_s(c.k, "reduction");
    std::int64_t r = red == "none" ? 0 : red == "mean" ? 1 : 2;  // at::Reduction
    // ATen always has an ignore_index; without one in the node, use a class no target has.
    std::int64_t ignore = n.has_attr("ignore_index") ? n.attr_i("ignore_index")
                                                     : std::numeric_limits<std::int64_t>::min();
    at::Tensor w = c.has(2) ? c.x[2] : at::Tensor();
    return at::nll_loss_nd(logp, c.in(1).to(at::kLong), w, r, ignore);
  };
  t.add("NegativeLogLikelihoodLoss", TorchOp{[nll](const Ctx& c) { return ATs{nll(c, c.in(0))}; }});
  t.add("SoftmaxCrossEntropyLoss", TorchOp{[nll](const Ctx& c) {
          at::Tensor logp = at::log_softmax(c.in(0), 1);
          if (c.node().outputs.size() > 1) return ATs{nll(c, logp), logp};
          return ATs{nll(c, logp)};
        }});
}

// QuantizeLinear and DequantizeLinear on ATen's quantized tensors, as PyTorch's own quantization
// runs them: quantize_per_tensor or quantize_per_channel and the integer representation, and
// the integers made a quantized tensor (_make_per_tensor/_per_channel_quantized_tensor) and
// dequantized. uint8 and int8 (and int32 to dequantize: qint32), per tensor or per axis, a
// float32 scale; blocked quantization, other integer or float8 types are refused.
namespace {

struct QuantArgs {
  bool per_axis = false;
  std::int64_t axis = 0;
  double scale = 0;
  std::int64_t zero = 0;
  at::Tensor scales, zeros;  // per axis: double and int64
};

QuantArgs quant_args(const Ctx& c, std::int64_t rank) {
  if (attr_i_or(c.k, "block_size", 0) != 0) c.unsupported("blocked quantization");
  const at::Tensor& s = c.in(1);
  if (s.scalar_type() != at::kFloat) c.unsupported("a scale that is not float32");
  QuantArgs q;
  q.per_axis = s.dim() == 1;
  if (s.dim() > 1) c.unsupported("a scale of rank above 1 (blocked quantization)");
  at::Tensor z = c.has(2) ? c.x[2] : at::zeros_like(s, at::kLong);
  if (z.sizes() != s.sizes()) c.unsupported("a zero point of another shape than the scale");
  if (q.per_axis) {
    q.axis = attr_i_or(c.k, "axis", 1);
    if (q.axis < 0) q.axis += rank;
    if (q.axis < 0 || q.axis >= rank) c.unsupported("axis out of range");
    q.scales = s.to(at::kDouble);
    q.zeros = z.to(at::kLong);
  } else {
    q.scale = s.item<double>();
    q.zero = z.to(at::kLong).item<std::int64_t>();
  }
  return q;
}

// The quantized type of an integer type: quint8, qint8, qint32.
at::ScalarType quantized_of(const Ctx& c, at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return at::kQUInt8;
    case at::kChar:
      return at::kQInt8;
    case at::kInt:
      return at::kQInt32;
    default:
      c.unsupported(fmt::format("quantized type {}", c10::toString(t)));
  }
}

ATs quantize_linear(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  if (x.scalar_type() != at::kFloat) c.unsupported("quantizing an input that is not float32");
  // The output's type: the zero point's, else output_dtype (opset 21), else uint8.
  at::ScalarType out = at::kByte;
  if (c.has(2)) {
    out = c.x[2].scalar_type();
  } else if (auto t = attr_i_or(c.k, "output_dtype", 0); t != 0) {
    auto dt = dtype_from_onnx(static_cast<int>(t));
    if (!dt) c.unsupported("output_dtype");
    out = to_aten(*dt);
  }
  if (out != at::kByte && out != at::kChar) c.unsupported("quantizing to other than uint8, int8");
  if (attr_i_or(c.k, "precision", 0) != 0) c.unsupported("the precision attribute");
  QuantArgs q = quant_args(c, x.dim());
  at::ScalarType qt = quantized_of(c, out);
  at::Tensor y = q.per_axis ? at::quantize_per_channel(x, q.scales, q.zeros, q.axis, qt)
                            : at::quantize_per_tensor(x, q.scale, q.zero, qt);
  return {y.int_repr()};
}

ATs dequantize_linear(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  quantized_of(c, x.scalar_type());  // uint8, int8 or int32
  if (attr_i_or(c.k, "output_dtype", 0) != 0) c.unsupported("the output_dtype attribute");
  QuantArgs q = quant_args(c, x.dim());
  at::Tensor qx = q.per_axis ? at::_make_per_channel_quantized_tensor(x, q.scales, q.zeros, q.axis)
                             : at::_make_per_tensor_quantized_tensor(x, q.scale, q.zero);
  return {at::dequantize(qx)};
}

// ---- MatMulInteger, ConvInteger: ATen's integer matmul and convolution on int32 operands less
// their zero points (the accumulator exact where it fits int32, as the reference requires).

// x as int32 less its zero point: a scalar, or one per index of `axis` (a's rows, a weight's
// output channels; -1: none, the zero point broadcast as it is).
at::Tensor minus_zero(const Ctx& c, const at::Tensor& x, std::size_t zero, std::int64_t axis) {
  at::Tensor xi = x.to(at::kInt);
  if (!c.has(zero)) return xi;
  at::Tensor z = c.x[zero].to(at::kInt);
  if (z.numel() > 1 && z.dim() == 1 && axis >= 0) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
    shape[static_cast<std::size_t>(axis)] = z.numel();
    z = z.reshape(shape);
  }
  return xi - z;
}

ATs matmul_integer(const Ctx& c) {
  const at::Tensor& a = c.in(0);
  std::int64_t rows = a.dim() >= 2 ? a.dim() - 2 : -1;
  return {at::matmul(minus_zero(c, a, 2, rows), minus_zero(c, c.in(1), 3, -1))};
}

// A convolution's geometry as ATen takes it, and the input padded where ONNX's pads are
// asymmetric (with `fill`, the value that stands for 0).
struct ConvGeometry {
  at::Tensor x;
  std::vector<std::int64_t> stride, pad, dilation;
  std::int64_t groups = 1;
  int nsp = 0;
};

ConvGeometry conv_geometry(const Ctx& c, const at::Tensor& x, std::size_t w, double fill) {
  const Shape& ws = c.raw[w].shape();
  Shape ks(ws.begin() + 2, ws.end());
  Window g = window_geometry(c.k, c.raw[0].shape(), attr_ints_or(c.k, "kernel_shape", ks), false);
  ConvGeometry r{x,
                 spatial(g.s, g.nsp),
                 spatial(g.pb, g.nsp),
                 spatial(g.d, g.nsp),
                 attr_i_or(c.k, "group", 1),
                 g.nsp};
  if (g.pb != g.pe) {
    r.x = at::constant_pad_nd(x, torch_pads(g), fill);
    r.pad.assign(static_cast<std::size_t>(g.nsp), 0);
  }
  return r;
}

ATs conv_integer(const Ctx& c) {
  ConvGeometry g = conv_geometry(c, minus_zero(c, c.in(0), 2, -1), 1, 0);
  at::Tensor w = minus_zero(c, c.in(1), 3, 0);
  return {at::convolution(g.x, w, at::Tensor(), g.stride, g.pad, g.dilation, false,
                          std::vector<std::int64_t>(static_cast<std::size_t>(g.nsp), 0), g.groups)};
}

// ---- QLinearMatMul, QLinearConv, DynamicQuantizeLinear on PyTorch's quantized engine (the
// default one: x86 from PyTorch 2, fbgemm or onednn before), as its quantized modules run them:
// quantized::linear and quantized::conv{1,2,3}d on weights packed by their prepack ops. These
// are called boxed through the dispatcher: the packed weights are TorchScript classes whose
// headers the wheel does not ship. The engine takes uint8 activations and outputs, int8
// weights.

// The dispatcher's `name`.`overload` on `stack`; its first result. A prepack op's refusal (a
// form of weight the engine does not take) is the binding's unsupported case.
c10::IValue call_boxed(const Ctx& c, const char* name, const char* overload,
                       std::vector<c10::IValue> stack, bool refusal_unsupported = false) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  try {
    op.callBoxed(&stack);
  } catch (const c10::Error& e) {
    if (!refusal_unsupported) throw;
    std::string why = e.what_without_backtrace();
    c.unsupported(fmt::format("{} refuses it ({})", name, why.substr(0, why.find('\n'))));
  }
  return std::move(stack.at(0));
}

// The integers of input `q` as a quantized tensor with the scale and zero point of inputs
// `scale` and `zero`: per tensor, or per index of `axis` where the scale has several
// (`per_axis` false: refused then).
at::Tensor quantized(const Ctx& c, const at::Tensor& q, std::size_t scale, std::size_t zero,
                     std::int64_t axis, bool per_axis) {
  const at::Tensor& s = c.in(scale);
  if (s.scalar_type() != at::kFloat) c.unsupported("a scale that is not float32");
  at::Tensor z = c.has(zero) ? c.x[zero].to(at::kLong) : at::zeros_like(s, at::kLong);
  if (s.numel() == 1)
    return at::_make_per_tensor_quantized_tensor(q, s.item<double>(),
                                                 z.reshape({-1})[0].item<std::int64_t>());
  if (!per_axis || s.dim() != 1)
    c.unsupported(fmt::format("input #{} has {} scales: the engine quantizes it per tensor", scale,
                              s.numel()));
  return at::_make_per_channel_quantized_tensor(q, s.to(at::kDouble), z.reshape({-1}), axis);
}

// y's scale and zero point: a uint8 output per tensor.
std::pair<double, std::int64_t> output_quantization(const Ctx& c, std::size_t scale) {
  const at::Tensor& s = c.in(scale);
  if (s.scalar_type() != at::kFloat) c.unsupported("a y_scale that is not float32");
  if (c.has(scale + 1) && c.x[scale + 1].scalar_type() != at::kByte)
    c.unsupported("an int8 output: the engine's are uint8");
  std::int64_t zero = c.has(scale + 1) ? c.x[scale + 1].to(at::kLong).item<std::int64_t>() : 0;
  return {s.item<double>(), zero};
}

void require_engine_types(const Ctx& c, const at::Tensor& x, const at::Tensor& w) {
  if (x.scalar_type() != at::kByte) c.unsupported("int8 activations: the engine's are uint8");
  if (w.scalar_type() != at::kChar) c.unsupported("a uint8 weight: the engine's are int8");
}

ATs qlinear_matmul(const Ctx& c) {
  const at::Tensor &a = c.in(0), &b = c.in(3);
  require_engine_types(c, a, b);
  if (a.dim() < 2 || b.dim() != 2) c.unsupported("a of rank under 2 or b not 2-D (a linear layer)");
  // quantized::linear computes x W^T: W is b transposed, its output channels b's columns.
  at::Tensor qa = quantized(c, a, 1, 2, 0, false);
  at::Tensor qw = quantized(c, b.t().contiguous(), 4, 5, 0, true);
  auto [ys, yz] = output_quantization(c, 6);
  c10::IValue packed = call_boxed(c, "quantized::linear_prepack", "", {qw, c10::IValue()}, true);
  return {call_boxed(c, "quantized::linear", "", {qa, packed, ys, yz}).toTensor().int_repr()};
}

ATs qlinear_conv(const Ctx& c) {
  const at::Tensor &x = c.in(0), &w = c.in(3);
  require_engine_types(c, x, w);
  const std::int64_t x_zero = c.has(2) ? c.x[2].to(at::kLong).item<std::int64_t>() : 0;
  // Asymmetric pads are padded with the zero point: the value that stands for 0.
  ConvGeometry g = conv_geometry(c, x, 3, static_cast<double>(x_zero));
  at::Tensor qx = quantized(c, g.x, 1, 2, 0, false);
  at::Tensor qw = quantized(c, w, 4, 5, 0, true);
  auto [ys, yz] = output_quantization(c, 6);
  // The engine takes a float bias and quantizes it with scale x_scale * w_scale: ONNX's int32
  // bias times that scale.
  c10::IValue bias;
  if (c.has(8)) {
    at::Tensor ws = c.in(4).to(at::kDouble).reshape({-1});
    bias = (c.x[8].to(at::kDouble) * ws * c.in(1).to(at::kDouble).reshape({-1})).to(at::kFloat);
  }
  static const char* const prepack[] = {"quantized::conv1d_prepack", "quantized::conv2d_prepack",
                                        "quantized::conv3d_prepack"};
  static const char* const run[] = {"quantized::conv1d", "quantized::conv2d", "quantized::conv3d"};
  if (g.nsp < 1 || g.nsp > 3) c.unsupported(fmt::format("{} spatial dimensions", g.nsp));
  const auto i = static_cast<std::size_t>(g.nsp - 1);
  c10::IValue packed =
      call_boxed(c, prepack[i], "", {qw, bias, g.stride, g.pad, g.dilation, g.groups}, true);
  return {
      call_boxed(c, run[i], g.nsp == 1 ? "" : "new", {qx, packed, ys, yz}).toTensor().int_repr()};
}

// torch.quantize_per_tensor_dynamic: the scale and zero point of x's range, x quantized.
ATs dynamic_quantize_linear(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  if (x.scalar_type() != at::kFloat) c.unsupported("an input that is not float32");
  at::Tensor q = at::quantize_per_tensor_dynamic(x, at::kQUInt8, false);
  return {q.int_repr(), at::scalar_tensor(q.q_scale(), at::kFloat),
          at::scalar_tensor(q.q_zero_point(), at::kByte)};
}

}  // namespace

void add_quantization(TorchTable& t) {
  const std::vector<DType> bytes{DType::Int8, DType::UInt8};
  TorchOp mm_integer{matmul_integer, false};
  mm_integer.dtypes = bytes;
  t.add("MatMulInteger", std::move(mm_integer));
  TorchOp conv_int{conv_integer, false};
  conv_int.dtypes = bytes;
  t.add("ConvInteger", std::move(conv_int));
  using Kernel = ATs (*)(const Ctx&);
  for (auto [op, fn] :
       {std::pair<const char*, Kernel>{"QLinearMatMul", qlinear_matmul},
        std::pair<const char*, Kernel>{"QLinearConv", qlinear_conv},
        std::pair<const char*, Kernel>{"DynamicQuantizeLinear", dynamic_quantize_linear}}) {
    TorchOp k{fn, false};
    k.dtypes = {DType::Float32};
    t.add(op, std::move(k));
  }
  TorchOp quantize{quantize_linear, false};
  quantize.dtypes = {DType::Float32};
  t.add("QuantizeLinear", std::move(quantize));
  TorchOp dequantize{dequantize_linear, false};
  dequantize.dtypes = {DType::UInt8, DType::Int8, DType::Int32};
  t.add("DequantizeLinear", std::move(dequantize));
}

}  // namespace metaop::torch_kernels
