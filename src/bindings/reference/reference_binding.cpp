#include "bindings/reference/reference_binding.h"

#include <fmt/format.h>

#include "ops/registry.h"

namespace metaop {

Support ReferenceBinding::supports(const std::string& op_type) const {
  Support s;
  if (const MetaOp* op = OpRegistry::instance().find(op_type)) {
    s.forward = true;
    s.backward = static_cast<bool>(op->vjp);
    s.dtypes = op->dtypes.empty() ? std::vector<DType>{DType::Float64, DType::Float32,
                                                       DType::Float16, DType::BFloat16}
                                  : op->dtypes;
  } else {
    s.reason = "no meta operator " + op_type;
  }
  return s;
}

// The reference runs each op's own declarations (metaop ops --where lists them).
std::vector<std::string> ReferenceBinding::where(const std::string& op_type) const {
  const MetaOp* op = OpRegistry::instance().find(op_type);
  if (!op) return {};
  std::vector<std::string> w;
  for (const auto& [concern, loc] : op->where)
    if (concern == "forward" || concern == "vjp")
      w.push_back(fmt::format("{}: {}", concern == "vjp" ? "backward" : concern, location(loc)));
  return w;
}

Tensors ReferenceBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) throw Unsupported(node.label() + ": no meta operator for " + node.op_type);
  if (node.domain != op->onnx_domain && !(op->onnx_domain.empty() && node.domain == "ai.onnx"))
    throw Unsupported(node.label() + ": domain '" + node.domain + "'");
  return op->reference(KernelContext{node, opset}, inputs);
}

Tensors ReferenceBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                   const Tensors& outputs, const Tensors& output_grads) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) throw Unsupported(node.label() + ": no reference VJP for " + node.op_type);
  return op->vjp(KernelContext{node, opset}, inputs, outputs, output_grads);
}

}  // namespace metaop
