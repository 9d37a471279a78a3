#pragma once
// Choices the ONNX text leaves open (Convention, ops/registry.h), shared by the ops that meet
// them. Each says what the text says and when the choice explains a finding, as narrowly as the
// case allows.
#include <functional>

#include "ops/registry.h"

namespace metaop {

// Whether input 0 holds a value with `held` and every element of output 0 outside the model (one
// at least) has `explained`(its flat index, reference, kernel): the shape of the non-finite
// conventions.
bool nonfinite_explains(const Tensors& in, const Tensors& ref, const Tensors& got,
                        const std::vector<std::vector<bool>>& bad, bool (*held)(double),
                        const std::function<bool(std::size_t, double, double)>& explained);
// Whether every element of output 0 outside the model (one at least) is `other`'s, the output of
// another reading of the text, to `tol` (and NaN where `other` is NaN, with `nan_matches`): the
// shape of the conventions that recompute the op as that reading.
bool other_reading_explains(const Tensor& other, const Tensors& got,
                            const std::vector<std::vector<bool>>& bad, double tol,
                            bool nan_matches);

// NaN through a comparison, max or min: the text defines the op by comparisons (x > alpha ? x :
// 0, max(0, x) ...) that NaN fails, and does not say whether NaN takes that branch or
// propagates. Explains a finding of an element-wise op when every element outside the model has
// a NaN among its own (broadcast) inputs; of another op (a reduction, pool or softmax row), when
// every such element is NaN on one side only (reference or kernel) and the inputs hold a NaN.
Convention nan_propagation();

// Which index a selection (ArgMax, ArgMin, Hardmax, TopK) picks when NaN takes part: the text
// orders values without saying where NaN goes. Explains a finding when the inputs hold NaN and
// every element outside the model lies in a slice along `axis` that holds one.
Convention nan_selection();

// Conv's padded taps against an infinite weight: the text pads the input with zeros, so such a
// tap is 0 x inf = NaN and so is the output; a kernel that skips padded taps (they add nothing
// to a finite sum) gives the sum of the others. Explains a finding when the weights hold an
// infinity and every element outside the model is NaN in the reference, not NaN in the kernel,
// and has a window that reaches into the padding.
Convention padded_infinities();

// Infinities through a transform (DFT, STFT): the text defines it as a sum of products by complex
// twiddles, and with an infinite input whether an output is +inf, -inf or NaN depends on which
// twiddle parts are exactly 0 and on the order of the operations (an FFT multiplies by exact
// zeros that a direct sum never forms: inf x 0 = NaN); the text does not say. Explains a finding
// when the inputs hold a non-finite value and every element outside the model is non-finite in
// both the reference and the kernel.
Convention transform_infinities();

// Products by a twiddle's part that is exactly 0 (at the quarter turns; every imaginary part of
// bin 0 and N/2 of a real signal): 0 x inf = NaN in the text's sum, nothing in a transform that
// leaves them out. Explains a finding of DFT or STFT when the signal holds an infinity or a NaN
// and every element outside the model is that transform's (recomputed without those products),
// to its own bound, or non-finite in both. Defined in signal.cpp, which knows the transforms'
// geometry.
Convention zero_twiddle_parts();

// Interpolation taps of weight 0 on infinite pixels (GridSample): the text defines the output as
// the weighted sum of the taps, where such a tap is 0 x inf = NaN; it does not say whether a
// kernel may skip it (a tap that adds nothing to a finite sum). Explains a finding when X holds
// an infinity and every element outside the model is NaN in the reference and infinite in the
// kernel.
Convention zero_weight_infinities();

}  // namespace metaop
