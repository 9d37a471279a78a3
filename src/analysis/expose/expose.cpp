// `metaop expose`: targets from the ops' danger zones, and the entry point. The search lives in
// expose_search.cpp, the verdict in expose_verdict.cpp, the one-line explanation in
// expose_explain.cpp.
#include "analysis/expose/expose.h"

#include <fmt/format.h>

#include "analysis/expose/expose_search.h"
#include "ops/registry.h"

namespace metaop {

std::string strategy_name(ExposeStrategy s) {
  switch (s) {
    case ExposeStrategy::Gradient:
      return "gradient";
    case ExposeStrategy::Grist:
      return "grist";
    case ExposeStrategy::Random:
      return "random";
  }
  return "?";
}

const char* to_string(TargetStatus s) {
  switch (s) {
    case TargetStatus::Searching:
      return "searching";
    case TargetStatus::Exposed:
      return "exposed";
    case TargetStatus::Reached:
      return "reached";
    case TargetStatus::Stalled:
      return "stalled";
    case TargetStatus::Budget:
      return "budget";
    case TargetStatus::Independent:
      return "independent";
  }
  return "?";
}

std::string vary_name(ExposeVary v) {
  switch (v) {
    case ExposeVary::Inputs:
      return "inputs";
    case ExposeVary::Weights:
      return "weights";
    case ExposeVary::Both:
      return "both";
  }
  return "?";
}

bool ExposeResult::exposed() const {
  for (const auto& t : targets)
    if (t.exposed) return true;
  return false;
}

std::vector<ExposeTarget> expose_targets(const Graph& g) {
  std::vector<ExposeTarget> out;
  const auto& reg = OpRegistry::instance();
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const MetaOp* op = reg.find(n.op_type);
    if (!op) continue;
    for (std::size_t z = 0; z < op->domain.danger.size(); ++z) {
      const DangerZone& zone = op->domain.danger[z];
      if (zone.applies && !zone.applies(KernelContext{n, g.opset})) continue;
      const auto& names = zone.watches_output ? n.outputs : n.inputs;
      auto k = static_cast<std::size_t>(zone.index);
      if (k >= names.size() || names[k].empty()) continue;
      out.push_back({i, z, n.name, n.op_type, danger_kind_name(zone.kind), zone.condition,
                     zone.unit, names[k]});
    }
  }
  return out;
}

ExposeResult expose_model(const Graph& g, const std::map<std::string, Tensor>& inputs,
                          const ExposeOptions& options) {
  expose_detail::Searcher s(g, inputs, options);
  return s.run();
}

}  // namespace metaop
