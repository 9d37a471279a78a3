#include "analysis/diagnose/diagnose_dropout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_width.h"

namespace metaop {

namespace {

// The tensor `name` holds whatever the inputs: an initializer, or the value of the Constant
// node that makes it; null for another value.
const Tensor* constant_tensor(const Graph& g, const std::string& name) {
  if (auto it = g.initializers.find(name); it != g.initializers.end()) return &it->second;
  for (const auto& n : g.nodes)
    if (n.op_type == "Constant" && n.outputs.size() == 1 && n.outputs[0] == name) {
      auto it = n.attrs.find("value");
      return it == n.attrs.end() || it->second.kind != Attribute::Kind::Tensor ? nullptr
                                                                               : &it->second.t;
    }
  return nullptr;
}

// Its single value, when it is a constant of one element.
std::optional<double> constant(const Graph& g, const std::string& name) {
  const Tensor* t = constant_tensor(g, name);
  return t && t->numel() == 1 ? std::optional<double>(t->f64_at(0)) : std::nullopt;
}

}  // namespace

std::vector<HighDropout> high_dropouts(const Graph& g) {
  std::vector<HighDropout> out;
  if (g.opset < 12) return out;  // training_mode is an input from opset 12 on
  for (const auto& n : g.nodes) {
    if (n.op_type != "Dropout" || n.inputs.size() < 3 || n.inputs[2].empty()) continue;
    auto training = constant(g, n.inputs[2]);
    if (!training || *training == 0) continue;
    std::optional<double> ratio = n.inputs[1].empty() ? 0.5 : constant(g, n.inputs[1]);
    if (ratio && *ratio > kDropoutHigh) out.push_back({n.name, *ratio});
  }
  return out;
}

Graph set_dropout_ratio(const Graph& g, const std::string& node, double ratio) {
  Graph out = g;
  auto it = std::find_if(out.nodes.begin(), out.nodes.end(),
                         [&](const Node& n) { return n.name == node && n.op_type == "Dropout"; });
  if (it == out.nodes.end()) fail("{}: no Dropout node '{}'", g.path, node);
  // A value of its own, so that nothing else that reads the old ratio changes.
  std::string name = node + "_metaop_ratio";
  const Tensor* old =
      it->inputs.size() > 1 && !it->inputs[1].empty() ? constant_tensor(g, it->inputs[1]) : nullptr;
  out.initializers[name] = Tensor::scalar(ratio, old ? old->dtype() : DType::Float32);
  if (it->inputs.size() < 2) it->inputs.resize(2);
  it->inputs[1] = name;
  return out;
}

void dropout_check(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o) {
  const MonitorRecord& rec = r.run.record;
  double loss = unexplained_loss(r);
  if (std::isnan(loss)) return;
  for (const HighDropout& h : high_dropouts(s.graph)) {
    TrainSetup t = s;
    t.graph = set_dropout_ratio(s.graph, h.node, kDropoutHigh);
    if (o.status)
      o.status(
          fmt::format("training again with the ratio of Dropout '{}' lowered from {:g} to {:g}",
                      h.node, h.ratio, kDropoutHigh));
    MonitoredRun m = monitored_run(t, o.thresholds);
    double lowered = last_epoch_loss(m.diagnosis.record);
    if (!m.diagnosis.trained || !std::isfinite(lowered) || lowered >= kClearlyLower * loss)
      continue;
    Diagnosis d;
    d.category = "hyperparameter";
    d.hyperparameter = "dropout";
    d.node = h.node;
    d.op_type = "Dropout";
    d.score = 0.7;
    d.symptoms = stall_symptoms(rec);
    d.evidence = fmt::format(
        "Dropout '{}' drops {:g} of its units at every step (more than {:g}: each step trains a "
        "small random part of the layer); the run's last epoch ends at a mean loss of {:.4g} "
        "({:.3g} times the trivial predictor's {:.4g}), and the same training with ratio {:g} "
        "ends at {:.4g} ({:.3g} times the run's; it counts below {:g})",
        h.node, h.ratio, kDropoutHigh, loss, loss / rec.trivial_loss, rec.trivial_loss,
        kDropoutHigh, lowered, lowered / loss, kClearlyLower);
    d.fix.kind = "dropout_ratio";
    d.fix.node = h.node;
    d.fix.factor = kDropoutHigh;
    d.fix.description =
        fmt::format("the ratio of Dropout '{}' {:g} -> {:g}", h.node, h.ratio, kDropoutHigh);
    supersede_fallbacks(r.diagnoses(), d);
    r.diagnoses().push_back(std::move(d));
  }
  std::stable_sort(r.diagnoses().begin(), r.diagnoses().end(),
                   [](const Diagnosis& a, const Diagnosis& b) { return a.score > b.score; });
}

}  // namespace metaop
