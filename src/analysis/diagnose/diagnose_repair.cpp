#include "analysis/diagnose/diagnose_repair.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "analysis/diagnose/diagnose_baseline.h"
#include "analysis/diagnose/diagnose_dropout.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_static.h"
#include "analysis/diagnose/diagnose_width.h"

namespace metaop {

namespace {

std::size_t node_index(const Graph& g, const std::string& name) {
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    if (g.nodes[k].name == name) return k;
  fail("{}: no node '{}'", g.path, name);
}

// Removes a one-input node: its input takes the name of its output.
void remove_node(Graph& g, const std::string& name) {
  std::size_t k = node_index(g, name);
  std::string in = g.nodes[k].inputs.at(0), out = g.nodes[k].outputs.at(0);
  bool produced = false;
  for (std::size_t j = 0; j < g.nodes.size(); ++j) {
    if (j == k) continue;
    for (const auto& i : g.nodes[j].inputs)
      if (i == out)
        fail("{}: '{}' is read by {}: it cannot be removed", g.path, out, g.nodes[j].label());
    for (const auto& o : g.nodes[j].outputs) produced |= o == in;
  }
  if (!produced)
    fail("{}: the input of {} is not computed by the model", g.path, g.nodes[k].label());
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(k));
  for (auto& n : g.nodes) {
    for (auto& i : n.inputs)
      if (i == in) i = out;
    for (auto& o : n.outputs)
      if (o == in) o = out;
  }
}

void reinitialize(Graph& g, const LayerInit& l, const std::string& init, std::uint64_t seed);

// A Relu after every layer of `layers` but the last (after its bias, for a Linear exported as
// MatMul + Add); returns how many were inserted.
std::size_t insert_relus(Graph& g, const std::vector<std::string>& layers) {
  std::size_t done = 0;
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
    std::size_t k = node_index(g, layers[i]);
    std::string value = g.nodes[k].outputs.at(0);
    for (std::size_t j = k + 1; j < g.nodes.size(); ++j) {
      const Node& m = g.nodes[j];
      if (m.op_type == "Add" && m.inputs.size() == 2 && m.inputs[0] == value &&
          g.initializers.count(m.inputs[1])) {
        k = j;
        value = m.outputs.at(0);
        break;
      }
    }
    for (const auto& o : g.outputs)
      if (o.name == value) fail("{}: '{}' is an output of the model", g.path, value);
    Node relu;
    relu.name = fmt::format("metaop_repair/Relu_{}", i);
    relu.op_type = "Relu";
    relu.inputs = {value};
    relu.outputs = {value + "_metaop_relu"};
    for (auto& n : g.nodes)
      for (auto& in : n.inputs)
        if (in == value) in = relu.outputs[0];
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(k + 1), std::move(relu));
    ++done;
  }
  return done;
}

// Replaces the nodes the fix names; with `init`, re-initializes the layers that feed them.
std::size_t replace_ops(Graph& g, const Fix& f, const StaticChecks& c, std::uint64_t seed) {
  std::size_t out = output_producer(g), done = 0;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    bool hit = f.node.empty() ? n.op_type == f.from && k != out : n.name == f.node;
    if (!hit) continue;
    bool keep_attrs = n.op_type == "Softmax" && f.op_type == "LogSoftmax";
    n.op_type = f.op_type;
    if (!keep_attrs) n.attrs.clear();
    if (f.op_type == "LeakyRelu") n.attrs["alpha"] = Attribute::of_float(0.01);
    ++done;
    if (f.init.empty()) continue;
    std::size_t layer = feeding_layer(g, k);
    if (layer == SIZE_MAX) continue;
    for (const auto& l : c.layers)
      if (l.node == g.nodes[layer].name) reinitialize(g, l, f.init, seed + k);
  }
  return done;
}

void reinitialize(Graph& g, const LayerInit& l, const std::string& init, std::uint64_t seed) {
  const Tensor& w = g.initializers.at(l.weight);
  double sd =
      init == "he"
          ? std::sqrt(2.0 / static_cast<double>(std::max<std::int64_t>(l.fan_in, 1)))
          : std::sqrt(2.0 / static_cast<double>(std::max<std::int64_t>(l.fan_in + l.fan_out, 1)));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sd);
  std::vector<double> v(static_cast<std::size_t>(w.numel()));
  for (auto& x : v) x = normal(rng);
  g.initializers[l.weight] = Tensor::from_f64(v, w.shape(), w.dtype());
  if (!l.bias.empty()) {
    const Tensor& b = g.initializers.at(l.bias);
    g.initializers[l.bias] = Tensor(b.dtype(), b.shape());
  }
}

Tensor standardize(const Tensor& x, const StaticChecks& c) {
  std::int64_t features = x.rank() >= 2 ? x.dim(1) : 1, inner = 1;
  for (std::int64_t d = 2; d < x.rank(); ++d) inner *= x.dim(d);
  if (static_cast<std::size_t>(features) != c.feature_mean.size())
    fail("standardize: the data has {} features, the statistics {}", features,
         c.feature_mean.size());
  auto v = x.to_f64();
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto f = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % features);
    double sd = c.feature_std[f] > 0 ? c.feature_std[f] : 1;
    if (std::isfinite(v[i])) v[i] = (v[i] - c.feature_mean[f]) / sd;
  }
  return Tensor::from_f64(v, x.shape(), x.dtype());
}

// Mean of the first and of the last quarter of the losses.
std::pair<double, double> quarters(const std::vector<double>& l) {
  if (l.empty()) return {NAN, NAN};
  std::size_t q = std::max<std::size_t>(1, l.size() / 4);
  double a = 0, b = 0;
  for (std::size_t i = 0; i < q; ++i) {
    a += l[i];
    b += l[l.size() - q + i];
  }
  return {a / static_cast<double>(q), b / static_cast<double>(q)};
}

std::string kind_of(const std::string& label) {
  return label.substr(0, label.find_first_of("@ "));
}

std::string definite_key(const Diagnosis& d) {
  return d.category + "|" + d.loss + "|" + d.input;
}

// Whether the repaired run `m` verifies diagnosis `d` of a run whose symptom kinds were `before`.
void judge(RepairAttempt& a, const MonitoredRun& m, const Diagnosis& d,
           const std::set<std::string>& before) {
  const auto& rec = m.diagnosis.record;
  a.symptoms = rec.symptoms;
  a.steps = rec.losses.size();
  std::tie(a.loss_first, a.loss_last) = quarters(rec.losses);
  a.accuracy = rec.epoch_accuracy(SIZE_MAX);
  std::string accuracy = std::isfinite(a.accuracy)
                             ? fmt::format(", accuracy {:.1f}% in the last epoch", 100 * a.accuracy)
                             : "";
  std::set<std::string> mine;
  for (const auto& l : d.symptoms) mine.insert(kind_of(l));
  std::vector<std::string> stay, fresh;
  for (const auto& s : rec.symptoms) {
    if (mine.count(s.kind)) stay.push_back(s.kind);
    if (!before.count(s.kind)) fresh.push_back(s.kind);
  }
  bool definite_left = false;
  for (const auto& x : m.diagnosis.diagnoses)
    if (x.definite) {
      a.remaining.push_back(x.category + ": " + (x.loss.empty() ? x.evidence : x.loss));
      definite_left |= d.definite && definite_key(x) == definite_key(d);
    }
  bool falls =
      m.diagnosis.trained && std::isfinite(a.loss_last) && a.loss_last < 0.9 * a.loss_first;
  // A repair must also beat the trivial predictor of its own data by the margin: a loss that
  // falls to chance level repaired nothing.
  double trivial = rec.trivial_loss, margin = rec.thresholds.chance_margin;
  a.trivial = std::isfinite(trivial) ? trivial : 0;
  bool beats = !(trivial > 0) || !std::isfinite(trivial) ||
               (std::isfinite(a.loss_last) && a.loss_last < margin * trivial);
  a.verified =
      m.diagnosis.trained && stay.empty() && fresh.empty() && !definite_left && falls && beats;
  if (a.verified) {
    a.result = fmt::format(
        "verified: {} steps without {}, loss {:.4g} -> {:.4g} (first and last "
        "quarter){}{}",
        a.steps, d.symptoms.empty() ? "symptoms" : fmt::format("{}", fmt::join(mine, ", ")),
        a.loss_first, a.loss_last,
        trivial > 0 ? fmt::format(", the trivial predictor's {:.4g}", trivial) : "", accuracy);
    return;
  }
  std::vector<std::string> why;
  if (!m.diagnosis.trained) why.push_back("training could not run");
  if (!stay.empty()) why.push_back(fmt::format("{} still there", fmt::join(stay, ", ")));
  if (!fresh.empty()) why.push_back(fmt::format("new: {}", fmt::join(fresh, ", ")));
  if (definite_left) why.push_back("the static fault is still there");
  if (m.diagnosis.trained && !falls)
    why.push_back(
        fmt::format("the loss does not fall ({:.4g} -> {:.4g})", a.loss_first, a.loss_last));
  if (m.diagnosis.trained && falls && !beats)
    why.push_back(
        fmt::format("the loss ends at {:.4g}, not below {:g} times the trivial "
                    "predictor's {:.4g}",
                    a.loss_last, margin, trivial));
  a.result = fmt::format("not verified: {}{}", fmt::join(why, "; "), accuracy);
}

// Whether the only symptoms a repaired run shows that the original did not are those of steps
// too large (a loss or gradients that explode, non-finite values, a loss that swings) and the
// original's are gone.
bool diverges_only(const RepairAttempt& a, const std::set<std::string>& before) {
  static const std::set<std::string> divergence = {"exploding_loss", "nonfinite_loss",
                                                   "nonfinite_activation", "exploding_gradient",
                                                   "oscillating_loss"};
  bool any = false;
  for (const auto& s : a.symptoms) {
    if (before.count(s.kind) || !divergence.count(s.kind)) return false;
    any = true;
  }
  return any;
}

}  // namespace

namespace {

// Re-initializes the layer of the fix and the other layers whose initial weights are off the same
// way (seeds from `seed` on); returns the note naming those others ("" when none).
std::string reinitialize_layers(Graph& g, const Fix& f, const StaticChecks& checks,
                                std::uint64_t seed) {
  const LayerInit* l = nullptr;
  for (const auto& x : checks.layers)
    if (x.node == f.node) l = &x;
  if (!l) fail("{}: no layer '{}' to re-initialize", g.path, f.node);
  bool large = l->gain > kGainHigh, small = l->gain < kGainLow;
  std::vector<std::string> others;
  for (const auto& x : checks.layers) {
    bool same = x.node == l->node || (large && x.gain > kGainHigh) ||
                (small && x.gain < kGainLow) || (l->symmetric && x.symmetric) ||
                std::find(f.also.begin(), f.also.end(), x.node) != f.also.end();
    if (!same) continue;
    std::string init = x.activation == "Relu" || x.activation == "LeakyRelu" ? "he" : "xavier";
    reinitialize(g, x, x.node == l->node ? f.init : init, seed++);
    if (x.node != l->node) others.push_back(x.node);
  }
  if (others.empty()) return "";
  return fmt::format(" (and of {}, whose {})", fmt::join(others, ", "),
                     l->symmetric     ? "units are identical too"
                     : f.also.empty() ? "weights are off the same way"
                                      : "gains compound with it");
}

// Binds the fix's node (its forward or backward) or weight update to the reference.
void rebind_reference(TrainSetup& setup, const Fix& f) {
  if (f.phase == Phase::Update) {
    setup.bind_update.push_back(f.node + "=reference");
    return;
  }
  auto make = setup.make_plan;
  std::string node = f.node;
  Phase phase = f.phase;
  setup.make_plan = [make, node, phase](const std::string& bind) {
    Plan p = make(bind);
    if (phase == Phase::Backward)
      p.bind_backward(node, "reference");
    else
      p.bind_op(node, "reference");
    return p;
  };
}

}  // namespace

namespace {

// The fixes that change the graph's structure (a node removed, replaced or inserted, a layer
// widened), applied to a.setup's graph; false for other kinds.
bool graph_fix(RepairAttempt& a, const Fix& f, const StaticChecks& checks) {
  Graph& g = a.setup.graph;
  std::uint64_t seed = 0x5eed + a.setup.config.seed;
  if (f.kind == "remove_node") {
    remove_node(g, f.node);
  } else if (f.kind == "replace_op") {
    if (replace_ops(g, f, checks, seed) == 0)
      fail("{}: no node to replace for '{}'", g.path, f.description);
  } else if (f.kind == "insert_relu") {
    if (insert_relus(g, checks.linear_layers) == 0)
      fail("{}: no layer to put a Relu after", g.path);
  } else if (f.kind == "widen_layer") {
    g = widen_layer(g, f.node, static_cast<std::int64_t>(f.factor), widen_seed(a.setup));
    a.weights_changed = true;
  } else if (f.kind == "dropout_ratio") {
    g = set_dropout_ratio(g, f.node, f.factor);
  } else {
    return false;
  }
  return true;
}

}  // namespace

RepairAttempt apply_fix(const TrainSetup& s, const Fix& f, int attempt,
                        const StaticChecks& checks) {
  RepairAttempt a;
  a.setup = s;
  Graph& g = a.setup.graph;
  auto& o = a.setup.config.optimizer;
  if (f.kind == "learning_rate") {
    // Lowering: x0.1, then x0.01; raising: the factor, then ten times more.
    double factor = !attempt ? f.factor : f.factor < 1 ? f.factor * f.factor : f.factor * 10;
    a.description = fmt::format("learning rate {:g} -> {:g}", o.lr, o.lr * factor);
    o.lr *= factor;
    a.hparams_changed = true;
  } else if (f.kind == "reinitialize") {
    a.description = f.description + reinitialize_layers(g, f, checks, 0x5eed + s.config.seed);
    a.weights_changed = true;
  } else if (f.kind == "standardize") {
    a.setup.X = standardize(s.X, checks);
    a.description = f.description;
    a.data_changed = true;
  } else if (f.kind == "shift_labels") {
    auto v = s.Y.to_i64();
    for (auto& y : v) y += f.shift;
    a.setup.Y = Tensor::from_i64(v, s.Y.shape(), s.Y.dtype());
    a.description = f.description;
    a.labels_changed = true;
  } else if (graph_fix(a, f, checks)) {
    a.description = f.description;
    a.graph_changed = true;
  } else if (f.kind == "weight_decay") {
    a.description =
        fmt::format("weight decay {:g} -> {:g}", o.weight_decay, o.weight_decay * f.factor);
    o.weight_decay *= f.factor;
    a.hparams_changed = true;
  } else if (f.kind == "momentum") {
    a.description = fmt::format("momentum {:g} -> {:g}", o.momentum, f.factor);
    o.momentum = f.factor;
    a.hparams_changed = true;
  } else if (f.kind == "batch_size") {
    auto batch = static_cast<std::int64_t>(f.factor);
    a.description = fmt::format("batch size {} -> {}", s.config.batch_size, batch);
    a.setup.config.batch_size = batch;
    a.hparams_changed = true;
  } else if (f.kind == "lr_schedule") {
    a.description = fmt::format("learning-rate schedule {} -> none", s.config.schedule.text());
    a.setup.config.schedule = LrSchedule{};
    a.hparams_changed = true;
  } else if (f.kind == "unfreeze") {
    a.description = f.description;
    a.setup.config.frozen.clear();
    a.hparams_changed = true;
  } else if (f.kind == "standardize_targets") {
    a.setup.Y = standardized_targets(s.Y);
    a.description = f.description;
    a.labels_changed = true;
  } else if (f.kind == "rebind") {
    rebind_reference(a.setup, f);
    a.description = f.description;
  } else if (f.kind != "swap_loss") {
    fail("unknown fix '{}'", f.kind);
  }
  if (!f.loss.empty()) {
    a.setup.loss = f.loss;
    a.setup.config.loss = parse_loss(f.loss);
    a.loss_changed = true;
    if (f.kind == "swap_loss") a.description = f.description;
  }
  return a;
}

namespace {

// A verified repair must also approach what the best verified repair of the same run reaches:
// one that removes less than this share of what the best removes of the trivial predictor's
// loss (1 - loss / trivial, each on its own data) leaves most of the fault in place.
constexpr double kApproachBest = 0.5;

void demote_partial_repairs(DiagnoseResult& r) {
  auto gain = [](const RepairAttempt& a) { return 1 - a.loss_last / a.trivial; };
  const RepairAttempt* best = nullptr;
  for (const auto& a : r.repairs)
    if (a.verified && a.trivial > 0 && (!best || gain(a) > gain(*best))) best = &a;
  if (!best) return;
  std::string best_change = best->description;
  double best_gain = gain(*best);
  for (auto& a : r.repairs) {
    if (!a.verified || !(a.trivial > 0) || gain(a) >= kApproachBest * best_gain) continue;
    a.verified = false;
    a.result = fmt::format(
        "not verified: the loss ends at {:.4g}, {:.0f}% below the trivial predictor's {:.4g}, "
        "where the repair '{}' ends {:.0f}% below it (a repair must reach {:g} of that): it "
        "leaves most of the fault",
        a.loss_last, 100 * gain(a), a.trivial, best_change, 100 * best_gain, kApproachBest);
    Diagnosis& d = r.diagnoses().at(a.diagnosis);
    d.fix_verified = false;
    d.fix_result = a.description + ": " + a.result;
  }
}

// Two faults at once: a static fault whose own repair does not verify may be held back by
// another fault of the setup. Its fix is tried together with the fix of each other diagnosis
// that has evidence of its own (score above 0.4: not named only because nothing else explained
// a symptom) and a fix of another kind, in rank order, two at most.
void repair_together(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o,
                     const std::set<std::string>& before, std::size_t& runs) {
  auto& ds = r.diagnoses();
  for (std::size_t i = 0; i < ds.size(); ++i) {
    if (!ds[i].definite || ds[i].fix.empty() || !ds[i].fix_tried || ds[i].fix_verified) continue;
    std::size_t tried = 0;
    for (std::size_t j = 0; j < ds.size() && tried < 2 && runs < o.max_repairs; ++j) {
      const Diagnosis& p = ds[j];
      if (j == i || p.fix.empty() || !p.fix_tried || p.score <= 0.4 || p.fix.kind == ds[i].fix.kind)
        continue;
      RepairAttempt a;
      try {
        a = apply_fix(s, ds[i].fix, 0, r.run.checks);
        RepairAttempt b = apply_fix(a.setup, p.fix, 0, r.run.checks);
        a.setup = std::move(b.setup);
        a.description += ", and " + b.description;
        a.graph_changed |= b.graph_changed;
        a.weights_changed |= b.weights_changed;
        a.data_changed |= b.data_changed;
        a.labels_changed |= b.labels_changed;
        a.hparams_changed |= b.hparams_changed;
        a.loss_changed |= b.loss_changed;
      } catch (const Error&) {
        continue;  // the two fixes do not compose
      }
      ++tried;
      a.diagnosis = i;
      a.partner = j;
      Diagnosis both = ds[i];
      for (const auto& l : p.symptoms)
        if (!explains(both, l)) both.symptoms.push_back(l);
      if (o.status) o.status(fmt::format("repair {}: {}", runs + 1, a.description));
      MonitoredRun m = monitored_run(a.setup, o.thresholds);
      ++runs;
      judge(a, m, both, before);
      bool ok = a.verified;
      r.repairs.push_back(std::move(a));
      if (ok) break;
    }
  }
}

// A verified repair of two faults verifies both diagnoses (after the partial-repair rule, which
// may have demoted the partner's own repair next to it).
void credit_partners(DiagnoseResult& r) {
  for (const auto& a : r.repairs) {
    if (!a.verified || a.partner == SIZE_MAX) continue;
    for (std::size_t k : {a.diagnosis, a.partner}) {
      Diagnosis& d = r.diagnoses().at(k);
      d.fix_verified = true;
      d.fix_result = a.description + ": " + a.result + " (two faults repaired together)";
    }
  }
}

}  // namespace

void repair_and_verify(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o) {
  std::set<std::string> before;
  for (const auto& sy : r.run.record.symptoms) before.insert(sy.kind);
  std::size_t runs = 0;
  auto& ds = r.diagnoses();
  for (std::size_t i = 0; i < ds.size() && runs < o.max_repairs; ++i) {
    auto& d = ds[i];
    if (d.fix.empty()) continue;
    int attempts = d.fix.kind == "learning_rate" ? 2 : 1;
    for (int k = 0; k < attempts && runs < o.max_repairs; ++k) {
      RepairAttempt a;
      try {
        a = apply_fix(s, d.fix, k, r.run.checks);
      } catch (const Error& e) {
        d.fix_tried = true;
        d.fix_result = fmt::format("could not be applied: {}", e.what());
        break;
      }
      a.diagnosis = i;
      if (o.status) o.status(fmt::format("repair {}: {}", runs + 1, a.description));
      MonitoredRun m = monitored_run(a.setup, o.thresholds);
      ++runs;
      judge(a, m, d, before);
      // A fix that removes its symptoms but makes the steps too large (a structural change
      // moves the stable learning rates) is tried once more with the learning rate / 10.
      if (!a.verified && d.fix.kind != "learning_rate" && diverges_only(a, before) &&
          runs < o.max_repairs) {
        r.repairs.push_back(a);
        d.fix_result = a.description + ": " + a.result;
        a.setup.config.optimizer.lr *= 0.1;
        a.description += fmt::format(", and learning rate {:g} -> {:g}", s.config.optimizer.lr,
                                     a.setup.config.optimizer.lr);
        a.hparams_changed = true;
        if (o.status) o.status(fmt::format("repair {}: {}", runs + 1, a.description));
        m = monitored_run(a.setup, o.thresholds);
        ++runs;
        judge(a, m, d, before);
      }
      d.fix_tried = true;
      d.fix_result = a.description + ": " + a.result;
      bool ok = a.verified;
      if (ok) {
        d.fix_verified = true;
        d.fix.description = a.description;
      }
      r.repairs.push_back(std::move(a));
      if (ok) break;
    }
  }
  repair_together(r, s, o, before, runs);
  demote_partial_repairs(r);
  credit_partners(r);
}

}  // namespace metaop
