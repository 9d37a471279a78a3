#include "report/train/train_summary.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "analysis/diagnose/diagnose.h"
#include "graph/onnx_io.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "report/core/run_diagnosis.h"
#include "report/train/train_report.h"

namespace metaop {

namespace {

// Steps per epoch as training takes them: every batch, the last one short (engine/train.cpp).
std::size_t steps_per_epoch(const TrainSetup& s) {
  if (!s.X.defined() || s.X.rank() == 0 || s.config.batch_size < 1) return 0;
  return static_cast<std::size_t>((s.X.dim(0) + s.config.batch_size - 1) / s.config.batch_size);
}

}  // namespace

void print_train_summary(std::FILE* out, const TrainSetup& s, const TrainSession& session) {
  const TrainResult& r = session.result;
  const auto& tc = session.check;
  std::size_t per_epoch = r.losses.size() / static_cast<std::size_t>(s.config.epochs);
  std::map<std::string, int> updated_by;
  for (const auto& [w, b] : r.update_bindings) ++updated_by[b];
  std::string updates;
  for (const auto& [b, n] : updated_by)
    updates += fmt::format("{}{} on {}", updates.empty() ? "" : ", ", n, b);
  fmt::print(out, "{}: {} steps under --bind {} ({} trainable tensors, {} {} update{}), loss {}\n",
             s.model, r.losses.size(), s.bind, r.trainable.size(), s.config.optimizer.kind, updates,
             updated_by.size() == 1 ? "" : "s", s.loss);
  for (int e = 0; e < s.config.epochs; ++e) {
    double sum = 0;
    for (std::size_t i = 0; i < per_epoch; ++i) sum += r.losses[e * per_epoch + i];
    fmt::print(out, "epoch {:>3}: mean loss {:.8g}\n", e + 1, sum / static_cast<double>(per_epoch));
  }
  // The slowest nodes, forward and backward per step, with their largest heap peaks.
  auto slow = slowest(r.profile, 5);
  double steps = static_cast<double>(std::max<std::size_t>(r.losses.size(), 1));
  fmt::print(out, "slowest nodes (per step: forward, backward; largest heap peak of a call):\n");
  for (const auto* p : slow)
    fmt::print(out, "  {:<40} {:<24} {:>9.3f} ms {:>9.3f} ms  {:>8.2f} MB {:>8.2f} MB\n", p->node,
               p->op_type, p->forward_seconds / steps * 1e3, p->backward_seconds / steps * 1e3,
               p->forward_peak / 1e6, p->backward_peak / 1e6);
  for (const auto& line : session.injected) fmt::print(out, "{}\n", line);
  if (!s.inject.empty() && session.injected.empty())
    fmt::print(out, "no injected fault was reached (no node of the plan's bindings matched)\n");
  if (!tc) return;
  fmt::print(out,
             "\nchecked {} of {} steps (forward and backward of every node, and every framework "
             "optimizer update, against the reference): {} finding(s)\n",
             tc->checked_steps, r.losses.size(), tc->findings.size());
  for (const auto& f : tc->findings)
    fmt::print(out,
               "  {:<9} {:<9} {:<9} {} ({})  score {}  step {} ({} checked steps)\n      {}\n{}{}",
               f.phase, f.kind, f.binding, f.node, f.op_type, fmt_score(f.score), f.step, f.steps,
               f.detail,
               (f.cls == FindingClass::None
                    ? ""
                    : fmt::format("      class {}: {}\n", to_string(f.cls), f.class_basis)) +
                   (f.verification.empty() ? "" : "      " + f.verification + "\n"),
               f.repro.empty() ? "" : "      reproducer: " + f.repro + "\n");
}

nlohmann::json train_to_json(const TrainSetup& s, const TrainSession& session) {
  const TrainResult& r = session.result;
  const auto& tc = session.check;
  const Graph& g = s.graph;
  nlohmann::json j;
  j["schema"] = "metaop-train/1";
  j["model"] = s.model;
  j["plan"] = s.bind;
  j["loss"] = s.loss;
  j["losses"] = r.losses;
  j["step_seconds"] = r.step_seconds;
  for (const auto& p : r.profile)
    j["node_profile"].push_back({{"node", p.node},
                                 {"op_type", p.op_type},
                                 {"forward_seconds", p.forward_seconds},
                                 {"backward_seconds", p.backward_seconds},
                                 {"forward_peak", p.forward_peak},
                                 {"backward_peak", p.backward_peak},
                                 {"forward_binding", p.forward_binding},
                                 {"backward_binding", p.backward_binding}});
  j["trainable"] = r.trainable;
  j["frozen"] = r.frozen;
  j["optimizer"] = s.config.optimizer.kind;
  j["lr_schedule"] = s.config.schedule.text();
  j["update_bindings"] = r.update_bindings;
  j["findings"] = nlohmann::json::array();
  if (!tc) return j;
  // Worst local score of each node over the checked steps, forward and backward.
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    j["node_scores"].push_back({{"node", g.nodes[k].name},
                                {"op_type", g.nodes[k].op_type},
                                {"forward", tc->forward_scores[k]},
                                {"backward", tc->backward_scores[k]}});
  for (const auto& [w, score] : tc->update_scores) j["update_scores"][w] = json_number(score);
  for (const auto& f : tc->findings) {
    nlohmann::json o = verified_finding_json(f);
    o["node"] = f.node;
    o["iteration"] = f.step;
    o["iterations"] = f.steps;
    j["findings"].push_back(o);
  }
  return j;
}

void write_train_reproducers(TrainSession& r, const TrainSetup& s, const std::string& root) {
  if (!r.check) return;
  auto& findings = r.check->findings;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    auto& f = findings[i];
    if (f.inputs.empty()) continue;
    f.repro = write_train_reproducer(r.training_graph, f, s.config.optimizer, r.applied.at(i),
                                     s.model, root);
  }
}

int report_training(TrainSession& r, const TrainSetup& s, const TrainOutputs& o) {
  bool findings = r.check && !r.check->findings.empty();
  bool diagnosed = r.diagnosis && !r.diagnosis->healthy();
  if (r.diagnosis && !r.diagnosis->trained) {  // the static checks stopped it
    fmt::print("{}: not trained: the static checks found labels the loss cannot take\n", s.model);
    print_run_diagnosis(stdout, *r.diagnosis);
    if (!o.json_file.empty()) {
      nlohmann::json j;
      j["schema"] = "metaop-train/1";
      j["model"] = s.model;
      j["losses"] = nlohmann::json::array();
      j["diagnosis"] = run_diagnosis_to_json(*r.diagnosis);
      std::ofstream(o.json_file) << j.dump(1) << '\n';
      fmt::print("wrote {}\n", o.json_file);
    }
    return 1;
  }
  // A reproducer per finding (`metaop repro DIR` judges it again), with the injected faults that
  // apply to the finding's binding and phase.
  if (findings)
    write_train_reproducers(r, s,
                            !o.repro_dir.empty()    ? o.repro_dir
                            : !o.report_dir.empty() ? o.report_dir + "/repro"
                                                    : "metaop-repro");
  print_train_summary(stdout, s, r);
  if (r.diagnosis) {
    fmt::print("\n");
    print_run_diagnosis(stdout, *r.diagnosis);
  }
  if (!o.json_file.empty()) {
    nlohmann::json j = train_to_json(s, r);
    if (r.diagnosis) j["diagnosis"] = run_diagnosis_to_json(*r.diagnosis);
    std::ofstream(o.json_file) << j.dump(1) << '\n';
    fmt::print("wrote {}\n", o.json_file);
  }
  if (!o.report_dir.empty()) {
    const TrainResult& t = r.result;
    TrainReport rep{s.model,       s.loss,     {{s.bind, t.losses}}, &s.graph,
                    r.check.get(), &t.profile, t.losses.size(),      steps_per_epoch(s)};
    write_train_report(rep, o.report_dir);
    fmt::print("wrote {}/index.html\n", o.report_dir);
  }
  if (!o.save.empty()) {
    write_file(o.save, with_initializers(s.model, r.result.weights));
    fmt::print("wrote {} (trained weights)\n", o.save);
  }
  return findings || diagnosed ? 1 : 0;
}

void print_comparison(std::FILE* out, const TrainSetup& s, const TrainComparison& c) {
  const auto& plans = c.plans;
  const auto& base = c.runs.at(plans[0]);
  fmt::print(out, "{}: {} steps, loss {}; divergence from --bind {}\n\n{:>5}", s.model,
             base.losses.size(), s.loss, plans[0], "step");
  for (const auto& b : plans) fmt::print(out, " {:>16}", b);
  fmt::print(out, "  {:>12}  {:>12}\n", "max rel diff", "weight drift");
  for (std::size_t step = 0; step < base.losses.size(); ++step) {
    double worst = 0;
    fmt::print(out, "{:>5}", step + 1);
    for (const auto& b : plans) {
      double l = c.runs.at(b).losses.at(step);
      fmt::print(out, " {:>16.9g}", l);
      worst = std::max(
          worst, std::fabs(l - base.losses[step]) / std::max(std::fabs(base.losses[step]), 1e-30));
    }
    double wd = 0;
    for (const auto& [b, d] : c.drift_per_step) wd = std::max(wd, d.at(step));
    fmt::print(out, "  {:>12.3g}  {:>12.3g}\n", worst, wd);
  }
  for (const auto& b : plans)
    fmt::print(out, "final weights under {}: relative drift {:.3g} from {}\n", b,
               c.final_drift.at(b), plans[0]);
  for (std::size_t k = 1; k < plans.size(); ++k) {
    const std::string& first = c.first_divergent_node.at(plans[k]);
    fmt::print(out,
               "first node whose values part (> 1e-4) between {} and {} on the first batch: {}\n",
               plans[0], plans[k], first.empty() ? "none" : first);
  }
}

nlohmann::json comparison_to_json(const TrainSetup& s, const TrainComparison& c) {
  nlohmann::json j;
  j["schema"] = "metaop-train-compare/1";
  j["model"] = s.model;
  j["plans"] = c.plans;
  for (const auto& b : c.plans) {
    j["losses"][b] = c.runs.at(b).losses;
    j["weight_drift"][b] = c.final_drift.at(b);
    if (c.drift_per_step.count(b)) j["weight_drift_per_step"][b] = c.drift_per_step.at(b);
  }
  for (std::size_t k = 1; k < c.plans.size(); ++k)
    j["first_divergent_node"][c.plans[k]] = c.first_divergent_node.at(c.plans[k]);
  return j;
}

int report_comparison(const TrainComparison& c, const TrainSetup& s, const TrainOutputs& o) {
  print_comparison(stdout, s, c);
  if (!o.json_file.empty()) {
    std::ofstream(o.json_file) << comparison_to_json(s, c).dump(1) << '\n';
    fmt::print("wrote {}\n", o.json_file);
  }
  if (!o.report_dir.empty()) {
    TrainReport rep{s.model, s.loss, {}, &s.graph, nullptr, nullptr, 0, steps_per_epoch(s)};
    for (const auto& b : c.plans) rep.losses[b] = c.runs.at(b).losses;
    write_train_report(rep, o.report_dir);
    fmt::print("wrote {}/index.html\n", o.report_dir);
  }
  return 0;
}

}  // namespace metaop
