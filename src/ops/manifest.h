#pragma once
// What an op declares about itself beside its float64 math, as plain data on its registry row
// (ops/registry.h): its family, which inputs are data, its sample cases, where ONNX leaves it
// undefined, what changes in training mode, which planted faults apply to it and the words
// `metaop expose` explains its outputs with. The layers above read them: the analysis layer
// turns the cases into node cases, the bindings that export one-node models read the inputs'
// roles, the executor the undefined inputs, training its training-mode behaviour, the fault
// catalog the faults, expose the words. Nothing here names a binding, the engine or analysis.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "tensor/tensor.h"

namespace metaop {

using Tensors = std::vector<Tensor>;

// The op families; `metaop ops` prints family_name().
enum class Family { elementwise, linear, conv, pool, norm, reduce, shape, index, loss };
const char* family_name(Family f);
// Whether the family only moves or selects elements (shape and index ops): a kernel there
// computes no new values, so a fallback to the reference changes nothing numerically.
bool moves_data(Family f);

// One input of a sample case: its shape and dtype, and either its integer values (axes,
// indices, shapes) or seeded random values in [lo, hi] (whole numbers when `whole`: exact zeros
// and ties, where gradients are not unique).
struct CaseInput {
  Shape shape = {};
  DType dtype = DType::Float32;
  std::vector<std::int64_t> values = {};
  double lo = -2, hi = 2;
  bool whole = false;
};

// A sample case the ONNX node tests lack: the node's inputs, attributes, opset and number of
// outputs. The analysis layer makes it a one-node graph named synthetic_<Op>_<n> (n counts the
// op's cases from 1) whose random values are seeded by (op, n) alone, so that adding a case
// changes no other case.
struct CaseSpec {
  std::int64_t opset = 13;
  std::vector<CaseInput> inputs = {};
  std::map<std::string, Attribute> attrs = {};
  std::size_t outputs = 1;
};
// Inputs of sample cases, briefly.
namespace case_input {
// Seeded random values in [lo, hi].
inline CaseInput floats(Shape s, double lo = -2, double hi = 2, DType t = DType::Float32) {
  return {std::move(s), t, {}, lo, hi};
}
// Whole numbers in [-2, 2]: exact zeros and ties.
inline CaseInput whole(Shape s) {
  return {std::move(s), DType::Float32, {}, -2, 2, true};
}
// A float32 scalar holding v.
inline CaseInput scalar(double v) {
  return {{}, DType::Float32, {}, v, v};
}
// int64 values (axes, indices, counts).
inline CaseInput ints(Shape s, std::vector<std::int64_t> v) {
  return {std::move(s), DType::Int64, std::move(v)};
}
}  // namespace case_input

// The seed of case n (from 1) of `op`: a hash of the two, the same on every platform.
std::uint64_t case_seed(const std::string& op, std::size_t n);

// Which inputs are data -- activations a model computes, fed as graph inputs where a binding
// exports the node as a one-node model -- and which are parameters (weights, shapes, axes,
// scales ...), written as initializers as exporters write them. Input 0 is data by default.
struct InputRoles {
  std::vector<int> data{0};
  // Ops that combine activations (Add, Concat, MatMul ...): every floating input is data too.
  bool floating_are_data = false;
  // Floating inputs whose values a randomized case keeps (binding tests): they hold coordinates
  // or indices that must stay as the case gives them (Resize's roi and scales, MaxRoiPool's
  // regions, whose first column is a batch index).
  std::vector<int> kept = {};
  bool is_data(std::size_t k, DType dtype) const;
  bool is_kept(std::size_t k) const;
  // Input 0 and every floating input: ops that combine activations.
  static InputRoles combine() { return {{0}, true}; }
  static InputRoles all(int n);
  // Input 0 is data; `k` keep their values when a case is randomized.
  static InputRoles keeping(std::vector<int> k) { return {{0}, false, std::move(k)}; }
};

// Where ONNX leaves the op undefined on given inputs: a message naming the node and the
// element (empty: defined). `refuse`d inputs are refused for every binding; `crashes` names
// inputs on which the op is defined (the reference computes them) but C++ kernels die, which
// framework bindings decline.
using InputCheck = std::function<std::string(const Node&, const Tensors&)>;
struct Undefined {
  InputCheck refuse = {};
  InputCheck crashes = {};
};

// What changes in training mode.
struct TrainingMode {
  // The op draws random numbers in training mode (Dropout's mask): a training step seeds it per
  // step and node and runs it on the reference, so every plan draws the same.
  bool random = false;
  // (output, input) pairs a training step writes back: the output's value becomes the
  // initializer the input names (BatchNormalization's running mean and variance). Only where
  // the node has every such output.
  std::vector<std::pair<std::size_t, std::size_t>> state = {};
};

// How `metaop expose` explains an element of the op's output, in words.
enum class ExplainForm {
  value,       // "OP NODE gave v"
  unary,       // an element-wise function of x: "of x gave v", underflow, saturation, overflow
  arithmetic,  // a op b = v, with the operator's symbol
  reduce,      // a reduction over n terms
  clamp,       // "clamped x to v"
  softmax,     // underflow or saturation against the logit gap
  product,     // a sum of products (MatMul, Gemm): its largest term and the two factors
  relay,       // moves elements unchanged (Reshape, Identity ...): the walk passes through
};
struct ExplainWords {
  ExplainForm form = ExplainForm::value;
  const char* symbol = "";               // arithmetic: the operator
  std::vector<double> underflow = {};    // outputs that say "underflowed to v"
  std::vector<double> saturation = {};   // outputs that say "saturated to v"
  std::optional<double> clamps_to = {};  // the output that says "clamped x to v" (Relu's 0)
  bool cancellation = false;             // a sum: a result far below its terms is cancellation
  bool mean = false;                     // reduce: the result is the sum divided by the count
  // The op's output explains a consumer's result (a saturating or underflowing op ...).
  bool telling = false;
  // A zero operand explains the op's result (Mul), whichever op made it.
  bool zero_operand_telling = false;
};

}  // namespace metaop
