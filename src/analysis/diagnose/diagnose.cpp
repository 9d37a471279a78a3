#include "analysis/diagnose/diagnose.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "analysis/diagnose/diagnose_dropout.h"
#include "analysis/diagnose/diagnose_repair.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_static.h"
#include "analysis/diagnose/diagnose_width.h"

namespace metaop {

RunMonitor::RunMonitor(const TrainSetup& s, TrainConfig& config, const DiagnoseThresholds& t,
                       bool stop_on_nonfinite)
    : s_(s), t_(t) {
  checks_ = static_checks(s.graph, s.X, s.Y, s.config.loss);
  monitor_ = install_monitor(s.graph, config, s.X.dim(0), t, stop_on_nonfinite);
  monitor_->set_trivial_loss(checks_.trivial_loss, checks_.trivial_what);
}

RunDiagnosis RunMonitor::finish() {
  monitor_->finish();
  RunDiagnosis d;
  d.checks = checks_;
  d.record = monitor_->record();
  d.trained = !d.record.losses.empty();
  if (d.record.first_output.defined())
    check_first_output(d.checks, s_.graph, s_.config.loss, d.record.first_output);
  d.diagnoses = diagnose_causes(s_.graph, d.checks, d.record, s_.config.optimizer, t_);
  return d;
}

namespace {

// A RunMonitor as the watch of a `train --diagnose` run.
class RunWatch : public TrainWatch {
 public:
  RunWatch(const TrainSetup& s, TrainConfig& config, const DiagnoseThresholds& t)
      : monitor_(s, config, t, false) {}
  bool trainable() const override { return monitor_.checks().trainable; }
  std::shared_ptr<RunDiagnosis> finish() override {
    return std::make_shared<RunDiagnosis>(monitor_.finish());
  }

 private:
  RunMonitor monitor_;
};

}  // namespace

MakeTrainWatch diagnose_watch(const DiagnoseThresholds& t) {
  return [t](const TrainSetup& s, TrainConfig& config) -> std::unique_ptr<TrainWatch> {
    return std::make_unique<RunWatch>(s, config, t);
  };
}

namespace {

// Ends training after step `last`, on top of what `config` already watches.
void stop_after(TrainConfig& config, std::size_t last) {
  if (last == 0) return;
  auto before = config.on_step;
  config.on_step = [before, last](const StepView& v) {
    bool go_on = before ? before(v) : true;
    return go_on && v.step < last;
  };
}

// Whether the run had every node and every update on the reference, without faults.
bool on_reference(const TrainSetup& s, const TrainResult& r) {
  if (!s.inject.empty()) return false;
  for (const auto& p : r.profile)
    if ((!p.forward_binding.empty() && p.forward_binding != "reference") ||
        (!p.backward_binding.empty() && p.backward_binding != "reference"))
      return false;
  for (const auto& [w, b] : r.update_bindings)
    if (b != "reference") return false;
  return true;
}

void say(const DiagnoseOptions& o, const std::string& s) {
  if (o.status) o.status(s);
}

void rank(std::vector<Diagnosis>& d) {
  std::stable_sort(d.begin(), d.end(),
                   [](const Diagnosis& a, const Diagnosis& b) { return a.score > b.score; });
}

// train --check on the run's own plan over steps 1..last: the kernels outside their error
// models.
void check_kernels(ReplaySplit& split, const TrainSetup& s, std::size_t last) {
  InjectedFaults faults(s.graph, s.inject, s.model);
  TrainConfig config = s.config;
  config.progress = {};
  configure_update(config, s.graph, s.bind, s.bind_update);
  Plan plan = faults.plan(s, false);
  TrainConfig run = faults.config(config, false);
  split.check = install_train_check(s.graph, run, 1);
  stop_after(run, last);
  // The first step with a finding names the kernel: no need to go on.
  auto before = run.on_step;
  auto check = split.check;
  run.on_step = [before, check](const StepView& v) { return before(v) && check->findings.empty(); };
  train(s.graph, s.X, s.Y, plan, run);
  split.checked_steps = split.check->checked_steps;
  split.training_graph = with_loss(s.graph, s.config.loss, s.Y.dtype());
  for (const auto& f : split.check->findings)
    split.applied.push_back(faults.applied(f.phase, f.binding));
}

Diagnosis framework_diagnosis(const TrainFinding& f, const ReplaySplit& split) {
  Diagnosis d;
  d.category = "framework";
  d.node = f.node;
  d.op_type = f.op_type;
  d.binding = f.binding;
  d.phase = f.phase;
  if (f.phase == Phase::Update) d.weight = f.node;
  d.score = 1;
  d.symptoms = split.vanished;
  d.evidence = fmt::format(
      "{} do not occur with every node and update on the float64 reference ({} steps "
      "trained); train --check over steps 1-{} finds the {} of {} ({}) under {} outside its "
      "error model (score {:.3g}, first worst at step {}): {}",
      fmt::join(split.vanished, ", "), split.steps, split.checked_steps, f.phase, f.node, f.op_type,
      f.binding, f.score, f.step, f.detail);
  d.fix.kind = "rebind";
  d.fix.node = f.node;
  d.fix.phase = f.phase;
  d.fix.description = f.phase == Phase::Update
                          ? fmt::format("the update of '{}' on the reference", f.node)
                          : fmt::format("the {} of '{}' on the reference", f.phase, f.node);
  return d;
}

// Replays the first failing steps on the reference; where symptoms vanish, names the kernels.
// The symptoms of the run that vanish on the reference replay (none when one of the earliest
// recurs there: the later ones are its consequences there as well); returns the last step of
// one that vanished.
std::size_t find_vanished(ReplaySplit& split, const std::vector<Symptom>& symptoms) {
  auto recurs = [&](const Symptom& sy) {
    for (const auto& x : split.replay_symptoms)
      if (x.kind == sy.kind) return true;
    return false;
  };
  // The earliest symptoms start the chain; when one of them recurs on the reference, the later
  // ones are its consequences there as well.
  std::size_t first = SIZE_MAX, fw_last = 0;
  for (const auto& sy : symptoms) first = std::min(first, sy.step);
  bool leading_recurs = false;
  for (const auto& sy : symptoms)
    if (sy.step == first) leading_recurs |= recurs(sy);
  for (const auto& sy : symptoms)
    if (!leading_recurs && !recurs(sy)) {
      split.vanished.push_back(symptom_label(sy));
      fw_last = std::max(fw_last, sy.step);
    }
  return fw_last;
}

// Whether every floating-point input of the finding's kernel was finite.
bool finite_inputs(const TrainFinding& f) {
  for (const auto& t : f.inputs)
    if (t.defined() && is_floating(t.dtype()))
      for (double v : t.to_f64())
        if (!std::isfinite(v)) return false;
  return true;
}

// One diagnosis per node (at most 3), from the findings whose kernel went wrong on finite
// inputs (a kernel fed the non-finite values of another is downstream of it).
std::vector<Diagnosis> framework_diagnoses(const ReplaySplit& split) {
  const auto& findings = split.check->findings;
  std::vector<const TrainFinding*> origins;
  for (const auto& f : findings)
    if (finite_inputs(f)) origins.push_back(&f);
  if (origins.empty()) origins.push_back(&findings.front());
  std::vector<Diagnosis> fw;
  std::set<std::string> nodes;
  for (const auto* f : origins)
    if (nodes.insert(f->node + "|" + f->binding).second && fw.size() < 3)
      fw.push_back(framework_diagnosis(*f, split));
  return fw;
}

// Removes the model's tentative causes whose symptoms all vanished on the reference; returns
// their labels.
std::vector<std::string> rule_out_vanished(std::vector<Diagnosis>& ds,
                                           const std::vector<std::string>& vanished_labels) {
  std::vector<std::string> ruled_out;
  std::set<std::string> vanished(vanished_labels.begin(), vanished_labels.end());
  ds.erase(std::remove_if(ds.begin(), ds.end(),
                          [&](const Diagnosis& d) {
                            if (d.definite || d.symptoms.empty()) return false;
                            for (const auto& l : d.symptoms)
                              if (!vanished.count(l.substr(0, l.find(' ')))) return false;
                            ruled_out.push_back(
                                d.category + (d.node.empty() ? "" : " " + d.node) +
                                (d.hyperparameter.empty() ? "" : " " + d.hyperparameter));
                            return true;
                          }),
           ds.end());
  return ruled_out;
}

void split_model_framework(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o) {
  auto& split = r.split;
  const auto& symptoms = r.run.record.symptoms;
  if (symptoms.empty()) {
    split.note = "no symptom during training: nothing to replay";
    return;
  }
  if (on_reference(s, r.result)) {
    split.note =
        "the run had every node and update on the float64 reference already: the "
        "symptoms are the model's or the setup's";
    for (auto& d : r.diagnoses())
      if (!d.symptoms.empty()) d.evidence += "; the run was on the float64 reference";
    return;
  }
  // The whole run again on the reference (a symptom that shows later there than in the run is
  // the model's all the same).
  say(o, "training again with every node and update on the reference");
  MonitoredRun rep = monitored_run(s, o.thresholds, 0, true);
  split.done = true;
  split.steps = rep.result.losses.size();
  split.replay_symptoms = rep.diagnosis.record.symptoms;
  std::size_t fw_last = find_vanished(split, symptoms);
  if (split.vanished.empty()) {
    split.note = fmt::format(
        "the symptoms recur with every node and update on the float64 reference ({} steps): "
        "the model's or the setup's",
        split.steps);
    for (auto& d : r.diagnoses())
      if (!d.symptoms.empty())
        d.evidence += "; recurs with every node and update on the float64 reference";
    return;
  }
  say(o, fmt::format("checking every kernel of steps 1-{} against the reference", fw_last));
  check_kernels(split, s, fw_last);
  if (split.check->findings.empty()) {
    split.note = fmt::format(
        "{} vanish on the float64 reference, but no kernel is outside its error model over "
        "steps 1-{}: the symptoms depend on rounding (the setup is at the edge of stability), "
        "and their causes are the model's or the setup's",
        fmt::join(split.vanished, ", "), split.checked_steps);
    for (auto& d : r.diagnoses()) d.evidence += "; " + split.note;
    return;
  }
  // The framework's kernels are the cause; model causes of the symptoms that vanished are
  // ruled out.
  std::vector<Diagnosis> fw = framework_diagnoses(split);
  auto& ds = r.diagnoses();
  std::vector<std::string> ruled_out = rule_out_vanished(ds, split.vanished);
  split.note = fmt::format(
      "{} vanish on the float64 reference ({} steps); train --check names {} kernel(s) "
      "outside their error models{}",
      fmt::join(split.vanished, ", "), split.steps, fw.size(),
      ruled_out.empty() ? "" : fmt::format("; ruled out: {}", fmt::join(ruled_out, "; ")));
  ds.insert(ds.begin(), fw.begin(), fw.end());
  rank(ds);
}

// Samples of the small-batch check, its steps, and the share of their trivial predictor's loss
// under which they count as fitted.
constexpr std::size_t kSmallBatch = 32, kSmallBatchSteps = 200;
constexpr double kFitted = 0.5;

bool labels_sorted(const Tensor& Y) {
  if (is_floating(Y.dtype()) || Y.rank() != 1 || Y.dim(0) < 2) return false;
  auto v = Y.to_i64();
  return std::is_sorted(v.begin(), v.end()) && v.front() != v.back();
}

void small_batch_check(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o) {
  const Symptom* chance = r.run.record.first("chance_level");
  if (!chance || s.X.dim(0) <= static_cast<std::int64_t>(kSmallBatch)) return;
  // Explained already: by a static fault, a framework kernel, or a cause with more evidence
  // than "nothing else explains it" (0.4).
  for (const auto& d : r.diagnoses())
    if (d.definite || d.category == "framework" || (d.score > 0.4 && explains(d, "chance_level")))
      return;
  auto& c = r.small_batch;
  std::vector<std::int64_t> rows(static_cast<std::size_t>(s.X.dim(0)));
  std::iota(rows.begin(), rows.end(), 0);
  std::mt19937_64 rng(s.config.seed + 0x5ba7c4);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(kSmallBatch);
  TrainSetup t = s;
  t.X = take_rows(s.X, rows);
  t.Y = take_rows(s.Y, rows);
  t.config.batch_size = static_cast<std::int64_t>(kSmallBatch);
  t.config.epochs = static_cast<int>(kSmallBatchSteps);
  say(o, fmt::format("training on {} samples alone for {} steps (can the model fit them?)",
                     kSmallBatch, kSmallBatchSteps));
  MonitoredRun m = monitored_run(t, o.thresholds);
  const auto& losses = m.diagnosis.record.losses;
  c.done = true;
  c.samples = kSmallBatch;
  c.steps = losses.size();
  c.trivial = m.diagnosis.record.trivial_loss;
  std::size_t tail = std::min<std::size_t>(10, losses.size());
  double sum = 0;
  for (std::size_t i = losses.size() - tail; i < losses.size(); ++i) sum += losses[i];
  c.last = tail ? sum / static_cast<double>(tail) : NAN;
  c.fitted = c.trivial > 0 && std::isfinite(c.last) && c.last < kFitted * c.trivial;
  c.note = fmt::format(
      "on {} samples alone the model's loss ends at {:.4g} after {} steps ({:.3g} times their "
      "trivial predictor's {:.4g}; fitted below {:g} times): {}",
      c.samples, c.last, c.steps, c.last / c.trivial, c.trivial, kFitted,
      c.fitted ? "the model and the optimizer can learn, the data set does not let them"
               : "the model or its training settings cannot fit even those");
  if (!c.fitted) {
    for (auto& d : r.diagnoses())
      if (explains(d, "chance_level")) d.evidence += "; " + c.note;
    return;
  }
  Diagnosis d;
  d.category = "data";
  d.input = "labels";
  d.score = 0.85;
  d.symptoms = stall_symptoms(r.run.record);  // a loss held near chance by the data stalls too
  d.evidence = fmt::format(
      "the whole data set stays at chance level ({:.3g} times the trivial predictor's loss) "
      "while {}: the labels do not follow from the inputs{} -- check how labels are paired "
      "with their inputs",
      chance->value, c.note,
      labels_sorted(s.Y) ? ", and they are sorted (non-decreasing over the samples): sorted "
                           "apart from their inputs?"
                         : "");
  supersede_fallbacks(r.diagnoses(), d);
  r.diagnoses().push_back(std::move(d));
  rank(r.diagnoses());
}

}  // namespace

MonitoredRun monitored_run(const TrainSetup& s, const DiagnoseThresholds& t, std::size_t max_steps,
                           bool reference) {
  MonitoredRun out;
  InjectedFaults faults(s.graph, reference ? std::vector<std::string>{} : s.inject, s.model);
  TrainConfig config = s.config;
  if (reference) {
    config.update_binding = "reference";
    config.update_bind.clear();
  } else {
    configure_update(config, s.graph, s.bind, s.bind_update);
  }
  Plan plan = reference ? Plan() : faults.plan(s, true);
  check_supported(s.graph, plan);
  TrainConfig run = reference ? config : faults.config(config, true);
  RunMonitor monitor(s, run, t, true);
  stop_after(run, max_steps);
  if (monitor.checks().trainable) out.result = train(s.graph, s.X, s.Y, plan, run);
  out.diagnosis = monitor.finish();
  out.injected = faults.log();
  return out;
}

DiagnoseResult diagnose(const TrainSetup& s, const DiagnoseOptions& o) {
  DiagnoseResult r;
  say(o, "training with the monitors");
  MonitoredRun run = monitored_run(s, o.thresholds);
  r.run = std::move(run.diagnosis);
  r.result = std::move(run.result);
  r.injected = std::move(run.injected);
  TrainSetup quiet = s;  // the later runs without the progress bar
  quiet.config.progress = {};
  if (!r.healthy()) split_model_framework(r, quiet, o);
  small_batch_check(r, quiet, o);
  width_check(r, quiet, o);
  dropout_check(r, quiet, o);
  if (o.repair && !r.healthy()) repair_and_verify(r, quiet, o);
  return r;
}

}  // namespace metaop
