#include "tensor/tensor_proto.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace metaop {

namespace {

void read_external(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what,
                   Tensor& t) {
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::stoll(kv.value());
    if (kv.key() == "length") length = std::stoll(kv.value());
  }
  if (location.empty()) fail("{}: external data without a location", what);
  auto path = std::filesystem::path(base_dir) / location;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open external data file {}", what, path.string());
  if (length >= 0 && static_cast<std::size_t>(length) != t.nbytes())
    fail("{}: external data length {} does not match {} bytes of {} {}", what, length, t.nbytes(),
         dtype_name(t.dtype()), shape_str(t.shape()));
  in.seekg(offset);
  if (!in.read(reinterpret_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes())))
    fail("{}: external data file {} is too short (need {} bytes at offset {})", what, path.string(),
         t.nbytes(), offset);
}

template <typename Field, typename Store>
void copy_field(const Field& f, Tensor& t, const std::string& what, Store store) {
  if (f.size() != t.numel())
    fail("{}: {} values for shape {}", what, f.size(), shape_str(t.shape()));
  for (int i = 0; i < f.size(); ++i) store(i, f.Get(i));
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& what) {
  auto dtype = dtype_from_onnx(p.data_type());
  if (!dtype)
    throw Unsupported(
        fmt::format("{}: unsupported tensor element type {}", what, onnx_type_name(p.data_type())));
  Shape shape(p.dims().begin(), p.dims().end());
  for (auto d : shape)
    if (d < 0) fail("{}: negative dimension in {}", what, shape_str(shape));
  Tensor t(*dtype, shape);
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    read_external(p, base_dir, what, t);
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != t.nbytes())
      fail("{}: raw_data has {} bytes, {} {} needs {}", what, p.raw_data().size(),
           dtype_name(*dtype), shape_str(shape), t.nbytes());
    if (t.nbytes()) std::memcpy(t.raw(), p.raw_data().data(), t.nbytes());
    return t;
  }
  switch (*dtype) {
    case DType::Float32:
      copy_field(p.float_data(), t, what, [&](int i, float v) { t.data<float>()[i] = v; });
      break;
    case DType::Float64:
      copy_field(p.double_data(), t, what, [&](int i, double v) { t.data<double>()[i] = v; });
      break;
    case DType::Int64:
      copy_field(p.int64_data(), t, what,
                 [&](int i, std::int64_t v) { t.data<std::int64_t>()[i] = v; });
      break;
    default:
      // int32_data carries int32, int8, uint8, bool, and the bits of float16 / bfloat16.
      copy_field(p.int32_data(), t, what, [&](int i, std::int32_t v) {
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
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  onnx::TensorProto p;
  if (!p.ParseFromIstream(&in))
    fail("{}: not a valid ONNX TensorProto (corrupt or truncated)", path);
  if (name) *name = p.name();
  return tensor_from_proto(p, std::filesystem::path(path).parent_path().string(), path);
}

void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  std::ofstream out(path, std::ios::binary);
  if (!out || !p.SerializeToOstream(&out)) fail("{}: write failed", path);
}

}  // namespace metaop
