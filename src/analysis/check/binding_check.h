#pragma once
// Judges one binding on one node against the float64 reference: forward on the same inputs
// with the op's error model (as `check` does), and backward (VJP) against central finite
// differences of the reference forward run in float64 (a sampled gradcheck, whose own
// truncation error needs the looser yardstick below; the backward's error model is applied by
// check_local_backward).
#include <string>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

struct Tolerance {
  double rtol = 1e-4;
  double atol_scale = 1e-5;  // relative to the largest |reference| value of the tensor
  double abs_floor = 0;      // absolute slack (finite differences resolve nothing below it)
};

// How a binding did on a node: ok; mismatch (beyond the bound); unsupported; error (it threw);
// crash (its worker died).
enum class NodeStatus { Ok, Mismatch, Unsupported, Error, Crash };
std::string_view to_string(NodeStatus s);

struct NodeVerdict {
  NodeStatus status = NodeStatus::Ok;
  std::string detail;  // the worst element, or the reason
  double worst = 0;    // max over outputs of error / bound (> 1 is a mismatch)
  // A mismatch's kind: accuracy (finite error beyond the bound), nonfinite (NaN or infinity
  // on one side only), shape (shape or dtype differs), omitted (an output left out).
  std::string kind;
  // Backward: coordinates compared with finite differences, and those skipped (kinks, points
  // outside the domain, non-finite values); a check that compared none fails.
  int compared = 0, skipped = 0;
  // Forward mismatches, crashes and errors: the triage class (analysis/core/triage.h), as its
  // word; empty for the backward.
  std::string cls = {};
  std::string class_basis = {};
};

// Compares `actual` with `ref` element-wise under tol; NaN must meet NaN, INF the same INF.
NodeVerdict judge(const Tensors& actual, const Tensors& ref, const Tolerance& tol,
                  const std::vector<std::string>& names);

// The binding's forward scored with the op's error model (analysis/core/accuracy); an output the
// node declares and the binding leaves out is a mismatch.
NodeVerdict check_forward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs);

// Backward of `b` with seeded random output gradients, against the finite-difference VJP of
// the reference (at most `samples` coordinates per input are differentiated).
NodeVerdict check_backward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs,
                           std::uint64_t seed = 0, int samples = 48,
                           const Tolerance& tol = {1e-3, 1e-4});

}  // namespace metaop
