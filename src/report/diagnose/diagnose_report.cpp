#include "report/diagnose/diagnose_report.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "bindings/factory.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "report/core/run_diagnosis.h"
#include "report/diagnose/diagnose_html.h"

namespace metaop {

void print_diagnosis(std::FILE* out, const TrainSetup& s, const DiagnoseResult& r) {
  const auto& rec = r.run.record;
  const auto& o = s.config.optimizer;
  std::string schedule = s.config.schedule.kind == "none"
                             ? ""
                             : fmt::format(", schedule {}", s.config.schedule.text());
  fmt::print(out, "{}: {} of {} steps under --bind {} ({} lr {:g}{}, batch {}), loss {}\n", s.model,
             rec.losses.size(), rec.total, s.bind, o.kind, o.lr, schedule, s.config.batch_size,
             s.loss);
  if (!rec.frozen.empty()) fmt::print(out, "frozen (--freeze): {}\n", fmt::join(rec.frozen, ", "));
  for (const auto& line : r.injected) fmt::print(out, "{}\n", line);
  if (!r.run.trained)
    fmt::print(out, "not trained: the static checks found labels the loss cannot take\n");
  if (rec.trivial_loss > 0)
    fmt::print(out, "trivial predictor: loss {:.4g}, {}\n", rec.trivial_loss, rec.trivial_what);
  if (double last = rec.epoch_accuracy(SIZE_MAX); std::isfinite(last))
    fmt::print(out,
               "accuracy: {:.1f}% of the samples predicted right in the first epoch, {:.1f}% in "
               "the last\n",
               100 * rec.epoch_accuracy(0), 100 * last);
  print_run_diagnosis(out, r.run);
  if (r.healthy()) return;
  if (!r.split.note.empty()) fmt::print(out, "model or framework: {}\n", r.split.note);
  if (r.small_batch.done) fmt::print(out, "small batch: {}\n", r.small_batch.note);
}

namespace {

// An accuracy, or null where the loss is not a classification's.
nlohmann::json accuracy_json(double a) {
  return std::isfinite(a) ? nlohmann::json(a) : nlohmann::json();
}

nlohmann::json monitors_json(const MonitorRecord& rec) {
  nlohmann::json m;
  m["grad_ratio"] = nlohmann::json::array();
  for (double x : rec.grad_ratio) m["grad_ratio"].push_back(json_number(x));
  for (const auto& w : rec.weights) {
    nlohmann::json gw = nlohmann::json::array(), uw = nlohmann::json::array();
    for (double x : w.grad_norm) gw.push_back(json_number(x));
    for (double x : w.update_ratio) uw.push_back(json_number(x));
    m["weights"].push_back({{"weight", w.weight},
                            {"node", w.node},
                            {"kernel", w.kernel},
                            {"grad_norm", gw},
                            {"update_ratio", uw}});
  }
  for (const auto& a : rec.activations) {
    nlohmann::json ps = nlohmann::json::array();
    for (double x : a.per_step) ps.push_back(json_number(x));
    m["activations"].push_back(
        {{"node", a.node}, {"op_type", a.op_type}, {"per_step", ps}, {"per_window", a.per_window}});
  }
  return m;
}

nlohmann::json replay_json(const ReplaySplit& split) {
  nlohmann::json sp;
  sp["done"] = split.done;
  sp["note"] = split.note;
  sp["replayed_steps"] = split.steps;
  sp["vanished"] = split.vanished;
  sp["replay_symptoms"] = nlohmann::json::array();
  for (const auto& x : split.replay_symptoms)
    sp["replay_symptoms"].push_back({{"kind", x.kind}, {"step", x.step}, {"node", x.node}});
  sp["checked_steps"] = split.checked_steps;
  sp["findings"] = nlohmann::json::array();
  if (split.check)
    for (const auto& f : split.check->findings)
      sp["findings"].push_back({{"node", f.node},
                                {"op_type", f.op_type},
                                {"binding", f.binding},
                                {"binding_version", binding_version(f.binding)},
                                {"phase", f.phase},
                                {"kind", f.kind},
                                {"score", json_number(f.score)},
                                {"step", f.step},
                                {"detail", f.detail},
                                {"repro", text_or_null(f.repro)}});
  return sp;
}

nlohmann::json repairs_json(const std::vector<RepairAttempt>& repairs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : repairs) {
    nlohmann::json sy = nlohmann::json::array();
    for (const auto& x : a.symptoms) sy.push_back(x.kind + (x.node.empty() ? "" : "@" + x.node));
    out.push_back({{"diagnosis", a.diagnosis + 1},
                   {"change", a.description},
                   {"steps", a.steps},
                   {"symptoms", sy},
                   {"static_faults_left", a.remaining},
                   {"loss_first_quarter", json_number(a.loss_first)},
                   {"loss_last_quarter", json_number(a.loss_last)},
                   {"trivial_loss", json_number(a.trivial)},
                   {"accuracy_last_epoch", accuracy_json(a.accuracy)},
                   {"verified", a.verified},
                   {"result", a.result}});
    // A repair of two faults at once: the other diagnosis (1-based), null for one.
    out.back()["together_with"] =
        a.partner == SIZE_MAX ? nlohmann::json(nullptr) : nlohmann::json(a.partner + 1);
  }
  return out;
}

}  // namespace

nlohmann::json diagnose_to_json(const TrainSetup& s, const DiagnoseResult& r) {
  nlohmann::json j = run_diagnosis_to_json(r.run);
  const auto& rec = r.run.record;
  j["schema"] = "metaop-diagnose/1";
  j["model"] = s.model;
  j["plan"] = s.bind;
  j["loss"] = s.loss;
  j["optimizer"] = optimizer_to_json(s.config.optimizer);
  j["lr_schedule"] = s.config.schedule.text();
  j["frozen"] = rec.frozen;
  j["batch_size"] = s.config.batch_size;
  j["epochs"] = s.config.epochs;
  j["steps"] = rec.losses.size();
  j["total_steps"] = rec.total;
  j["window"] = rec.window;
  j["losses"] = nlohmann::json::array();
  for (double l : rec.losses) j["losses"].push_back(json_number(l));
  // Classification: the share of each step's batch predicted right, and per epoch at both ends.
  j["accuracies"] = nlohmann::json::array();
  for (double x : rec.accuracies) j["accuracies"].push_back(json_number(x));
  j["accuracy_first_epoch"] = accuracy_json(rec.epoch_accuracy(0));
  j["accuracy_last_epoch"] = accuracy_json(rec.epoch_accuracy(SIZE_MAX));
  j["injected"] = r.injected;
  j["trivial_loss"] = json_number(rec.trivial_loss);
  j["trivial_what"] = rec.trivial_what;
  const auto& sb = r.small_batch;
  j["small_batch"] = {{"done", sb.done},
                      {"fitted", sb.fitted},
                      {"samples", sb.samples},
                      {"steps", sb.steps},
                      {"last", json_number(sb.last)},
                      {"trivial_loss", json_number(sb.trivial)},
                      {"note", sb.note}};
  j["monitors"] = monitors_json(rec);
  j["replay"] = replay_json(r.split);
  j["repairs"] = repairs_json(r.repairs);
  return j;
}

int report_diagnosis(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOutputs& o) {
  if (r.split.check && !r.split.check->findings.empty())
    write_framework_reproducers(r, s,
                                !o.repro_dir.empty()    ? o.repro_dir
                                : !o.report_dir.empty() ? o.report_dir + "/repro"
                                                        : "metaop-repro");
  std::vector<std::string> written;
  if (!o.out_dir.empty()) written = write_repaired(r, s, o.out_dir);
  print_diagnosis(stdout, s, r);
  for (const auto& w : written) fmt::print("wrote {}\n", w);
  if (!o.out_dir.empty() && written.empty() && !r.healthy())
    fmt::print("--out {}: no verified repair to write\n", o.out_dir);
  if (!o.json_file.empty()) {
    std::ofstream(o.json_file) << diagnose_to_json(s, r).dump(1) << '\n';
    fmt::print("wrote {}\n", o.json_file);
  }
  if (!o.report_dir.empty()) {
    write_diagnose_html(s, r, o.report_dir);
    fmt::print("wrote {}/index.html\n", o.report_dir);
  }
  return r.healthy() ? 0 : 1;
}

}  // namespace metaop
