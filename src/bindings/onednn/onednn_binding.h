#pragma once
// oneDNN binding: each node runs on oneDNN's primitive for its op (eltwise, binary, convolution,
// deconvolution, matmul, pooling, batch and layer normalization, softmax, reduction, concat,
// reorder, prelu, resampling), float32, plain layouts; backward through the backward primitives
// where oneDNN has them. The same sources are built against oneDNN 3 (v3 API: primitive
// descriptors straight from the engine) and Debian's oneDNN 2.6 (v2 API: X::desc, then
// X::primitive_desc).
#include "bindings/binding.h"

namespace metaop {

// The binding's name: "onednn" for the current oneDNN, "onednn-2.6" for Debian's (the same
// sources are built once per oneDNN, METAOP_ONEDNN_BINDING in CMakeLists.txt).
const char* onednn_binding_name();

class OneDNNBinding final : public Binding {
 public:
  std::string name() const override { return onednn_binding_name(); }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
  // Makes oneDNN's CPU engine and stream (oneDNN 3 built for SYCL starts its runtime here).
  void prepare() override;
};

}  // namespace metaop
