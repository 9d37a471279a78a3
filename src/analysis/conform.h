#pragma once
// Runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_*.pb) on a plan.
#include <functional>
#include <string>
#include <vector>

namespace metaop {

struct ConformResult {
  std::string test;    // folder name
  std::string status;  // pass, fail, unsupported
  std::string reason;
};

// Test folders under each path: a path that holds model.onnx is a test; otherwise each
// subfolder holding one is (sorted by name).
std::vector<std::string> find_conformance_tests(const std::vector<std::string>& paths);

ConformResult run_conformance_test(const std::string& dir, double rtol = 1e-3, double atol = 1e-7);

}  // namespace metaop
