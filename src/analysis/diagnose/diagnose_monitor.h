#pragma once
// The per-step monitors of `metaop diagnose` and `metaop train --diagnose`. They read what the
// training loop already computed at each step (engine/train.h's StepView: the loss, every value
// of the forward, the weights' gradients, the weights before and after the update) and keep a
// few numbers per step: the loss; per weight tensor its gradient norm and update-to-weight
// ratio; the ratio of the first layer's gradient norm to the last's; per activation node the
// fraction of dead (ReLU) or saturated (Sigmoid, Tanh) units. Symptoms are judged on windows of
// steps with the published thresholds (docs/diagnose.md cites each source).
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/train.h"

namespace metaop {

// Each threshold is a named option of `metaop diagnose`; the defaults are the published ones
// where there are published ones (AUTOTRAINER, ICSE 2021; DeepDiagnosis, ICSE 2022).
struct DiagnoseThresholds {
  double vanish_ratio = 1e-3;           // AUTOTRAINER beta_1: first/last gradient-norm ratio below
  double vanish_first = 1e-4;           // AUTOTRAINER beta_2: ... and the first layer's norm below
  double explode_ratio = 70;            // AUTOTRAINER beta_3: first/last gradient-norm ratio above
  double dead_fraction = 0.7;           // AUTOTRAINER gamma: share of dead ReLU units, at least
  double saturated_fraction = 0.5;      // DeepDiagnosis: share of saturated values, above
  double saturation_preactivation = 5;  // DeepDiagnosis: |pre-activation| beyond this
  double saturation_output = 1e-3;      // outputs this close to an asymptote
  double slow_gain = 0.01;              // AUTOTRAINER delta: best loss gain of a window below
  int stagnation_epochs = 5;            // DeepDiagnosis: loss unchanged over these epochs
  double stagnation_change = 1e-3;      // "unchanged": relative spread of their mean losses below
  double loss_growth = 10;              // a step's loss above this multiple of the first step's
  double converged = 0.1;               // loss below this share of the first window's: converged
  double update_ratio_high = 0.1;       // DeepDiagnosis: update/weight above (learning rate high)
  double update_ratio_low = 1e-5;       // DeepDiagnosis: update/weight below (learning rate low)
  double chance_margin = 0.8;     // a run (or a repair) must end below this share of the trivial
                                  // predictor's loss (diagnose_baseline), else: chance_level
  double oscillation_rise = 0.5;  // the epochs' mean losses rise again, in all, by at least
                                  // this share of the first epoch's: oscillating_loss
  std::size_t window = 0;         // steps per window; 0: one epoch
};

// Fails naming the option of a threshold out of its range.
void validate(const DiagnoseThresholds& t);

// The symptom kinds, in the order the documentation lists them.
const std::vector<std::string>& symptom_kinds();

// Batches: a usual size, and a run of fewer updates than kFewUpdates in all with one or two an
// epoch (batches above kUsualBatch of at least 4 kUsualBatch samples: most of the data each)
// that cannot have reached a minimum (symptom few_updates, cause batch_size).
constexpr std::int64_t kUsualBatch = 32;
constexpr std::size_t kFewUpdates = 64;
// The fewest samples for which the batch-size rules speak (a batch is then a small share).
constexpr std::int64_t kBatchRuleSamples = 4 * kUsualBatch;
bool few_updates_setting(std::size_t steps_per_epoch, std::size_t total, std::int64_t batch,
                         std::int64_t samples);

struct Symptom {
  std::string kind;           // one of symptom_kinds()
  std::size_t step = 0;       // 1-based: the first step (or the end of the first window) it shows
  std::string node, op_type;  // where: the activation, the first non-finite node, the layer
  double value = 0, threshold = 0;
  std::string detail;  // in words, with the numbers
};

// One trainable weight over the steps.
struct WeightSeries {
  std::string weight, node, op_type;  // the weight and the (first) node that reads it
  bool kernel = false;                // a layer's weight (Gemm, MatMul, Conv, ConvTranspose)
  std::vector<double> grad_norm;      // per step, L2
  std::vector<double> update_ratio;   // per step, |w_after - w_before| / |w_before|
};

// One activation node over the steps.
struct ActivationSeries {
  std::string node, op_type;
  std::size_t index = 0;  // in the graph
  // Per step: ReLU, the share of units (axis 1) whose output is 0 for every sample of the
  // batch; Sigmoid and Tanh, the share of values saturated (output within saturation_output of
  // an asymptote, or pre-activation beyond saturation_preactivation).
  std::vector<double> per_step;
  std::vector<double> per_window;  // ReLU: units dead over a whole window; else the mean share
};

struct MonitorRecord {
  DiagnoseThresholds thresholds;  // those the symptoms were judged with
  std::size_t steps_per_epoch = 0, window = 0, total = 0;
  std::int64_t batch_size = 0, samples = 0;  // the run's batch size, the data's first dim
  std::vector<double> losses;
  // Classification losses (cross_entropy, nll: the largest output is the label; bce, on
  // probabilities above 0.5 or logits above 0): per step, the share of the batch's samples
  // predicted right. Empty for the others.
  std::vector<double> accuracies;
  // The trivial predictor's loss (predicting the label frequencies or the targets' mean); NaN
  // where the loss has none.
  double trivial_loss = std::numeric_limits<double>::quiet_NaN();
  std::string trivial_what;        // what the trivial predictor predicts, in words
  double seconds = 0;              // spent in the monitors, over all steps
  std::vector<double> grad_ratio;  // per step: first layer's gradient norm / the last layer's
  std::vector<WeightSeries> weights;
  std::vector<ActivationSeries> activations;
  std::vector<Symptom> symptoms;  // in the order found
  // The model's output at the first step (initial weights): its range against the loss.
  Tensor first_output;
  // What the run was asked to leave alone and how its learning rate moved: the weights --freeze
  // named (not monitored: they get no gradient), the schedule, the initial lr, the epochs.
  std::vector<std::string> frozen;
  LrSchedule schedule;
  double lr = 0;
  int epochs = 0;
  bool has(const std::string& kind) const;
  const Symptom* first(const std::string& kind) const;
  // The mean accuracy of epoch `e` (from 0), or of the last epoch with e = SIZE_MAX; NaN
  // without accuracies.
  double epoch_accuracy(std::size_t e) const;
};

class TrainMonitor {
 public:
  // `g`: the model (without its loss); `samples`: the data's first dim.
  TrainMonitor(const Graph& g, const TrainConfig& c, std::int64_t samples,
               const DiagnoseThresholds& t);
  // The step's numbers and the symptoms they show. Returns false after a non-finite loss when
  // `stop_on_nonfinite` (every later step is non-finite too).
  bool observe(const StepView& v);
  // Judges the last, incomplete window and the loss over the epochs; idempotent.
  void finish();
  const MonitorRecord& record() const { return rec_; }
  // The trivial predictor's loss the run is judged against (chance_level).
  void set_trivial_loss(double loss, const std::string& what) {
    rec_.trivial_loss = loss;
    rec_.trivial_what = what;
  }
  bool stop_on_nonfinite = false;

 private:
  bool watch(const StepView& v);
  void add(Symptom s);
  void end_window(std::size_t step);
  void judge_gradients(const StepView& v);
  void judge_activations(const StepView& v);
  void find_nonfinite(const StepView& v);
  void judge_loss_windows();
  void judge_chance(double last_epoch, std::size_t step);
  void judge_oscillation(const std::vector<double>& means, std::size_t steps_per_epoch);
  void judge_few_updates(const std::vector<double>& means, std::size_t steps_per_epoch);
  void record_accuracy(const StepView& v);

  DiagnoseThresholds t_;
  MonitorRecord rec_;
  std::string output_;  // the model's output value
  LossKind loss_ = LossKind::MSE;
  std::size_t first_kernel_ = SIZE_MAX, last_kernel_ = SIZE_MAX;  // into rec_.weights
  std::vector<std::vector<std::uint8_t>> alive_;     // per ReLU: units alive in the window
  std::vector<double> window_ratio_, window_first_;  // gradient ratio, first norm, this window
  std::size_t window_start_ = 1, last_step_ = 0;
  bool nonfinite_searched_ = false, finished_ = false;
};

// Installs a monitor on `config` (its on_step, chained after one already there).
std::shared_ptr<TrainMonitor> install_monitor(const Graph& g, TrainConfig& config,
                                              std::int64_t samples, const DiagnoseThresholds& t,
                                              bool stop_on_nonfinite);

// The layer node (Gemm, MatMul, Conv, ConvTranspose) whose output reaches node `index` through
// element-wise, normalization and shape ops only; SIZE_MAX when there is none.
std::size_t feeding_layer(const Graph& g, std::size_t index);

}  // namespace metaop
