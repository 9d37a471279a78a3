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

// The labels or targets standardized per column (axis 0 is the sample): mean 0, standard
// deviation 1.
Tensor standardized_targets(const Tensor& Y);

}  // namespace metaop
