#pragma once
// The offline HTML report of `metaop train`: loss curves of each plan, the per-node forward and
// gradient error along the model (with --check), and the findings.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/train_check.h"

namespace metaop {

struct TrainReport {
  std::string model, loss;
  std::map<std::string, std::vector<double>> losses;  // plan -> per-step loss
  const Graph* graph = nullptr;
  const TrainCheck* check = nullptr;                  // optional
  const std::vector<NodeProfile>* profile = nullptr;  // optional: time and memory per node
  std::size_t steps = 0;                              // steps the profile covers
};

// Writes DIR/index.html (self-contained: inline SVG and CSS, no scripts or network).
void write_train_report(const TrainReport& r, const std::string& dir);

// The optimizer's settings in a reproducer's repro.json, and back (throws on a missing key).
nlohmann::json optimizer_to_json(const OptimizerConfig& c);
OptimizerConfig optimizer_from_json(const nlohmann::json& j);

// A reproducer folder for a training finding under `root`: repro.json (what, where, the
// binding, the injected faults that applied, the optimizer and step for an update), the .npy
// files the judgement needs (the node's or update's inputs, for backward also the forward
// outputs and the output gradients, and what the binding produced), model.onnx (the node alone,
// for forward and backward) and a README; `metaop repro DIR` judges it again. `h` is the
// training graph (the model with its loss); `inject` the --inject specs that applied to the
// finding. Returns the folder.
std::string write_train_reproducer(const Graph& h, const TrainFinding& f,
                                   const OptimizerConfig& optimizer,
                                   const std::vector<std::string>& inject, const std::string& model,
                                   const std::string& root);

}  // namespace metaop
