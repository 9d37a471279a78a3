#pragma once
// A layer too narrow for its task (an `architecture` cause): a hidden dense layer narrower than
// the model's output squeezes what the output can tell apart. Its loss falls, only to a level
// no monitor symptom tells from what the data allow, so the check is an experiment: the same
// training with that layer widened. When the wider model ends clearly lower, the layer is the
// cause and widening it is the fix (verified like every repair, by retraining).
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/diagnose/diagnose.h"

namespace metaop {

// A hidden dense layer (Gemm or MatMul with a weight) that feeds the next dense layer through
// element-wise activations only, and is narrower than the model's output.
struct NarrowLayer {
  std::string node, next;    // the layer and the layer it feeds
  std::int64_t width = 0;    // its outputs
  std::int64_t output = 0;   // the model's output width (the last layer's outputs)
  std::int64_t widened = 0;  // the width the check tries: max(2 output, 4 width)
};

// The narrow layers of g (none for an autoencoder, whose targets are its inputs: a bottleneck is
// its design).
std::vector<NarrowLayer> narrow_layers(const Graph& g, const Tensor& X, const Tensor& Y);

// g with `node`'s outputs widened to `width`: its weight and bias, and the next layer's weight,
// drawn anew as PyTorch initializes a Linear of the new sizes (uniform, bound 1/sqrt(fan_in)),
// seeded by `seed`; the next layer's bias kept. Throws Error when `node` is not such a layer.
Graph widen_layer(const Graph& g, const std::string& node, std::int64_t width, std::uint64_t seed);
// The seed of the check's widening, which its repair repeats.
inline std::uint64_t widen_seed(const TrainSetup& s) {
  return 0x71de + s.config.seed;
}

// The experiments that train a changed model again (this check, diagnose_dropout) run when the
// run ends above kExperimentAbove of its trivial predictor's loss and nothing definite, no
// framework kernel and no cause with more evidence than "nothing else explains it" (0.4) is
// named; a changed model counts when its last epoch ends below kClearlyLower times the run's.
constexpr double kExperimentAbove = 1.0 / 3, kClearlyLower = 0.7;
// The mean loss of a run's last epoch.
double last_epoch_loss(const MonitorRecord& rec);
// The run's symptoms of a loss that stays high (chance_level, stagnant_loss, slow_convergence),
// as labels: what a cause found by an experiment explains.
std::vector<std::string> stall_symptoms(const MonitorRecord& rec);
// The run's last-epoch loss when the experiments apply to it, NaN when they do not.
double unexplained_loss(const DiagnoseResult& r);

// The check, after the run: when the run ends above a third of its trivial predictor's loss and
// nothing definite, no framework kernel and no cause with more evidence than "nothing else
// explains it" is named, each narrow layer is widened and the setup trained again; a wider model
// whose last epoch ends below 0.7 times the run's is an `architecture` diagnosis of that layer,
// with the widening as its fix.
void width_check(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o);

}  // namespace metaop
