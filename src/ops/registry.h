#pragma once
// The meta-operator registry: one row per ONNX operator. Each concern attaches to the row
// separately (reference forward now; gradient, error model and input domain as they arrive), so
// adding an op means adding its entry in one family file.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "tensor/tensor.h"

namespace metaop {

struct KernelContext {
  const Node& node;
  std::int64_t opset;
};

using Tensors = std::vector<Tensor>;
using ReferenceForward = std::function<Tensors(const KernelContext&, const Tensors&)>;

struct MetaOp {
  std::string type;
  std::string family;  // elementwise, linear, conv, pool, norm, reduce, shape, index, loss
  // Inputs as given (any dtype); computes in float64 and rounds once to the output dtype.
  ReferenceForward reference;
};

class OpRegistry {
 public:
  static const OpRegistry& instance();
  const MetaOp* find(const std::string& type) const;
  std::vector<std::string> types() const;
  void add(MetaOp op);

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
