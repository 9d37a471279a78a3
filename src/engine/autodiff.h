#pragma once
// Reverse-mode differentiation over a graph: the forward run's values (kept), then each node's
// VJP in reverse order, from the binding the plan names for it (its own backward, or the
// reference's VJP when it has none), with gradients summed where a value feeds several nodes.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/executor.h"

namespace metaop {

struct BackwardResult {
  std::map<std::string, Tensor> grads;  // for each value asked for that the seeds reach
  std::vector<NodeRecord> records;      // backward of each node, in the order run
};

// Float initializers that training updates: every float initializer except those only read as
// statistics, bounds, scales or fill values (BatchNormalization's mean and var, Resize's roi and
// scales, Clip's bounds, Pad's constant, Dropout's ratio).
std::vector<std::string> trainable_initializers(const Graph& g);

// Sees each node's backward: its inputs, outputs, output gradients, the input gradients the
// binding returned, and the record (binding, fallback).
using BackwardObserver =
    std::function<void(const Node&, const Tensors& inputs, const Tensors& outputs,
                       const Tensors& output_grads, const Tensors& input_grads, const NodeRecord&)>;

// `forward` must come from run_graph with keep_all. `seeds` gives the gradient of some values
// (typically {loss: 1}); `wrt` the values whose gradients to return.
BackwardResult run_backward(const Graph& g, const RunResult& forward,
                            const std::map<std::string, Tensor>& seeds, Plan& plan,
                            const std::set<std::string>& wrt, const BackwardObserver& observe = {});

}  // namespace metaop
