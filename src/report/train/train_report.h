#pragma once
// The offline HTML report of `metaop train`: loss curves of each plan, the per-node forward and
// gradient error along the model (with --check), and the findings.
#include <map>
#include <string>
#include <vector>

#include "analysis/core/train_check.h"

namespace metaop {

struct TrainReport {
  std::string model, loss;
  std::map<std::string, std::vector<double>> losses;  // plan -> per-step loss
  const Graph* graph = nullptr;
  const TrainCheck* check = nullptr;                  // optional
  const std::vector<NodeProfile>* profile = nullptr;  // optional: time and memory per node
  std::size_t steps = 0;                              // steps the profile covers
  std::size_t steps_per_epoch = 0;                    // 0: not known (no epoch marks)
};

// Writes DIR/index.html (self-contained: inline SVG, CSS and, with --check, the graph view's
// pan-and-zoom script; nothing fetched).
void write_train_report(const TrainReport& r, const std::string& dir);

}  // namespace metaop
