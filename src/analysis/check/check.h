#pragma once
// `metaop check`: op-by-op differential testing of inference against the float64 oracle.
// For each sample and binding: run the model end to end under the binding, score every node's
// kernel against the reference on the kernel's own inputs (local error, with the op's error
// model) and against the end-to-end reference run (propagated error); report findings, verify
// each by replacement, and keep what a reproducer needs.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/core/accuracy.h"
#include "analysis/core/finding.h"
#include "bindings/fault_injection.h"
#include "graph/graph.h"

namespace metaop {

using Inputs = std::map<std::string, Tensor>;

struct CheckOptions {
  std::vector<std::string> bindings;  // framework bindings under test
  std::vector<FaultSpec> faults;      // injected faults (evaluation)
  AccumulationBound bound;
  int threads = 1;
  bool verify = true;
  std::size_t max_verify = 20;  // per binding: the highest-scoring findings are verified
  std::function<void(const std::string&)> progress;  // one status line at a time
};

struct NodeCheck {  // one node under one binding for one sample
  std::size_t node = 0;
  std::string ran_on;  // the binding that ran it (the reference after a fallback)
  std::string fallback, crash;
  bool hang = false;
  Score local;       // against the reference on the same inputs
  Drift propagated;  // worst output against the end-to-end reference run
  double seconds = 0;
  std::size_t output_bytes = 0;
  std::int64_t heap_delta = 0;  // heap after the kernel minus before
  std::int64_t heap_peak = 0;   // highest heap during the kernel minus before
};

struct BindingRun {
  std::string binding;  // "reference" for the end-to-end oracle run
  int sample = 0;
  std::vector<NodeCheck> nodes;  // in run order
  Drift output;                  // graph outputs against the reference run
  double seconds = 0;            // sum of the kernels' time
};

struct Finding : FindingCore {  // phase: forward
  std::size_t node = 0;
  std::string node_name;
  int sample = 0;
  // The worst element (detail has it in words, with the inputs there).
  std::string output, index;
  double reference_value = 0, binding_value = 0, tolerance = 0;
  double model_error_before = 0, model_error_after = 0;  // relative, at the graph outputs
  // With other versions of its framework in the run (--bind torch-1.13,torch): the finding in
  // each ("present in torch-1.13 and torch", "fixed in torch (2.15)"), and its word (present,
  // fixed, new, mixed; across_versions.h). Empty otherwise.
  std::string across_versions, across_versions_word;
  std::map<std::string, std::string> versions;  // binding -> present, absent, not run
  // What a reproducer needs (not serialized).
  Tensors inputs, reference_outputs, binding_outputs;
};

struct CheckResult {
  std::string model;
  std::vector<std::string> bindings;
  int samples = 0;
  std::vector<BindingRun> runs;
  std::vector<Finding> findings;                 // ranked: defects by score, then the rest
  std::map<std::string, std::string> fault_log;  // "binding/node" -> what was injected
  // Whether a finding fails the run (fails_run, analysis/core/triage.h).
  bool defects(bool float32_limits = false) const;
};

CheckResult check_model(const Graph& g, const std::vector<Inputs>& samples,
                        const CheckOptions& options);
// The same with samples made one at a time by `sample(s)` for s = 0 .. count-1, so that many
// samples never live at once.
CheckResult check_model(const Graph& g, std::size_t count,
                        const std::function<Inputs(std::size_t)>& sample,
                        const CheckOptions& options);

}  // namespace metaop
