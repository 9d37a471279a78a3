#pragma once
// Judges one binding on one node against the float64 reference: forward on the same inputs,
// and backward (VJP) against central finite differences of the reference forward run in
// float64 (a sampled gradcheck). Until the per-op error models arrive, "float32 accuracy" is
// the interim bound |b - r| <= rtol * |r| + atol_scale * max|r| (per output tensor).
#include <string>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

struct Tolerance {
  double rtol = 1e-4;
  double atol_scale = 1e-5;  // relative to the largest |reference| value of the tensor
  double abs_floor = 0;      // absolute slack (finite differences resolve nothing below it)
};

struct NodeVerdict {
  std::string status;  // ok, mismatch, unsupported, error
  std::string detail;  // the worst element, or the reason
  double worst = 0;    // max over outputs of error / bound (> 1 is a mismatch)
};

// Compares `actual` with `ref` element-wise under tol; NaN must meet NaN, INF the same INF.
NodeVerdict judge(const Tensors& actual, const Tensors& ref, const Tolerance& tol,
                  const std::vector<std::string>& names);

NodeVerdict check_forward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs,
                          const Tolerance& tol = {});

// Backward of `b` with seeded random output gradients, against the finite-difference VJP of
// the reference (at most `samples` coordinates per input are differentiated).
NodeVerdict check_backward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs,
                           std::uint64_t seed = 0, int samples = 48,
                           const Tolerance& tol = {1e-3, 1e-4});

}  // namespace metaop
