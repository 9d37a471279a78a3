#include "analysis/check/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "analysis/core/across_versions.h"
#include "analysis/core/triage.h"
#include "bindings/factory.h"
#include "engine/executor.h"

namespace metaop {

bool CheckResult::defects(bool float32_limits) const {
  for (const auto& f : findings)
    if (fails_run(f, float32_limits)) return true;
  return false;
}

namespace {

bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return true;
  for (double v : t.to_f64())
    if (!std::isfinite(v)) return false;
  return true;
}

Tensors node_values(const std::vector<std::string>& names,
                    const std::map<std::string, Tensor>& values) {
  Tensors out;
  for (const auto& name : names) {
    auto it = name.empty() ? values.end() : values.find(name);
    out.push_back(it == values.end() ? Tensor() : it->second);
  }
  return out;
}

Finding make_finding(const Graph& g, std::size_t n, const std::string& binding, FindingKind kind,
                     int sample) {
  Finding f;
  f.node = n;
  f.node_name = g.nodes[n].name;
  f.op_type = g.nodes[n].op_type;
  f.binding = binding;
  f.kind = kind;
  f.sample = sample;
  return f;
}

void describe_worst(Finding& f, const Node& node, const Score& s, const Tensors& in,
                    const Tensors& ref) {
  f.detail = describe_worst(node, s, in, ref, f.binding);
  if (!s.mismatch.empty() || s.worst_index < 0) return;
  const Tensor& out = ref[s.worst_output];
  f.output = s.worst_output < node.outputs.size() ? node.outputs[s.worst_output] : "";
  f.index = index_str(out.shape(), s.worst_index);
  f.reference_value = s.worst_ref;
  f.binding_value = s.worst_got;
  f.tolerance = s.worst_tol;
}

// Values that depend on node n: its outputs and everything computed from them.
std::set<std::string> downstream_values(const Graph& g, const std::vector<std::size_t>& order,
                                        std::size_t n) {
  std::set<std::string> vals(g.nodes[n].outputs.begin(), g.nodes[n].outputs.end());
  vals.erase("");
  for (std::size_t k : order) {
    const Node& node = g.nodes[k];
    bool hit = false;
    for (const auto& in : node.inputs) hit |= !in.empty() && vals.count(in);
    if (hit)
      for (const auto& o : node.outputs)
        if (!o.empty()) vals.insert(o);
  }
  return vals;
}

double model_error(const Graph& g, const RunResult& run, const RunResult& ref) {
  double worst = 0;
  for (const auto& o : g.outputs) {
    Drift d = drift(run.outputs.at(o.name), ref.outputs.at(o.name));
    worst = std::max(worst, d.nonfinite ? INFINITY : d.rel);
  }
  return worst;
}

// A node's record of a run, as the check reports it (scores are filled in later).
NodeCheck node_check(const NodeRecord& rec) {
  NodeCheck nc;
  nc.node = rec.node;
  nc.ran_on = rec.binding;
  nc.fallback = rec.fallback_reason;
  nc.crash = rec.crash;
  nc.hang = rec.hang;
  nc.seconds = rec.seconds;
  nc.output_bytes = rec.output_bytes;
  nc.heap_delta = rec.heap_delta;
  nc.heap_peak = rec.heap_peak;
  return nc;
}

struct Sample {
  int index;
  const Inputs* inputs;
  RunResult reference;
};

class Checker {
 public:
  Checker(const Graph& g, const CheckOptions& o) : g_(g), opt_(o), order_(topological_order(g)) {}

  CheckResult run(std::size_t count, const std::function<Inputs(std::size_t)>& make) {
    result_.model = g_.path;
    result_.bindings = opt_.bindings;
    result_.samples = static_cast<int>(count);
    for (std::size_t s = 0; s < count; ++s) {
      Inputs inputs = make(s);
      Sample smp{static_cast<int>(s), &inputs, {}};
      status(fmt::format("sample {}: reference run", s));
      Plan ref_plan;
      smp.reference = run_graph(g_, inputs, ref_plan, keep_all());
      record_reference(smp);
      for (const auto& b : opt_.bindings) check_binding(smp, b);
    }
    compare_versions_of_findings();
    rank();
    return std::move(result_);
  }

 private:
  RunOptions keep_all() const {
    RunOptions o;
    o.keep_all = true;
    return o;
  }

  void status(const std::string& s) const {
    if (opt_.progress) opt_.progress(s);
  }

  // The binding's plan, its kernels wrapped with the injected faults meant for it (faulty_).
  Plan plan_for(const std::string& binding) {
    Plan p;
    std::vector<FaultSpec> mine;
    for (const auto& f : opt_.faults)
      if (f.binding.empty() || f.binding == binding) mine.push_back(f);
    faulty_ = nullptr;
    if (!mine.empty()) {
      auto fb = std::make_unique<FaultyBinding>(make_binding(binding), mine);
      faulty_ = fb.get();
      p.add_binding(std::move(fb));
    }
    p.set_default(binding);
    return p;
  }

  // The reference run: its time per node, and model-level hazards (a node whose exact result is
  // non-finite on finite inputs: the model itself breaks at this input).
  void record_reference(Sample& smp) {
    BindingRun run;
    run.binding = "reference";
    run.sample = smp.index;
    for (const auto& rec : smp.reference.records) {
      run.seconds += rec.seconds;
      run.nodes.push_back(node_check(rec));
      const Node& node = g_.nodes[rec.node];
      Tensors in = node_values(node.inputs, smp.reference.values);
      Tensors out = node_values(node.outputs, smp.reference.values);
      bool in_ok = std::all_of(in.begin(), in.end(), all_finite);
      bool out_ok = std::all_of(out.begin(), out.end(), all_finite);
      if (in_ok && !out_ok && !hazard_nodes_.count(rec.node)) {
        hazard_nodes_.insert(rec.node);
        Finding f = make_finding(g_, rec.node, "reference", FindingKind::Hazard, smp.index);
        f.score = INFINITY;
        std::size_t o = 0;
        while (o < out.size() && all_finite(out[o])) ++o;
        auto v = out[o].to_f64();
        std::int64_t i = 0;
        while (std::isfinite(v[i])) ++i;
        f.output = node.outputs[o];
        f.index = index_str(out[o].shape(), i);
        f.reference_value = v[i];
        f.detail = fmt::format(
            "the exact result is {} at {}{} on finite inputs: the model itself overflows or leaves "
            "the op's domain here; inputs: {}",
            v[i], f.output, f.index, describe_inputs(node, in, out[o], i));
        f.verified = true;
        f.verification = "float64 reference";
        f.inputs = in;
        f.reference_outputs = out;
        result_.findings.push_back(std::move(f));
      }
    }
    result_.runs.push_back(std::move(run));
  }

  // The finding of one node's run under the binding, if any: its crash or hang, its fallback to
  // the reference, or its forward outside the error model (then nc.local is its score).
  std::optional<Finding> node_finding(const Sample& smp, const std::string& binding,
                                      const NodeRecord& rec, const Tensors& in, const Tensors& out,
                                      NodeCheck& nc) const {
    const Node& node = g_.nodes[rec.node];
    if (!rec.crash.empty()) {
      Finding f = make_finding(g_, rec.node, binding,
                               rec.hang ? FindingKind::Hang : FindingKind::Crash, smp.index);
      f.score = INFINITY;
      f.detail = rec.crash;
      f.verified = true;
      f.verification =
          rec.hang ? "the kernel was killed after the kernel timeout; the reference ran the node"
                   : "the kernel crashed; the reference ran the node";
      f.inputs = in;
      f.reference_outputs = out;
      triage_non_numerical(f);
      return f;
    }
    if (!rec.fallback_reason.empty()) {
      Finding f = make_finding(g_, rec.node, binding, FindingKind::Unsupported, smp.index);
      f.detail = rec.fallback_reason;
      return f;
    }
    LocalCheck lc = check_local(node, g_.opset, in, out, opt_.bound);
    nc.local = lc.score;
    if (!lc.score.bad()) return std::nullopt;
    Finding f = make_finding(g_, rec.node, binding, score_kind(lc.score), smp.index);
    f.score = lc.score.score;
    describe_worst(f, node, lc.score, in, lc.reference);
    f.inputs = in;
    f.reference_outputs = lc.reference;
    f.binding_outputs = out;
    triage_local(node, g_.opset, in, lc, out).apply_to(f);
    return f;
  }

  // Keeps one finding per (node, binding, kind): the worst over samples; verifies the numerical
  // ones (up to max_verify per binding).
  void keep_worst(Sample& smp, const std::string& binding, const RunResult& run,
                  std::vector<Finding>& found) {
    std::sort(found.begin(), found.end(),
              [](const Finding& a, const Finding& b) { return a.score > b.score; });
    std::set<std::size_t> suspects;
    for (const auto& f : found)
      if (f.numerical()) suspects.insert(f.node);
    for (auto& f : found) {
      Finding* prev = nullptr;
      for (auto& e : result_.findings)
        if (e.node == f.node && e.binding == f.binding && e.kind == f.kind) prev = &e;
      if (prev && (prev->verified || prev->score >= f.score)) continue;
      if (f.numerical() && opt_.verify && verified_count_[binding] < opt_.max_verify) {
        ++verified_count_[binding];
        verify(smp, binding, run, f, suspects);
      }
      if (prev)
        *prev = std::move(f);
      else
        result_.findings.push_back(std::move(f));
    }
  }

  void check_binding(Sample& smp, const std::string& binding) {
    status(fmt::format("sample {}: {} run", smp.index, binding));
    Plan plan = plan_for(binding);
    RunResult run = run_graph(g_, *smp.inputs, plan, keep_all());
    if (faulty_)
      for (const auto& [node, note] : faulty_->log())
        result_.fault_log[fmt::format("{}/{}", binding, node)] = note;
    BindingRun br;
    br.binding = binding;
    br.sample = smp.index;
    std::vector<Finding> found;
    std::size_t done = 0;
    for (const auto& rec : run.records) {
      const Node& node = g_.nodes[rec.node];
      if (++done % 16 == 0)
        status(
            fmt::format("sample {}: {} node {}/{}", smp.index, binding, done, run.records.size()));
      NodeCheck nc = node_check(rec);
      br.seconds += rec.seconds;
      Tensors in = node_values(node.inputs, run.values);
      Tensors out = node_values(node.outputs, run.values);
      for (std::size_t o = 0; o < node.outputs.size(); ++o) {
        if (node.outputs[o].empty()) continue;
        Drift d = drift(out[o], smp.reference.values.at(node.outputs[o]));
        if (d.rel > nc.propagated.rel || std::isnan(d.rel)) nc.propagated = d;
        nc.propagated.nonfinite = std::max(nc.propagated.nonfinite, d.nonfinite);
      }
      if (auto f = node_finding(smp, binding, rec, in, out, nc)) found.push_back(std::move(*f));
      br.nodes.push_back(std::move(nc));
    }
    br.output = Drift{};
    for (const auto& o : g_.outputs) {
      Drift d = drift(run.outputs.at(o.name), smp.reference.outputs.at(o.name));
      if (d.rel > br.output.rel) br.output = d;
      br.output.nonfinite += d.nonfinite;
    }
    result_.runs.push_back(std::move(br));
    keep_worst(smp, binding, run, found);
  }

  // Re-runs the model with the finding's node on the reference and compares the values that
  // depend on it (its consumers' outputs onwards, and its own outputs that are graph outputs) with
  // the end-to-end reference run, before and after. Verified when the node's error visibly
  // propagates -- some dependent value drifts more than twice as far before as after, or has
  // non-finite values only before -- and nothing non-finite is left after. The yardstick is the
  // binding's own rounding (the after run), not a bound. With several suspects, the others run
  // on the reference in both runs, so that only this node differs.
  void verify(Sample& smp, const std::string& binding, const RunResult& original, Finding& f,
              const std::set<std::size_t>& suspects) {
    status(fmt::format("sample {}: verifying {} on {}", smp.index, f.node_name, binding));
    std::optional<RunResult> isolated;
    if (suspects.size() > 1) {
      Plan others = plan_for(binding);
      for (std::size_t s : suspects)
        if (s != f.node) others.bind_op(g_.nodes[s].name, "reference");
      isolated = run_graph(g_, *smp.inputs, others, keep_all());
    }
    const RunResult& before = isolated ? *isolated : original;
    Plan plan = plan_for(binding);
    for (std::size_t s : suspects) plan.bind_op(g_.nodes[s].name, "reference");
    RunResult after = run_graph(g_, *smp.inputs, plan, keep_all());

    const auto& own = g_.nodes[f.node].outputs;
    auto values = downstream_values(g_, order_, f.node);
    std::set<std::string> dependents, graph_outputs;
    for (const auto& o : g_.outputs) graph_outputs.insert(o.name);
    for (const auto& v : values)
      if (std::find(own.begin(), own.end(), v) == own.end() || graph_outputs.count(v))
        dependents.insert(v);
    std::string effect, residue;
    for (const auto& v : dependents) {
      const Tensor& ref = smp.reference.values.at(v);
      Drift b = drift(before.values.at(v), ref), a = drift(after.values.at(v), ref);
      if (a.nonfinite > 0 && residue.empty())
        residue = fmt::format("'{}' still has {} non-finite mismatches", v, a.nonfinite);
      if (!effect.empty()) continue;
      if (b.nonfinite > a.nonfinite)
        effect = fmt::format("'{}' has {} non-finite mismatches before, {} after", v, b.nonfinite,
                             a.nonfinite);
      else if (!is_floating(ref.dtype()) && b.max_abs_err > 0 && a.max_abs_err == 0)
        effect = fmt::format("'{}' differs before, matches after", v);
      else if (is_floating(ref.dtype()) && b.max_abs_err > 2 * a.max_abs_err && b.max_abs_err > 0)
        effect =
            fmt::format("'{}' drifts {:.3g} before, {:.3g} after", v, b.max_abs_err, a.max_abs_err);
    }
    f.model_error_before = model_error(g_, before, smp.reference);
    f.model_error_after = model_error(g_, after, smp.reference);
    f.verified = !effect.empty() && residue.empty();
    if (f.verified)
      f.verification = fmt::format("verified by replacement: {}", effect);
    else if (effect.empty())
      f.verification =
          "not verified: replacing it changes no dependent value beyond the binding's own "
          "rounding (masked downstream, or it needs another suspect's output)";
    else
      f.verification = fmt::format("not verified: {}", residue);
  }

  // How a binding stands towards a node of a sample: the finding there, or whether it ran it.
  VersionState state_of(const std::string& binding, int sample, std::size_t node) const {
    for (const auto& f : result_.findings)
      if (f.binding == binding && f.sample == sample && f.node == node && f.defect())
        return VersionState::Present;
    for (const auto& run : result_.runs)
      if (run.binding == binding && run.sample == sample)
        for (const auto& n : run.nodes)
          if (n.node == node)
            return n.ran_on == binding ? VersionState::Absent : VersionState::NotRun;
    return VersionState::NotRun;
  }

  void compare_versions_of_findings() {
    for (const auto& group : version_groups(opt_.bindings))
      for (auto& f : result_.findings) {
        if (!f.defect() || std::find(group.bindings.begin(), group.bindings.end(), f.binding) ==
                               group.bindings.end())
          continue;
        std::vector<VersionState> states;
        for (const auto& b : group.bindings) {
          states.push_back(state_of(b, f.sample, f.node));
          f.versions[b] = to_string(states.back());
        }
        f.across_versions = across_versions_phrase(group, states);
        f.across_versions_word = across_versions_word(states);
      }
  }

  void rank() {
    std::stable_sort(result_.findings.begin(), result_.findings.end(),
                     [](const Finding& a, const Finding& b) {
                       if (a.defect() != b.defect()) return a.defect();
                       if (a.score != b.score) return a.score > b.score;
                       return a.node < b.node;  // ties: the upstream node first
                     });
  }

  const Graph& g_;
  const CheckOptions& opt_;
  std::vector<std::size_t> order_;
  CheckResult result_;
  FaultyBinding* faulty_ = nullptr;
  std::set<std::size_t> hazard_nodes_;
  std::map<std::string, std::size_t> verified_count_;
};

}  // namespace

CheckResult check_model(const Graph& g, const std::vector<Inputs>& samples,
                        const CheckOptions& options) {
  return Checker(g, options).run(samples.size(), [&](std::size_t s) { return samples[s]; });
}

CheckResult check_model(const Graph& g, std::size_t count,
                        const std::function<Inputs(std::size_t)>& sample,
                        const CheckOptions& options) {
  return Checker(g, options).run(count, sample);
}

}  // namespace metaop
