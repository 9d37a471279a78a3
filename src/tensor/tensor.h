#pragma once
// A dense, contiguous, row-major tensor with shared storage. Reference kernels work on float64
// copies (to_f64 / from_f64): inputs are widened exactly and each result is rounded once to the
// output dtype.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/error.h"

namespace metaop {

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtype_of<std::int8_t>() {
  return DType::Int8;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::UInt8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtype_of<std::int16_t>() {
  return DType::Int16;
}
template <>
constexpr DType dtype_of<std::uint16_t>() {
  return DType::UInt16;
}
template <>
constexpr DType dtype_of<std::uint32_t>() {
  return DType::UInt32;
}
template <>
constexpr DType dtype_of<std::uint64_t>() {
  return DType::UInt64;
}

class Tensor {
 public:
  Tensor() = default;                // undefined: an omitted optional input
  Tensor(DType dtype, Shape shape);  // zero-filled
  // Contents undefined: for code that writes every element (no zero-filling pass first).
  static Tensor empty(DType dtype, Shape shape);
  // A tensor over memory it does not allocate: `storage` holds at least the bytes of dtype and
  // shape, and its deleter says when the last tensor over it is gone (isolated workers' outputs
  // read in place in shared memory, bindings/isolate.h).
  static Tensor over(DType dtype, Shape shape, std::shared_ptr<std::byte[]> storage);

  static Tensor from_f64(const std::vector<double>& values, Shape shape, DType dtype);
  static Tensor from_i64(const std::vector<std::int64_t>& values, Shape shape,
                         DType dtype = DType::Int64);
  static Tensor scalar(double v, DType dtype);

  bool defined() const { return buf_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t rank() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  std::int64_t dim(std::int64_t i) const;  // negative i counts from the back

  std::byte* raw() { return buf_.get(); }
  const std::byte* raw() const { return buf_.get(); }
  // The storage, to know it while it lives: tensors are not changed in place once made, so a
  // live storage stands for its contents (isolated workers keep copies by it, isolate.h).
  std::weak_ptr<const std::byte[]> storage() const { return buf_; }
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return reinterpret_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return reinterpret_cast<const T*>(raw());
  }

  double f64_at(std::int64_t i) const;
  std::vector<double> to_f64() const;
  // Integer view for index-like inputs; floating values must be integral.
  std::vector<std::int64_t> to_i64() const;
  Tensor to(DType dtype) const;        // one rounding; float -> int truncates toward zero
  Tensor reshaped(Shape shape) const;  // shares storage
  Tensor clone() const;

 private:
  void check_type(DType t) const;
  DType dtype_ = DType::Float32;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> buf_;
};

// Bool tensors read from files hold bytes other than 0 and 1 where the file says so; as C++ bool
// those are undefined: every byte becomes 0 or 1.
void normalize_bools(Tensor& t);

// Float16 / bfloat16 conversions (through Eigen's implementations).
std::uint16_t f64_to_half_bits(double v);
double half_bits_to_f64(std::uint16_t b);
std::uint16_t f64_to_bf16_bits(double v);
double bf16_bits_to_f64(std::uint16_t b);

}  // namespace metaop
