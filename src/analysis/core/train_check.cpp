#include "analysis/core/train_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "analysis/core/triage.h"
#include "ops/optimizer.h"

namespace metaop {

namespace {

// Adds an occurrence: one finding per (node, binding, phase, kind), keeping the worst step's
// details and reproducer data.
void record(TrainCheck& tc, TrainFinding f) {
  // Numerical findings are triaged where they are made (forward, backward and update); crashes
  // and hangs are defects.
  if (f.cls == FindingClass::None) triage_non_numerical(f);
  for (auto& old : tc.findings)
    if (old.node == f.node && old.binding == f.binding && old.phase == f.phase &&
        old.kind == f.kind) {
      std::size_t steps = old.steps + 1;
      if (f.score > old.score) old = std::move(f);
      old.steps = steps;
      return;
    }
  f.steps = 1;
  tc.findings.push_back(std::move(f));
  std::stable_sort(tc.findings.begin(), tc.findings.end(),
                   [](const TrainFinding& a, const TrainFinding& b) { return a.score > b.score; });
}

// `node`: a node's name, or the weight of an update (then `op_type` is the optimizer).
TrainFinding finding(const std::string& node, const std::string& op_type,
                     const std::string& binding, Phase phase, FindingKind kind, double score,
                     std::size_t step, std::string detail) {
  TrainFinding f;
  f.node = node;
  f.op_type = op_type;
  f.binding = binding;
  f.phase = phase;
  f.kind = kind;
  f.score = score;
  f.step = step;
  f.detail = std::move(detail);
  return f;
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

LocalCheck check_update(const OptimizerConfig& c, long t, const Tensor& before, const Tensor& grad,
                        const Tensors& state_before, const Tensor& after,
                        const Tensors& state_after) {
  DType state_dtype = state_after.empty() ? after.dtype() : state_after[0].dtype();
  UpdateReference ref =
      reference_update(c, t, before, grad, state_before, after.dtype(), state_dtype);
  LocalCheck lc;
  // A result beyond the output dtype's range is infinite in that dtype, whatever the kernel.
  auto in_range = [](const Tensor& r, DType dt) {
    auto v = r.to_f64(), rounded = r.to(dt).to_f64();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (std::isinf(rounded[i])) v[i] = rounded[i];
    return Tensor::from_f64(v, r.shape(), DType::Float64);
  };
  lc.reference = {in_range(ref.weight, after.dtype())};
  for (const auto& s : ref.slots) lc.reference.push_back(in_range(s, state_dtype));
  std::vector<std::vector<double>> tol{ref.weight_tol};
  for (const auto& s : ref.slot_tols) tol.push_back(s);
  // Compared in float64: the tolerances count the kernel's final rounding.
  Tensors got{after.to(DType::Float64)};
  for (const auto& s : state_after) {
    if (s.numel() != after.numel()) {
      lc.score.score = INFINITY;
      lc.score.mismatch = fmt::format("a state tensor of shape {} for a weight of shape {}",
                                      shape_str(s.shape()), shape_str(after.shape()));
      return lc;
    }
    got.push_back(s.reshaped(after.shape()).to(DType::Float64));
  }
  if (got.size() != lc.reference.size()) {
    lc.score.score = INFINITY;
    lc.score.mismatch = fmt::format("the kernel kept {} state tensors, the {} rule {}",
                                    state_after.size(), c.kind, ref.slots.size());
    return lc;
  }
  lc.score = score_outputs(got, lc.reference, tol);
  lc.tol = std::move(tol);
  return lc;
}

void verify_train_finding(TrainFinding& f, const Graph& g, const Tensor& X, const Tensor& Y,
                          const TrainConfig& config, const std::function<Plan()>& make_plan,
                          const std::map<std::string, Tensor>& reference_weights,
                          const std::map<std::string, Tensor>& original_weights) {
  TrainConfig plain = config;
  plain.watch = {};
  plain.on_forward = {};
  plain.on_backward = {};
  plain.on_update = {};
  plain.progress = {};
  Plan plan = make_plan();
  if (f.phase == Phase::Backward)
    plan.bind_backward(f.node, "reference");
  else if (f.phase == Phase::Update)
    plain.update_bind[f.node] = "reference";
  else
    plan.bind_op(f.node, "reference");
  TrainResult after = train(g, X, Y, plan, plain);
  // The values the finding changes first: for an update, the weight it updates; otherwise every
  // weight (a node's error reaches the weights through the gradients). The model-wide drift is
  // dominated by the most ill-conditioned tensor (a BatchNormalization bias whose gradient
  // cancels moves by 1e-2 relative from a one-ulp change elsewhere), which would hide a wrong
  // update of another weight.
  auto only = [&](const std::map<std::string, Tensor>& w) {
    if (f.phase != Phase::Update) return w;
    std::map<std::string, Tensor> one;
    if (auto it = w.find(f.node); it != w.end()) one.insert(*it);
    return one;
  };
  double before_drift = weight_drift(only(original_weights), reference_weights);
  double after_drift = weight_drift(only(after.weights), reference_weights);
  // A non-finite drift is removed or not; a finite one must at least halve.
  f.verified = std::isfinite(after_drift) && before_drift > 0 &&
               (std::isinf(before_drift) || after_drift <= 0.5 * before_drift);
  f.verification = fmt::format(
      "{}: with its {} on the reference, {} drift{} {:.3g} from the all-reference run (before: "
      "{:.3g})",
      f.verified ? "verified" : "not verified", f.phase,
      f.phase == Phase::Update ? "the weight '" + f.node + "'" : std::string("the trained weights"),
      f.phase == Phase::Update ? "s" : "", after_drift, before_drift);
}

namespace {

// Judges each node of a checked step's forward run that did not run on the reference.
void judge_forward(TrainCheck& tc, const AccumulationBound& bound, std::size_t n, std::size_t step,
                   const Graph& h, const RunResult& f) {
  for (const auto& rec : f.records) {
    const Node& node = h.nodes[rec.node];
    if (rec.binding == "reference" && rec.crash.empty()) continue;  // nothing to judge
    Tensors in, out;
    for (const auto& i : node.inputs) in.push_back(i.empty() ? Tensor() : f.values.at(i));
    if (!rec.crash.empty()) {
      auto c = finding(node.name, node.op_type, rec.planned, Phase::Forward, FindingKind::Crash,
                       INFINITY, step, rec.crash);
      c.inputs = in;
      record(tc, std::move(c));
      continue;
    }
    for (const auto& o : node.outputs) out.push_back(o.empty() ? Tensor() : f.values.at(o));
    LocalCheck lc = check_local(node, h.opset, in, out, bound);
    if (rec.node < n)
      tc.forward_scores[rec.node] = std::max(tc.forward_scores[rec.node], lc.score.score);
    if (lc.score.bad()) {
      auto found = finding(node.name, node.op_type, rec.binding, Phase::Forward,
                           score_kind(lc.score), lc.score.score, step,
                           describe_worst(lc.score, lc.reference, node.outputs, rec.binding));
      triage_local(node, h.opset, in, lc, out).apply_to(found);
      found.inputs = in;
      found.got = out;
      record(tc, std::move(found));
    }
  }
}

// The inputs and outputs of one node's backward call.
struct BackwardCall {
  const Tensors& ins;
  const Tensors& outs;
  const Tensors& grads;
  const Tensors& gin;
};

// Judges one node's backward call of a checked step.
void judge_backward(TrainCheck& tc, const AccumulationBound& bound, std::size_t n,
                    std::int64_t opset, std::size_t step, const Node& node, const BackwardCall& b,
                    const NodeRecord& rec) {
  if (!rec.crash.empty()) {
    auto c = finding(node.name, node.op_type, rec.planned, Phase::Backward, FindingKind::Crash,
                     INFINITY, step, rec.crash);
    c.inputs = b.ins;
    c.outputs = b.outs;
    c.output_grads = b.grads;
    record(tc, std::move(c));
    return;
  }
  if (rec.binding == "reference") return;
  LocalCheck lc = check_local_backward(node, opset, b.ins, b.outs, b.grads, b.gin, bound);
  std::vector<std::string> names;
  names.reserve(node.inputs.size());
  for (const auto& i : node.inputs) names.push_back("grad " + i);
  if (rec.node < n)
    tc.backward_scores[rec.node] = std::max(tc.backward_scores[rec.node], lc.score.score);
  if (lc.score.bad()) {
    auto f =
        finding(node.name, node.op_type, rec.binding, Phase::Backward, score_kind(lc.score),
                lc.score.score, step, describe_worst(lc.score, lc.reference, names, rec.binding));
    f.inputs = b.ins;
    f.outputs = b.outs;
    f.output_grads = b.grads;
    f.got = b.gin;
    triage_backward(node, opset, b.ins, b.outs, b.grads, lc, b.gin).apply_to(f);
    record(tc, std::move(f));
  }
}

// Judges one weight's update by a framework's optimizer.
void judge_update(TrainCheck& tc, const OptimizerConfig& run, std::size_t step,
                  const UpdateCall& u) {
  const OptimizerConfig& opt = u.optimizer ? *u.optimizer : run;  // a schedule's lr
  if (!u.crash.empty()) {
    auto c = finding(u.weight, opt.kind, u.binding, Phase::Update,
                     u.hang ? FindingKind::Hang : FindingKind::Crash, INFINITY, step, u.crash);
    c.lr = opt.lr;
    c.inputs = {*u.before, *u.grad};
    for (const auto& s : *u.state_before) c.inputs.push_back(s);
    record(tc, std::move(c));
    return;
  }
  if (u.binding == "reference") return;
  LocalCheck lc =
      check_update(opt, u.t, *u.before, *u.grad, *u.state_before, *u.after, *u.state_after);
  double& worst = tc.update_scores[u.weight];
  worst = std::max(worst, lc.score.score);
  if (!lc.score.bad()) return;
  std::vector<std::string> names{u.weight};
  for (const auto& s : optimizer_slots(opt)) names.push_back(s);
  auto f = finding(u.weight, opt.kind, u.binding, Phase::Update, score_kind(lc.score),
                   lc.score.score, step, describe_worst(lc.score, lc.reference, names, u.binding));
  f.lr = opt.lr;
  f.inputs = {*u.before, *u.grad};
  for (const auto& s : *u.state_before) f.inputs.push_back(s);
  f.got = {*u.after};
  for (const auto& s : *u.state_after) f.got.push_back(s);
  if (f.numerical()) triage_update(opt, u.t, u.weight, f.inputs, lc, f.got).apply_to(f);
  record(tc, std::move(f));
}

}  // namespace

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
    judge_forward(*tc, bound, n, step, h, f);
  };
  config.on_backward = [tc, bound, n, opset = g.opset](std::size_t step, const Node& node,
                                                       const Tensors& ins, const Tensors& outs,
                                                       const Tensors& grads, const Tensors& gin,
                                                       const NodeRecord& rec) {
    judge_backward(*tc, bound, n, opset, step, node, BackwardCall{ins, outs, grads, gin}, rec);
  };
  config.on_update = [tc, opt = config.optimizer](std::size_t step, const UpdateCall& u) {
    judge_update(*tc, opt, step, u);
  };
  return tc;
}

}  // namespace metaop
