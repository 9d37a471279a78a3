#pragma once
// LibTorch (ATen) binding: forward through ATen's own kernels, backward through torch autograd
// on that single op. No torch header here: only torch_binding.cpp pays for them.
#include "bindings/binding.h"

namespace metaop {

// The binding's name: "torch" for the current LibTorch, "torch-1.13" for Debian's (the same
// sources are built once per LibTorch, METAOP_TORCH_BINDING in CMakeLists.txt).
const char* torch_binding_name();

class TorchBinding final : public Binding {
 public:
  TorchBinding();
  std::string name() const override { return torch_binding_name(); }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
  // ATen intra-op threads (process-wide); 1 by default for reproducible comparisons.
  static void set_threads(int n);
  std::unique_ptr<UpdateKernel> update_kernel(const OptimizerConfig& c) const override;
};

}  // namespace metaop
