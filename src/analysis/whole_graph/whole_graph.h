#pragma once
// Whole-graph mode: the entire model runs in a framework as its users run it (ONNX Runtime with
// its graph optimizations, OpenCV importing the whole model with its layer fusions), and its
// outputs are judged against the float64 reference with the same framework's node-by-node run
// as the yardstick. A discrepancy that node-by-node mode does not show is localized by
// reduction: prefixes of the model bisected, then windows fed with the reference's values
// grown from the first tensor that shows it; the optimization level that introduces it is
// found, and the reduced model is written and re-run as the reproducer. The rule is in
// docs/whole-graph.md.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/core/accuracy.h"
#include "bindings/whole_model.h"
#include "graph/graph.h"

namespace metaop {

struct WholeGraphOptions {
  std::vector<std::string> bindings;  // those with a whole-model mode
  std::vector<FusionFault> faults;    // planted whole-graph defects (evaluation)
  double factor = 16;                 // K of the rule
  bool reduce = true;
  std::string repro_root;               // where reduced models go ("" : not written)
  std::vector<std::string> extra_args;  // passed on to the reproducer's command (--inject-fusion)
  std::function<void(const std::string&)> progress;
};

// A tensor of a whole-graph run judged against the reference, next to the node-by-node run.
struct TensorVerdict {
  std::string value;
  double whole = 0, node_by_node = 0;  // normwise relative errors against the reference
  double yardstick = 0;                // max(node_by_node, floor)
  std::int64_t whole_nonfinite = 0, nbn_nonfinite = 0;  // non-finite on one side only
  // In absolute terms: the elements, and the non-finite values of each run and the reference.
  std::int64_t elements = 0;
  std::int64_t whole_nonfinite_values = 0, nbn_nonfinite_values = 0, ref_nonfinite_values = 0;
  std::string mismatch;  // shape or dtype the reference does not have
  bool bad = false;
};

struct Reduction {
  std::size_t nodes = 0;                 // N, nodes of the model
  int prefix_runs = 0, window_runs = 0;  // whole-graph framework runs while localizing
  int level_runs = 0, verify_runs = 0;   // and on the reduced model
  int node_by_node_runs = 0;             // the yardstick runs of the windows (MetaOp's executor)
  int budget = 0;                        // ceil(log2 N) + 4
  std::string first_value;               // the first tensor (prefix bisection) that shows it
  std::vector<std::string> window;       // the reduced model's nodes, in order
  std::vector<std::string> window_ops;
  std::string level;  // the lowest level that shows it (Refused: that refuses the reduced model)
  std::vector<std::pair<std::string, bool>> levels_tried;
  TensorVerdict evidence;  // the reduced model's output
  bool verified = false;   // re-running the written reproducer shows it again
  std::string verification;
  std::string repro;  // folder
  std::string note;   // when the reduction could not narrow it down
  // The reduced model, its inputs (the reference's values there) and the reference's outputs.
  Graph graph;
  std::map<std::string, Tensor> inputs, reference;
};

// A whole-model run against the node-by-node run: ok, a discrepancy beyond the rule, or the
// framework refused the model, crashed or hung. `Refused`: it refuses the model at the users'
// level but runs it at its lowest -- its optimizations break a model it supports, a defect
// (`Unsupported`: it refuses it at every level, a limitation).
enum class WholeGraphStatus { Ok, Discrepancy, Unsupported, Refused, Crash, Hang };
std::string_view to_string(WholeGraphStatus s);

struct WholeGraphVerdict {
  std::string binding, level;
  std::string level_option;  // the option that chooses the level ("--ort-opt"), if any
  std::string runs_at;       // Refused: the lowest level, at which the framework runs the model
  int sample = 0;
  WholeGraphStatus status = WholeGraphStatus::Ok;
  std::string detail;
  std::vector<TensorVerdict> outputs;
  double seconds_whole = 0, seconds_node_by_node = 0;
  std::optional<Reduction> reduction;
  bool defect() const {
    return status == WholeGraphStatus::Discrepancy || status == WholeGraphStatus::Refused ||
           status == WholeGraphStatus::Crash || status == WholeGraphStatus::Hang;
  }
};

struct WholeGraphResult {
  std::vector<WholeGraphVerdict> verdicts;
  bool defects() const;
};

// `model_path`: the file (its bytes are what the frameworks get for the whole model).
WholeGraphResult check_whole_graph(const Graph& g, const std::string& model_path,
                                   const std::vector<std::map<std::string, Tensor>>& samples,
                                   const WholeGraphOptions& options);

// Re-runs a reduced model (as read back from its reproducer) whole at `level` and judges its
// outputs with the rule; true when the discrepancy shows again (`evidence` then says how). With
// `refusal`, what must show again is the framework refusing it at `level`.
bool verify_reduced(const Graph& reduced, const std::map<std::string, Tensor>& inputs,
                    const std::map<std::string, Tensor>& reference, const std::string& binding,
                    const std::string& level, const WholeGraphOptions& options,
                    TensorVerdict& evidence, bool refusal = false);

// Judges one tensor: whole-graph value, node-by-node value, reference value.
TensorVerdict judge_tensor(const std::string& name, const Tensor& whole, const Tensor& nbn,
                           const Tensor& ref, double factor);

}  // namespace metaop
