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
#include "analysis/diagnose/diagnose_monitor.h"
#include "bindings/fault_injection.h"
#include "engine/train.h"

namespace metaop {

// What a training run is asked to do (the command line, parsed).
struct TrainSetup {
  std::string model;                   // the file, for messages and reproducers
  std::string loss;                    // --loss as given
  std::string data_path, labels_path;  // --data and --labels, for messages
  Graph graph;
  Tensor X, Y;
  TrainConfig config;  // loss, optimizer, epochs, batch size, seed, update kernels, progress
  std::string bind = "reference";
  // The plan whose default is `bind` (with --bind-op and the thread settings applied).
  std::function<Plan(const std::string& bind)> make_plan;
  std::vector<std::string> bind_update;  // --bind-update specs
  std::vector<std::string> inject;       // --inject specs, as given
  bool check = false;
  std::size_t check_every = 1;
  // --diagnose: the static checks and the per-step monitors of `metaop diagnose`, with the
  // rules that map symptoms to causes (no replay, no repair).
  bool diagnose = false;
  DiagnoseThresholds thresholds;
};

// The update kernels of a plan whose nodes run on `bind`: those `specs` name (BINDING, or
// WEIGHT_NODE_OR_OP=BINDING), else the binding's own optimizer when it has one, else the
// reference's rule.
void configure_update(TrainConfig& c, const Graph& g, const std::string& bind,
                      const std::vector<std::string>& specs);

// The injected faults of a run (--inject), parsed and checked against the model: forward and
// backward faults wrap the plan's framework bindings, update faults the update kernels.
class InjectedFaults {
 public:
  InjectedFaults(const Graph& g, const std::vector<std::string>& specs, const std::string& model);
  // The plan of `setup` with its framework bindings wrapped; `track`: keep the wrappers' logs
  // (valid while the plan lives).
  Plan plan(const TrainSetup& setup, bool track);
  // `c` with its update kernels wrapped; `track` as for plan().
  TrainConfig config(const TrainConfig& c, bool track);
  // What each tracked fault did, one line each: forward and backward faults by binding and node,
  // then update faults by weight.
  std::vector<std::string> log() const;
  // The specs that apply to a finding of this phase under this binding.
  std::vector<std::string> applied(Phase phase, const std::string& binding) const;

 private:
  std::vector<std::string> specs_;
  std::vector<FaultSpec> parsed_, kernel_;
  std::map<std::string, std::map<std::string, FaultSpec>> update_;  // binding -> weight -> fault
  std::vector<FaultyBinding*> bindings_;
  std::shared_ptr<std::vector<std::shared_ptr<FaultyUpdate>>> updates_ =
      std::make_shared<std::vector<std::shared_ptr<FaultyUpdate>>>();
};

struct RunDiagnosis;  // analysis/diagnose.h

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
