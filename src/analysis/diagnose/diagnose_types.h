#pragma once
// What `metaop diagnose` says: root causes (diagnoses) with a category, a place, the evidence
// and a mechanical fix; and what it knows before training (static checks of the graph and the
// data). Plain data shared by diagnose_static, diagnose_rules, diagnose_repair and diagnose.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bindings/phase.h"

namespace metaop {

// A mechanical repair, applied to a copy of the training setup (diagnose_repair).
struct Fix {
  // learning_rate (multiply by `factor`; tried once more with factor^2 when the first fails),
  // weight_decay (multiply by `factor`), momentum (set to `factor`), standardize_targets,
  // reinitialize (`node`'s weight with `init`, its bias zeroed), standardize (the inputs, per
  // feature), shift_labels (by `shift`), remove_node (the output's Softmax: its input becomes
  // the output), replace_op (every hidden node of op type `from`, or `node` alone, becomes
  // `op_type`), swap_loss (to `loss`), rebind (`node`'s `phase` -- forward, backward, or the
  // update of weight `node` -- to the reference), insert_relu (a Relu after every layer but
  // the last), batch_size (set to `factor`), widen_layer (`node`'s outputs to `factor`, and
  // the next layer's inputs with them), dropout_ratio (`node`'s ratio set to `factor`).
  std::string kind;
  std::string description;  // in words
  double factor = 1;
  std::string node, from, op_type, init, loss;
  std::vector<std::string> also;  // reinitialize: other layers re-initialized with `node`
  Phase phase = Phase::Forward;
  std::int64_t shift = 0;
  bool empty() const { return kind.empty(); }
};

struct Diagnosis {
  // hyperparameter, initialization, activation, architecture, data, loss, framework
  std::string category;
  std::string hyperparameter;  // learning_rate, weight_decay, momentum, batch_size, ...
  std::string node, op_type;   // the place: a layer, an activation, the loss's input, a kernel
  std::string weight;          // initialization: the weight; framework: an updated weight
  std::string binding;         // framework: the binding of the faulty kernel,
  std::optional<Phase> phase;  // and its phase
  std::string input;           // data: a model input, or "labels"
  std::vector<std::int64_t> features;  // data: the features concerned (axis 1 of the input)
  std::string loss;                    // loss: the mismatch, in words
  std::string evidence;
  double score = 0;                   // strength of the evidence, for the ranking (0..1)
  std::vector<std::string> symptoms;  // the symptoms it explains: "kind" or "kind@node"
  Fix fix;
  bool fix_tried = false, fix_verified = false;
  std::string fix_result;  // how the repair went, in words
  std::string repro;       // framework: the reproducer folder of the kernel's finding
  bool definite = false;   // from a static check: a fault whatever the run shows
};

// The phase of a framework diagnosis's kernel, in words ("" for other categories).
inline const char* phase_text(const Diagnosis& d) {
  return d.phase ? to_string(*d.phase) : "";
}

// One layer (Gemm, MatMul, Conv, ConvTranspose with a trainable weight) at initialization.
struct LayerInit {
  std::string node, op_type, weight, bias;
  std::int64_t fan_in = 0, fan_out = 0;
  double gain = 0;         // std(weight) * sqrt(fan_in): about 0.58 for PyTorch's default
  double bias_mean = 0;    // 0 without a bias
  std::string activation;  // the Relu, Sigmoid, Tanh or LeakyRelu it feeds, when it feeds one
  bool first = false;      // reads the model's input
  bool symmetric = false;  // its units start identical and stay so (symmetric_layers)
};

struct StaticChecks {
  std::vector<Diagnosis> definite;  // loss mismatches, labels out of range, non-finite data
  std::vector<std::string> notes;   // harmless, said once (LogSoftmax before cross_entropy)
  // Per feature of the first input (axis 1: columns, or channels of images): mean, standard
  // deviation, and the features whose scale is far from 1 or from the others'.
  std::vector<double> feature_mean, feature_std;
  std::vector<std::int64_t> off_scale;
  double off_scale_factor = 1;  // how far the farthest is: from 1, or from the median feature
  std::string data_detail;      // why they are off, in words
  std::vector<LayerInit> layers;
  std::int64_t classes = 0;  // cross_entropy and nll: the output's axis 1, when known
  bool trainable = true;     // false when the labels make training fail (out of class range)
  // The trivial predictor's loss (diagnose_baseline): NaN where there is none.
  double trivial_loss = std::numeric_limits<double>::quiet_NaN();
  std::string trivial_what;  // what it predicts, in words
  // mse: the largest |mean| or standard deviation of a target column, and that column's.
  double target_scale = 1, target_mean = 0, target_sd = 1;
  // Samples whose inputs are identical, bit for bit: how many distinct inputs the samples have,
  // and the lowest loss any model can reach when it must give identical inputs one prediction
  // (the labels' entropy or variance within each group; NaN when every input is distinct).
  std::int64_t samples = 0, distinct_inputs = 0;
  double floor_loss = std::numeric_limits<double>::quiet_NaN();
  // Features (axis 1 of the first input) with one value in every sample.
  std::vector<std::int64_t> constant_features;
  // The layers (in graph order) when the model has two or more and nothing between them but
  // ops that keep it affine: the model computes what one layer would.
  std::vector<std::string> linear_layers;
};

}  // namespace metaop
