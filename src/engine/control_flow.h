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
#include "tensor/composite.h"

namespace metaop {

// What a graph output of sequence or optional type became: the inlined graph's outputs that
// hold its tensors, in order.
struct CompositeOutput {
  bool optional = false, has = true, sequence = false;
  std::vector<std::string> outputs;
};

struct InlinedGraph {
  Graph graph;  // without If, Loop, Scan and the sequence and optional operators
  // What each control-flow node did, in run order ("node 'loop' (Loop): 5 iterations, 35
  // nodes"): two runs that took the same path have the same list.
  std::vector<std::string> path;
  // The tensors of the sequence and optional graph inputs, as inputs of the inlined graph (which
  // takes them in place of those inputs): add them to the run's inputs.
  std::map<std::string, Tensor> element_inputs;
  // The graph outputs of sequence or optional type (which the inlined graph's outputs replace
  // by their tensors), by name.
  std::map<std::string, CompositeOutput> composite_outputs;
  // The graph outputs of string type, evaluated as the model was lowered (engine/strings), by
  // name (the inlined graph has no string value).
  std::map<std::string, StringTensor> string_outputs;
};

// Sequences and optionals are lowered as the control flow is inlined: a sequence is the list of
// its tensors' names, an optional the name it holds or none; SequenceAt, SequenceInsert,
// SequenceErase, SequenceLength, SequenceConstruct, SequenceEmpty, Optional, OptionalHasElement
// and OptionalGetElement make no node (their results are known on the inputs), SplitToSequence
// becomes a Split (a Gather per element where the split axis is dropped), ConcatFromSequence a
// Concat (after an Unsqueeze per tensor with new_axis), and SequenceMap runs its body once per
// element as a Loop does.
//
// Fails (Error) naming the node where a condition is not a one-element bool, a trip count not a
// one-element integer, the Scan inputs' lengths differ, a loop has neither a trip count nor a
// condition, a sequence position is out of range, an empty optional is read, a tensor operator
// takes a sequence, or the inlined graph passes its node limit. A Scan of opset 8 (a batch axis 0
// on every input) runs per batch element; sequence lengths shorter than the sequence are
// Unsupported. `composite_inputs` gives the sequence and optional graph inputs, `string_inputs`
// the string ones (a graph input of such a type without a value there is Unsupported).
//
// String tensors are evaluated as the model is lowered (engine/strings: StringNormalizer,
// StringConcat, StringSplit, RegexFullMatch, and Cast, CastLike, Equal and Identity of strings):
// the inlined graph holds none, a numeric result of them is a constant, and a tensor operator
// that takes a string tensor fails naming the node.
InlinedGraph inline_control_flow(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                 const std::map<std::string, CompositeValue>& composite_inputs = {},
                                 const std::map<std::string, StringTensor>& string_inputs = {});

// The number of nodes an inlined graph may reach.
constexpr std::size_t kMaxInlinedNodes = 200'000;

}  // namespace metaop
