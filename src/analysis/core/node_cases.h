#pragma once
// The cases bindings are judged on: the single-node ONNX conformance node tests (their
// attribute settings and inputs), cases the node tests lack (synthetic, seeded), and the same
// shapes with seeded random values. Shared by the binding tests and the oracle benchmark.
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/registry.h"

namespace metaop {

struct NodeCase {
  std::string test;                 // the node test's folder name, or synthetic_<Op>_<n>
  Graph graph;                      // one node
  std::vector<Tensors> input_sets;  // graph inputs, in order
};

// The single-node tests under `node_tests_dir` that MetaOp reads, with their input sets.
std::vector<NodeCase> load_node_cases(const std::string& node_tests_dir);
// Shapes, attributes and values the node tests lack (per-channel PRelu, LayerNormalization's
// float64 statistics, exact zeros and ties for kinks and selections ...): the cases each op
// declares in its block (OpBuilder::cases), by op type.
std::vector<NodeCase> synthetic_node_cases();
// Both, by op type (loaded once per process).
const std::map<std::string, std::vector<NodeCase>>& node_cases_by_op(
    const std::string& node_tests_dir);

// The node's inputs (graph inputs and initializers) in the node's order.
Tensors node_inputs(const Graph& g, const Tensors& graph_inputs);
// Same shapes, seeded random values for the floating data inputs, drawn within each input's own
// range so that they stay in the op's domain; integer inputs, scalars, and the inputs the op's
// manifest keeps (InputRoles::kept) keep their values.
Tensors randomized(const Node& node, const Tensors& in, std::uint64_t seed);

}  // namespace metaop
