// Integer and quantized linear algebra: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv,
// DynamicQuantizeLinear. Their results are integers: the references follow the ONNX texts'
// arithmetic (zero points subtracted exactly, products summed exactly in int32's range,
// requantization rounded half to even and saturated) and their error models are exact, so a
// framework's rounding mode or saturation is judged to the unit.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/linear_util.h"

namespace metaop {

namespace {

void require_8bit(const KernelContext& c, const Tensor& t, const char* what) {
  if (t.dtype() != DType::UInt8 && t.dtype() != DType::Int8)
    fail("{}: {} is {}, expected uint8 or int8", c.node.label(), what, dtype_name(t.dtype()));
}

// x - zero_point, exactly, in float64: a zero point of one element for the whole tensor, or one
// per index of `axis` (per row of a matrix's A, per column of B, per output channel of a weight),
// given as a 1-D tensor or with x's rank (1 along the other axes).
Tensor minus_zero_point(const KernelContext& c, const Tensor& x, const Tensors& in, std::size_t k,
                        std::int64_t axis, const char* what) {
  std::vector<double> v = x.to_f64();
  if (!has_input(in, k)) return Tensor::from_f64(v, x.shape(), DType::Float64);
  const Tensor& zp = in[k];
  if (zp.dtype() != x.dtype())
    fail("{}: {} zero point is {} for a {} input", c.node.label(), what, dtype_name(zp.dtype()),
         dtype_name(x.dtype()));
  auto z = zp.to_f64();
  if (z.size() == 1) {
    for (auto& e : v) e -= z[0];
    return Tensor::from_f64(v, x.shape(), DType::Float64);
  }
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis >= x.rank() || static_cast<std::int64_t>(z.size()) != x.dim(axis))
    fail("{}: {} zero point of shape {} for an input of shape {}", c.node.label(), what,
         shape_str(zp.shape()), shape_str(x.shape()));
  if (zp.rank() > 1) {
    // With x's rank, it must be 1 everywhere but along the axis and the batch dims, which
    // broadcast as MatMul's do: only the per-axis layout without batch variation is read here.
    if (zp.rank() != x.rank() || zp.numel() != x.dim(axis))
      fail("{}: {} zero point of shape {}: per-batch zero points are not supported", c.node.label(),
           what, shape_str(zp.shape()));
  }
  std::int64_t inner = 1;
  for (std::int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const std::int64_t dim = x.dim(axis);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    v[static_cast<std::size_t>(i)] -= z[static_cast<std::size_t>((i / inner) % dim)];
  return Tensor::from_f64(v, x.shape(), DType::Float64);
}

// MatMul or Conv of the exact integer operands in float64 (exact: every product and partial sum
// is an integer far below 2^53), by the float op's reference with the node's attributes.
Tensor integer_product(const KernelContext& c, const char* float_op, const Tensors& operands) {
  Node n = c.node;
  n.op_type = float_op;
  KernelContext fc{n, c.opset};
  return forward_with_gemm(fc, operands, gemm_f64)[0];
}

// The accumulator as int32: ONNX lets it overflow only in 32 bits, and defines no value then.
Tensor to_int32(const KernelContext& c, const Tensor& acc) {
  auto v = acc.to_f64();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] > std::numeric_limits<std::int32_t>::max() ||
        v[i] < std::numeric_limits<std::int32_t>::min())
      fail("{}: the int32 accumulator overflows at element {} ({}): undefined in ONNX",
           c.node.label(), i, v[i]);
  return Tensor::from_f64(v, acc.shape(), DType::Int32);
}

// A's zero point per row: axis -2 of A (a 1-D A has one row).
std::int64_t row_axis(const Tensor& a) {
  return a.rank() >= 2 ? a.rank() - 2 : 0;
}

Tensors matmul_integer(const KernelContext& c, const Tensors& in) {
  const Tensor &a = input(c, in, 0), &b = input(c, in, 1);
  require_8bit(c, a, "A");
  require_8bit(c, b, "B");
  Tensor fa = minus_zero_point(c, a, in, 2, row_axis(a), "A's");
  Tensor fb = minus_zero_point(c, b, in, 3, -1, "B's");
  return {to_int32(c, integer_product(c, "MatMul", {fa, fb}))};
}

Tensors conv_integer(const KernelContext& c, const Tensors& in) {
  const Tensor &x = input(c, in, 0), &w = input(c, in, 1);
  require_8bit(c, x, "x");
  require_8bit(c, w, "w");
  if (has_input(in, 2) && in[2].numel() != 1)
    fail("{}: x's zero point has {} elements: a scalar", c.node.label(), in[2].numel());
  Tensor fx = minus_zero_point(c, x, in, 2, 1, "x's");
  Tensor fw = minus_zero_point(c, w, in, 3, 0, "w's");
  return {to_int32(c, integer_product(c, "Conv", {fx, fw}))};
}

// ---- QLinearMatMul, QLinearConv: y = saturate(round(acc * multiplier) + y_zero_point), where
// acc is the exact integer product of the operands less their zero points and the multiplier is
// a_scale * b_scale / y_scale in the scales' type (float32, or float16 and bfloat16 from opset
// 21), as ONNX's reference computes it; the product acc * multiplier is exact here and rounded
// half to even.

// The multiplier of each output element: the `outer` scales of one input along one axis of the
// output (A's rows, a weight's output channels), the `inner` ones of the other along another
// (B's columns).
struct Requantize {
  std::vector<float> m;  // multiplier per (outer index, inner index)
  std::size_t n_outer = 1, n_inner = 1;
  std::int64_t stride_outer = 0, dim_outer = 1, stride_inner = 0, dim_inner = 1;
  double zero = 0, lo = 0, hi = 255;
  DType type = DType::UInt8;

  float at(std::int64_t i) const {
    std::size_t o = n_outer == 1 ? 0 : static_cast<std::size_t>((i / stride_outer) % dim_outer);
    std::size_t k = n_inner == 1 ? 0 : static_cast<std::size_t>((i / stride_inner) % dim_inner);
    return m[o * n_inner + k];
  }
};

// A scale's values, checked; float32 or (opset 21) float16 and bfloat16.
std::vector<double> scales(const KernelContext& c, const Tensor& s, const char* what) {
  if (!is_floating(s.dtype()) || s.dtype() == DType::Float64)
    throw Unsupported(fmt::format("{}: {} is {} (float32, float16 or bfloat16 scales)",
                                  c.node.label(), what, dtype_name(s.dtype())));
  auto v = s.to_f64();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!(v[i] > 0) || !std::isfinite(v[i]))
      fail("{}: {} {} at {}: scales must be positive and finite", c.node.label(), what, v[i], i);
  return v;
}

// x rounded to `t`: float32, or float16 and bfloat16 through float32 (as NumPy's arithmetic on
// them, each operation computed in float32 and rounded to the type).
float round_to(DType t, float x) {
  if (t == DType::Float16) return static_cast<float>(half_bits_to_f64(f64_to_half_bits(x)));
  if (t == DType::BFloat16) return static_cast<float>(bf16_bits_to_f64(f64_to_bf16_bits(x)));
  return x;
}

// y's scale and zero point, and the outer and inner scales' products over it, for an output of
// shape `os`.
Requantize requantize(const KernelContext& c, const std::vector<double>& outer,
                      const std::vector<double>& inner, const Tensors& in, std::size_t y_scale,
                      const Shape& os, std::int64_t axis_outer, std::int64_t axis_inner) {
  Requantize r;
  const DType type = input(c, in, y_scale).dtype();
  auto ys = scales(c, input(c, in, y_scale), "y_scale");
  if (ys.size() != 1) fail("{}: y_scale has {} elements: a scalar", c.node.label(), ys.size());
  if (has_input(in, y_scale + 1)) {
    const Tensor& yz = in[y_scale + 1];
    require_8bit(c, yz, "y_zero_point");
    if (yz.numel() != 1) fail("{}: y_zero_point has {} elements", c.node.label(), yz.numel());
    r.type = yz.dtype();
    r.zero = yz.f64_at(0);
  }
  r.lo = r.type == DType::UInt8 ? 0 : -128;
  r.hi = r.type == DType::UInt8 ? 255 : 127;
  r.n_outer = outer.size();
  r.n_inner = inner.size();
  auto stride = [&](std::int64_t axis) {
    std::int64_t s = 1;
    for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < os.size(); ++d) s *= os[d];
    return s;
  };
  if (r.n_outer > 1) {
    if (axis_outer < 0 || axis_outer >= static_cast<std::int64_t>(os.size()) ||
        os[static_cast<std::size_t>(axis_outer)] != static_cast<std::int64_t>(r.n_outer))
      fail("{}: {} scales for an output of shape {}", c.node.label(), r.n_outer, shape_str(os));
    r.stride_outer = stride(axis_outer);
    r.dim_outer = static_cast<std::int64_t>(r.n_outer);
  }
  if (r.n_inner > 1) {
    if (axis_inner < 0 || axis_inner >= static_cast<std::int64_t>(os.size()) ||
        os[static_cast<std::size_t>(axis_inner)] != static_cast<std::int64_t>(r.n_inner))
      fail("{}: {} scales for an output of shape {}", c.node.label(), r.n_inner, shape_str(os));
    r.stride_inner = stride(axis_inner);
    r.dim_inner = static_cast<std::int64_t>(r.n_inner);
  }
  // In the scales' type, as ONNX's reference computes it.
  const auto y = static_cast<float>(ys[0]);
  for (double o : outer)
    for (double k : inner)
      r.m.push_back(
          round_to(type, round_to(type, static_cast<float>(o) * static_cast<float>(k)) / y));
  return r;
}

// The quantized output from the exact accumulator: acc * multiplier exact (`twin`: rounded to
// float32 first, as a float32 requantization does), rounded half to even, plus the zero point,
// saturated.
Tensor requantized(const Tensor& acc, const Requantize& r, bool twin) {
  auto v = acc.to_f64();
  for (std::int64_t i = 0; i < acc.numel(); ++i) {
    double& e = v[static_cast<std::size_t>(i)];
    double real = twin ? static_cast<double>(static_cast<float>(e) * r.at(i))
                       : e * static_cast<double>(r.at(i));
    e = std::clamp(std::nearbyint(real) + r.zero, r.lo, r.hi);
  }
  return Tensor::from_f64(v, acc.shape(), r.type);
}

Tensors qlinear_matmul(const KernelContext& c, const Tensors& in, bool twin) {
  const Tensor &a = input(c, in, 0), &b = input(c, in, 3);
  require_8bit(c, a, "a");
  require_8bit(c, b, "b");
  Tensor acc = integer_product(c, "MatMul",
                               {minus_zero_point(c, a, in, 2, row_axis(a), "a's"),
                                minus_zero_point(c, b, in, 5, -1, "b's")});
  const auto rank = acc.rank();
  auto as = scales(c, input(c, in, 1), "a_scale"), bs = scales(c, input(c, in, 4), "b_scale");
  // A's scales per row (output axis -2), B's per column (output axis -1).
  Requantize r =
      requantize(c, as, bs, in, 6, acc.shape(), b.rank() == 1 ? rank - 1 : rank - 2, rank - 1);
  return {requantized(acc, r, twin)};
}

Tensors qlinear_conv(const KernelContext& c, const Tensors& in, bool twin) {
  const Tensor &x = input(c, in, 0), &w = input(c, in, 3);
  require_8bit(c, x, "x");
  require_8bit(c, w, "w");
  Tensors operands{minus_zero_point(c, x, in, 2, 1, "x's"),
                   minus_zero_point(c, w, in, 5, 0, "w's")};
  if (has_input(in, 8)) {
    // The bias is int32, quantized with scale x_scale * w_scale and zero point 0: it adds to the
    // accumulator exactly.
    if (in[8].dtype() != DType::Int32)
      fail("{}: bias is {}, expected int32", c.node.label(), dtype_name(in[8].dtype()));
    operands.push_back(Tensor::from_f64(in[8].to_f64(), in[8].shape(), DType::Float64));
  }
  Tensor acc = integer_product(c, "Conv", operands);
  auto xs = scales(c, input(c, in, 1), "x_scale"), ws = scales(c, input(c, in, 4), "w_scale");
  if (xs.size() != 1) fail("{}: x_scale has {} elements: a scalar", c.node.label(), xs.size());
  // The weight's scales per output channel (output axis 1).
  Requantize r = requantize(c, ws, xs, in, 6, acc.shape(), 1, -1);
  return {requantized(acc, r, twin)};
}

// ---- DynamicQuantizeLinear: uint8 with the scale and zero point of x's range (0 included),
// computed in float32 as the ONNX text writes them.
struct DynamicRange {
  float scale = 0, zero = 0;
};

DynamicRange dynamic_range(const std::vector<double>& x) {
  float lo = 0, hi = 0;
  for (double v : x) {
    lo = std::min(lo, static_cast<float>(v));
    hi = std::max(hi, static_cast<float>(v));
  }
  DynamicRange r;
  r.scale = (hi - lo) / 255.0f;
  float zero = 0.0f - lo / r.scale;
  r.zero = std::clamp(std::nearbyint(zero), 0.0f, 255.0f);
  return r;
}

Tensors dynamic_quantize_linear(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  if (x.dtype() != DType::Float32)
    fail("{}: x is {}, expected float32", c.node.label(), dtype_name(x.dtype()));
  auto v = x.to_f64();
  DynamicRange r = dynamic_range(v);
  for (auto& e : v) {
    float q = static_cast<float>(e) / r.scale;
    e = std::clamp(static_cast<double>(std::nearbyint(q)) + r.zero, 0.0, 255.0);
  }
  return {Tensor::from_f64(v, x.shape(), DType::UInt8), Tensor::scalar(r.scale, DType::Float32),
          Tensor::scalar(r.zero, DType::UInt8)};
}

// NaN has no integer, and a range of 0 (x all zeros) a scale of 0: undefined in ONNX.
Undefined dynamic_quantize_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.empty() || !in[0].defined()) return "";
    auto x = in[0].to_f64();
    bool nonzero = false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i]))
        return fmt::format("{}: x is NaN at {}: its quantized value is undefined in ONNX",
                           node.label(), i);
      if (std::isinf(x[i]))
        return fmt::format("{}: x is {} at {}: the scale is infinite, undefined in ONNX",
                           node.label(), x[i], i);
      nonzero |= x[i] != 0;
    }
    if (!nonzero)
      return fmt::format("{}: x is all zeros: its scale is 0 and x / scale undefined in ONNX",
                         node.label());
    return "";
  };
  return u;
}

}  // namespace

void register_quantized_ops(OpRegistry& r) {
  const char* integer_doc = "exact: integers, the int32 accumulator exact";
  // Their data are int8 or uint8 (the ONNX text's T1 and T2), their outputs int32.
  const std::vector<DType> bytes{DType::Int8, DType::UInt8};
  r.op("MatMulInteger", Family::linear, matmul_integer)
      .dtypes(bytes)
      .error(error_models::exact(integer_doc))
      .inputs(InputRoles{{0, 1}})
      .float32_rounded();
  r.op("ConvInteger", Family::conv, conv_integer)
      .dtypes(bytes)
      .error(error_models::exact(integer_doc))
      .inputs(InputRoles{{0, 1}})
      .float32_rounded();
  const char* requant_doc =
      "exact: an integer, the accumulator times a_scale * b_scale / y_scale (float32) rounded "
      "half to even and saturated";
  const char* requant_formula =
      "the exact int32 accumulator converted to float32, times the float32 multiplier in float32, "
      "rounded half to even";
  const char* requant_better =
      "an exact product of the accumulator and the multiplier (a fixed-point multiplier of 31 "
      "bits, or float64)";
  // The node tests' weights are uint8; int8 weights are what x86 engines (and PyTorch's) take:
  // activations over their full 8 bits (their pairwise products may pass int16), and over 7 bits
  // with a weight zero point.
  const CaseInput u8_full{{}, DType::UInt8, {}, 0, 255, true},
      u8_low{{}, DType::UInt8, {}, 0, 127, true}, i8_full{{}, DType::Int8, {}, -128, 127, true};
  auto sized = [](CaseInput c, Shape s) {
    c.shape = std::move(s);
    return c;
  };
  const CaseInput u8_128{{}, DType::UInt8, {128}}, u8_64{{}, DType::UInt8, {64}},
      i8_m3{{}, DType::Int8, {-3}};
  r.op("QLinearMatMul", Family::linear,
       [](const KernelContext& c, const Tensors& in) { return qlinear_matmul(c, in, false); })
      .error(error_models::exact(requant_doc))
      .inputs(InputRoles{{0, 3}})
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return qlinear_matmul(c, in, true); },
               requant_formula, requant_better)
      .cases({{10,
               {sized(u8_full, {4, 16}), case_input::scalar(0.02), u8_128, sized(i8_full, {16, 8}),
                case_input::floats({8}, 0.005, 0.02),
                CaseInput{{8}, DType::Int8, {0, 0, 0, 0, 0, 0, 0, 0}}, case_input::scalar(0.4),
                u8_128}},
              {10,
               {sized(u8_low, {2, 3, 16}), case_input::scalar(0.05), u8_64, sized(i8_full, {16, 4}),
                case_input::scalar(0.01), i8_m3, case_input::scalar(0.5), u8_128}}});
  r.op("QLinearConv", Family::conv,
       [](const KernelContext& c, const Tensors& in) { return qlinear_conv(c, in, false); })
      .error(error_models::exact(requant_doc))
      .inputs(InputRoles{{0, 3}})
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return qlinear_conv(c, in, true); },
               requant_formula, requant_better)
      // 3x3 over 4 channels, per-channel weight scales and an int32 bias; then 7-bit activations,
      // a strided 1-D convolution with asymmetric pads.
      .cases({{10,
               {sized(u8_full, {1, 4, 6, 6}), case_input::scalar(0.02), u8_128,
                sized(i8_full, {3, 4, 3, 3}), case_input::floats({3}, 0.002, 0.01),
                CaseInput{{3}, DType::Int8, {0, 0, 0}}, case_input::scalar(0.3), u8_128,
                CaseInput{{3}, DType::Int32, {-500, 0, 1234}}},
               {{"pads", Attribute::of_ints({1, 1, 1, 1})}}},
              {10,
               {sized(u8_low, {2, 2, 9}), case_input::scalar(0.05), u8_64,
                sized(i8_full, {4, 2, 3}), case_input::scalar(0.01),
                CaseInput{{}, DType::Int8, {0}}, case_input::scalar(0.2), u8_128},
               {{"pads", Attribute::of_ints({0, 2})}, {"strides", Attribute::of_ints({2})}}}});
  r.op("DynamicQuantizeLinear", Family::elementwise, dynamic_quantize_linear)
      .error(error_models::exact(
          "exact: the scale and zero point of x's range as the ONNX text computes them in "
          "float32, x / scale rounded half to even and saturated"))
      .undefined(dynamic_quantize_undefined())
      .float32_rounded()
      .cases({{11, {case_input::floats({3, 4}, -2, 5)}, {}, 3},
              {11, {case_input::whole({2, 5})}, {}, 3}});
}

}  // namespace metaop
