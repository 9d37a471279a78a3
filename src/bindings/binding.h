#pragma once
// A binding runs meta operators on one framework's kernels (or on the float64 reference).
// "Unsupported" is a normal answer: supports() says so up front with a reason, and forward()
// may still throw Unsupported for an attribute value or dtype it finds it lacks.
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "tensor/tensor.h"

namespace metaop {

using Tensors = std::vector<Tensor>;
class UpdateKernel;      // bindings/update_kernel.h
struct OptimizerConfig;  // ops/optimizer.h

struct Support {
  bool forward = false;
  bool backward = false;
  // Dtypes it accepts for the op's data: floating ones, or those of an op ONNX defines for
  // integers or bool alone (MetaOp::dtypes).
  std::vector<DType> dtypes;
  std::string reason;  // why not, when it has neither
};

class Binding {
 public:
  virtual ~Binding() = default;
  virtual std::string name() const = 0;
  virtual Support supports(const std::string& op_type) const = 0;
  virtual Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) = 0;
  // Vector-Jacobian product: gradients of the node's inputs given its outputs' gradients.
  virtual Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                           const Tensors& outputs, const Tensors& output_grads);
  // Where the binding's kernels of `op_type` are declared, one "what: file:line ..." line each
  // (metaop ops --where); empty when it has none.
  virtual std::vector<std::string> where(const std::string& op_type) const;
  // Its optimizers' update kernel for `c`, in this process (what a worker runs: the worker knows
  // its binding, not the factory); nullptr when it has none.
  virtual std::unique_ptr<UpdateKernel> update_kernel(const OptimizerConfig& c) const;
  // What a worker does once before its first kernel (a plugin's binding: load the plugin), so
  // that the kernel timeout measures kernels, not the framework's start-up.
  virtual void prepare() {}
};

// "file:line" of a declaration (file names relative to the project: the build maps them).
std::string location(const std::source_location& where);

}  // namespace metaop
