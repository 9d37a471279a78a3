#pragma once
// `metaop diagnose`: finds why a training run fails and says where. Static checks of the graph
// and the data before training; monitors at every step (diagnose_monitor); each symptom mapped
// to root causes with a category and a place (diagnose_rules); the model-or-framework split,
// replaying the first failing steps with every node and update on the float64 reference and,
// when the symptom goes away there, naming the framework kernel with `train --check`; and
// mechanical repairs verified by training again (diagnose_repair).
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "analysis/core/train_check.h"
#include "analysis/core/train_setup.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_types.h"

namespace metaop {

// What the static checks and the monitors of one run found, and the causes.
struct RunDiagnosis {
  StaticChecks checks;
  MonitorRecord record;
  std::vector<Diagnosis> diagnoses;  // ranked
  bool trained = false;              // false when the static checks stopped it (labels)
  bool healthy() const { return diagnoses.empty() && record.symptoms.empty(); }
};

// `train --diagnose` and every run of `diagnose`: the static checks, then the monitor installed
// on `config` (chained after its on_step); finish() judges the last window and applies the rules.
class RunMonitor {
 public:
  RunMonitor(const TrainSetup& s, TrainConfig& config, const DiagnoseThresholds& t,
             bool stop_on_nonfinite);
  RunDiagnosis finish();
  const StaticChecks& checks() const { return checks_; }

 private:
  const TrainSetup& s_;
  DiagnoseThresholds t_;
  StaticChecks checks_;
  std::shared_ptr<TrainMonitor> monitor_;
};

// `train --diagnose`: what TrainSetup::diagnose makes for each run, a RunMonitor with `t` that
// lets the run go on after a non-finite loss.
MakeTrainWatch diagnose_watch(const DiagnoseThresholds& t);

// A monitored training run of the setup (its plan and injected faults), stopped after a
// non-finite loss or after `max_steps` (0: all); `on_reference`: every node and update on the
// reference, without faults.
struct MonitoredRun {
  RunDiagnosis diagnosis;
  TrainResult result;
  std::vector<std::string> injected;  // what each injected fault did
};
MonitoredRun monitored_run(const TrainSetup& s, const DiagnoseThresholds& t,
                           std::size_t max_steps = 0, bool on_reference = false);

// The model-or-framework split.
struct ReplaySplit {
  bool done = false;
  std::string note;       // why it was not needed, or what it found, in words
  std::size_t steps = 0;  // steps replayed on the reference
  std::vector<Symptom> replay_symptoms;
  std::vector<std::string> vanished;  // symptom labels of the run absent from the replay
  // train --check on the run's plan over the first failing steps, when symptoms vanished.
  std::shared_ptr<TrainCheck> check;
  std::size_t checked_steps = 0;
  Graph training_graph;                           // for the findings' reproducers
  std::vector<std::vector<std::string>> applied;  // per finding: the --inject specs
};

// "Overfit a small batch": a run that ends at chance level is trained again on a few samples
// (the same model, optimizer and plan, many steps). A model that fits them but not the whole
// data set is not at fault: its labels do not follow from its inputs.
struct SmallBatchCheck {
  bool done = false, fitted = false;
  std::size_t samples = 0, steps = 0;
  double last = 0, trivial = 0;  // the last steps' mean loss, the samples' trivial predictor's
  std::string note;              // what it showed, in words
};

struct RepairAttempt {
  std::size_t diagnosis = 0;  // index into DiagnoseResult::diagnoses
  // A repair of two faults at once: the other diagnosis whose fix it applies too (SIZE_MAX: none).
  std::size_t partner = SIZE_MAX;
  std::string description;  // what was changed
  TrainSetup setup;         // the repaired setup
  bool graph_changed = false, weights_changed = false, data_changed = false, labels_changed = false,
       hparams_changed = false, loss_changed = false;
  std::vector<Symptom> symptoms;         // what the retrained run showed
  std::vector<std::string> remaining;    // definite static faults left
  double loss_first = 0, loss_last = 0;  // mean of the first and the last quarter of its steps
  double trivial = 0;  // the trivial predictor's loss on the repaired data (0: none)
  // Classification: the repaired run's accuracy in its last epoch (NaN otherwise).
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  std::size_t steps = 0;
  bool verified = false;
  std::string result;  // in words
};

struct DiagnoseOptions {
  DiagnoseThresholds thresholds;
  bool repair = true;
  std::size_t max_repairs = 8;
  std::function<void(const std::string&)> status;  // one line per phase
};

struct DiagnoseResult {
  RunDiagnosis run;
  TrainResult result;                 // of the monitored run
  std::vector<std::string> injected;  // what each injected fault did
  ReplaySplit split;
  SmallBatchCheck small_batch;
  std::vector<Diagnosis>& diagnoses() { return run.diagnoses; }
  const std::vector<Diagnosis>& diagnoses() const { return run.diagnoses; }
  std::vector<RepairAttempt> repairs;
  bool healthy() const { return run.healthy(); }
};

DiagnoseResult diagnose(const TrainSetup& s, const DiagnoseOptions& o);

}  // namespace metaop
