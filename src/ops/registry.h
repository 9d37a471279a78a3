#pragma once
// The meta-operator registry: one row per ONNX operator. Each concern attaches to the row
// separately (reference forward, error model; gradient and input domain as they arrive), so
// adding an op means adding its entry in one family file.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/error_model.h"

namespace metaop {

using ReferenceForward = std::function<Tensors(const KernelContext&, const Tensors&)>;
// Vector-Jacobian product in float64: the gradients of the inputs (an undefined tensor for an
// input that is not differentiable) given the inputs, the forward outputs and the outputs'
// gradients (undefined for outputs that receive none), each rounded once to its input's dtype.
using ReferenceVjp = std::function<Tensors(const KernelContext&, const Tensors& inputs,
                                           const Tensors& outputs, const Tensors& output_grads)>;

struct MetaOp {
  MetaOp(std::string t, std::string f, ReferenceForward r)
      : type(std::move(t)), family(std::move(f)), reference(std::move(r)) {}
  std::string type;
  std::string family;  // elementwise, linear, conv, pool, norm, reduce, shape, index, loss
  // Inputs as given (any dtype); computes in float64 and rounds once to the output dtype.
  ReferenceForward reference;
  ErrorModel error;  // attached after registration, in the same family file
  Domain domain;     // likewise (defaults: input 0 is data, no critical points)
  ReferenceVjp vjp;  // likewise; empty: not differentiable (integer, boolean, shape ops)
};

class OpRegistry {
 public:
  static const OpRegistry& instance();
  const MetaOp* find(const std::string& type) const;
  std::vector<std::string> types() const;
  void add(MetaOp op);
  // Declares the error model of an op already added.
  void set_error_model(const std::string& type, ErrorModel model);
  void set_domain(const std::string& type, Domain domain);
  // The op's danger zones (ops/danger.h), kept apart from set_domain's other fields.
  void set_danger(const std::string& type, DangerZones zones);
  void set_vjp(const std::string& type, ReferenceVjp vjp);
  // After set_error_model: the VJP's own error magnitudes, for ops that need more than the
  // generic bound.
  void set_backward_error_model(const std::string& type, VjpMagnitudeFn fn);

 private:
  OpRegistry() = default;
  std::map<std::string, MetaOp> ops_;
};

// One registration function per family file.
void register_elementwise_ops(OpRegistry& r);
void register_linear_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_pool_ops(OpRegistry& r);
void register_norm_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);
void register_index_ops(OpRegistry& r);
void register_resize_ops(OpRegistry& r);
void register_loss_ops(OpRegistry& r);

}  // namespace metaop
