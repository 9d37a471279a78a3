#include "bindings/torch/aten_convert.h"

#include <ATen/ops/empty.h>
#include <fmt/format.h>

#include <cstring>

#include "tensor/error.h"

namespace metaop {

at::ScalarType to_aten(DType t) {
  switch (t) {
    case DType::Float32:
      return at::kFloat;
    case DType::Float64:
      return at::kDouble;
    case DType::Float16:
      return at::kHalf;
    case DType::BFloat16:
      return at::kBFloat16;
    case DType::Int64:
      return at::kLong;
    case DType::Int32:
      return at::kInt;
    case DType::Int8:
      return at::kChar;
    case DType::UInt8:
      return at::kByte;
    case DType::Bool:
      return at::kBool;
    case DType::Int16:
      return at::kShort;
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
      break;  // LibTorch 1.13 has none; 2.x has them as "limited support" shell types
  }
  throw Unsupported(fmt::format("ATen kernels take no {} tensors", dtype_name(t)));
}

DType from_aten(at::ScalarType t, const std::string& who) {
  switch (t) {
    case at::kFloat:
      return DType::Float32;
    case at::kDouble:
      return DType::Float64;
    case at::kHalf:
      return DType::Float16;
    case at::kBFloat16:
      return DType::BFloat16;
    case at::kLong:
      return DType::Int64;
    case at::kInt:
      return DType::Int32;
    case at::kChar:
      return DType::Int8;
    case at::kByte:
      return DType::UInt8;
    case at::kBool:
      return DType::Bool;
    case at::kShort:
      return DType::Int16;
    default:
      break;
  }
  throw Unsupported(fmt::format("{}: ATen produced dtype {}", who, c10::toString(t)));
}

at::Tensor to_aten(const Tensor& t) {
  if (!t.defined()) return at::Tensor();
  std::vector<std::int64_t> dims(t.shape().begin(), t.shape().end());
  auto out = at::empty(dims, at::TensorOptions().dtype(to_aten(t.dtype())));
  if (t.nbytes()) std::memcpy(out.data_ptr(), t.raw(), t.nbytes());
  return out;
}

Tensor from_aten(const at::Tensor& a, const std::string& who) {
  if (!a.defined()) return Tensor();
  at::Tensor c = a.detach().contiguous();
  Tensor t =
      Tensor::empty(from_aten(c.scalar_type(), who), Shape(c.sizes().begin(), c.sizes().end()));
  if (t.nbytes()) std::memcpy(t.raw(), c.data_ptr(), t.nbytes());
  return t;
}

}  // namespace metaop
