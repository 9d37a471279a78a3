#pragma once
// Training under a binding plan: a loss appended to the model, mini-batches of seeded shuffled
// data, forward and backward node by node (each on the binding the plan names), and an optimizer
// that updates the trainable initializers (float64 arithmetic, rounded once to each weight's
// dtype, so that every plan gets the same update rule).
#include <functional>
#include <map>
#include <string>
#include <vector>

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

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd, adam, adamw
  double lr = 0.01, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
};

// SGD (momentum, nesterov, L2 weight decay) and Adam / AdamW, as PyTorch defines them.
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig c);
  Tensor step(const std::string& name, const Tensor& weight, const Tensor& grad);
  void next_step() { ++t_; }

 private:
  Tensor step_f32(const std::string& name, const Tensor& weight, const Tensor& grad);
  OptimizerConfig c_;
  long t_ = 1;
  std::map<std::string, std::vector<double>> m_, v_;
};

struct TrainConfig {
  LossKind loss = LossKind::CrossEntropy;
  OptimizerConfig optimizer;
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
};

struct TrainResult {
  std::vector<double> losses;             // per step
  std::vector<double> step_seconds;       // per step: forward, backward and update
  std::map<std::string, Tensor> weights;  // every initializer of the model, as trained
  std::vector<std::string> trainable;
};

// X: [N, ...] model inputs (the model's first input), Y: [N, ...] labels.
TrainResult train(const Graph& g, const Tensor& X, const Tensor& Y, Plan& plan,
                  const TrainConfig& config);

}  // namespace metaop
