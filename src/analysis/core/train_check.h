#pragma once
// `metaop train --check`: every K-th step, each node's forward and backward under its binding are
// judged against the reference on the same inputs (and output gradients), with the error models
// of `check` (src/analysis/accuracy); findings carry the phase and the step.
#include <string>
#include <vector>

#include "analysis/core/accuracy.h"
#include "analysis/core/finding.h"
#include "engine/train.h"

namespace metaop {

struct TrainFinding : FindingCore {  // kind: accuracy, nonfinite or crash
  std::string node;       // a node's name; for an update the weight (op_type: the optimizer)
  std::size_t step = 0;   // the step of the worst occurrence
  std::size_t steps = 0;  // checked steps where it occurred
  double lr = 0;          // an update's learning rate at its step (a schedule's); 0: the run's
  // What a reproducer needs, from the worst occurrence: the node's (or update's) inputs, the
  // binding's outputs, and for backward the forward outputs and output gradients.
  Tensors inputs, outputs, output_grads, got;
};

// Local check of one update step: the reference rule on the binding's own weight, gradient and
// state before the step, against the binding's new weight and state (outputs: weight, then the
// slots), with the update's error model (ops/optimizer.h).
LocalCheck check_update(const OptimizerConfig& c, long t, const Tensor& before, const Tensor& grad,
                        const Tensors& state_before, const Tensor& after,
                        const Tensors& state_after);

struct TrainCheck {
  std::size_t checked_steps = 0;
  std::vector<TrainFinding> findings;  // one per (node, binding, phase, kind), ranked by score
  // Worst local score per node along the model, forward and backward (for the report).
  std::vector<double> forward_scores, backward_scores;
  std::map<std::string, double> update_scores;  // per weight updated by a framework kernel
};

// Relative distance between two sets of weights: the largest, over tensors, of
// max|a - b| / max|b|.
double weight_drift(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b);

// Verification by replacement: trains again, same data order and steps, with the finding's node
// on the reference (only its backward for a backward finding, the weight's update for an update
// finding), and compares the final weights (for an update finding, that weight) with those of
// an all-reference run. Verified when the replacement removes at least half of the drift from
// the reference trajectory that the original run had.
void verify_train_finding(TrainFinding& f, const Graph& g, const Tensor& X, const Tensor& Y,
                          const TrainConfig& config, const std::function<Plan()>& make_plan,
                          const std::map<std::string, Tensor>& reference_weights,
                          const std::map<std::string, Tensor>& original_weights);

// Installs the hooks on `config` (check every `every` steps, the first included: forward,
// backward and update of every framework-bound node and weight) and returns
// where the findings go; valid while `config` trains.
std::shared_ptr<TrainCheck> install_train_check(const Graph& g, TrainConfig& config,
                                                std::size_t every,
                                                const AccumulationBound& bound = {});

}  // namespace metaop
