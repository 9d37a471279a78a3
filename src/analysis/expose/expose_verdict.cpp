// The verdict of `metaop expose`: each target's closest approach, the run on the binding of a
// point where a target entered its zone, and what the outcome reports.
#include <fmt/format.h>

#include <algorithm>

#include "analysis/expose/expose_search.h"
#include "ops/registry.h"

namespace metaop::expose_detail {

bool Searcher::reaches(std::size_t from, std::size_t to) {
  if (from == to) return true;
  auto key = std::pair{from, to};
  if (auto it = reach_cache_.find(key); it != reach_cache_.end()) return it->second;
  std::set<std::string> live(g_.nodes[from].outputs.begin(), g_.nodes[from].outputs.end());
  bool found = false;
  for (auto k : topological_order(g_)) {
    bool feeds = false;
    for (const auto& in : g_.nodes[k].inputs) feeds |= !in.empty() && live.count(in);
    if (!feeds) continue;
    if (k == to) {
      found = true;
      break;
    }
    for (const auto& o : g_.nodes[k].outputs) live.insert(o);
  }
  return reach_cache_[key] = found;
}

// Records each target's closest approach; a point where a target still searched for entered
// its zone on the reference (or on the binding only) goes to the verdict on the binding.
void Searcher::consider(const Point& p, const Evaluation& e) {
  if (!e.ok) return;
  bool suspicious = false;
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    if (state_[t].done) continue;
    if (e.distance[t] < state_[t].best_distance) {
      state_[t].best_distance = e.distance[t];
      state_[t].best = p;
      state_[t].restarts = 0;
      state_[t].binding_misses = 0;
      state_[t].next_binding = 0;
      double rel = state_[t].start > 0 ? e.distance[t] / state_[t].start : 0;
      state_[t].history.emplace_back(steps_, rel);
    }
    bool in_zone = e.distance[t] == 0 || (t < e.binding_zone.size() && e.binding_zone[t]);
    suspicious |= in_zone && evaluations_ >= state_[t].next_verify;
  }
  if (suspicious) verify(p);
}

void Searcher::verify(const Point& p) {
  ++verifications_;
  apply(p);
  auto run = run_binding();
  if (!run) return;
  const RunResult& r = *run;
  for (const auto& rec : r.records) {
    const MetaOp* op = OpRegistry::instance().find(g_.nodes[rec.node].op_type);
    // Constants and shape arithmetic on the reference do not change the verdict.
    if (!rec.fallback_reason.empty() && op && !moves_data(op->family))
      fallback_ops_.insert(g_.nodes[rec.node].op_type);
  }
  std::vector<std::string> bad_outputs;
  for (const auto& o : g_.outputs)
    if (!all_finite(r.outputs.at(o.name))) bad_outputs.push_back(o.name);
  std::vector<std::size_t> order;
  order.reserve(r.records.size());
  for (const auto& rec : r.records) order.push_back(rec.node);
  std::size_t origin = g_.nodes.size();
  std::string why;
  if (!bad_outputs.empty()) why = explain_nonfinite(g_, r.values, order, &origin);
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    auto& s = state_[t];
    if (s.done) continue;
    double d = kInf;
    try {
      for (double x : zone_distances(t, r.values).distance) d = std::min(d, x);
    } catch (const Error&) {
      continue;
    }
    if (d != 0) {
      // In the zone on the reference, not on the binding (its kernel rounds differently, or is
      // stable where the reference is not): verify this target again later and later.
      if (bad_outputs.empty())
        s.next_verify = evaluations_ + (std::int64_t{1} << std::min(++s.mismatches, 12));
      continue;
    }
    const std::size_t node = targets_[t].node;
    if (!bad_outputs.empty() && origin < g_.nodes.size() && reaches(node, origin)) {
      s.exposed = s.done = true;
      s.status = TargetStatus::Exposed;
      s.seconds = elapsed();
      s.exposed_step = step_in_progress_;
      s.found_by = phase_;
      s.best_distance = 0;
      s.best = s.exposing = p;
      s.history.emplace_back(steps_, 0.0);
      s.first_node = g_.nodes[origin].name;
      s.first_op = g_.nodes[origin].op_type;
      s.explanation = why;
      s.nonfinite_outputs = bad_outputs;
    } else if (bad_outputs.empty() && ++s.harmless >= 3) {
      // In the zone three times over and the output stayed finite: downstream ops absorb it.
      s.done = true;
      s.status = TargetStatus::Reached;
    }
  }
}

TargetOutcome Searcher::outcome(std::size_t t) {
  const auto& s = state_[t];
  TargetOutcome o;
  o.target = targets_[t];
  o.exposed = s.exposed;
  o.iterations = s.exposed ? s.exposed_step : s.steps;
  o.seconds = s.exposed ? s.seconds : elapsed();
  o.start_distance = s.start;
  o.distance = s.best_distance;
  o.history = s.history;
  if (s.status != TargetStatus::Searching)
    o.status = s.status;
  else if (s.independent)
    o.status = TargetStatus::Independent;
  else
    o.status = s.restarts >= 4 ? TargetStatus::Stalled : TargetStatus::Budget;
  const Point& p = s.exposed ? s.exposing : s.best;
  if (!p.empty()) {
    apply(p);
    for (const auto& vi : g_.inputs) o.inputs[vi.name] = inputs_.at(vi.name);
    for (const auto& v : varied_)
      if (v.weight) o.weights[v.name] = work_.initializers.at(v.name);
    // Targets often share their closest point (the start point): evaluate each point once.
    auto cached = std::find_if(outcome_cache_.begin(), outcome_cache_.end(),
                               [&](const auto& c) { return c.first == p; });
    if (cached == outcome_cache_.end()) {
      if (outcome_cache_.size() >= 4) outcome_cache_.erase(outcome_cache_.begin());
      outcome_cache_.emplace_back(p, evaluate(p));
      cached = std::prev(outcome_cache_.end());
    }
    const Evaluation& e = cached->second;
    if (e.ok) {
      try {
        ZoneDistances zd = zone_distances(t, e.run.values);
        const Node& n = g_.nodes[targets_[t].node];
        Tensors ins, outs;
        for (const auto& i : n.inputs) ins.push_back(i.empty() ? Tensor() : e.run.values.at(i));
        for (const auto& out : n.outputs)
          outs.push_back(out.empty() ? Tensor() : e.run.values.at(out));
        const DangerZone& z =
            OpRegistry::instance().find(n.op_type)->domain.danger[targets_[t].zone];
        if (e.site[t] < zd.distance.size())
          o.detail = z.describe(KernelContext{n, g_.opset}, ins, outs, e.site[t]);
      } catch (const Error&) {
      }
    }
  }
  o.found_by = s.found_by;
  o.first_node = s.first_node;
  o.first_op = s.first_op;
  o.explanation = s.explanation;
  o.nonfinite_outputs = s.nonfinite_outputs;
  return o;
}

}  // namespace metaop::expose_detail
