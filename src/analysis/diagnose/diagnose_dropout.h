#pragma once
// A dropout ratio too high (a `hyperparameter` cause): a training-mode Dropout that drops most of
// its units leaves each step a small random part of the layer to learn with, and the loss stays
// high without any monitor symptom that says why. Like the width check (diagnose_width), the
// check is an experiment: the same training with the ratio lowered.
#include <string>
#include <vector>

#include "analysis/diagnose/diagnose.h"

namespace metaop {

// A Dropout node in training mode (opset 12 on: its training_mode input a constant true) with a
// constant ratio above kDropoutHigh.
struct HighDropout {
  std::string node;
  double ratio = 0;
};
// Above this ratio a Dropout keeps fewer than half of its units: Srivastava et al. (JMLR 2014,
// "Dropout: A Simple Way to Prevent Neural Networks from Overfitting") retain half of the hidden
// units at most, and 0.8 of the inputs.
constexpr double kDropoutHigh = 0.5;

std::vector<HighDropout> high_dropouts(const Graph& g);

// g with `node`'s ratio set to `ratio` (its ratio initializer or Constant replaced; added when
// the node has none). Throws Error when `node` is not a Dropout of g.
Graph set_dropout_ratio(const Graph& g, const std::string& node, double ratio);

// The check, after the run: when the run ends above a third of its trivial predictor's loss and
// nothing definite, no framework kernel and no cause with more evidence than "nothing else
// explains it" is named, each high Dropout's ratio is lowered to kDropoutHigh and the setup
// trained again; a run whose last epoch ends below 0.7 times the run's is a `hyperparameter`
// diagnosis (`dropout`) of that node, with the lowered ratio as its fix.
void dropout_check(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o);

}  // namespace metaop
