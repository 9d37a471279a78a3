#pragma once
// oneDNN 2.6 binding (v2 API: X::desc, then X::primitive_desc): each node runs on oneDNN's
// primitive for its op (eltwise, binary, convolution, deconvolution, matmul, pooling, batch and
// layer normalization, softmax, reduction, concat, reorder, prelu, resampling), float32, plain
// layouts; backward through the backward primitives where oneDNN 2.6 has them.
#include "bindings/binding.h"

namespace metaop {

class OneDNNBinding final : public Binding {
 public:
  std::string name() const override { return "onednn"; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
};

}  // namespace metaop
