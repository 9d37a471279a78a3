#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metaop {

enum class DType : std::uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int64,
  Int32,
  Int8,
  UInt8,
  Bool,
  Int16,
  UInt16,
  UInt32,
  UInt64  // values past 2^53 are exact where a kernel moves them, not through float64 arithmetic
};

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_floating(DType t);
bool is_unsigned(DType t);  // uint8 to uint64 (bool is neither)
// The integer dtypes, int8 to int64 and uint8 to uint64.
const std::vector<DType>& integer_dtypes();
// The least and greatest value of an integer or bool dtype, as doubles (int64's and uint64's
// greatest: the largest double below 2^63 and 2^64, which they can hold).
double integer_lowest(DType t);
double integer_largest(DType t);
// ONNX TensorProto::DataType <-> DType; nullopt for types MetaOp does not handle.
std::optional<DType> dtype_from_onnx(int onnx_type);
int dtype_to_onnx(DType t);
std::string onnx_type_name(int onnx_type);

using Shape = std::vector<std::int64_t>;
// The highest rank MetaOp reads from a file (NumPy's limit too): a header may claim 100,000
// dims, and per-element loops over the dims would crawl.
constexpr std::size_t kMaxRank = 64;
// Element count; fails on a negative dim and on a count past int64 (naming the shape).
std::int64_t shape_numel(const Shape& s);
// Bytes of a tensor of this shape and dtype; fails where they pass int64.
std::int64_t shape_nbytes(const Shape& s, DType t);
std::string shape_str(const Shape& s);
// Multi-index of a flat row-major index, "[0, 3, 1, 2]".
std::string index_str(const Shape& s, std::int64_t flat);

}  // namespace metaop
