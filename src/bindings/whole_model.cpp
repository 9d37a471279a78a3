#include "bindings/whole_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bindings/factory.h"
#include "bindings/onnx_import/import_binding.h"
#include "graph/onnx_io.h"

namespace metaop {

std::string serialize_model(const WholeModel& m) {
  if (!m.original_bytes.empty()) return m.original_bytes;
  SubgraphSpec spec;
  for (std::size_t i = 0; i < m.graph.nodes.size(); ++i) spec.nodes.push_back(i);
  // Every graph output is named by the graph; no value outside is needed.
  return export_subgraph(m.graph, spec);
}

namespace {

// The fusion fault: where `first` feeds only a `second`, A's output is scaled before B, or the
// model is refused.
class FusionFaultRunner final : public WholeModelRunner {
 public:
  FusionFaultRunner(std::unique_ptr<WholeModelRunner> inner, std::vector<FusionFault> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}
  std::string name() const override { return inner_->name(); }
  std::vector<std::string> levels() const override { return inner_->levels(); }
  std::string level_option() const override { return inner_->level_option(); }
  std::string users_level() const override { return inner_->users_level(); }
  std::size_t first_fusing_level() const override { return inner_->first_fusing_level(); }
  std::map<std::string, Tensor> run(const WholeModel& m,
                                    const std::map<std::string, Tensor>& inputs,
                                    const std::vector<std::string>& outputs,
                                    const std::string& level) override {
    auto lv = levels();
    auto at = static_cast<std::size_t>(std::find(lv.begin(), lv.end(), level) - lv.begin());
    if (at < first_fusing_level()) return inner_->run(m, inputs, outputs, level);
    WholeModel faulty = m;
    Graph& g = faulty.graph;
    bool changed = false;
    for (const auto& f : faults_) {
      if (!f.binding.empty() && f.binding != name()) continue;
      for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        Node& a = g.nodes[i];
        if ((a.op_type != f.first && a.name != f.first) || a.outputs.empty()) continue;
        std::string out = a.outputs[0];
        std::vector<std::size_t> users;
        for (std::size_t j = 0; j < g.nodes.size(); ++j)
          for (const auto& in : g.nodes[j].inputs)
            if (in == out) users.push_back(j);
        bool graph_output = false;
        for (const auto& o : g.outputs) graph_output |= o.name == out;
        if (users.size() != 1 || graph_output || g.nodes[users[0]].op_type != f.second) continue;
        if (f.kind == FusionFault::Kind::Refuse)
          throw Unsupported(fmt::format("{} refuses the model at level '{}' (planted: {})", name(),
                                        level, f.spec));
        // A -> Mul(A's output, 1 + 2^-8) -> B.
        std::string raw = out + "__metaop_unscaled", scale = out + "__metaop_scale";
        a.outputs[0] = raw;
        const ValueInfo* vi = g.find_value_info(out);
        DType dt = vi && vi->dtype ? *vi->dtype : DType::Float32;
        g.initializers[scale] = Tensor::scalar(1.0 + std::ldexp(1.0, -8), dt);
        Node mul;
        mul.name = a.name + "__metaop_fault";
        mul.op_type = "Mul";
        mul.inputs = {raw, scale};
        mul.outputs = {out};
        g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, mul);
        changed = true;
        ++i;
      }
    }
    if (!changed) return inner_->run(m, inputs, outputs, level);
    faulty.original_bytes.clear();
    g.value_info.clear();  // the renamed values: left to shape inference
    return inner_->run(faulty, inputs, outputs, level);
  }

 private:
  std::unique_ptr<WholeModelRunner> inner_;
  std::vector<FusionFault> faults_;
};

}  // namespace

bool has_whole_model_runner(const std::string& binding) {
  const BindingInfo* b = find_binding_info(binding);
  return b && b->whole_model;
}

std::unique_ptr<WholeModelRunner> make_whole_model_runner(const std::string& binding) {
  if (const ImportBindingSpec* spec = find_import_spec(binding))
    return make_import_model_runner(*spec);
  if (has_whole_model_runner(binding))
    return load_plugin_binding(*find_binding_info(binding)).whole_model();
  std::vector<std::string> with;
  for (const auto& b : binding_infos())
    if (b.whole_model) with.push_back(b.name);
  std::string names = fmt::format("{}", fmt::join(with, ", "));
  if (auto comma = names.rfind(", "); comma != std::string::npos) names.replace(comma, 2, " and ");
  fail("--whole-graph: binding '{}' has no whole-model mode ({} have)", binding, names);
}

FusionFault parse_fusion_fault(const std::string& spec) {
  FusionFault f;
  f.spec = spec;
  std::string s = spec;
  if (auto at = s.rfind('@'); at != std::string::npos) {
    f.binding = s.substr(at + 1);
    s = s.substr(0, at);
  }
  auto colon = s.rfind(':');
  auto plus = s.find('+');
  std::string kind = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (colon == std::string::npos || plus == std::string::npos || plus > colon || plus == 0 ||
      colon == plus + 1 || (kind != "scale" && kind != "refuse"))
    fail(
        "--inject-fusion '{}': expected FIRST+SECOND:scale[@BINDING] or FIRST+SECOND:refuse"
        "[@BINDING] (FIRST an op type or node name, SECOND an op type)",
        spec);
  f.kind = kind == "refuse" ? FusionFault::Kind::Refuse : FusionFault::Kind::Scale;
  f.first = s.substr(0, plus);
  f.second = s.substr(plus + 1, colon - plus - 1);
  if (!f.binding.empty() && !has_whole_model_runner(f.binding))
    fail("--inject-fusion '{}': binding '{}' has no whole-model mode", spec, f.binding);
  return f;
}

std::unique_ptr<WholeModelRunner> with_fusion_faults(std::unique_ptr<WholeModelRunner> runner,
                                                     const std::vector<FusionFault>& faults) {
  if (faults.empty()) return runner;
  return std::make_unique<FusionFaultRunner>(std::move(runner), faults);
}

}  // namespace metaop
