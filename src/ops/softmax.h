// What softmax.cpp defines for other families: the softmax family's forward error magnitude,
// which SoftmaxCrossEntropyLoss (loss.cpp) shares.
#pragma once

#include <vector>

#include "ops/params.h"

namespace metaop {

// First-order forward error magnitude (units of u) of softmax (`log` false) or log-softmax
// over the middle axis of x viewed as `split` ([outer, n, inner]), with kappa = kappa(n): shared
// by Softmax, LogSoftmax and SoftmaxCrossEntropyLoss.
std::vector<double> softmax_magnitude(const std::vector<double>& x, const AxisSplit& split,
                                      double kappa, bool log);

}  // namespace metaop
