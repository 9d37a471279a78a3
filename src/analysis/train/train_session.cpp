#include "analysis/train/train_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "analysis/core/compare.h"
#include "bindings/factory.h"
#include "ops/kernel_util.h"

namespace metaop {

TrainSession run_training(const TrainSetup& s) {
  const Graph& g = s.graph;
  InjectedFaults faults(g, s.inject, s.model);
  TrainConfig config = s.config;
  configure_update(config, g, s.bind, s.bind_update);
  Plan plan = faults.plan(s, true);
  check_supported(g, plan);
  if (s.check_every < 1) fail("--check-every {}: must be at least 1", s.check_every);
  TrainSession out;
  TrainConfig run_config = faults.config(config, true);
  if (s.check) out.check = install_train_check(g, run_config, s.check_every);
  std::unique_ptr<TrainWatch> monitor;
  if (s.diagnose) monitor = s.diagnose(s, run_config);
  if (monitor && !monitor->trainable()) {
    out.diagnosis = monitor->finish();
    return out;
  }
  out.result = train(g, s.X, s.Y, plan, run_config);
  if (monitor) out.diagnosis = monitor->finish();
  out.injected = faults.log();
  out.training_graph = with_loss(g, config.loss, s.Y.dtype());
  if (!out.check || out.check->findings.empty()) return out;
  // Verification by replacement of the five worst findings, against an all-reference run.
  auto& findings = out.check->findings;
  TrainConfig plain = config;
  plain.progress = {};
  plain.update_binding = "reference";
  plain.update_bind.clear();
  Plan reference_plan;
  TrainResult ref = train(g, s.X, s.Y, reference_plan, plain);
  TrainConfig replay = faults.config(config, false);
  for (std::size_t i = 0; i < findings.size() && i < 5; ++i)
    verify_train_finding(
        findings[i], g, s.X, s.Y, replay, [&] { return faults.plan(s, false); }, ref.weights,
        out.result.weights);
  for (const auto& f : findings) out.applied.push_back(faults.applied(f.phase, f.binding));
  return out;
}

TrainComparison compare_training(const TrainSetup& s, const std::vector<std::string>& plans) {
  const Graph& g = s.graph;
  TrainComparison out;
  out.plans = plans;
  // The first plan's weights after every step (kept: memory grows with steps x model size), and
  // each other plan's drift from them, step by step.
  std::vector<std::map<std::string, Tensor>> base_weights;
  for (const auto& b : plans) {
    Plan p = s.make_plan(b);
    check_supported(g, p);
    TrainConfig c = s.config;
    c.progress = {};
    configure_update(c, g, b, s.bind_update);
    bool first_plan = b == plans[0];
    c.after_step = [&](std::size_t, const std::map<std::string, Tensor>& w) {
      std::map<std::string, Tensor> mine;
      for (const auto& [name, t] : g.initializers) mine[name] = w.at(name);
      auto& drift = out.drift_per_step[b];
      if (first_plan)
        base_weights.push_back(std::move(mine));
      else
        drift.push_back(weight_drift(mine, base_weights.at(drift.size())));
    };
    out.runs[b] = train(g, s.X, s.Y, p, c);
  }
  out.drift_per_step.erase(plans[0]);
  const auto& base = out.runs.at(plans[0]);
  for (const auto& b : plans)
    out.final_drift[b] = weight_drift(out.runs.at(b).weights, base.weights);
  // Where the values part, on the first batch at the initial weights.
  Graph h = with_loss(g, s.config.loss, s.Y.dtype());
  std::int64_t n = std::min<std::int64_t>(s.config.batch_size, s.X.dim(0));
  auto take_first = [&](const Tensor& t) {
    std::int64_t per = t.numel() / t.dim(0);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * per));
    std::iota(idx.begin(), idx.end(), 0);
    Shape sh = t.shape();
    sh[0] = n;
    return take(t, sh, idx);
  };
  std::map<std::string, Tensor> inputs{{g.inputs[0].name, take_first(s.X)}};
  if (s.config.loss != LossKind::Output) inputs[kLabelsInput] = take_first(s.Y);
  RunOptions keep;
  keep.keep_all = true;
  std::map<std::string, RunResult> fwd;
  for (const auto& b : plans) {
    Plan p = s.make_plan(b);
    for (const auto& node : h.nodes)
      if (node.op_type == "Dropout") p.bind_op(node.name, "reference");
    fwd[b] = run_graph(h, inputs, p, keep);
  }
  for (std::size_t k = 1; k < plans.size(); ++k) {
    const auto& rb = fwd.at(plans[k]);
    std::string first;
    for (const auto& rec : rb.records) {
      for (const auto& o : h.nodes[rec.node].outputs) {
        if (o.empty() || !is_floating(rb.values.at(o).dtype())) continue;
        Drift d = drift(rb.values.at(o), fwd.at(plans[0]).values.at(o));
        if (d.nonfinite || d.rel > 1e-4) {
          first = fmt::format("{} ({}): '{}' drifts {:.3g} relative", h.nodes[rec.node].name,
                              h.nodes[rec.node].op_type, o, d.nonfinite ? INFINITY : d.rel);
          break;
        }
      }
      if (!first.empty()) break;
    }
    out.first_divergent_node[plans[k]] = first;
  }
  return out;
}

}  // namespace metaop
