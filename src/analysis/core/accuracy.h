#pragma once
// Scoring against the float64 oracle with the ops' error models (src/ops/error_model.h):
// per output element, error / tolerance; per node, the worst element and how many are over.
#include <string>
#include <vector>

#include "analysis/core/finding.h"
#include "ops/registry.h"

namespace metaop {

struct Score {
  double max_abs_err = 0;
  double max_ulp_err = 0;  // in ULPs of the output dtype at the reference value
  double score = 0;        // max over elements of error / tolerance (> 1: outside the model)
  std::int64_t elements = 0;
  std::int64_t over = 0;           // elements with error > tolerance
  std::int64_t nonfinite = 0;      // NaN/INF where the reference is finite, or the reverse
  std::int64_t new_nonfinite = 0;  // of those: non-finite here, finite in the reference
  std::string mismatch;            // shape or dtype differs (then score is infinite)
  // The worst element (largest score; a non-finite mismatch beats any finite one).
  std::size_t worst_output = 0;
  std::int64_t worst_index = -1;
  double worst_ref = 0, worst_got = 0, worst_tol = 0;
  std::string note;  // what the worst values are when not one element's (a sum over a tie)
  bool bad() const { return score > 1 || nonfinite > 0 || !mismatch.empty(); }
};

// The kind of finding a bad score makes: nonfinite when some element is non-finite on one side
// only, else accuracy.
FindingKind score_kind(const Score& s);

// Scores `got` against `ref` with per-element tolerances `tol` (from tolerances(); an empty
// vector for an output means exact comparison).
Score score_outputs(const Tensors& got, const Tensors& ref,
                    const std::vector<std::vector<double>>& tol);

// Per output, which elements score_outputs counts against `got` (outside the tolerance, or a
// non-finite mismatch); empty for an output missing on either side or of another shape or dtype.
std::vector<std::vector<bool>> bad_elements(const Tensors& got, const Tensors& ref,
                                            const std::vector<std::vector<double>>& tol);

// The worst element in words, one wording for check, probe and train --check:
// "NAME[INDEX] (note): BINDING got, reference r, error e, tolerance t; k of n elements over
// tolerance, m non-finite mismatches; inputs there: ..." (names: the outputs'; the non-finite
// count when there are some; `inputs` when given), or the shape/dtype mismatch; "" when none.
std::string describe_worst(const Score& s, const Tensors& reference,
                           const std::vector<std::string>& names, const std::string& binding,
                           const std::string& inputs = "");
// The same for a node, with its inputs at the worst element (describe_inputs).
std::string describe_worst(const Node& node, const Score& s, const Tensors& in,
                           const Tensors& reference, const std::string& binding);
// A node's inputs at element `index` of its output `out`: the value there for inputs of the
// output's size (element-wise ops), all values of small ones, else shape and range.
std::string describe_inputs(const Node& node, const Tensors& in, const Tensor& out,
                            std::int64_t index);

// Local check of one node: the reference on the same `inputs`, the op's error model, the score.
struct LocalCheck {
  Tensors reference;
  Score score;
  std::vector<std::vector<double>> tol;  // the tolerances it was scored with
};
LocalCheck check_local(const Node& node, std::int64_t opset, const Tensors& inputs,
                       const Tensors& got, const AccumulationBound& bound = {});

// Local check of one node's backward: the reference VJP on the same inputs, outputs and output
// gradients. Tolerance of gradient element i: the op's own backward bound where it declares one
// (element-wise ops, softmax, normalizations ...), else 4 ulp + u * kappa(n) * M_i, where M_i
// is the VJP run on |output gradients| and |inputs| (the sum of |terms| for the multilinear ops)
// and n the number of terms behind the element. Where the gradient is not unique (kinks, ties:
// MetaOp::subgradient) every value of the subgradient set is accepted, and only those.
LocalCheck check_local_backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                const Tensors& outputs, const Tensors& output_grads,
                                const Tensors& got, const AccumulationBound& bound = {});

// Propagated error of a value against the end-to-end reference run: no tolerance, just size.
struct Drift {
  double max_abs_err = 0;
  double rel = 0;              // max_abs_err / max |reference| (finite elements)
  std::int64_t nonfinite = 0;  // non-finite mismatches
};
Drift drift(const Tensor& got, const Tensor& ref);

}  // namespace metaop
