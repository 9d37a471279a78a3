#include "tensor/tensor_proto.h"

#include <fmt/format.h>
#include <onnx/onnx-data_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tensor/files.h"
#include "tensor/text.h"

namespace metaop {

namespace {

std::int64_t parse_count(const std::string& v, const std::string& key, const std::string& what) {
  std::int64_t n = 0;
  if (v.empty() || v.size() > 19)
    fail("{}: external data {} '{}' is not a byte count", what, key, printable(v, 40));
  for (char c : v) {
    if (c < '0' || c > '9')
      fail("{}: external data {} '{}' is not a byte count", what, key, printable(v, 40));
    n = n * 10 + (c - '0');
  }
  return n;
}

// External data must lie inside the model's folder (confined_path) in a regular file holding
// the declared bytes; the sizes are checked before the tensor is allocated.
Tensor read_external(const onnx::TensorProto& p, const std::string& base_dir,
                     const std::string& what, DType dtype, const Shape& shape,
                     std::int64_t nbytes) {
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = parse_count(kv.value(), "offset", what);
    if (kv.key() == "length") length = parse_count(kv.value(), "length", what);
  }
  if (location.empty()) fail("{}: external data without a location", what);
  std::string path = confined_path(base_dir, location, what + ": external data");
  InputFile in(path, what + ": external data");
  if (length >= 0 && length != nbytes)
    fail("{}: external data length {} does not match {} bytes of {} {}", what, length, nbytes,
         dtype_name(dtype), shape_str(shape));
  if (offset > in.size() || nbytes > in.size() - offset)
    fail("{}: external data file {} is too short (need {} bytes at offset {}, it has {})", what,
         path, nbytes, offset, in.size());
  Tensor t = Tensor::empty(dtype, shape);
  if (nbytes) in.read_at(offset, t.raw(), nbytes);
  if (dtype == DType::Bool) normalize_bools(t);
  return t;
}

template <typename Field, typename Store>
void copy_field(const Field& f, Store store) {
  for (int i = 0; i < f.size(); ++i) store(i, f.Get(i));
}

// The number of values the typed field of this dtype holds.
int typed_field_size(const onnx::TensorProto& p, DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return p.float_data_size();
    case DType::Float64:
      return p.double_data_size();
    case DType::Int64:
      return p.int64_data_size();
    case DType::UInt32:
    case DType::UInt64:
      return p.uint64_data_size();
    default:
      return p.int32_data_size();
  }
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& what) {
  auto dtype = dtype_from_onnx(p.data_type());
  if (!dtype)
    throw Unsupported(
        fmt::format("{}: unsupported tensor element type {}", what, onnx_type_name(p.data_type())));
  if (static_cast<std::size_t>(p.dims_size()) > kMaxRank)
    fail("{}: {} dimensions (MetaOp reads tensors of rank up to {})", what, p.dims_size(),
         kMaxRank);
  Shape shape(p.dims().begin(), p.dims().end());
  for (auto d : shape)
    if (d < 0) fail("{}: negative dimension in {}", what, shape_str(shape));
  std::int64_t nbytes = 0;
  try {
    nbytes = shape_nbytes(shape, *dtype);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  // Declared sizes are checked against the bytes present before anything is allocated.
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    return read_external(p, base_dir, what, *dtype, shape, nbytes);
  if (p.has_raw_data()) {
    if (static_cast<std::int64_t>(p.raw_data().size()) != nbytes)
      fail("{}: raw_data has {} bytes, {} {} needs {}", what, p.raw_data().size(),
           dtype_name(*dtype), shape_str(shape), nbytes);
    Tensor t = Tensor::empty(*dtype, shape);
    if (nbytes) std::memcpy(t.raw(), p.raw_data().data(), static_cast<std::size_t>(nbytes));
    if (*dtype == DType::Bool) normalize_bools(t);
    return t;
  }
  if (std::int64_t n = shape_numel(shape); typed_field_size(p, *dtype) != n)
    fail("{}: {} values for shape {}", what, typed_field_size(p, *dtype), shape_str(shape));
  Tensor t = Tensor::empty(*dtype, shape);
  switch (*dtype) {
    case DType::Float32:
      copy_field(p.float_data(), [&](int i, float v) { t.data<float>()[i] = v; });
      break;
    case DType::Float64:
      copy_field(p.double_data(), [&](int i, double v) { t.data<double>()[i] = v; });
      break;
    case DType::Int64:
      copy_field(p.int64_data(), [&](int i, std::int64_t v) { t.data<std::int64_t>()[i] = v; });
      break;
    case DType::UInt32:
      copy_field(p.uint64_data(), [&](int i, std::uint64_t v) {
        t.data<std::uint32_t>()[i] = static_cast<std::uint32_t>(v);
      });
      break;
    case DType::UInt64:
      copy_field(p.uint64_data(), [&](int i, std::uint64_t v) { t.data<std::uint64_t>()[i] = v; });
      break;
    default:
      // int32_data carries int32, int16, uint16, int8, uint8, bool, and the bits of float16 /
      // bfloat16.
      copy_field(p.int32_data(), [&](int i, std::int32_t v) {
        switch (*dtype) {
          case DType::Int32:
            t.data<std::int32_t>()[i] = v;
            break;
          case DType::Int8:
            t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v);
            break;
          case DType::UInt8:
            t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
            break;
          case DType::Bool:
            t.data<bool>()[i] = v != 0;
            break;
          case DType::Int16:
            t.data<std::int16_t>()[i] = static_cast<std::int16_t>(v);
            break;
          default:
            reinterpret_cast<std::uint16_t*>(t.raw())[i] = static_cast<std::uint16_t>(v);
        }
      });
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(dtype_to_onnx(t.dtype()));
  for (auto d : t.shape()) p->add_dims(d);
  p->set_raw_data(std::string(reinterpret_cast<const char*>(t.raw()), t.nbytes()));
}

Tensor read_tensor_pb(const std::string& path, std::string* name) {
  std::string bytes = InputFile(path).read_all();
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes))
    fail("{}: not a valid ONNX TensorProto (corrupt or truncated)", path);
  if (name) *name = p.name();
  return tensor_from_proto(p, std::filesystem::path(path).parent_path().string(), path);
}

StringTensor string_tensor_from_proto(const onnx::TensorProto& p, const std::string& what) {
  if (p.data_type() != onnx::TensorProto::STRING)
    fail("{}: a tensor of {}, not of strings", what, onnx_type_name(p.data_type()));
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    throw Unsupported(fmt::format("{}: string tensors in external data are not read", what));
  StringTensor t;
  t.shape.assign(p.dims().begin(), p.dims().end());
  if (t.shape.size() > kMaxRank) fail("{}: rank {} passes {}", what, t.shape.size(), kMaxRank);
  const std::int64_t n = shape_numel(t.shape);
  if (n != p.string_data_size())
    fail("{}: shape {} holds {} strings, the tensor has {}", what, shape_str(t.shape), n,
         p.string_data_size());
  t.values.assign(p.string_data().begin(), p.string_data().end());
  return t;
}

StringTensor read_string_tensor_pb(const std::string& path) {
  onnx::TensorProto p;
  if (!p.ParseFromString(InputFile(path).read_all()))
    fail("{}: not a valid ONNX TensorProto (corrupt or truncated)", path);
  return string_tensor_from_proto(p, path);
}

CompositeValue read_composite_pb(const std::string& path, bool optional, bool sequence) {
  const std::string bytes = InputFile(path).read_all();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  CompositeValue v;
  v.optional = optional;
  v.sequence = sequence;
  auto read_sequence = [&](const onnx::SequenceProto& s) {
    if (s.elem_type() != onnx::SequenceProto::TENSOR &&
        s.elem_type() != onnx::SequenceProto::UNDEFINED)
      throw Unsupported(fmt::format(
          "{}: '{}' is a sequence of {} (MetaOp reads sequences of "
          "tensors)",
          path, printable(s.name()), onnx::SequenceProto::DataType_Name(s.elem_type())));
    for (const auto& t : s.tensor_values()) v.tensors.push_back(tensor_from_proto(t, dir, path));
  };
  if (optional) {
    onnx::OptionalProto p;
    if (!p.ParseFromString(bytes))
      fail("{}: not a valid ONNX OptionalProto (corrupt or truncated)", path);
    if (p.has_sequence_value()) {
      v.sequence = true;
      read_sequence(p.sequence_value());
    } else if (p.has_tensor_value()) {
      v.sequence = false;
      v.tensors.push_back(tensor_from_proto(p.tensor_value(), dir, path));
    } else if (p.has_sparse_tensor_value() || p.has_map_value() || p.has_optional_value()) {
      throw Unsupported(fmt::format(
          "{}: '{}' holds {} (MetaOp reads optional tensors and "
          "sequences of tensors)",
          path, printable(p.name()), onnx::OptionalProto::DataType_Name(p.elem_type())));
    } else {
      v.has = false;
    }
    return v;
  }
  onnx::SequenceProto s;
  if (!s.ParseFromString(bytes))
    fail("{}: not a valid ONNX SequenceProto (corrupt or truncated)", path);
  read_sequence(s);
  return v;
}

void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  std::ofstream out(path, std::ios::binary);
  if (!out || !p.SerializeToOstream(&out)) fail("{}: write failed", path);
}

}  // namespace metaop
