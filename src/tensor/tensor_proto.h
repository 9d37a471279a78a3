#pragma once
// ONNX TensorProto <-> Tensor, including raw_data, the typed repeated fields and external data.
#include <string>

#include "tensor/composite.h"
#include "tensor/tensor.h"

namespace onnx {
class TensorProto;
}

namespace metaop {

// base_dir resolves external data locations; `what` names the tensor in error messages.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& what);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);
Tensor read_tensor_pb(const std::string& path, std::string* name = nullptr);
// An OptionalProto file (`optional`) or a SequenceProto file of tensors: maps, sparse tensors and
// nested values are Unsupported. An empty optional says it is a sequence where `sequence`.
CompositeValue read_composite_pb(const std::string& path, bool optional, bool sequence);
// A TensorProto of element type STRING (any other type fails naming `what`).
StringTensor string_tensor_from_proto(const onnx::TensorProto& p, const std::string& what);
StringTensor read_string_tensor_pb(const std::string& path);
void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name);

}  // namespace metaop
