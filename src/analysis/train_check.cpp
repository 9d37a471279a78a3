#include "analysis/train_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

namespace metaop {

namespace {

void record(TrainCheck& tc, const Node& node, const std::string& binding, const std::string& phase,
            const std::string& kind, double score, std::size_t step, std::string detail) {
  for (auto& f : tc.findings)
    if (f.node == node.name && f.binding == binding && f.phase == phase && f.kind == kind) {
      ++f.steps;
      if (score > f.score) {
        f.score = score;
        f.step = step;
        f.detail = std::move(detail);
      }
      return;
    }
  tc.findings.push_back({node.name, node.op_type, binding, phase, kind, score, step, 1,
                         std::move(detail), false, ""});
  std::stable_sort(tc.findings.begin(), tc.findings.end(),
                   [](const TrainFinding& a, const TrainFinding& b) { return a.score > b.score; });
}

std::string worst_text(const Score& s, const Tensors& ref, const std::vector<std::string>& names,
                       const std::string& binding) {
  if (!s.mismatch.empty()) return s.mismatch;
  if (s.worst_index < 0) return "";
  std::string name = s.worst_output < names.size() ? names[s.worst_output] : "";
  return fmt::format(
      "{}{}: {} {:.9g}, reference {:.9g}, tolerance {:.3g}; {} of {} over, {} "
      "non-finite mismatches",
      name, index_str(ref[s.worst_output].shape(), s.worst_index), binding, s.worst_got,
      s.worst_ref, s.worst_tol, s.over, s.elements, s.nonfinite);
}

}  // namespace

double weight_drift(const std::map<std::string, Tensor>& a,
                    const std::map<std::string, Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : b) {
    auto it = a.find(name);
    if (it == a.end()) continue;
    Drift d = drift(it->second, t);
    worst = std::max(worst, d.nonfinite ? INFINITY : d.rel);
  }
  return worst;
}

void verify_train_finding(TrainFinding& f, const Graph& g, const Tensor& X, const Tensor& Y,
                          const TrainConfig& config, const std::function<Plan()>& make_plan,
                          const std::map<std::string, Tensor>& reference_weights,
                          const std::map<std::string, Tensor>& original_weights) {
  TrainConfig plain = config;
  plain.watch = {};
  plain.on_forward = {};
  plain.on_backward = {};
  plain.progress = {};
  Plan plan = make_plan();
  if (f.phase == "backward")
    plan.bind_backward(f.node, "reference");
  else
    plan.bind_op(f.node, "reference");
  TrainResult after = train(g, X, Y, plan, plain);
  double before_drift = weight_drift(original_weights, reference_weights);
  double after_drift = weight_drift(after.weights, reference_weights);
  f.verified = before_drift > 0 && after_drift <= 0.5 * before_drift;
  f.verification = fmt::format(
      "{}: with its {} on the reference, the trained weights drift {:.3g} from the all-reference "
      "run (before: {:.3g})",
      f.verified ? "verified" : "not verified", f.phase, after_drift, before_drift);
}

std::shared_ptr<TrainCheck> install_train_check(const Graph& g, TrainConfig& config,
                                                std::size_t every, const AccumulationBound& bound) {
  auto tc = std::make_shared<TrainCheck>();
  std::size_t n = g.nodes.size();
  tc->forward_scores.assign(n, 0.0);
  tc->backward_scores.assign(n, 0.0);
  if (every < 1) every = 1;
  config.watch = [tc, every](std::size_t step) {
    bool w = (step - 1) % every == 0;
    tc->checked_steps += w;
    return w;
  };
  config.on_forward = [tc, bound, n](std::size_t step, const Graph& h, const RunResult& f) {
    for (const auto& rec : f.records) {
      const Node& node = h.nodes[rec.node];
      if (rec.binding == "reference" && rec.crash.empty()) continue;  // nothing to judge
      if (!rec.crash.empty()) {
        record(*tc, node, rec.planned, "forward", "crash", INFINITY, step, rec.crash);
        continue;
      }
      Tensors in, out;
      for (const auto& i : node.inputs) in.push_back(i.empty() ? Tensor() : f.values.at(i));
      for (const auto& o : node.outputs) out.push_back(o.empty() ? Tensor() : f.values.at(o));
      LocalCheck lc = check_local(node, h.opset, in, out, bound);
      if (rec.node < n)
        tc->forward_scores[rec.node] = std::max(tc->forward_scores[rec.node], lc.score.score);
      if (lc.score.bad())
        record(*tc, node, rec.binding, "forward", lc.score.nonfinite ? "nonfinite" : "accuracy",
               lc.score.score, step, worst_text(lc.score, lc.reference, node.outputs, rec.binding));
    }
  };
  config.on_backward = [tc, bound, n, opset = g.opset](std::size_t step, const Node& node,
                                                       const Tensors& ins, const Tensors& outs,
                                                       const Tensors& grads, const Tensors& gin,
                                                       const NodeRecord& rec) {
    if (!rec.crash.empty()) {
      record(*tc, node, rec.planned, "backward", "crash", INFINITY, step, rec.crash);
      return;
    }
    if (rec.binding == "reference") return;
    LocalCheck lc = check_local_backward(node, opset, ins, outs, grads, gin, bound);
    std::vector<std::string> names;
    for (const auto& i : node.inputs) names.push_back("grad " + i);
    if (rec.node < n)
      tc->backward_scores[rec.node] = std::max(tc->backward_scores[rec.node], lc.score.score);
    if (lc.score.bad())
      record(*tc, node, rec.binding, "backward", lc.score.nonfinite ? "nonfinite" : "accuracy",
             lc.score.score, step, worst_text(lc.score, lc.reference, names, rec.binding));
  };
  return tc;
}

}  // namespace metaop
