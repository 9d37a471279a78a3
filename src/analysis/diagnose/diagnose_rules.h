#pragma once
// From symptoms to root causes: each symptom of a run is mapped to the causes that can produce
// it (docs/diagnose.md lists the rules), each with a category, a place, the evidence that ranks
// it and a mechanical fix when there is one. A cause shared by several symptoms is one
// diagnosis that lists them.
#include <vector>

#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_types.h"

namespace metaop {

// Initial weight gains (std * sqrt(fan_in)) outside [kGainLow, kGainHigh] are abnormal:
// PyTorch's default gives 0.58, He 1.41, Xavier at most 1.41.
constexpr double kGainLow = 0.1, kGainHigh = 4;
// Within those bounds, layers whose gains compound through a deep stack: a layer above
// kGainCompound (He's gain by sqrt 2) amplifies its input; when the product of every layer's gain
// (over sqrt 2 before a Relu or LeakyRelu, which keeps the signal's scale under He's
// initialization) reaches kCompoundHigh and the first step's loss, at the initial weights, is
// kFirstLossHigh times the trivial predictor's or more, the outputs start far off scale.
constexpr double kGainCompound = 2, kCompoundHigh = 10, kFirstLossHigh = 10;

// The causes of the static checks' definite faults and of the run's symptoms, ranked by the
// strength of their evidence (definite faults first). `g` is the model without its loss.
std::vector<Diagnosis> diagnose_causes(const Graph& g, const StaticChecks& checks,
                                       const MonitorRecord& run, const OptimizerConfig& optimizer,
                                       const DiagnoseThresholds& t);

// "kind" or "kind@node": how a diagnosis names a symptom it explains.
std::string symptom_label(const Symptom& s);

// A cause found by an experiment (the small-batch check, a layer widened, a dropout lowered)
// explains its symptoms: the causes named for them only because nothing else explained them
// (score 0.4 or less) no longer stand for those symptoms, and those left explaining nothing are
// removed from `list`.
void supersede_fallbacks(std::vector<Diagnosis>& list, const Diagnosis& found);

// An initialization diagnosis of layer `l` whose fix re-initializes it (He before a Relu or
// LeakyRelu, else Xavier normal; its bias zeroed).
Diagnosis initialization_diagnosis(const LayerInit& l, double score, std::string evidence);
// Whether d explains a symptom whose label starts with `label` (a kind matches every node).
bool explains(const Diagnosis& d, const std::string& label);

}  // namespace metaop
