#pragma once
// Update kernels: what applies the optimizer step to each weight during training. The reference
// keeps its state in float64 and rounds each new weight once; a framework's kernel runs its own
// optimizer (torch: torch::optim) on its own state. Which one updates a weight is part of the
// training plan, like a node's binding.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"
#include "ops/optimizer.h"

namespace metaop {

class UpdateKernel {
 public:
  virtual ~UpdateKernel() = default;
  virtual std::string name() const = 0;
  // Step t (1-based, counted over the whole run) of `weight`: the new value, of w's dtype.
  virtual Tensor step(const std::string& weight, long t, const Tensor& w, const Tensor& g) = 0;
  // The weight's state after its last step, in optimizer_slots() order; empty before its first.
  virtual Tensors state(const std::string& weight) const = 0;
  // Replaces the weight's state (same order and sizes; `t` the steps it has taken), as a
  // reproducer or an injected fault needs.
  virtual void set_state(const std::string& weight, long t, const Tensors& slots) = 0;
};

// Bindings with an update kernel: reference, torch.
std::vector<std::string> update_binding_names();
bool has_update_kernel(const std::string& binding);
// A framework's update kernel runs in its binding's worker process (IsolatedUpdate, isolate.h)
// unless isolation() is None.
std::unique_ptr<UpdateKernel> make_update_kernel(const std::string& binding,
                                                 const OptimizerConfig& c);
// The binding's update kernel in this process (what a worker runs).
std::unique_ptr<UpdateKernel> make_update_kernel_in_process(const std::string& binding,
                                                            const OptimizerConfig& c);

// The reference: the float64 rule of ops/optimizer.h on float64 state; float32 weights are
// updated element by element without float64 copies of whole tensors.
class ReferenceUpdate final : public UpdateKernel {
 public:
  explicit ReferenceUpdate(OptimizerConfig c);
  std::string name() const override { return "reference"; }
  Tensor step(const std::string& weight, long t, const Tensor& w, const Tensor& g) override;
  Tensors state(const std::string& weight) const override;
  void set_state(const std::string& weight, long t, const Tensors& slots) override;

 private:
  OptimizerConfig c_;
  std::map<std::string, std::vector<double>> m_, v_;
  std::map<std::string, Shape> shape_;
};

}  // namespace metaop
