#include "analysis/conform/conform.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "analysis/core/compare.h"
#include "analysis/core/onnx_tests.h"
#include "engine/control_flow.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "tensor/tensor_proto.h"

namespace fs = std::filesystem;

namespace metaop {

std::string_view to_string(ConformStatus s) {
  switch (s) {
    case ConformStatus::Pass:
      return "pass";
    case ConformStatus::Fail:
      return "fail";
    case ConformStatus::Unsupported:
      return "unsupported";
  }
  return "?";
}

ConformResult run_conformance_test(const std::string& dir, Plan& plan, double rtol, double atol) {
  ConformResult r;
  r.test = fs::path(dir).filename().string();
  try {
    Graph g = load_onnx((fs::path(dir) / "model.onnx").string());
    check_supported(g, plan);
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) fail("{}: no test_data_set_* folder", dir);
    for (const auto& set : sets) {
      std::map<std::string, Tensor> inputs;
      auto in_files = sorted_pbs(set, "input_");
      // Inputs bind by position to the graph inputs that are not initializers.
      if (in_files.size() > g.inputs.size())
        fail("{}: {} input files for {} graph inputs", set.string(), in_files.size(),
             g.inputs.size());
      for (std::size_t i = 0; i < in_files.size(); ++i)
        inputs[g.inputs[i].name] = read_test_tensor(in_files[i].string(), g.inputs[i]);
      auto out_files = sorted_pbs(set, "output_");
      // If, Loop and Scan run inlined as these inputs take them.
      const bool control_flow = has_control_flow(g);
      Graph flat = control_flow ? inline_control_flow(g, inputs).graph : Graph{};
      RunResult res = run_graph(control_flow ? flat : g, inputs, plan);
      r.bound_nodes = 0;
      for (const auto& rec : res.records) r.bound_nodes += rec.binding != "reference";
      for (std::size_t i = 0; i < out_files.size() && i < g.outputs.size(); ++i) {
        Tensor expected = read_test_tensor(out_files[i].string(), g.outputs[i]);
        const Tensor& actual = res.outputs.at(g.outputs[i].name);
        auto cmp = compare_tensors(actual, expected, rtol, atol);
        if (!cmp.ok) {
          r.status = ConformStatus::Fail;
          r.reason = fmt::format("{}: output '{}': {}", set.filename().string(), g.outputs[i].name,
                                 cmp.reason);
          return r;
        }
      }
    }
    r.status = ConformStatus::Pass;
  } catch (const Unsupported& e) {
    r.status = ConformStatus::Unsupported;
    r.reason = e.what();
  } catch (const std::exception& e) {
    r.status = ConformStatus::Fail;
    r.reason = e.what();
  }
  return r;
}

}  // namespace metaop
