#pragma once
// Choices the ONNX text leaves open (Convention, ops/registry.h), shared by the ops that meet
// them. Each says what the text says and when the choice explains a finding, as narrowly as the
// case allows.
#include "ops/registry.h"

namespace metaop {

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

}  // namespace metaop
