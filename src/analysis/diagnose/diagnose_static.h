#pragma once
// The checks of `metaop diagnose` before training: the loss against what the model outputs
// (a Softmax before cross_entropy, which applies its own; nll on outputs that are not
// log-probabilities; bce on outputs outside [0, 1]; bce_with_logits after a Sigmoid), labels
// outside the class range, non-finite data, the scale of each input feature (mean and standard
// deviation), and each layer's initial weights.
#include "analysis/diagnose/diagnose_types.h"
#include "engine/train.h"

namespace metaop {

// The graph, the data and the initial weights. `g` is the model without its loss.
StaticChecks static_checks(const Graph& g, const Tensor& X, const Tensor& Y, LossKind loss);

// The model's output on the first batch at the initial weights (the first step's) against the
// loss: values outside [0, 1] under bce, rows that are not log-probabilities under nll,
// probabilities under cross_entropy. Adds definite diagnoses to `checks`.
void check_first_output(StaticChecks& checks, const Graph& g, LossKind loss, const Tensor& output);

// The node that produces the model's first output, seen through Identity, Reshape, Flatten,
// Squeeze and Unsqueeze; SIZE_MAX for an input or initializer.
std::size_t output_producer(const Graph& g);

}  // namespace metaop
