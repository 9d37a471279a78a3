#pragma once
// Runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_*.pb) on a plan.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace metaop {

struct ConformResult {
  std::string test;    // folder name
  std::string status;  // pass, fail, unsupported
  std::string reason;
  int bound_nodes = 0;
};

// Test folders under each path: a path that holds model.onnx is a test; otherwise each
// subfolder holding one is (sorted by name).
std::vector<std::string> find_conformance_tests(const std::vector<std::string>& paths);

struct Graph;
class Tensor;
// The inputs of a test's first data set (test_data_set_0), bound by position to the graph inputs.
std::map<std::string, Tensor> load_test_inputs(const Graph& g, const std::string& dir);

class Plan;
// Runs the test under `plan` (nodes its bindings lack fall back to the reference).
// `bound_nodes` counts the nodes that ran on a binding other than the reference.
ConformResult run_conformance_test(const std::string& dir, Plan& plan, double rtol = 1e-3,
                                   double atol = 1e-7);

}  // namespace metaop
