#pragma once
// Runs a graph node by node under a binding plan. Every node goes to the binding the plan
// names for it (by node name, then op type, then the default); a binding that lacks the op
// falls back to the reference, and the run records it.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"
#include "graph/graph.h"

namespace metaop {

class Plan {
 public:
  Plan();  // everything on the reference
  // Takes ownership; the same name returns the same instance.
  Binding* binding(const std::string& name);
  // Adds a binding made elsewhere (tests, plug-ins), under its name().
  void add_binding(std::unique_ptr<Binding> b);
  void set_default(const std::string& binding);
  void bind_op(const std::string& op_type_or_node, const std::string& binding);
  Binding* for_node(const Node& n);
  // The backward of a node may be bound apart from its forward (verification by replacement of
  // a gradient); by default it follows the forward's binding.
  void bind_backward(const std::string& node_name, const std::string& binding);
  Binding* for_node_backward(const Node& n);
  Binding* reference() { return binding("reference"); }

 private:
  std::map<std::string, std::unique_ptr<Binding>> bindings_;
  std::string default_ = "reference";
  std::map<std::string, std::string> overrides_;           // node name or op type -> binding
  std::map<std::string, std::string> backward_overrides_;  // node name -> binding
};

struct NodeRecord {
  std::size_t node = 0;
  std::string binding;          // the binding that ran it
  std::string planned;          // the binding the plan named for it
  std::string fallback_reason;  // non-empty when the planned binding could not
  std::string crash;            // non-empty when its kernel crashed
  bool hang = false;            // the crash was a kernel killed after the kernel timeout
  double seconds = 0;
  std::size_t output_bytes = 0;  // size of the values it produced
  // Heap in use after the kernel minus before (its outputs plus whatever it kept, e.g. caches),
  // and the highest level during the kernel minus before (its workspace and temporaries too);
  // tensor/heap.h counts every allocation of the process.
  std::int64_t heap_delta = 0, heap_peak = 0;
};

struct RunOptions {
  bool keep_all = false;  // keep every intermediate value; otherwise free after last use
  // Called after each node (index into the run order, total) for progress display.
  std::function<void(std::size_t, std::size_t)> progress;
  // Called with each node's outputs before they are stored (error propagation studies may
  // change them).
  std::function<void(const Node&, std::int64_t opset, const Tensors& inputs, Tensors& outputs)>
      after_node;
};

struct RunResult {
  std::map<std::string, Tensor> outputs;  // graph outputs
  std::map<std::string, Tensor> values;   // all values, with keep_all
  std::vector<NodeRecord> records;        // in run order
};

// Checks that every graph input is given with the declared dtype and static dims; `source`
// names where each came from (a file) for the messages.
void validate_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, std::string>& source = {});

// Inputs on which a node's result is undefined in ONNX and that crash kernels (integer Div and
// Mod by zero, the lowest integer divided by -1): an Error naming the node and the element.
// run_graph applies it before every binding, the reference included.
void refuse_undefined_inputs(const Node& node, const Tensors& inputs);
// Inputs on which a node's result is defined but framework kernels are known to crash (the
// lowest integer modulo -1): the reason, or "" (run_graph runs such a node on the reference).
std::string crashing_inputs(const Node& node, const Tensors& inputs);

// The node's forward on the plan's reference. Its errors are the model's: they end the run,
// named after the node (a size past the memory budget too).
Tensors reference_forward(const Node& node, std::int64_t opset, Plan& plan, const Tensors& ins);

// Throws Unsupported listing every op type (with counts) that no binding of the plan runs.
void check_supported(const Graph& g, Plan& plan);

RunResult run_graph(const Graph& g, const std::map<std::string, Tensor>& inputs, Plan& plan,
                    const RunOptions& options = {});

}  // namespace metaop
