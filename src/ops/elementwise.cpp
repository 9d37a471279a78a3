// Element-wise meta operators other than the unary and binary tables: the variadic Max, Min,
// Sum and Mean, Where, Clip, Cast and CastLike, Dropout, IsNaN and IsInf -- one block each.
// Each reference computes in float64 on exactly widened inputs and rounds once to the output.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/danger.h"
#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// ---- Max, Min, Sum, Mean: any number of broadcasting inputs.

double nan_max(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
}
double nan_min(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
}

ReferenceForward variadic(double (*combine)(double, double), bool mean) {
  return [=](const KernelContext& c, const Tensors& in) {
    if (in.empty()) fail("{}: needs at least one input", c.node.label());
    check_same_dtype(c, in);
    std::vector<const Tensor*> ins;
    for (const auto& t : in) ins.push_back(&t);
    std::size_t n = ins.size();
    return Tensors{broadcast_apply(c, ins, in[0].dtype(), [&](const double* v) {
      double acc = v[0];
      for (std::size_t k = 1; k < n; ++k) acc = combine(acc, v[k]);
      return mean ? acc / static_cast<double>(n) : acc;
    })};
  };
}

// Each input gets its share, summed back over broadcasting: all of it (Sum), 1/n (Mean), or,
// for Max and Min, the first input that equals the result. With `f32`, the shares and their sums
// in float32, in that order (the VJP's float32 twin).
Tensors variadic_grads(bool select, bool mean, const Tensors& in, const Tensors& out,
                       const Tensors& grads, const SumOrder* f32) {
  const Shape& os = out[0].shape();
  auto g = grad_of(grads, out, 0), y = out[0].to_f64();
  std::vector<std::vector<double>> parts(in.size(), std::vector<double>(g.size(), 0.0));
  std::vector<std::vector<double>> vals(in.size());
  std::vector<std::vector<std::int64_t>> maps(in.size());
  for (std::size_t k = 0; k < in.size(); ++k) {
    vals[k] = in[k].to_f64();
    maps[k] = broadcast_map(in[k].shape(), os);
  }
  auto n = static_cast<double>(in.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!select) {
      double share = !mean ? g[i]
                     : f32 ? static_cast<float>(g[i]) / static_cast<float>(n)
                           : g[i] / n;
      for (auto& p : parts) p[i] = share;
      continue;
    }
    for (std::size_t k = 0; k < in.size(); ++k)
      if (vals[k][maps[k][i]] == y[i]) {
        parts[k][i] = g[i];
        break;
      }
  }
  Tensors res(in.size());
  for (std::size_t k = 0; k < in.size(); ++k)
    if (is_floating(in[k].dtype()))
      res[k] = grad_like(f32 ? unbroadcast_f32(parts[k], os, in[k].shape(), *f32)
                             : unbroadcast(parts[k], os, in[k].shape()),
                         in[k]);
  return res;
}

// Declares the variadic op's VJP and its float32 twin.
OpBuilder with_variadic_vjp(OpBuilder b, bool select, bool mean,
                            std::source_location where = std::source_location::current()) {
  b.vjp([=](const KernelContext&, const Tensors& in, const Tensors& out,
            const Tensors& grads) { return variadic_grads(select, mean, in, out, grads, nullptr); },
        where);
  b.vjp_float32(
      [=](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads,
          SumOrder order) { return variadic_grads(select, mean, in, out, grads, &order); },
      select ? "g to the first input equal to the result, summed over broadcasting"
             : (mean ? "g / n to every input, summed over broadcasting"
                     : "g to every input, summed over broadcasting"),
      "a wider accumulator for the sums over broadcasting", where);
  return b;
}

// Variadic Max / Min at a tie: the output's gradient may go to any of the tied inputs, or be
// split among them.
SubgradientFn variadic_tie_subgradient() {
  return [](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    const Shape& os = out[0].shape();
    auto g = grad_of(grads, out, 0), y = out[0].to_f64();
    std::vector<std::vector<double>> vals(in.size());
    std::vector<std::vector<std::int64_t>> maps(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) {
      vals[k] = in[k].to_f64();
      maps[k] = broadcast_map(in[k].shape(), os);
    }
    std::vector<std::vector<double>> lo(in.size(), std::vector<double>(g.size(), 0.0)), hi = lo;
    bool any = false;
    for (std::size_t i = 0; i < g.size(); ++i) {
      int tied = 0;
      for (std::size_t k = 0; k < in.size(); ++k) tied += vals[k][maps[k][i]] == y[i];
      bool first = true;
      for (std::size_t k = 0; k < in.size(); ++k) {
        if (vals[k][maps[k][i]] != y[i]) continue;
        if (tied > 1) {
          lo[k][i] = std::min(0.0, g[i]);
          hi[k][i] = std::max(0.0, g[i]);
        } else if (first) {
          lo[k][i] = hi[k][i] = g[i];
        }
        first = false;
      }
      any = any || tied > 1;
    }
    if (!any) return sets;
    for (std::size_t k = 0; k < in.size(); ++k)
      if (is_floating(in[k].dtype()))
        sets[k] = {
            unbroadcast(lo[k], os, in[k].shape()), unbroadcast(hi[k], os, in[k].shape()), {}};
    return sets;
  };
}

double count_inputs(const KernelContext&, const Tensors& in) {
  return static_cast<double>(in.size());
}

void register_variadic(OpRegistry& r) {
  using namespace error_models;
  Domain data_inputs({0, 1, 2}, [](const KernelContext&) { return std::vector<double>{0}; });
  with_variadic_vjp(r.op("Max", Family::elementwise, variadic(nan_max, false)), true, false)
      .error(exact())
      .subgradient(variadic_tie_subgradient())
      .domain(data_inputs)
      .inputs(InputRoles::combine())
      .cases({{13, {case_input::floats({2, 3, 4, 5}), case_input::floats({2, 3, 4, 5})}},
              {13, {case_input::whole({2, 3, 4, 5}), case_input::whole({2, 3, 4, 5})}}});
  with_variadic_vjp(r.op("Min", Family::elementwise, variadic(nan_min, false)), true, false)
      .error(exact())
      .subgradient(variadic_tie_subgradient())
      .domain(data_inputs)
      .inputs(InputRoles::combine())
      .cases({{13, {case_input::floats({2, 3, 4, 5}), case_input::floats({2, 3, 4, 5})}},
              {13, {case_input::whole({2, 3, 4, 5}), case_input::whole({2, 3, 4, 5})}}});
  with_variadic_vjp(
      r.op("Sum", Family::elementwise, variadic([](double a, double b) { return a + b; }, false)),
      false, false)
      .error(accumulation(count_inputs, "kappa(#inputs) * sum|x_k|", 1))
      .domain(data_inputs)
      .danger({danger::output_overflow()})
      .inputs(InputRoles::combine())
      .cases({{13, {case_input::floats({2, 3, 4, 5}), case_input::floats({2, 3, 4, 5})}}});
  with_variadic_vjp(
      r.op("Mean", Family::elementwise, variadic([](double a, double b) { return a + b; }, true)),
      false, true)
      .error(accumulation(count_inputs, "kappa(#inputs) * mean|x_k|", 2))
      .domain(data_inputs)
      .inputs(InputRoles::combine())
      .cases({{13, {case_input::floats({2, 3, 4, 5}), case_input::floats({2, 3, 4, 5})}}});
}

// ---- Where: cond ? x : y, broadcast.

// Where's VJP: g to the branch the condition takes, summed back over broadcasting (with `f32`,
// in float32 in that order).
Tensors where_grads(const Tensors& in, const Tensors& out, const Tensors& grads,
                    const SumOrder* f32) {
  const Shape& os = out[0].shape();
  auto g = grad_of(grads, out, 0), cond = in[0].to_f64();
  auto mc = broadcast_map(in[0].shape(), os);
  std::vector<double> gx(g.size()), gy(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) (cond[mc[i]] != 0 ? gx : gy)[i] = g[i];
  auto back = [&](const std::vector<double>& part, const Tensor& like) {
    return grad_like(
        f32 ? unbroadcast_f32(part, os, like.shape(), *f32) : unbroadcast(part, os, like.shape()),
        like);
  };
  Tensors res(in.size());
  if (is_floating(in[1].dtype())) res[1] = back(gx, in[1]);
  if (is_floating(in[2].dtype())) res[2] = back(gy, in[2]);
  return res;
}

void register_where(OpRegistry& r) {
  r.op("Where", Family::elementwise,
       [](const KernelContext& c, const Tensors& in) {
         const Tensor& cond = input(c, in, 0);
         const Tensor& x = input(c, in, 1);
         const Tensor& y = input(c, in, 2);
         return Tensors{broadcast_apply(c, {&cond, &x, &y}, x.dtype(),
                                        [](const double* v) { return v[0] != 0 ? v[1] : v[2]; })};
       })
      .error(error_models::exact())
      .vjp([](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return where_grads(in, out, grads, nullptr);
      })
      .vjp_float32(
          [](const KernelContext&, const Tensors& in, const Tensors& out, const Tensors& grads,
             SumOrder order) { return where_grads(in, out, grads, &order); },
          "g to the branch the condition takes, summed over broadcasting",
          "a wider accumulator for the sums over broadcasting")
      .domain(Domain({1, 2}))
      .inputs(InputRoles::all(3));
}

// ---- Clip: bounds from attributes (before opset 11) or inputs.

Tensors clip(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto [lo, hi] = clip_bounds(c, in);
  auto v = x.to_f64();
  for (auto& e : v)
    if (!std::isnan(e)) e = std::min(std::max(e, lo), hi);
  return {Tensor::from_f64(v, x.shape(), x.dtype())};
}

// Inside the bounds the gradient passes; below or above it goes to the bound (when an input).
Tensors clip_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                 const Tensors& grads) {
  auto [lo, hi] = clip_bounds(c, in);
  auto x = in[0].to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> gx(g.size(), 0.0);
  double glo = 0, ghi = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (x[i] < lo)
      glo += g[i];
    else if (x[i] > hi)
      ghi += g[i];
    else
      gx[i] = g[i];
  }
  Tensors res(in.size());
  if (is_floating(in[0].dtype())) res[0] = grad_like(gx, in[0]);
  if (c.opset >= 11 && has_input(in, 1)) res[1] = grad_like({glo}, in[1]);
  if (c.opset >= 11 && has_input(in, 2)) res[2] = grad_like({ghi}, in[2]);
  return res;
}

// At x equal to a bound, the gradient may stay with x or go to the bound (when it is an input).
std::vector<GradientSet> clip_subgradient(const KernelContext& c, const Tensors& in,
                                          const Tensors& out, const Tensors& grads) {
  std::vector<GradientSet> sets(in.size());
  auto [lo, hi] = clip_bounds(c, in);
  if (!(lo <= hi) || !is_floating(in[0].dtype())) return sets;
  auto x = in[0].to_f64(), g = grad_of(grads, out, 0);
  GradientSet sx;
  std::array<double, 2> blo{}, bhi{};  // interval of the lower and upper bound's gradient
  bool any = false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    int b = x[i] < lo ? 0 : (x[i] > hi ? 1 : -1);
    if (b >= 0) {
      blo[b] += g[i];
      bhi[b] += g[i];
    }
    if (x[i] != lo && x[i] != hi) continue;
    if (!any) sx.lo.assign(x.size(), NAN), sx.hi.assign(x.size(), NAN);
    any = true;
    sx.lo[i] = std::min(0.0, g[i]);
    sx.hi[i] = std::max(0.0, g[i]);
    int side = x[i] == lo ? 0 : 1;
    blo[side] += std::min(0.0, g[i]);
    bhi[side] += std::max(0.0, g[i]);
  }
  if (!any) return sets;
  sets[0] = std::move(sx);
  for (int b = 0; b < 2; ++b)
    if (c.opset >= 11 && has_input(in, 1 + b) && is_floating(in[1 + b].dtype()))
      sets[1 + b] = {{blo[b]}, {bhi[b]}, {}};
  return sets;
}

void register_clip(OpRegistry& r) {
  r.op("Clip", Family::elementwise, clip)
      .error(error_models::exact())
      .vjp(clip_vjp)
      .subgradient(clip_subgradient)
      .domain(Domain({0},
                     [](const KernelContext&) {
                       return std::vector<double>{0, 6, -1, 1};
                     }))
      .cases(
          {{13,
            {case_input::floats({2, 3, 4, 5}), case_input::scalar(-0.5), case_input::scalar(0.5)}},
           {13, {case_input::whole({2, 3, 4, 5}), case_input::scalar(-1), case_input::scalar(1)}}})
      .explain({.form = ExplainForm::clamp});
}

// ---- Cast, CastLike: conversions; between floating types the gradient passes through.

// A cast to float16 or bfloat16 overflows where the value exceeds the type's range.
DangerZone narrowing_cast() {
  DangerZone narrowing = danger::output_overflow();
  narrowing.applies = [](const KernelContext& c) {
    if (!c.node.has_attr("to")) return false;  // required: the kernel fails on such a node
    auto to = dtype_from_onnx(static_cast<int>(c.node.attr_i("to")));
    return to && (*to == DType::Float16 || *to == DType::BFloat16);
  };
  return narrowing;
}

Tensors cast_vjp(const KernelContext&, const Tensors& in, const Tensors& out,
                 const Tensors& grads) {
  Tensors res(in.size());
  if (is_floating(in[0].dtype()) && is_floating(out[0].dtype()))
    res[0] = grad_like(grad_of(grads, out, 0), in[0]);
  return res;
}

// x as `to`. Between integer types the ONNX text has a value out of the target's range keep
// its low bits ("discard higher bits and reinterpret": 200 as int16 -> -56 as int8); the other
// casts round once (Tensor::to).
Tensor cast_to(const Tensor& x, DType to) {
  auto integer = [](DType t) { return !is_floating(t) && t != DType::Bool; };
  if (!integer(x.dtype()) || !integer(to) || x.dtype() == to) return x.to(to);
  // Every value as its two's-complement bits (uint64's as they are, the others exactly).
  std::vector<std::uint64_t> bits(static_cast<std::size_t>(x.numel()));
  if (x.dtype() == DType::UInt64) {
    std::copy_n(x.data<std::uint64_t>(), bits.size(), bits.begin());
  } else {
    auto v = x.to_i64();
    std::transform(v.begin(), v.end(), bits.begin(),
                   [](std::int64_t e) { return static_cast<std::uint64_t>(e); });
  }
  if (dtype_size(to) == 8) {  // int64 and uint64 hold all 64 bits
    Tensor y = Tensor::empty(to, x.shape());
    if (y.nbytes()) std::memcpy(y.raw(), bits.data(), y.nbytes());
    return y;
  }
  // Narrower: the low bits, read with the target's sign (exact in a double).
  const double span = std::ldexp(1.0, static_cast<int>(dtype_size(to) * 8));
  const std::uint64_t mask = static_cast<std::uint64_t>(span) - 1;
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    auto low = static_cast<double>(bits[i] & mask);
    v[i] = !is_unsigned(to) && low >= span / 2 ? low - span : low;
  }
  return Tensor::from_f64(v, x.shape(), to);
}

void register_casts(OpRegistry& r) {
  r.op("Cast", Family::elementwise,
       [](const KernelContext& c, const Tensors& in) {
         const Tensor& x = input(c, in, 0);
         auto to = c.node.attr_i("to");
         auto dt = dtype_from_onnx(static_cast<int>(to));
         if (!dt)
           throw Unsupported(fmt::format("{}: cast to {} is not supported", c.node.label(),
                                         onnx_type_name(static_cast<int>(to))));
         return Tensors{cast_to(x, *dt)};
       })
      .error(error_models::exact())
      .vjp(cast_vjp)
      .danger({narrowing_cast()});
  r.op("CastLike", Family::elementwise,
       [](const KernelContext& c, const Tensors& in) {
         return Tensors{cast_to(input(c, in, 0), input(c, in, 1).dtype())};
       })
      .error(error_models::exact())
      .vjp(cast_vjp);
}

// ---- Dropout: the identity in inference; in training the seeded mask, scaled by 1/(1-ratio).

Tensors dropout(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto [ratio, training] = dropout_mode(c, in);
  Tensor mask(DType::Bool, x.shape());
  if (!training || ratio == 0) {
    for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = true;
    return {x, mask};
  }
  auto keep = dropout_mask(c, x.numel(), ratio);
  auto v = x.to_f64();
  for (std::size_t i = 0; i < v.size(); ++i) {
    mask.data<bool>()[i] = keep[i];
    v[i] = keep[i] ? v[i] / (1 - ratio) : 0.0;
  }
  return {Tensor::from_f64(v, x.shape(), x.dtype()), mask};
}

void register_dropout(OpRegistry& r) {
  r.op("Dropout", Family::elementwise, dropout)
      .error(error_models::exact())
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        Tensors res(in.size());
        auto g = grad_of(grads, out, 0);
        auto [ratio, training] = dropout_mode(c, in);
        if (training && ratio > 0) {
          auto keep = dropout_mask(c, in[0].numel(), ratio);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = keep[i] ? g[i] / (1 - ratio) : 0.0;
        }
        res[0] = grad_like(g, in[0]);
        return res;
      })
      .training({.random = true});
}

// ---- IsNaN, IsInf: boolean tests.

// ---- BitwiseNot (opset 18): every bit flipped, within the integer type (unsigned: max - x).

Tensors bitwise_not(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  if (is_floating(x.dtype()) || x.dtype() == DType::Bool)
    fail("{}: BitwiseNot takes integers, not {}", c.node.label(), dtype_name(x.dtype()));
  auto v = x.to_f64();
  for (auto& e : v)
    e = is_unsigned(x.dtype()) ? integer_largest(x.dtype()) - e
                               : static_cast<double>(~static_cast<std::int64_t>(e));
  return {Tensor::from_f64(v, x.shape(), x.dtype())};
}

void register_tests(OpRegistry& r) {
  r.op("IsNaN", Family::elementwise, [](const KernelContext& c, const Tensors& in) {
     const Tensor& x = input(c, in, 0);
     auto v = x.to_f64();
     for (auto& e : v) e = std::isnan(e);
     return Tensors{Tensor::from_f64(v, x.shape(), DType::Bool)};
   }).error(error_models::exact());
  r.op("IsInf", Family::elementwise, [](const KernelContext& c, const Tensors& in) {
     const Tensor& x = input(c, in, 0);
     bool pos = attr_i(c, "detect_positive"), neg = attr_i(c, "detect_negative");
     auto v = x.to_f64();
     for (auto& e : v) e = std::isinf(e) && ((e > 0 && pos) || (e < 0 && neg));
     return Tensors{Tensor::from_f64(v, x.shape(), DType::Bool)};
   }).error(error_models::exact());
}

// ---- QuantizeLinear, DequantizeLinear: linear quantization per tensor or per axis, exact
// integers: y = saturate(round(x / scale) + zero_point), rounding half to even, and
// x = (q - zero_point) * scale.

// The scale and zero point of each element: one for the tensor (a scalar or one-element scale),
// or one per index of `axis` (opset 13 on). Blocked quantization (block_size, opset 21) is not
// implemented.
struct QuantLayout {
  std::vector<double> scale, zero;
  std::int64_t inner = 1, dim = 1;  // per axis: element i takes (i / inner) % dim
  std::size_t at(std::int64_t i) const {
    return scale.size() == 1 ? 0 : static_cast<std::size_t>((i / inner) % dim);
  }
};

QuantLayout quant_layout(const KernelContext& c, const Tensors& in, const Shape& xs) {
  if (attr_i_or(c, "block_size", 0) != 0)
    throw Unsupported(c.node.label() + ": blocked quantization (block_size)");
  QuantLayout l;
  const Tensor& scale = input(c, in, 1);
  require_float(c, scale, "scale");
  l.scale = scale.to_f64();
  l.zero = has_input(in, 2) ? in[2].to_f64() : std::vector<double>(l.scale.size(), 0.0);
  if (l.zero.size() != l.scale.size())
    fail("{}: {} zero points for {} scales", c.node.label(), l.zero.size(), l.scale.size());
  if (scale.rank() == 0 || l.scale.size() == 1) return l;
  if (scale.rank() != 1 || c.opset < 13)
    fail("{}: scale of shape {}: a scalar, or 1-D along axis (opset 13 on)", c.node.label(),
         shape_str(scale.shape()));
  const auto rank = static_cast<std::int64_t>(xs.size());
  std::int64_t axis = norm_axis(c, attr_i_or(c, "axis", 1), rank);
  l.dim = xs[static_cast<std::size_t>(axis)];
  if (static_cast<std::int64_t>(l.scale.size()) != l.dim)
    fail("{}: {} scales for axis {} of size {}", c.node.label(), l.scale.size(), axis, l.dim);
  for (std::int64_t d = axis + 1; d < rank; ++d) l.inner *= xs[static_cast<std::size_t>(d)];
  return l;
}

// The output type: the zero point's, else output_dtype (opset 21 on), else uint8.
DType quantized_type(const KernelContext& c, const Tensors& in) {
  if (has_input(in, 2)) return in[2].dtype();
  if (auto t = attr_i_or(c, "output_dtype", 0); t != 0) {
    auto dt = dtype_from_onnx(static_cast<int>(t));
    if (!dt)
      throw Unsupported(
          fmt::format("{}: output_dtype {}", c.node.label(), onnx_type_name(static_cast<int>(t))));
    return *dt;
  }
  return DType::UInt8;
}

// a / b correctly rounded to `t` (float16 and bfloat16 through float32: a double rounding that
// can differ from a direct one only where float32's quotient lies exactly between two of theirs).
double quotient_in(DType t, double a, double b) {
  if (t == DType::Float64) return a / b;
  float q = static_cast<float>(a) / static_cast<float>(b);
  if (t == DType::Float16) return half_bits_to_f64(f64_to_half_bits(q));
  if (t == DType::BFloat16) return bf16_bits_to_f64(f64_to_bf16_bits(q));
  return q;
}

Tensors quantize_linear(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  DType out = quantized_type(c, in);
  if (out != DType::UInt8 && out != DType::Int8 && out != DType::UInt16 && out != DType::Int16)
    throw Unsupported(fmt::format("{}: quantizing to {}", c.node.label(), dtype_name(out)));
  QuantLayout l = quant_layout(c, in, x.shape());
  double lo = integer_lowest(out), hi = integer_largest(out);
  // x / scale is rounded to the precision of the division before it is rounded to an integer:
  // opset 23's `precision` attribute, by default the scale's type. The older texts name no
  // precision, and ONNX's reference (and its test data) divides in the scale's type: so does
  // this one at every opset (a quotient just off x.5 can round the other way in float32).
  DType precision = input(c, in, 1).dtype();
  if (auto p = attr_i_or(c, "precision", 0); p != 0) {
    auto dt = dtype_from_onnx(static_cast<int>(p));
    if (!dt || !is_floating(*dt))
      throw Unsupported(
          fmt::format("{}: precision {}", c.node.label(), onnx_type_name(static_cast<int>(p))));
    precision = *dt;
  }
  auto v = x.to_f64();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    double& e = v[static_cast<std::size_t>(i)];
    std::size_t k = l.at(i);
    double q = quotient_in(precision, e, l.scale[k]);
    if (std::isnan(q)) fail("{}: x / scale is NaN at element {}", c.node.label(), i);
    e = std::clamp(std::nearbyint(q) + l.zero[k], lo, hi);  // nearbyint: half to even
  }
  return {Tensor::from_f64(v, x.shape(), out)};
}

Tensors dequantize_linear(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  QuantLayout l = quant_layout(c, in, x.shape());
  DType out = input(c, in, 1).dtype();
  auto v = x.to_f64();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::size_t k = l.at(i);
    v[static_cast<std::size_t>(i)] = (v[static_cast<std::size_t>(i)] - l.zero[k]) * l.scale[k];
  }
  return {Tensor::from_f64(v, x.shape(), out)};
}

// ONNX gives no integer for NaN (nor for a NaN or zero scale, which make x / scale NaN or
// infinite): such inputs are refused for every binding.
Undefined quantize_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.size() < 2 || !in[0].defined() || !in[1].defined()) return "";
    auto x = in[0].to_f64(), scale = in[1].to_f64();
    for (std::size_t i = 0; i < scale.size(); ++i)
      if (std::isnan(scale[i]) || scale[i] == 0)
        return fmt::format("{}: scale {} at {}: x / scale has no integer (undefined in ONNX)",
                           node.label(), scale[i], i);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::isnan(x[i]))
        return fmt::format("{}: x is NaN at {}: its quantized value is undefined in ONNX",
                           node.label(), i);
    return "";
  };
  return u;
}

void register_quantize(OpRegistry& r) {
  const CaseInput u8_zero{{}, DType::UInt8, {128}}, i8_zero{{}, DType::Int8, {-3}};
  r.op("QuantizeLinear", Family::elementwise, quantize_linear)
      .error(error_models::exact("exact: an integer, rounded half to even and saturated"))
      .undefined(quantize_undefined())
      // Its float32 evaluation is the reference: the quotient in the scale's type, then exact.
      .float32_rounded()
      // Whole numbers over a scale of 2 land on ties (x.5), which round to even; a scale of 0.01
      // saturates most of them.
      .cases({{13, {case_input::whole({2, 3, 4, 5}), case_input::scalar(2), u8_zero}},
              {13, {case_input::floats({2, 3, 4, 5}, -3, 3), case_input::scalar(0.01), i8_zero}},
              {13,
               {case_input::whole({2, 3, 4, 5}), case_input::floats({3}, 0.5, 2),
                CaseInput{{3}, DType::Int8, {-1, 0, 1}}}}});
  r.op("DequantizeLinear", Family::elementwise, dequantize_linear)
      .error(error_models::ulp(0.5, "0.5 ulp: q - zero_point is exact, the product rounds once"))
      .float32_rounded()
      .cases({{13,
               {CaseInput{{2, 3}, DType::UInt8, {0, 1, 127, 128, 254, 255}},
                case_input::scalar(0.0375), u8_zero}},
              {13,
               {CaseInput{{2, 3}, DType::Int8, {-128, -1, 0, 1, 100, 127}},
                case_input::floats({3}, 0.001, 2), CaseInput{{3}, DType::Int8, {-1, 0, 1}}}}});
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  register_unary_ops(r);
  register_binary_ops(r);
  register_variadic(r);
  register_where(r);
  register_clip(r);
  register_casts(r);
  register_dropout(r);
  register_tests(r);
  register_quantize(r);
  r.op("BitwiseNot", Family::elementwise, bitwise_not)
      .dtypes(integer_dtypes())
      .error(error_models::exact())
      .float32_rounded()
      .cases({{18, {CaseInput{{2, 3}, DType::Int32, {-1, 0, 5, 12, -128, 2147483647}}}},
              {18, {CaseInput{{2, 3}, DType::UInt8, {0, 1, 127, 128, 254, 255}}}}});
}

}  // namespace metaop
