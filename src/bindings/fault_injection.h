#pragma once
// Fault injection for evaluating the checks: a binding wrapped so that chosen nodes (by name or
// op type) run a known-faulty kernel. `--inject OPTYPE_OR_NODE:FAULT[@BINDING]`.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"
#include "bindings/phase.h"
#include "bindings/update_kernel.h"

namespace metaop {

struct FaultSpec {
  std::string target;            // node name or op type
  std::string fault;             // one of fault_names()
  std::string binding;           // empty: every binding under test
  Phase phase = Phase::Forward;  // or Backward (the kernel's VJP), or Update (the optimizer's
                                 // step of the weights the target names or reads)
};

// Parses OPTYPE_OR_NODE:FAULT[@BINDING[:backward|:update]]; fails naming the spec and the known
// faults.
FaultSpec parse_fault(const std::string& spec);
// The phase a fault belongs to: forward, backward or update.
Phase fault_phase(const std::string& fault);

struct FaultInfo {
  std::string name;
  std::string what;
  // Op-specific faults apply to the ops that name them (OpBuilder::faults); the others to any
  // op with a floating output.
  bool op_specific = false;
  std::vector<std::string> op_types = {};  // the ops that name it
};
const std::vector<FaultInfo>& fault_catalog();
// Whether `fault` can be applied to a node of this op type.
bool fault_applies(const std::string& fault, const std::string& op_type);

class FaultyBinding : public Binding {
 public:
  FaultyBinding(std::unique_ptr<Binding> inner, std::vector<FaultSpec> faults);
  std::string name() const override { return inner_->name(); }
  Support supports(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
  // Node name -> what was done to it ("bias at [0, 3, 1, 1]"), or why it was not applied.
  const std::map<std::string, std::string>& log() const { return log_; }

 private:
  const FaultSpec* match(const Node& node, Phase phase) const;
  Tensors faulty_forward(const FaultSpec& spec, const Node& node, std::int64_t opset,
                         const Tensors& inputs, std::string& note);
  std::unique_ptr<Binding> inner_;
  std::vector<FaultSpec> faults_;
  std::map<std::string, std::string> log_;
};

// An update kernel whose step of chosen weights is faulty (the weight's step applied with a
// flipped sign or doubled, a NaN, the state rounded to float16 or not written back).
class FaultyUpdate : public UpdateKernel {
 public:
  FaultyUpdate(std::unique_ptr<UpdateKernel> inner, std::map<std::string, FaultSpec> faults);
  std::string name() const override { return inner_->name(); }
  Tensor step(const std::string& weight, long t, const Tensor& w, const Tensor& g) override;
  Tensors state(const std::string& weight) const override { return inner_->state(weight); }
  void set_state(const std::string& weight, long t, const Tensors& slots) override {
    inner_->set_state(weight, t, slots);
  }
  // Weight -> what was done to it.
  const std::map<std::string, std::string>& log() const { return log_; }

 private:
  std::unique_ptr<UpdateKernel> inner_;
  std::map<std::string, FaultSpec> faults_;
  std::map<std::string, std::string> log_;
};

}  // namespace metaop
