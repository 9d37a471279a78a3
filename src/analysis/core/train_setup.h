#pragma once
// What a training run is asked to do (TrainSetup), the update kernels of its plan and the
// injected faults wrapped around its kernels from outside: shared by `metaop train`
// (analysis/train) and `metaop diagnose` (analysis/diagnose). A run's watch (TrainWatch) is the
// interface through which `train --diagnose` runs diagnose's monitors without either capability
// including the other.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/fault_injection.h"
#include "engine/train.h"

namespace metaop {

struct TrainSetup;
struct RunDiagnosis;  // what a watch found (analysis/diagnose/diagnose.h)

// Watches a training run beside the check: made before the run on its config (chained after
// its on_step), asked whether the run may train, and finished after it.
class TrainWatch {
 public:
  virtual ~TrainWatch() = default;
  // False when the static checks found labels the loss cannot take: the run does not train.
  virtual bool trainable() const = 0;
  // Judges the last window and applies the rules.
  virtual std::shared_ptr<RunDiagnosis> finish() = 0;
};
using MakeTrainWatch =
    std::function<std::unique_ptr<TrainWatch>(const TrainSetup& s, TrainConfig& config)>;

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
  // rules that map symptoms to causes (no replay, no repair); empty without --diagnose
  // (analysis/diagnose/diagnose.h: diagnose_watch).
  MakeTrainWatch diagnose;
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

}  // namespace metaop
