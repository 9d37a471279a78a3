#include "bindings/reference/reference_binding.h"

#include "ops/registry.h"

namespace metaop {

Support ReferenceBinding::supports(const std::string& op_type) const {
  Support s;
  if (OpRegistry::instance().find(op_type)) {
    s.forward = true;
    s.dtypes = {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16};
  } else {
    s.reason = "no meta operator " + op_type;
  }
  return s;
}

Tensors ReferenceBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) throw Unsupported(node.label() + ": no meta operator for " + node.op_type);
  if (!node.domain.empty() && node.domain != "ai.onnx")
    throw Unsupported(node.label() + ": domain '" + node.domain + "'");
  return op->reference(KernelContext{node, opset}, inputs);
}

}  // namespace metaop
