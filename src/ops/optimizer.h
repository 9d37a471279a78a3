#pragma once
// The update phase of training as a meta operator: one optimizer step of one weight, with its
// float64 reference (SGD with momentum / nesterov / L2 weight decay, Adam and AdamW, as
// torch.optim defines them) and its error model. Inputs: the weight, its gradient and the
// optimizer's state for it; outputs: the new weight and the new state.
#include <string>
#include <vector>

#include "ops/error_model.h"

namespace metaop {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd, adam, adamw
  double lr = 0.01, momentum = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
};

// Fails naming the flag when a hyperparameter is out of its domain (unknown kind, lr <= 0,
// negative momentum, betas outside [0, 1), eps <= 0 for adam, nesterov without momentum).
void validate(const OptimizerConfig& c);

// Settings PyTorch accepts that are almost surely mistakes (SGD momentum of 1 or more), in
// words naming the flag: run, with a warning.
std::vector<std::string> optimizer_warnings(const OptimizerConfig& c);

// The state tensors kept per weight, in order: sgd with momentum {momentum_buffer}, sgd without
// {}, adam and adamw {exp_avg, exp_avg_sq}.
std::vector<std::string> optimizer_slots(const OptimizerConfig& c);

// One element of one step, in float64: the new weight and slots (m: momentum_buffer or exp_avg,
// v: exp_avg_sq, unused by sgd).
struct UpdateElement {
  double w = 0, m = 0, v = 0;
  // Error-model magnitudes: the same computation on absolute values of every term (the
  // denominators of Adam kept as they are), so that a kernel evaluating the rule with n
  // roundings in precision u errs by at most gamma(n) * magnitude (first order).
  double w_mag = 0, m_mag = 0, v_mag = 0;
};

// The rule at step t (1-based), bias corrections computed once.
class UpdateRule {
 public:
  UpdateRule(const OptimizerConfig& c, long t);
  // `first`: the weight's first step (its state is still empty; m and v are ignored).
  UpdateElement operator()(bool first, double w, double g, double m, double v) const;

 private:
  OptimizerConfig c_;
  double b1_ = 1, b2_ = 1;
};

// Roundings on the longest path to each output of the rule as torch.optim evaluates it
// tensor-op by tensor-op (each product with a scalar counts two: the scalar's rounding and the
// product's), for the error model.
struct UpdateRoundings {
  int weight = 0, m = 0, v = 0;
};
UpdateRoundings update_roundings(const OptimizerConfig& c);

// The reference step on whole tensors, with the tolerance of each output element for a kernel
// whose outputs have the given dtypes: gamma(n) * magnitude with u of that dtype (n counts the
// output's final rounding), plus n subnormal spacings of that dtype (underflow). `slots` empty:
// the first step.
struct UpdateReference {
  Tensor weight;  // float64
  Tensors slots;  // float64, in optimizer_slots() order
  std::vector<double> weight_tol;
  std::vector<std::vector<double>> slot_tols;
};
UpdateReference reference_update(const OptimizerConfig& c, long t, const Tensor& weight,
                                 const Tensor& grad, const Tensors& slots, DType weight_dtype,
                                 DType state_dtype);

// The faithful evaluation of one step in the weight's dtype (triage, analysis/core/triage.h):
// the algorithm as PyTorch's documentation of SGD, Adam and AdamW writes it, operation by
// operation, each result and each scalar (lr, momentum, the betas, the bias corrections) rounded
// to that dtype as a tensor operation of that dtype reads it. Returns the new weight and slots
// (optimizer_slots() order), all in the weight's dtype as torch.optim keeps its state; `slots`
// empty: the first step.
Tensors faithful_update(const OptimizerConfig& c, long t, const Tensor& weight, const Tensor& grad,
                        const Tensors& slots);

}  // namespace metaop
