#pragma once
// Frameworks that run a whole model as their users run it (whole-graph mode): those that import
// ONNX (ONNX Runtime with its graph optimizations, OpenVINO, TVM...: onnx_import/), OpenCV
// importing the whole model with its layer fusions.
// The model is either the file as given (whole-model runs) or a sub-model MetaOp cut out of it
// (prefixes and windows, for localization by reduction); each runner has optimization levels,
// lowest first, whose last is what users get.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace metaop {

struct WholeModel {
  Graph graph;                 // nodes, initializers, inputs and outputs of the (sub-)model
  std::string original_bytes;  // the model file itself, when it is the whole model
};

class WholeModelRunner {
 public:
  virtual ~WholeModelRunner() = default;
  virtual std::string name() const = 0;
  virtual std::vector<std::string> levels() const = 0;
  // The command-line option that chooses the level users get ("--ort-opt"); empty when the
  // framework has no such choice and users get the last level.
  virtual std::string level_option() const { return ""; }
  // The level users get: the one chosen with level_option(), else the framework's default (the
  // last level unless said otherwise).
  virtual std::string users_level() const { return levels().back(); }
  // The first level at which the framework fuses an op with the activation after it (where a
  // planted FusionFault applies).
  virtual std::size_t first_fusing_level() const = 0;
  // The named outputs of the model on the given inputs. Unsupported when the framework refuses
  // the model; Crash or Hang when it dies or does not finish.
  virtual std::map<std::string, Tensor> run(const WholeModel& m,
                                            const std::map<std::string, Tensor>& inputs,
                                            const std::vector<std::string>& outputs,
                                            const std::string& level) = 0;
};

// The serialized model: the original bytes when given, else the graph exported.
std::string serialize_model(const WholeModel& m);

// The bindings that have one (those of the ONNX-import base, and plugins that register a runner:
// opencv-4.6); fails for a binding that has no whole-model mode.
std::unique_ptr<WholeModelRunner> make_whole_model_runner(const std::string& binding);
bool has_whole_model_runner(const std::string& binding);

// Evaluation: a planted defect that only a whole-graph run shows, imitating a wrong fusion.
// Where node A (by name or op type) feeds only node B (by op type) and both are in the model
// run, at the runner's levels from `from_level` on (ONNX Runtime fuses Conv with its activation
// at "extended"; OpenCV at "fusion"): `scale` multiplies A's output by (1 + 2^-8) before B;
// `refuse` makes the framework refuse the model (Unsupported), as an optimizer that rejects a
// pattern it rewrites. A model without the pair -- each node alone, as node-by-node runs have
// it -- is run unchanged.
struct FusionFault {
  enum class Kind { Scale, Refuse };
  std::string first, second;  // "Conv", "Relu"; first may be a node name
  Kind kind = Kind::Scale;
  std::string binding;  // empty: every whole-model binding
  std::string spec;     // as given
};
// "FIRST+SECOND:scale[@BINDING]" or "FIRST+SECOND:refuse[@BINDING]".
FusionFault parse_fusion_fault(const std::string& spec);
std::unique_ptr<WholeModelRunner> with_fusion_faults(std::unique_ptr<WholeModelRunner> runner,
                                                     const std::vector<FusionFault>& faults);

}  // namespace metaop
