#include "analysis/whole_graph/whole_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "engine/executor.h"

namespace metaop {

std::string_view to_string(WholeGraphStatus s) {
  switch (s) {
    case WholeGraphStatus::Ok:
      return "ok";
    case WholeGraphStatus::Discrepancy:
      return "discrepancy";
    case WholeGraphStatus::Unsupported:
      return "unsupported";
    case WholeGraphStatus::Refused:
      return "refused";
    case WholeGraphStatus::Crash:
      return "crash";
    case WholeGraphStatus::Hang:
      return "hang";
  }
  return "?";
}

bool WholeGraphResult::defects() const {
  for (const auto& v : verdicts)
    if (v.defect()) return true;
  return false;
}

namespace {

// Below this normwise relative error (16 units of float32 roundoff, 2^-20) a difference is
// rounding whatever the yardstick says: an exact node-by-node run must not make the rule
// demand bit-exactness of fused kernels.
constexpr double kFloor = 0x1p-20;

using Values = std::map<std::string, Tensor>;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {

std::int64_t nonfinite_values(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return 0;
  auto v = t.to_f64();
  return std::count_if(v.begin(), v.end(), [](double e) { return !std::isfinite(e); });
}

}  // namespace

TensorVerdict judge_tensor(const std::string& name, const Tensor& whole, const Tensor& nbn,
                           const Tensor& ref, double factor) {
  TensorVerdict v;
  v.value = name;
  Tensor w = whole;
  if (!w.defined()) {
    v.mismatch = "no value";
    v.bad = true;
    return v;
  }
  // OpenCV keeps at least 2 dims and returns float32 for integer results: same elements, the
  // reference's shape and dtype.
  if (w.shape() != ref.shape()) {
    if (w.numel() != ref.numel()) {
      v.mismatch =
          fmt::format("shape {}, reference {}", shape_str(w.shape()), shape_str(ref.shape()));
      v.bad = true;
      return v;
    }
    w = w.reshaped(ref.shape());
  }
  if (w.dtype() != ref.dtype()) w = w.to(ref.dtype());
  Drift dw = drift(w, ref), dn = drift(nbn, ref);
  v.elements = ref.numel();
  v.whole_nonfinite_values = nonfinite_values(w);
  v.nbn_nonfinite_values = nonfinite_values(nbn);
  v.ref_nonfinite_values = nonfinite_values(ref);
  v.whole = dw.rel;
  v.node_by_node = dn.rel;
  v.whole_nonfinite = dw.nonfinite;
  v.nbn_nonfinite = dn.nonfinite;
  if (!is_floating(ref.dtype())) {
    // Integer results (indices, shapes, masks): exact, or as exact as node by node.
    v.yardstick = dn.max_abs_err;
    v.bad = dw.max_abs_err > dn.max_abs_err;
    return v;
  }
  v.yardstick = std::max(std::isfinite(dn.rel) ? dn.rel : 0.0, kFloor);
  v.bad = dw.nonfinite > dn.nonfinite || dw.rel > factor * v.yardstick;
  return v;
}

namespace {

// A whole-model run that failed (a crash, or a refusal while one is localized) as the verdict
// of its first output.
TensorVerdict failed_run(const std::vector<std::string>& outputs, std::string why) {
  TensorVerdict t;
  t.value = outputs.empty() ? "" : outputs[0];
  t.mismatch = std::move(why);
  t.bad = true;
  return t;
}

// The sub-model of `nodes` (indices into g.nodes, in order): values they read that they do not
// produce are inputs (initializers stay initializers), `outputs` its outputs; types and shapes
// from `values`.
Graph cut(const Graph& g, const std::vector<std::size_t>& nodes,
          const std::vector<std::string>& outputs, const Values& values) {
  Graph s;
  s.path = fmt::format("{} [{} node(s) from '{}']", g.path, nodes.size(),
                       nodes.empty() ? "" : g.nodes[nodes.front()].name);
  s.name = g.name;
  s.opset = g.opset;
  std::set<std::string> produced, seen;
  for (auto i : nodes) {
    const Node& n = g.nodes[i];
    for (const auto& in : n.inputs) {
      if (in.empty() || produced.count(in) || !seen.insert(in).second) continue;
      if (auto it = g.initializers.find(in); it != g.initializers.end()) {
        s.initializers[in] = it->second;
        continue;
      }
      const Tensor& t = values.at(in);
      ValueInfo vi;
      vi.name = in;
      vi.dtype = t.dtype();
      vi.onnx_elem_type = dtype_to_onnx(t.dtype());
      vi.dims = t.shape();
      s.inputs.push_back(vi);
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) produced.insert(o);
    s.nodes.push_back(n);
  }
  for (const auto& o : outputs) {
    const Tensor& t = values.at(o);
    ValueInfo vi;
    vi.name = o;
    vi.dtype = t.dtype();
    vi.onnx_elem_type = dtype_to_onnx(t.dtype());
    vi.dims = t.shape();
    s.outputs.push_back(vi);
    s.value_info[o] = vi;
  }
  for (const auto& p : produced)
    if (auto it = g.value_info.find(p); it != g.value_info.end() && !s.value_info.count(p))
      s.value_info[p] = it->second;
  return s;
}

class WholeGraphChecker {
 public:
  WholeGraphChecker(const Graph& g, const std::string& path, const WholeGraphOptions& o)
      : g_(g), opt_(o), order_(topological_order(g)) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("{}: cannot open", path);
    bytes_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    for (std::size_t p = 0; p < order_.size(); ++p) position_[order_[p]] = p;
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
  }

  WholeGraphResult run(const std::vector<Values>& samples) {
    WholeGraphResult res;
    std::set<std::string> reduced;
    for (std::size_t s = 0; s < samples.size(); ++s) {
      status(fmt::format("whole-graph sample {}: reference run", s));
      Plan ref_plan;
      RunOptions keep;
      keep.keep_all = true;
      ref_ = run_graph(g_, samples[s], ref_plan, keep).values;
      for (const auto& b : opt_.bindings) {
        WholeGraphVerdict v = check(b, static_cast<int>(s), samples[s]);
        bool localize =
            v.status == WholeGraphStatus::Discrepancy || v.status == WholeGraphStatus::Refused;
        if (localize && opt_.reduce && !reduced.count(b)) {
          reduced.insert(b);
          v.reduction = reduce(v);
        }
        res.verdicts.push_back(std::move(v));
      }
    }
    return res;
  }

 private:
  void status(const std::string& s) const {
    if (opt_.progress) opt_.progress(s);
  }

  std::unique_ptr<WholeModelRunner> runner(const std::string& b) const {
    return with_fusion_faults(make_whole_model_runner(b), opt_.faults);
  }

  WholeGraphVerdict check(const std::string& b, int sample, const Values& inputs) {
    WholeGraphVerdict v;
    v.binding = b;
    v.sample = sample;
    runner_ = runner(b);
    v.level_option = runner_->level_option();
    v.level = runner_->users_level();
    status(fmt::format("whole-graph sample {}: {} node by node", sample, b));
    Plan plan;
    plan.set_default(b);
    RunOptions keep;
    keep.keep_all = true;
    auto t0 = std::chrono::steady_clock::now();
    nbn_ = run_graph(g_, inputs, plan, keep).values;
    v.seconds_node_by_node = seconds_since(t0);
    status(fmt::format("whole-graph sample {}: {} whole model", sample, b));
    std::vector<std::string> outs;
    outs.reserve(g_.outputs.size());
    for (const auto& o : g_.outputs) outs.push_back(o.name);
    WholeModel m{g_, bytes_};
    Values got;
    t0 = std::chrono::steady_clock::now();
    try {
      got = runner_->run(m, inputs, outs, v.level);
    } catch (const Hang& e) {
      v.status = WholeGraphStatus::Hang;
      v.detail = e.what();
      return v;
    } catch (const Crash& e) {
      v.status = WholeGraphStatus::Crash;
      v.detail = e.what();
      return v;
    } catch (const Unsupported& e) {
      v.status = WholeGraphStatus::Unsupported;
      v.detail = e.what();
      refused_but_runs(v, m, inputs, outs);
      return v;
    } catch (const Error& e) {
      // The framework failed on a model it accepted (TVM's compile of a valid model): a defect
      // of the whole-model run, as a kernel that throws is one of a node.
      v.status = WholeGraphStatus::Crash;
      v.detail = fmt::format("threw: {}", e.what());
      return v;
    }
    v.seconds_whole = seconds_since(t0);
    v.status = WholeGraphStatus::Ok;
    for (const auto& o : outs) {
      TensorVerdict t = judge_tensor(o, got[o], nbn_.at(o), ref_.at(o), opt_.factor);
      if (t.bad) v.status = WholeGraphStatus::Discrepancy;
      v.outputs.push_back(t);
    }
    inputs_ = inputs;
    return v;
  }

  // A model the framework refuses at the users' level: if it runs at the lowest level, its
  // optimizations break a model it supports (Refused), localized as a discrepancy is.
  void refused_but_runs(WholeGraphVerdict& v, const WholeModel& m, const Values& inputs,
                        const std::vector<std::string>& outs) {
    auto levels = runner_->levels();
    if (levels.empty() || levels.front() == v.level) return;
    status(fmt::format("whole-graph sample {}: {} refuses it at level {}; at level {}", v.sample,
                       v.binding, v.level, levels.front()));
    try {
      runner_->run(m, inputs, outs, levels.front());
    } catch (const Error&) {
      return;  // refused (or failing) at every level: unsupported, as before
    }
    v.status = WholeGraphStatus::Refused;
    v.runs_at = levels.front();
    v.detail = fmt::format("{}; runs at level '{}'", v.detail, v.runs_at);
    inputs_ = inputs;
  }

  // Runs `nodes` whole with `outputs` marked at `level`; the first bad output's verdict, or none.
  // Localizing a refusal (refusal_), what shows it is the framework refusing the model.
  std::optional<TensorVerdict> shows(const std::vector<std::size_t>& nodes,
                                     const std::vector<std::string>& outputs,
                                     const std::string& level, const Values& yard, int& runs,
                                     std::string* refused = nullptr) {
    Graph sub = cut(g_, nodes, outputs, ref_);
    Values feed;
    for (const auto& in : sub.inputs) feed[in.name] = ref_.at(in.name);
    ++runs;
    Values got;
    try {
      got = runner_->run(WholeModel{sub, ""}, feed, outputs, level);
    } catch (const Unsupported& e) {
      if (refused) *refused = e.what();
      if (!refusal_) return std::nullopt;
      return failed_run(outputs, fmt::format("refused: {}", e.what()));
    } catch (const Crash& e) {
      return failed_run(outputs, e.what());
    }
    if (refusal_) return std::nullopt;  // it runs: what is being localized does not show
    for (const auto& o : outputs) {
      TensorVerdict t = judge_tensor(o, got[o], yard.at(o), ref_.at(o), opt_.factor);
      if (t.bad) return t;
    }
    return std::nullopt;
  }

  // Graph inputs of a prefix are the model's inputs, so the yardstick is the full
  // node-by-node run; a window is fed the reference's values, so its yardstick is the window
  // run node by node on them.
  Values window_yardstick(const std::vector<std::size_t>& nodes,
                          const std::vector<std::string>& outputs, Reduction& r) {
    if (refusal_) return {};  // a refusal needs no yardstick
    Graph sub = cut(g_, nodes, outputs, ref_);
    Values feed;
    for (const auto& in : sub.inputs) feed[in.name] = ref_.at(in.name);
    Plan plan;
    plan.set_default(runner_->name());
    ++r.node_by_node_runs;
    return run_graph(sub, feed, plan).outputs;
  }

  // Nodes within positions [from, to] of the run order that the node at `to` depends on.
  std::vector<std::size_t> cone(std::size_t from, std::size_t to) const {
    std::set<std::string> needed(g_.nodes[order_[to]].inputs.begin(),
                                 g_.nodes[order_[to]].inputs.end());
    std::vector<std::size_t> picked{order_[to]};
    for (std::size_t p = to; p-- > from;) {
      const Node& n = g_.nodes[order_[p]];
      bool used = false;
      for (const auto& o : n.outputs) used |= !o.empty() && needed.count(o);
      if (!used) continue;
      picked.push_back(order_[p]);
      needed.insert(n.inputs.begin(), n.inputs.end());
    }
    std::reverse(picked.begin(), picked.end());
    return picked;
  }

  // 1. Prefixes: the nodes before position k, their frontier (values read later, or graph
  // outputs) marked as outputs. The whole model (k = N) shows it; k = 0 computes nothing.
  // Returns the first value that shows it; `hi` becomes the shortest prefix that does.
  std::string bisect_prefixes(const WholeGraphVerdict& v, Reduction& r, std::size_t& hi) {
    std::size_t lo = 0;
    std::string bad_value;
    for (const auto& t : v.outputs)
      if (t.bad && bad_value.empty()) bad_value = t.value;
    while (hi - lo > 1) {
      std::size_t mid = lo + (hi - lo) / 2;
      status(fmt::format("whole-graph {}: bisecting prefixes [{}, {}]", v.binding, lo, hi));
      std::vector<std::size_t> nodes(order_.begin(),
                                     order_.begin() + static_cast<std::ptrdiff_t>(mid));
      auto out = frontier(mid);
      auto t = shows(nodes, out, v.level, nbn_, r.prefix_runs);
      if (t) {
        hi = mid;
        bad_value = t->value;
      } else {
        lo = mid;
      }
    }
    return bad_value;
  }

  // 2. Windows ending at the node at position `end`, fed the reference's values: 1, 2, 4...
  // nodes of the run order back (only those the node depends on), then bisected. Returns the
  // smallest window that shows it (r.window, r.evidence), or nothing (r.note says why).
  std::optional<std::vector<std::size_t>> reduce_window(const WholeGraphVerdict& v, std::size_t end,
                                                        const std::vector<std::string>& outs,
                                                        std::size_t prefix, Reduction& r) {
    std::map<std::vector<std::size_t>, bool> tried;
    auto window_shows = [&](std::size_t len) -> std::optional<TensorVerdict> {
      auto nodes = cone(end + 1 - len, end);
      if (auto it = tried.find(nodes); it != tried.end() && !it->second) return std::nullopt;
      status(fmt::format("whole-graph {}: window of {} node(s) at '{}'", v.binding, nodes.size(),
                         g_.nodes[order_[end]].name));
      Values yard = window_yardstick(nodes, outs, r);
      auto t = shows(nodes, outs, v.level, yard, r.window_runs);
      tried[nodes] = t.has_value();
      return t;
    };
    std::size_t len = 1, last_quiet = 0;
    std::optional<TensorVerdict> found;
    for (;;) {
      found = window_shows(len);
      if (found || len == end + 1) break;
      last_quiet = len;
      len = std::min(2 * len, end + 1);
    }
    if (!found) {
      r.note = fmt::format(
          "no window ending at '{}' fed the reference's values shows it (the prefix of {} nodes "
          "does): the discrepancy needs upstream values as the framework computes them",
          g_.nodes[order_[end]].name, prefix);
      return std::nullopt;
    }
    std::size_t quiet = last_quiet, loud = len;
    while (loud - quiet > 1) {
      std::size_t mid = quiet + (loud - quiet) / 2;
      if (auto t = window_shows(mid)) {
        loud = mid;
        found = t;
      } else {
        quiet = mid;
      }
    }
    auto nodes = cone(end + 1 - loud, end);
    for (auto i : nodes) {
      r.window.push_back(g_.nodes[i].name);
      r.window_ops.push_back(g_.nodes[i].op_type);
    }
    r.evidence = *found;
    return nodes;
  }

  // 3. The lowest optimization level that shows it, bisected over the levels below the
  // users' one (which does).
  void lowest_level(const WholeGraphVerdict& v, const std::vector<std::size_t>& nodes,
                    const std::vector<std::string>& outs, Reduction& r) {
    auto levels = runner_->levels();
    std::ptrdiff_t hi_level = std::find(levels.begin(), levels.end(), v.level) - levels.begin();
    std::ptrdiff_t lo_level = -1;
    Values yard = window_yardstick(nodes, outs, r);
    r.levels_tried.emplace_back(v.level, true);
    while (hi_level - lo_level > 1) {
      std::ptrdiff_t mid = lo_level + (hi_level - lo_level) / 2;
      const std::string& lv = levels[static_cast<std::size_t>(mid)];
      status(fmt::format("whole-graph {}: reduced model at level {}", v.binding, lv));
      bool s = shows(nodes, outs, lv, yard, r.level_runs).has_value();
      r.levels_tried.emplace_back(lv, s);
      if (s)
        hi_level = mid;
      else
        lo_level = mid;
    }
    r.level = levels[static_cast<std::size_t>(hi_level)];
  }

  Reduction reduce(const WholeGraphVerdict& v) {
    Reduction r;
    const std::size_t N = order_.size();
    r.nodes = N;
    r.budget =
        static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max<std::size_t>(N, 2))))) +
        4;
    std::size_t hi = N;
    refusal_ = v.status == WholeGraphStatus::Refused;
    r.first_value = bisect_prefixes(v, r, hi);
    if (refusal_) {
      // The shortest refused prefix's last node is the one whose addition the framework refuses.
      r.first_value.clear();
      for (const auto& o : g_.nodes[order_[hi - 1]].outputs)
        if (!o.empty() && r.first_value.empty()) r.first_value = o;
      if (r.first_value.empty()) {
        r.note = "the node the refusal comes with has no output";
        return r;
      }
    }
    std::size_t end = position_.at(producer_.at(r.first_value));
    std::vector<std::string> outs;
    for (const auto& o : g_.nodes[order_[end]].outputs)
      if (!o.empty()) outs.push_back(o);
    auto nodes = reduce_window(v, end, outs, hi, r);
    if (!nodes) return r;
    lowest_level(v, *nodes, outs, r);
    // The reduced model and its data, for the reproducer.
    r.graph = cut(g_, *nodes, outs, ref_);
    for (const auto& in : r.graph.inputs) r.inputs[in.name] = ref_.at(in.name);
    for (const auto& o : outs) r.reference[o] = ref_.at(o);
    return r;
  }

  // Values produced before position k that nodes from k on read, or that are graph outputs.
  std::vector<std::string> frontier(std::size_t k) const {
    std::set<std::string> later;
    for (std::size_t p = k; p < order_.size(); ++p)
      for (const auto& in : g_.nodes[order_[p]].inputs) later.insert(in);
    for (const auto& o : g_.outputs) later.insert(o.name);
    std::vector<std::string> out;
    for (std::size_t p = 0; p < k; ++p)
      for (const auto& o : g_.nodes[order_[p]].outputs)
        if (!o.empty() && later.count(o) && ref_.count(o)) out.push_back(o);
    return out;
  }

  const Graph& g_;
  const WholeGraphOptions& opt_;
  std::vector<std::size_t> order_;
  std::map<std::size_t, std::size_t> position_;
  std::map<std::string, std::size_t> producer_;
  std::string bytes_;
  std::unique_ptr<WholeModelRunner> runner_;
  Values ref_, nbn_, inputs_;
  bool refusal_ = false;  // localizing a refusal (Refused), not a discrepancy
};

}  // namespace

WholeGraphResult check_whole_graph(const Graph& g, const std::string& model_path,
                                   const std::vector<Values>& samples,
                                   const WholeGraphOptions& options) {
  for (const auto& b : options.bindings)
    if (!has_whole_model_runner(b)) make_whole_model_runner(b);  // fails, naming those that have

  return WholeGraphChecker(g, model_path, options).run(samples);
}

bool verify_reduced(const Graph& reduced, const Values& inputs, const Values& reference,
                    const std::string& binding, const std::string& level,
                    const WholeGraphOptions& options, TensorVerdict& evidence, bool refusal) {
  auto runner = with_fusion_faults(make_whole_model_runner(binding), options.faults);
  std::vector<std::string> outs;
  outs.reserve(reduced.outputs.size());
  for (const auto& o : reduced.outputs) outs.push_back(o.name);
  Plan plan;
  plan.set_default(binding);
  Values yard = refusal ? Values{} : run_graph(reduced, inputs, plan).outputs;
  Values got;
  try {
    got = runner->run(WholeModel{reduced, ""}, inputs, outs, level);
  } catch (const Unsupported& e) {
    if (!refusal) return false;
    evidence = failed_run(outs, fmt::format("refused: {}", e.what()));
    return true;
  } catch (const Crash& e) {
    evidence = TensorVerdict{};
    evidence.mismatch = e.what();
    evidence.bad = true;
    return true;
  }
  if (refusal) return false;  // it runs the reduced model at that level
  for (const auto& o : outs) {
    TensorVerdict t = judge_tensor(o, got[o], yard.at(o), reference.at(o), options.factor);
    if (t.bad) {
      evidence = t;
      return true;
    }
  }
  return false;
}

}  // namespace metaop
