#pragma once
// If, Loop and Scan, run by inlining their bodies. On given inputs the float64 reference decides
// which branch each If takes and how many iterations each Loop and Scan runs; the graph becomes
// one without control flow whose nodes are the bodies' nodes as they ran, named
// "<node>/<then|else|iteration>/<body node>". Every binding then runs them and every check judges
// them as it judges any other node (an ONNX-import binding runs each as a one-node model). The
// plumbing between iterations is ONNX too: a Scan input's slice is a Gather, a scan output is the
// Concat of its iterations' values, each Unsqueezed; the iteration number and the constants a
// loop needs are initializers.
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace metaop {

struct InlinedGraph {
  Graph graph;  // without If, Loop and Scan
  // What each control-flow node did, in run order ("node 'loop' (Loop): 5 iterations, 35
  // nodes"): two runs that took the same path have the same list.
  std::vector<std::string> path;
};

// Fails (Error) naming the node where a condition is not a one-element bool, a trip count not a
// one-element integer, the Scan inputs' lengths differ, a loop has neither a trip count nor a
// condition, or the inlined graph passes its node limit. A Scan of opset 8 (a batch axis 0 on
// every input) runs per batch element; sequence lengths shorter than the sequence are Unsupported.
InlinedGraph inline_control_flow(const Graph& g, const std::map<std::string, Tensor>& inputs);

// The number of nodes an inlined graph may reach.
constexpr std::size_t kMaxInlinedNodes = 200'000;

}  // namespace metaop
