#pragma once
// The float64 reference: a thin adapter over the meta operators' reference kernels.
#include "bindings/binding.h"

namespace metaop {

class ReferenceBinding final : public Binding {
 public:
  std::string name() const override { return "reference"; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
};

}  // namespace metaop
