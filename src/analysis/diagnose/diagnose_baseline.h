#pragma once
// What the data alone allow, before any model: the loss of the trivial predictor, which ignores
// the inputs and predicts the label frequencies (cross_entropy, nll, bce: their entropy) or the
// targets' mean (mse: their variance). A model that learns ends well below it; a run that ends
// at it has learnt nothing from its inputs (`chance_level`), and a repair whose loss stays there
// repaired nothing. Also the scale of regression targets, which sets the scale of MSE's
// gradients.
#include "analysis/diagnose/diagnose_types.h"
#include "engine/train.h"

namespace metaop {

// Fills checks.trivial_loss and trivial_what, and for mse the targets' scale (target_scale,
// target_mean, target_sd).
void baseline_checks(StaticChecks& checks, const Tensor& Y, LossKind loss);

// Samples whose inputs are identical (bit for bit) must get one prediction: fills
// checks.samples, distinct_inputs and floor_loss (the lowest loss any model can reach, the
// labels' entropy or the targets' variance within each group of identical inputs), and adds a
// definite `data` diagnosis of `input` when that floor is at chance level (at least the default
// chance margin times the trivial predictor's loss: no model can learn from these inputs), a
// note when identical inputs only lower what can be learnt, or when most inputs are repeats.
void duplicate_inputs(StaticChecks& checks, const Tensor& X, const Tensor& Y, LossKind loss,
                      const std::string& input);

// The labels or targets standardized per column (axis 0 is the sample): mean 0, standard
// deviation 1.
Tensor standardized_targets(const Tensor& Y);

}  // namespace metaop
