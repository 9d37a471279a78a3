#include "tensor/tensor.h"

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/heap.h"

namespace metaop {

namespace {

template <typename I>
I saturate_to_int(double v) {
  // float -> int truncates toward zero; NaN becomes 0 and out-of-range values saturate so that
  // the conversion is defined for every input (C++ leaves it undefined). The bounds as doubles
  // round up for int64 and uint64 (2^63, 2^64), so ">=" catches every value past the type.
  if (std::isnan(v)) return 0;
  double t = std::trunc(v);
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (t <= lo) return std::numeric_limits<I>::min();
  if (t >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

void store(std::byte* base, DType t, std::int64_t i, double v) {
  switch (t) {
    case DType::Float32:
      reinterpret_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::Float64:
      reinterpret_cast<double*>(base)[i] = v;
      break;
    case DType::Float16:
      reinterpret_cast<std::uint16_t*>(base)[i] = f64_to_half_bits(v);
      break;
    case DType::BFloat16:
      reinterpret_cast<std::uint16_t*>(base)[i] = f64_to_bf16_bits(v);
      break;
    case DType::Int64:
      reinterpret_cast<std::int64_t*>(base)[i] = saturate_to_int<std::int64_t>(v);
      break;
    case DType::Int32:
      reinterpret_cast<std::int32_t*>(base)[i] = saturate_to_int<std::int32_t>(v);
      break;
    case DType::Int8:
      reinterpret_cast<std::int8_t*>(base)[i] = saturate_to_int<std::int8_t>(v);
      break;
    case DType::UInt8:
      reinterpret_cast<std::uint8_t*>(base)[i] = saturate_to_int<std::uint8_t>(v);
      break;
    case DType::Bool:
      reinterpret_cast<bool*>(base)[i] = (v != 0.0);
      break;
    case DType::Int16:
      reinterpret_cast<std::int16_t*>(base)[i] = saturate_to_int<std::int16_t>(v);
      break;
    case DType::UInt16:
      reinterpret_cast<std::uint16_t*>(base)[i] = saturate_to_int<std::uint16_t>(v);
      break;
    case DType::UInt32:
      reinterpret_cast<std::uint32_t*>(base)[i] = saturate_to_int<std::uint32_t>(v);
      break;
    case DType::UInt64:
      reinterpret_cast<std::uint64_t*>(base)[i] = saturate_to_int<std::uint64_t>(v);
      break;
  }
}

double load(const std::byte* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::Float32:
      return reinterpret_cast<const float*>(base)[i];
    case DType::Float64:
      return reinterpret_cast<const double*>(base)[i];
    case DType::Float16:
      return half_bits_to_f64(reinterpret_cast<const std::uint16_t*>(base)[i]);
    case DType::BFloat16:
      return bf16_bits_to_f64(reinterpret_cast<const std::uint16_t*>(base)[i]);
    case DType::Int64:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(base)[i]);
    case DType::Int32:
      return reinterpret_cast<const std::int32_t*>(base)[i];
    case DType::Int8:
      return reinterpret_cast<const std::int8_t*>(base)[i];
    case DType::UInt8:
      return reinterpret_cast<const std::uint8_t*>(base)[i];
    case DType::Bool:  // as bytes: a file may hold values other than 0 and 1
      return reinterpret_cast<const std::uint8_t*>(base)[i] != 0 ? 1.0 : 0.0;
    case DType::Int16:
      return reinterpret_cast<const std::int16_t*>(base)[i];
    case DType::UInt16:
      return reinterpret_cast<const std::uint16_t*>(base)[i];
    case DType::UInt32:
      return reinterpret_cast<const std::uint32_t*>(base)[i];
    case DType::UInt64:
      return static_cast<double>(reinterpret_cast<const std::uint64_t*>(base)[i]);
  }
  return 0.0;
}

}  // namespace

namespace {
// double -> float rounded to odd: when the conversion is inexact, the result is the neighbour
// whose last mantissa bit is 1. A following round-to-nearest to any format with at least two
// fewer mantissa bits (half, bfloat16) then equals one direct rounding of the double.
float to_float_round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}
}  // namespace

std::uint16_t f64_to_half_bits(double v) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(to_float_round_to_odd(v)));
}
double half_bits_to_f64(std::uint16_t b) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(b));
}
std::uint16_t f64_to_bf16_bits(double v) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(to_float_round_to_odd(v)));
}
double bf16_bits_to_f64(std::uint16_t b) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b));
}

namespace {
// Sizes are checked before anything is allocated: the element count for overflow, the bytes
// against the memory budget (--max-memory).
std::int64_t checked_nbytes(DType dtype, const Shape& shape) {
  std::int64_t bytes = shape_nbytes(shape, dtype);
  if (bytes >= (std::int64_t{1} << 20))
    check_budget(bytes,
                 fmt::format("a {} tensor of shape {}", dtype_name(dtype), shape_str(shape)));
  return bytes;
}
}  // namespace

void normalize_bools(Tensor& t) {
  auto* p = reinterpret_cast<std::uint8_t*>(t.raw());
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  auto bytes = checked_nbytes(dtype_, shape_);
  numel_ = shape_numel(shape_);
  buf_ = std::shared_ptr<std::byte[]>(new std::byte[static_cast<std::size_t>(bytes)]());
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  auto bytes = checked_nbytes(t.dtype_, t.shape_);
  t.numel_ = shape_numel(t.shape_);
  t.buf_ = std::shared_ptr<std::byte[]>(new std::byte[static_cast<std::size_t>(bytes)]);
  return t;
}

Tensor Tensor::over(DType dtype, Shape shape, std::shared_ptr<std::byte[]> storage) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  checked_nbytes(t.dtype_, t.shape_);
  t.numel_ = shape_numel(t.shape_);
  t.buf_ = std::move(storage);
  return t;
}

Tensor Tensor::from_f64(const std::vector<double>& values, Shape shape, DType dtype) {
  Tensor t = empty(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel_)
    fail("internal: {} values for shape {}", values.size(), shape_str(t.shape_));
  if (dtype == DType::Float64) {
    if (t.nbytes()) std::memcpy(t.raw(), values.data(), t.nbytes());  // null data when empty
  } else if (dtype == DType::Float32) {  // the common case, without a switch per element
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel_; ++i) p[i] = static_cast<float>(values[i]);
  } else {
    for (std::int64_t i = 0; i < t.numel_; ++i) store(t.raw(), dtype, i, values[i]);
  }
  return t;
}

Tensor Tensor::from_i64(const std::vector<std::int64_t>& values, Shape shape, DType dtype) {
  Tensor t = empty(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel_)
    fail("internal: {} values for shape {}", values.size(), shape_str(t.shape_));
  if (dtype == DType::Int64) {
    if (t.nbytes()) std::memcpy(t.raw(), values.data(), t.nbytes());
  } else {
    for (std::int64_t i = 0; i < t.numel_; ++i)
      store(t.raw(), dtype, i, static_cast<double>(values[i]));
  }
  return t;
}

Tensor Tensor::scalar(double v, DType dtype) {
  return from_f64({v}, {}, dtype);
}

std::int64_t Tensor::dim(std::int64_t i) const {
  std::int64_t r = rank();
  if (i < -r || i >= r) fail("dimension {} out of range for rank {}", i, r);
  return shape_[i < 0 ? i + r : i];
}

void Tensor::check_type(DType t) const {
  if (!defined()) fail("internal: access to an undefined tensor");
  if (t != dtype_)
    fail("internal: tensor is {}, accessed as {}", dtype_name(dtype_), dtype_name(t));
}

double Tensor::f64_at(std::int64_t i) const {
  return load(raw(), dtype_, i);
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(numel_);
  if (dtype_ == DType::Float64) {
    if (nbytes()) std::memcpy(out.data(), raw(), nbytes());
  } else if (dtype_ == DType::Float32) {  // the common case, without a switch per element
    const float* p = data<float>();
    for (std::int64_t i = 0; i < numel_; ++i) out[i] = p[i];
  } else {
    for (std::int64_t i = 0; i < numel_; ++i) out[i] = load(raw(), dtype_, i);
  }
  return out;
}

std::vector<std::int64_t> Tensor::to_i64() const {
  std::vector<std::int64_t> out(numel_);
  if (dtype_ == DType::Int64) {
    if (nbytes()) std::memcpy(out.data(), raw(), nbytes());
    return out;
  }
  if (dtype_ == DType::UInt64) {  // exact, not through a double
    const auto* p = data<std::uint64_t>();
    for (std::int64_t i = 0; i < numel_; ++i) {
      if (p[i] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("uint64 value {} is past int64, which indices and shapes are", p[i]);
      out[i] = static_cast<std::int64_t>(p[i]);
    }
    return out;
  }
  for (std::int64_t i = 0; i < numel_; ++i) {
    double v = load(raw(), dtype_, i);
    if (v != std::trunc(v)) fail("expected integer values, found {}", v);
    out[i] = static_cast<std::int64_t>(v);
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(dtype, shape_);
  if (dtype_ == DType::Int64) {
    // Keep int64 values exact where the target is an integer type.
    const auto* src = data<std::int64_t>();
    for (std::int64_t i = 0; i < numel_; ++i) {
      if (dtype == DType::Int32)
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(src[i]);
      else
        store(t.raw(), dtype, i, static_cast<double>(src[i]));
    }
    return t;
  }
  for (std::int64_t i = 0; i < numel_; ++i) store(t.raw(), dtype, i, load(raw(), dtype_, i));
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel_)
    fail("cannot reshape {} ({} elements) to {}", shape_str(shape_), numel_, shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

}  // namespace metaop
