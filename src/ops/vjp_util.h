#pragma once
// Helpers shared by the reference VJPs (the gradient of each op lives next to it, in its family
// file, attached with OpRegistry::set_vjp).
#include <vector>

#include "ops/registry.h"

namespace metaop {

// Gradient of output o as float64 values (zeros when the output receives no gradient).
std::vector<double> grad_of(const Tensors& grads, const Tensors& outputs, std::size_t o);
// Sums a gradient of broadcast shape `out` back to the shape `in` it was broadcast from.
std::vector<double> unbroadcast(const std::vector<double>& g, const Shape& out, const Shape& in);
// A gradient for input `like`: its shape and dtype, rounded once.
Tensor grad_like(const std::vector<double>& g, const Tensor& like);

// The subgradient set of a selection (MaxPool, ReduceMax ...) built window by window: for each
// selected value, the elements of its window equal to it (`candidates`). With one candidate its
// gradient is certain; with more, each may take any share of it and their sum is fixed (one
// group per connected set of ties).
class TieCollector {
 public:
  explicit TieCollector(std::size_t elements);
  void add(const std::vector<std::int64_t>& candidates, double g);
  // Empty when no window had a tie (the reference's gradient is then the only correct one).
  GradientSet finish();

 private:
  std::int64_t root(std::int64_t i);
  std::vector<double> lo_, hi_;
  std::vector<std::int64_t> group_, parent_;
  bool any_ = false;
};

// The adjoint of an op that only moves elements of its `data` inputs (reshape, transpose,
// slice, gather, concat, pad ...): the forward is run once on element numbers instead of values
// (exact in float64), so each output element names the input element it came from, and the
// gradient flows back along the same map (summed where an element was copied more than once).
// Positions the op fills with a constant get none. `zero_fill` lists float inputs that hold such
// a constant, set to 0 for the probe.
ReferenceVjp data_movement_vjp(const std::vector<int>& data_inputs = {0},
                               const std::vector<int>& zero_fill = {});
// Its float32 twin (Float32Vjp): the same adjoint, an element's copies summed in float32.
Float32VjpEvaluate data_movement_vjp_f32(std::vector<int> data_inputs = {0},
                                         std::vector<int> zero_fill = {});
// unbroadcast in float32: each element's terms summed in `order` (float32 twins of VJPs).
std::vector<double> unbroadcast_f32(const std::vector<double>& g, const Shape& out, const Shape& in,
                                    SumOrder order);

}  // namespace metaop
