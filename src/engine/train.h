#pragma once
// Training under a binding plan: a loss appended to the model, mini-batches of seeded shuffled
// data, forward and backward node by node (each on the binding the plan names), and an optimizer
// that updates the trainable initializers on each weight's update kernel (the float64 reference
// rule, or a framework's optimizer: bindings/update_kernel.h).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/update_kernel.h"
#include "engine/autodiff.h"

namespace metaop {

// mse, cross_entropy (from logits), nll (from log-probabilities), bce (from probabilities),
// bce_with_logits, output (the model's own scalar output).
enum class LossKind { MSE, CrossEntropy, NLL, BCE, BCEWithLogits, Output };
LossKind parse_loss(const std::string& s);
extern const char* const kLossOutput;   // name of the appended loss value
extern const char* const kLabelsInput;  // name of the appended labels input

// The model with the loss appended: inputs gain kLabelsInput (of `labels_dtype`, batch-sized),
// and the only output is kLossOutput, the mean loss over the batch.
Graph with_loss(const Graph& g, LossKind kind, DType labels_dtype);

// Training-mode BatchNormalization nodes write their running statistics (outputs 1 and 2) back
// into the mean and var initializers they read, as a framework's module state would.
void update_running_stats(Graph& g, const RunResult& forward);

// What the update hook sees of one weight's step.
struct UpdateCall {
  std::string weight, binding;
  long t = 0;  // 1-based
  const Tensor *before = nullptr, *grad = nullptr, *after = nullptr;
  const Tensors *state_before = nullptr, *state_after = nullptr;  // empty before the first step
  const OptimizerConfig* optimizer = nullptr;  // the settings of this step (a schedule's lr)
  // The kernel crashed or hung (in its worker): what happened; the step then ran on the
  // reference, from the kernel's state, and the kernel was given the reference's state after it.
  std::string crash;
  bool hang = false;
};

// What one step computed, handed to a monitor (analysis/diagnose) after the step's update: the
// loop's own values, nothing recomputed or copied.
// The rows `rows` of x (indices along axis 0): a batch of samples.
Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& rows);

struct StepView {
  std::size_t step = 0, total = 0;  // step is 1-based
  double loss = 0;
  const Graph* graph = nullptr;        // the training graph (the model and its loss)
  const RunResult* forward = nullptr;  // every value of the forward (kept for the backward)
  const std::map<std::string, Tensor>* grads = nullptr;  // of each trainable weight
  // The trainable weights before the update (the tensors the update replaced: update kernels
  // return new tensors), and every initializer after it.
  const std::map<std::string, Tensor>* previous = nullptr;
  const std::map<std::string, Tensor>* weights = nullptr;
};

// A learning-rate schedule, stepped after each epoch as PyTorch's schedulers are: step:N:GAMMA
// (StepLR: times GAMMA every N epochs), exp:GAMMA (ExponentialLR), cosine (CosineAnnealingLR
// over the run's epochs, down to 0), or none.
struct LrSchedule {
  std::string kind = "none";
  int step = 1;
  double gamma = 1;
  std::string text() const;  // as written on the command line
};
// Fails naming --lr-schedule and the value when it is not one of the forms above.
LrSchedule parse_lr_schedule(const std::string& s);
// The learning rate of epoch `epoch` (0-based) of `epochs`, from `lr`.
double scheduled_lr(const LrSchedule& s, double lr, int epoch, int epochs);

struct TrainConfig {
  LossKind loss = LossKind::CrossEntropy;
  OptimizerConfig optimizer;
  // The update kernel of every weight (reference, torch), but the weights `update_bind` names.
  std::string update_binding = "reference";
  std::map<std::string, std::string> update_bind;
  // Makes the update kernel of a binding, once per binding a run uses (default:
  // make_update_kernel). Evaluation hands in kernels it has wrapped (bindings/fault_injection):
  // the loop does not know whether a kernel is faulty.
  std::function<std::shared_ptr<UpdateKernel>(const std::string& binding, const OptimizerConfig&)>
      make_update;
  LrSchedule schedule;
  // Weights training leaves as they are (fine-tuning's frozen layers): weight names, node names
  // or op types, as weights_named() resolves them. They get no gradient and no update.
  std::vector<std::string> frozen;
  int epochs = 1;
  std::int64_t batch_size = 32;
  std::uint64_t seed = 0;
  // After each step: (step, total steps, loss).
  std::function<void(std::size_t, std::size_t, double)> progress;
  // After each step's update, with the model's current initializers.
  std::function<void(std::size_t step, const std::map<std::string, Tensor>& initializers)>
      after_step;
  // Checking hooks (src/analysis/train_check): on the steps `watch` selects (1-based), the
  // forward run and each node's backward.
  std::function<bool(std::size_t step)> watch;
  std::function<void(std::size_t step, const Graph& g, const RunResult& forward)> on_forward;
  std::function<void(std::size_t step, const Node&, const Tensors& inputs, const Tensors& outputs,
                     const Tensors& output_grads, const Tensors& input_grads, const NodeRecord&)>
      on_backward;
  std::function<void(std::size_t step, const UpdateCall&)> on_update;
  // Monitor of every step; returning false ends training after that step (the result holds the
  // steps run).
  std::function<bool(const StepView&)> on_step;
};

// Time and memory of one node of the training graph (the model and its loss) over all steps.
struct NodeProfile {
  std::string node, op_type;
  double forward_seconds = 0, backward_seconds = 0;  // summed over the steps
  std::int64_t forward_peak = 0, backward_peak = 0;  // the largest heap peak of one call
  std::string forward_binding, backward_binding;     // what ran it (the last step)
};

// The n nodes with the most forward and backward time.
std::vector<const NodeProfile*> slowest(const std::vector<NodeProfile>& profile, std::size_t n);

struct TrainResult {
  std::vector<double> losses;             // per step
  std::vector<double> step_seconds;       // per step: forward, backward and update
  std::vector<NodeProfile> profile;       // per node of the training graph, in graph order
  std::map<std::string, Tensor> weights;  // every initializer of the model, as trained
  std::vector<std::string> trainable;     // what training updated (the frozen ones left out)
  std::vector<std::string> frozen;        // the weights --freeze named
  std::map<std::string, std::string> update_bindings;  // weight -> the kernel that updated it
};

// The weights `target` names (an update binding's or fault's): the weight itself, or the
// trainable initializers read by the nodes of that name or op type.
std::vector<std::string> weights_named(const Graph& g, const std::vector<std::string>& trainable,
                                       const std::string& target);

// The trainable initializers that config's --freeze leaves to train, and those it freezes;
// fails naming a --freeze entry that names no trainable weight.
std::vector<std::string> trained_weights(const Graph& g, const TrainConfig& config,
                                         std::vector<std::string>* frozen = nullptr);

// X: [N, ...] model inputs (the model's first input), Y: [N, ...] labels.
TrainResult train(const Graph& g, const Tensor& X, const Tensor& Y, Plan& plan,
                  const TrainConfig& config);

}  // namespace metaop
