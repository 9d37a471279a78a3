#pragma once
// Runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_*.pb) on a plan.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/core/onnx_tests.h"

namespace metaop {

enum class ConformStatus { Pass, Fail, Unsupported };
std::string_view to_string(ConformStatus s);

struct ConformResult {
  std::string test;  // folder name
  ConformStatus status = ConformStatus::Fail;
  std::string reason;
  int bound_nodes = 0;
};

class Plan;
// Runs the test under `plan` (nodes its bindings lack fall back to the reference).
// `bound_nodes` counts the nodes that ran on a binding other than the reference.
ConformResult run_conformance_test(const std::string& dir, Plan& plan, double rtol = 1e-3,
                                   double atol = 1e-7);

}  // namespace metaop
