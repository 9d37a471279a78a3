#pragma once
// `metaop train` as calls: a training run under a binding plan with the evaluation's injected
// faults wrapped around its kernels from outside (forward and backward bindings, update
// kernels), the `--check` hooks and the verification by replacement of the worst findings; and
// `--compare`, the same training under several bindings with where they part.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/core/train_check.h"
#include "analysis/core/train_setup.h"

namespace metaop {

struct TrainSession {
  TrainResult result;
  std::shared_ptr<TrainCheck> check;  // with --check
  std::vector<std::string> injected;  // what each injected fault did
  // What the reproducers of the findings need: the training graph (model and loss) and, per
  // finding, the --inject specs that applied to it.
  Graph training_graph;
  std::vector<std::vector<std::string>> applied;
  std::shared_ptr<RunDiagnosis> diagnosis;  // with --diagnose
};

// Trains under the setup's plan with the injected faults; with --check, judges every K-th step
// and verifies the five worst findings by replacement against an all-reference run; with
// --diagnose, watches every step (and does not train when the static checks find labels the
// loss cannot take).
TrainSession run_training(const TrainSetup& s);

// --compare B1,B2,...: the same training (initial weights, data order, steps) under each binding.
struct TrainComparison {
  std::vector<std::string> plans;
  std::map<std::string, TrainResult> runs;
  // Each other plan's weight drift from the first plan's after every step, and at the end.
  std::map<std::string, std::vector<double>> drift_per_step;
  std::map<std::string, double> final_drift;
  // On the first batch at the initial weights, the first node (in run order) whose values part
  // from the first plan's by more than 1e-4 relative ("" when none), per other plan.
  std::map<std::string, std::string> first_divergent_node;
};
TrainComparison compare_training(const TrainSetup& s, const std::vector<std::string>& plans);

}  // namespace metaop
