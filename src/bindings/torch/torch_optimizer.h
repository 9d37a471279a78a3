#pragma once
// LibTorch's optimizers (torch::optim::SGD, Adam, AdamW: the same float32 tensor-op sequence as
// torch.optim's single-tensor path) as an update kernel, one optimizer per weight so that each
// weight can be bound on its own. No torch header here.
#include <memory>

#include "bindings/torch/torch_binding.h"
#include "bindings/update_kernel.h"

namespace metaop {

class TorchUpdate final : public UpdateKernel {
 public:
  explicit TorchUpdate(OptimizerConfig c);
  ~TorchUpdate() override;
  std::string name() const override { return torch_binding_name(); }
  Tensor step(const std::string& weight, long t, const Tensor& w, const Tensor& g) override;
  Tensors state(const std::string& weight) const override;
  void set_state(const std::string& weight, long t, const Tensors& slots) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaop
