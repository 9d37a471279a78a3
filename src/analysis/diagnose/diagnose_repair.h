#pragma once
// The mechanical repairs of `metaop diagnose`: a fix applied to a copy of the training setup
// (learning rate, a layer's initial weights, standardized inputs, labels, the model's graph, the
// loss, or a node bound to the reference), then the same training again with the monitors. A
// diagnosis whose repair removes its symptoms, brings no new one and lets the loss fall is
// verified.
#include "analysis/diagnose/diagnose.h"

namespace metaop {

// `s` with fix `f` applied; `attempt` 1 applies a learning-rate factor twice. `checks` are the
// original run's static checks (feature statistics, layer fans). Fails when the fix cannot be
// applied to this model.
RepairAttempt apply_fix(const TrainSetup& s, const Fix& f, int attempt, const StaticChecks& checks);

// Tries the fix of each diagnosis in rank order (a learning rate twice: the factor, then its
// square), each in a fresh training run of the full length, and records whether it verified.
void repair_and_verify(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o);

}  // namespace metaop
