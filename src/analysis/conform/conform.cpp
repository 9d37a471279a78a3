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
#include "tensor/text.h"

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

namespace {

// What differs between a sequence or optional output and the expected value ("" if nothing).
std::string compare_composite(const CompositeOutput& got, const CompositeValue& want,
                              const RunResult& res, double rtol, double atol) {
  if (got.has != want.has)
    return fmt::format("{} optional, expected {}", got.has ? "a full" : "an empty",
                       want.has ? "a full one" : "an empty one");
  if (!got.has) return "";
  if (got.sequence != want.sequence)
    return fmt::format("{}, expected {}", got.sequence ? "a sequence" : "a tensor",
                       want.sequence ? "a sequence" : "a tensor");
  if (got.outputs.size() != want.tensors.size())
    return fmt::format("{} tensors, expected {}", got.outputs.size(), want.tensors.size());
  for (std::size_t k = 0; k < got.outputs.size(); ++k)
    if (auto cmp = compare_tensors(res.outputs.at(got.outputs[k]), want.tensors[k], rtol, atol);
        !cmp.ok)
      return fmt::format("tensor #{}: {}", k, cmp.reason);
  return "";
}

// What differs between two string tensors ("" if nothing): the shape, or the first string.
std::string compare_strings(const StringTensor& got, const StringTensor& want) {
  if (got.shape != want.shape)
    return fmt::format("shape {}, expected {}", shape_str(got.shape), shape_str(want.shape));
  for (std::size_t k = 0; k < got.values.size(); ++k)
    if (got.values[k] != want.values[k])
      return fmt::format("element {} is '{}', expected '{}'", k, printable(got.values[k], 80),
                         printable(want.values[k], 80));
  return "";
}

}  // namespace

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
      std::map<std::string, CompositeValue> composite_inputs;
      std::map<std::string, StringTensor> string_inputs;
      auto in_files = sorted_pbs(set, "input_");
      // Inputs bind by position to the graph inputs that are not initializers.
      if (in_files.size() > g.inputs.size())
        fail("{}: {} input files for {} graph inputs", set.string(), in_files.size(),
             g.inputs.size());
      for (std::size_t i = 0; i < in_files.size(); ++i) {
        const ValueInfo& vi = g.inputs[i];
        if (vi.sequence || vi.optional)
          composite_inputs[vi.name] = read_test_composite(in_files[i].string(), vi);
        else if (is_string_value(vi))
          string_inputs[vi.name] = read_string_tensor_pb(in_files[i].string());
        else
          inputs[vi.name] = read_test_tensor(in_files[i].string(), vi);
      }
      auto out_files = sorted_pbs(set, "output_");
      // If, Loop, Scan, the sequence operators and strings run inlined as these inputs take them.
      const bool inlined = needs_inlining(g);
      InlinedGraph flat;
      if (inlined) {
        flat = inline_control_flow(g, inputs, composite_inputs, string_inputs);
        inputs.insert(flat.element_inputs.begin(), flat.element_inputs.end());
      }
      RunResult res = run_graph(inlined ? flat.graph : g, inputs, plan);
      r.bound_nodes = 0;
      for (const auto& rec : res.records) r.bound_nodes += rec.binding != "reference";
      for (std::size_t i = 0; i < out_files.size() && i < g.outputs.size(); ++i) {
        const ValueInfo& vi = g.outputs[i];
        std::string problem;
        if (is_string_value(vi))
          problem = compare_strings(flat.string_outputs.at(vi.name),
                                    read_string_tensor_pb(out_files[i].string()));
        else if (vi.sequence || vi.optional)
          problem =
              compare_composite(flat.composite_outputs.at(vi.name),
                                read_test_composite(out_files[i].string(), vi), res, rtol, atol);
        else if (auto cmp =
                     compare_tensors(res.outputs.at(vi.name),
                                     read_test_tensor(out_files[i].string(), vi), rtol, atol);
                 !cmp.ok)
          problem = cmp.reason;
        if (!problem.empty()) {
          r.status = ConformStatus::Fail;
          r.reason = fmt::format("{}: output '{}': {}", set.filename().string(), vi.name, problem);
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
