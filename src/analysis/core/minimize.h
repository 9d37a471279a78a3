#pragma once
// Minimized inputs of a finding: delta debugging (Zeller and Hildebrandt's ddmin) over the
// inputs' shapes, then over their values, keeping every step at which the finding still shows.
// The test that says whether it shows (`Shows`) is the caller's: for a node, the binding's
// outputs on the candidate judged against the reference, with the same kind and class.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace metaop {

using Tensors = std::vector<Tensor>;

struct MinimizeOptions {
  // Inputs that may change (the others, initializers, indices, shapes and axes, stay as they
  // are): one flag per input.
  std::vector<bool> free;
  int budget = 400;  // calls of `shows` at most, the first (the inputs as given) included
  // Values of at most this many elements in all are simplified one by one (0, 1, then the
  // value with fewer significant digits).
  std::int64_t simplify_up_to = 64;
};

struct MinimizeResult {
  Tensors inputs;          // the smallest inputs found at which the finding still shows
  bool shown = false;      // whether it showed on the inputs as given (else inputs unchanged)
  int calls = 0;           // calls of `shows`
  bool exhausted = false;  // the budget ran out before no step was left
  std::vector<std::string> steps;  // what was kept, in words ("input 0 dim 2: 32 -> 1")
};

// A candidate's test: true when the finding still shows on `inputs`. It must not throw for
// inputs the op refuses (shapes that no longer agree): false then.
using Shows = std::function<bool(const Tensors& inputs)>;

// Shrinks the free inputs' dimensions (each dimension alone, the dimensions broadcasting aligns
// across inputs together, and the dimensions of one size across inputs together, as a matrix
// product's or a convolution's shared ones), each to a 1-minimal set of indices, then simplifies
// the values.
MinimizeResult minimize_inputs(const Tensors& inputs, const MinimizeOptions& opt,
                               const Shows& shows);

// `t`'s slices at `index` along dimension `dim` (any order, repeats allowed).
Tensor take_along(const Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& index);

}  // namespace metaop
