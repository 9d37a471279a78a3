#pragma once
// `metaop expose`: inputs that drive a model into NaN/INF. Every node whose meta operator
// declares a danger zone (ops/danger.h) is a target; a search moves the varied tensors (float
// inputs, trainable weights, or both, within a box) to bring each target's distance to its zone
// to 0, following the gradient of that distance through the graph's reference VJPs (GRIST,
// Yan et al. FSE 2021, with objectives from the ops instead of written by hand). A target is
// exposed when its node's values enter the zone in a run on the chosen binding and the model's
// output is non-finite because of it; the verdict names the first node that produced a
// non-finite value and explains the chain in one line.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "ops/danger.h"

namespace metaop {

enum class ExposeStrategy {
  Gradient,  // adaptive sign and Newton steps, restarts, targets scheduled by progress
  Grist,     // GRIST's plain schedule: x <- clip(x - 0.15 sign(grad)), targets in turn
  Random,    // uniform random points in the box (the baseline)
};
enum class ExposeVary { Inputs, Weights, Both };

// What became of a target: Exposed; Reached (its zone, but the model's output stayed finite);
// Stalled (no progress after restarts); Budget (still progressing when the budget ran out);
// Independent (does not depend on the varied tensors). Searching: not settled yet (internal).
enum class TargetStatus { Searching, Exposed, Reached, Stalled, Budget, Independent };

std::string strategy_name(ExposeStrategy s);
const char* to_string(TargetStatus s);
std::string vary_name(ExposeVary v);

struct ExposeOptions {
  ExposeStrategy strategy = ExposeStrategy::Gradient;
  ExposeVary vary = ExposeVary::Inputs;
  // Box of the varied inputs: [lo, hi] for every element, or (clip_from_inputs) each input's
  // own min and max over the given values (GRIST's rule).
  std::pair<double, double> clip{-1.0, 1.0};
  bool clip_from_inputs = false;
  // Per input: its own box, over the two above.
  std::map<std::string, std::pair<double, double>> input_clip;
  // When not empty: vary exactly these inputs and weights (`vary` is then Both); every other
  // tensor keeps its given value.
  std::vector<std::string> vary_names;
  // Box of a varied weight: each element within radius * max|W| of its value (max|W| of that
  // initializer; the mean of the others' for an all-zero one).
  double weight_radius = 1.0;
  std::string binding = "torch";  // the verdict runs the model on it
  double time_limit = 60;         // seconds, whole search
  std::int64_t iterations = 0;    // cap on search steps (gradient steps, random points), all
                                  // targets; 0: none, the time limit ends the search
  // Also measure each target's distance to its zone on the binding (its float32 kernels): a
  // value that float32 rounding pushes into the zone where the float64 reference stays out
  // (a probability rounded to exactly 1) counts as in the zone, and goes to the verdict.
  bool binding_distances = true;
  std::uint64_t seed = 0;
  // Gradient strategy: also start from constant inputs (each bound of the box, its middle, 0).
  bool constant_starts = true;
  // End the search at the first exposure (the other targets keep their closest approach).
  bool stop_at_first = false;
  // Called after each step: steps done, the budget's steps, seconds, exposed targets, targets.
  std::function<void(std::int64_t, std::int64_t, double, std::size_t, std::size_t)> progress;
};

// A danger zone of one node.
struct ExposeTarget {
  std::size_t node = 0;
  std::size_t zone = 0;  // index into the op's danger zones
  std::string node_name, op_type, kind, condition, unit;
  std::string watched;  // the value whose distance is measured
};

// The nodes of `g` whose ops declare a danger zone that applies to them, in graph order.
std::vector<ExposeTarget> expose_targets(const Graph& g);

struct TargetOutcome {
  ExposeTarget target;
  bool exposed = false;
  TargetStatus status = TargetStatus::Searching;
  // Exposed: the search's steps (all targets) until its exposure; otherwise the steps spent on
  // it.
  std::int64_t iterations = 0;
  double seconds = 0;  // from the start of the search to its exposure (or the end)
  double start_distance = 0, distance = 0;  // at the start point, and the closest approach
  std::string detail;                       // the zone's description at the closest point
  // (step, closest distance so far / start distance), recorded as it improves.
  std::vector<std::pair<std::int64_t, double>> history;
  // The exposing (or closest) point: every graph input, and the varied weights.
  std::map<std::string, Tensor> inputs, weights;
  // Verdict (exposed targets): the first node that produced a non-finite value on the binding,
  // the chain in one line, and the graph outputs that are non-finite.
  std::string first_node, first_op, explanation;
  std::vector<std::string> nonfinite_outputs;
  // What produced the exposing point: the start point, a constant start point, a gradient step,
  // a GRIST step, a restart, a random move or point.
  std::string found_by;
  std::vector<std::string> files;  // written by the report (input .npy files, model)
};

struct ExposeResult {
  std::string model, binding;
  ExposeStrategy strategy = ExposeStrategy::Gradient;
  ExposeVary vary = ExposeVary::Inputs;
  std::vector<std::string> varied;                         // names of the varied tensors
  std::map<std::string, std::pair<double, double>> boxes;  // overall [lo, hi] of each
  std::vector<TargetOutcome> targets;
  std::int64_t iterations = 0, evaluations = 0, verifications = 0;
  std::int64_t binding_entries = 0;  // points in a zone on the binding only (float32 rounding)
  double seconds = 0;
  std::string stop_reason;         // what ended the search, in words
  std::vector<std::string> notes;  // what the user should know (clipped inputs, fallbacks)
  bool exposed() const;
};

// `inputs`: a value for every graph input (the start point). Throws Error on bad options.
ExposeResult expose_model(const Graph& g, const std::map<std::string, Tensor>& inputs,
                          const ExposeOptions& options);

// What made the first non-finite value of a run, in one line ("Log input reached 0 at /Log
// (Softmax /Softmax underflowed to 0 for a logit gap of 112)"); `values`: every value of the
// run (keep_all). Returns the node index in `first` (g.nodes.size() when everything is finite).
std::string explain_nonfinite(const Graph& g, const std::map<std::string, Tensor>& values,
                              const std::vector<std::size_t>& run_order, std::size_t* first);

}  // namespace metaop
