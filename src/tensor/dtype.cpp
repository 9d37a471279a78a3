#include "tensor/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "tensor/error.h"

namespace metaop {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
    case DType::UInt64:
      return 8;
    case DType::Float32:
    case DType::Int32:
    case DType::UInt32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16:
    case DType::UInt16:
      return 2;
    case DType::Int8:
    case DType::UInt8:
    case DType::Bool:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
    case DType::Int16:
      return "int16";
    case DType::UInt16:
      return "uint16";
    case DType::UInt32:
      return "uint32";
    case DType::UInt64:
      return "uint64";
  }
  return "?";
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_unsigned(DType t) {
  return t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

const std::vector<DType>& integer_dtypes() {
  static const std::vector<DType> all{DType::Int8,  DType::Int16,  DType::Int32,  DType::Int64,
                                      DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64};
  return all;
}

double integer_lowest(DType t) {
  switch (t) {
    case DType::Int8:
      return -128;
    case DType::Int16:
      return -32768;
    case DType::Int32:
      return -2147483648.0;
    case DType::Int64:
      return -9223372036854775808.0;
    default:  // bool and the unsigned types
      return 0;
  }
}

double integer_largest(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::UInt8:
      return 255;
    case DType::Int8:
      return 127;
    case DType::Int16:
      return 32767;
    case DType::UInt16:
      return 65535;
    case DType::Int32:
      return 2147483647.0;
    case DType::UInt32:
      return 4294967295.0;
    case DType::UInt64:
      return 18446744073709549568.0;  // the largest double below 2^64
    default:                          // int64: the largest double below 2^63
      return 9223372036854774784.0;
  }
}

std::optional<DType> dtype_from_onnx(int onnx_type) {
  using P = onnx::TensorProto;
  switch (onnx_type) {
    case P::FLOAT:
      return DType::Float32;
    case P::DOUBLE:
      return DType::Float64;
    case P::FLOAT16:
      return DType::Float16;
    case P::BFLOAT16:
      return DType::BFloat16;
    case P::INT64:
      return DType::Int64;
    case P::INT32:
      return DType::Int32;
    case P::INT8:
      return DType::Int8;
    case P::UINT8:
      return DType::UInt8;
    case P::BOOL:
      return DType::Bool;
    case P::INT16:
      return DType::Int16;
    case P::UINT16:
      return DType::UInt16;
    case P::UINT32:
      return DType::UInt32;
    case P::UINT64:
      return DType::UInt64;
    default:
      return std::nullopt;
  }
}

int dtype_to_onnx(DType t) {
  using P = onnx::TensorProto;
  switch (t) {
    case DType::Float32:
      return P::FLOAT;
    case DType::Float64:
      return P::DOUBLE;
    case DType::Float16:
      return P::FLOAT16;
    case DType::BFloat16:
      return P::BFLOAT16;
    case DType::Int64:
      return P::INT64;
    case DType::Int32:
      return P::INT32;
    case DType::Int8:
      return P::INT8;
    case DType::UInt8:
      return P::UINT8;
    case DType::Bool:
      return P::BOOL;
    case DType::Int16:
      return P::INT16;
    case DType::UInt16:
      return P::UINT16;
    case DType::UInt32:
      return P::UINT32;
    case DType::UInt64:
      return P::UINT64;
  }
  return P::UNDEFINED;
}

std::string onnx_type_name(int onnx_type) {
  if (onnx::TensorProto_DataType_IsValid(onnx_type))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(onnx_type));
  return fmt::format("type#{}", onnx_type);
}

std::int64_t shape_numel(const Shape& s) {
  // Every product of dims is checked: a wrapped count (say [4, 2^62 + 1] -> 4) would size a
  // buffer far smaller than the loops over the shape go.
  std::int64_t n = 1;
  bool overflow = false;
  for (auto d : s) {
    if (d < 0) fail("negative dimension {} in shape {}", d, shape_str(s));
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  // A zero dim makes the count 0 whatever came before; otherwise the wrap stands.
  if (overflow && std::find(s.begin(), s.end(), 0) == s.end())
    fail("shape {} has more than 2^63 elements", shape_str(s));
  return overflow ? 0 : n;
}

std::int64_t shape_nbytes(const Shape& s, DType t) {
  std::int64_t n = shape_numel(s), bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(t)), &bytes))
    fail("shape {} of {} takes more than 2^63 bytes", shape_str(s), dtype_name(t));
  return bytes;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string index_str(const Shape& s, std::int64_t flat) {
  std::vector<std::int64_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? flat % s[d] : 0;
    flat = s[d] ? flat / s[d] : 0;
  }
  return shape_str(idx);
}

}  // namespace metaop
