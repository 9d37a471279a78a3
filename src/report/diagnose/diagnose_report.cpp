#include "report/diagnose/diagnose_report.h"

#include <fmt/format.h>

#include <fstream>

#include "report/check/check_report.h"
#include "report/core/repro.h"
#include "report/diagnose/diagnose_html.h"

namespace metaop {

namespace {

nlohmann::json text_or_null(const std::string& s) {
  return s.empty() ? nlohmann::json() : nlohmann::json(s);
}

std::string features_text(const std::vector<std::int64_t>& f) {
  std::string out;
  for (std::size_t i = 0; i < f.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(f[i]);
  if (f.size() > 8) out += fmt::format(", ... ({} in all)", f.size());
  return out;
}

std::string place(const Diagnosis& d) {
  if (d.category == "hyperparameter") return d.hyperparameter;
  if (d.category == "initialization") return fmt::format("{} (weight '{}')", d.node, d.weight);
  if (d.category == "data")
    return d.features.empty()
               ? d.input
               : fmt::format("{}, features [{}]", d.input, features_text(d.features));
  if (d.category == "loss") return d.loss + (d.node.empty() ? "" : " (" + d.node + ")");
  if (d.category == "framework")
    return fmt::format("{} of {} ({}) under {}", phase_text(d), d.node, d.op_type, d.binding);
  return d.node.empty() ? "" : fmt::format("{} ({})", d.node, d.op_type);
}

std::string value_text(const Symptom& s) {
  return fmt::format("{:.4g} (threshold {:g})", s.value, s.threshold);
}

}  // namespace

void print_run_diagnosis(std::FILE* out, const RunDiagnosis& d) {
  for (const auto& n : d.checks.notes) fmt::print(out, "note: {}\n", n);
  if (!d.checks.off_scale.empty() && d.healthy())
    fmt::print(out, "note: {} (no symptom in this run)\n", d.checks.data_detail);
  if (d.healthy()) {
    fmt::print(out, "diagnosis: healthy ({} steps: no symptom, no static fault)\n",
               d.record.losses.size());
    return;
  }
  if (!d.record.symptoms.empty()) {
    fmt::print(out, "symptoms (first step where seen):\n");
    for (const auto& s : d.record.symptoms)
      fmt::print(out, "  {:<20} step {:>5}  {:<32} {}\n      {}\n", s.kind, s.step,
                 s.node.empty() ? "-" : s.node + " (" + s.op_type + ")", value_text(s), s.detail);
  }
  fmt::print(out, "diagnoses (most likely first):\n");
  for (std::size_t i = 0; i < d.diagnoses.size(); ++i) {
    const auto& x = d.diagnoses[i];
    fmt::print(out, "  {}. {:<15} {}{}\n      evidence: {}\n", i + 1, x.category, place(x),
               x.symptoms.empty() ? (x.definite ? "  [static check]" : "")
                                  : fmt::format("  [explains {}]", fmt::join(x.symptoms, ", ")),
               x.evidence);
    if (!x.fix.empty())
      fmt::print(out, "      fix: {}{}\n", x.fix.description,
                 x.fix_tried ? (x.fix_verified ? "  -- verified" : "  -- not verified") : "");
    if (x.fix_tried) fmt::print(out, "      repair: {}\n", x.fix_result);
    if (!x.repro.empty()) fmt::print(out, "      reproducer: {}\n", x.repro);
  }
  if (d.diagnoses.empty())
    fmt::print(out, "  none of the rules explains these symptoms (docs/diagnose.md)\n");
}

nlohmann::json run_diagnosis_to_json(const RunDiagnosis& d) {
  nlohmann::json j;
  j["healthy"] = d.healthy();
  j["symptoms"] = nlohmann::json::array();
  for (const auto& s : d.record.symptoms)
    j["symptoms"].push_back({{"kind", s.kind},
                             {"step", s.step},
                             {"node", text_or_null(s.node)},
                             {"op_type", text_or_null(s.op_type)},
                             {"value", json_number(s.value)},
                             {"threshold", json_number(s.threshold)},
                             {"detail", s.detail}});
  j["diagnoses"] = nlohmann::json::array();
  for (std::size_t i = 0; i < d.diagnoses.size(); ++i) {
    const auto& x = d.diagnoses[i];
    j["diagnoses"].push_back(
        {{"rank", i + 1},
         {"category", x.category},
         {"hyperparameter", text_or_null(x.hyperparameter)},
         {"node", text_or_null(x.node)},
         {"op_type", text_or_null(x.op_type)},
         {"weight", text_or_null(x.weight)},
         {"binding", text_or_null(x.binding)},
         {"phase", x.phase ? nlohmann::json(*x.phase) : nlohmann::json()},
         {"input", text_or_null(x.input)},
         {"features", x.features},
         {"loss", text_or_null(x.loss)},
         {"place", place(x)},
         {"evidence", x.evidence},
         {"score", x.score},
         {"static", x.definite},
         {"symptoms", x.symptoms},
         {"fix", x.fix.empty() ? nlohmann::json() : nlohmann::json(x.fix.description)},
         {"fix_tried", x.fix_tried},
         {"fix_verified", x.fix_verified},
         {"fix_result", text_or_null(x.fix_result)},
         {"repro", text_or_null(x.repro)}});
  }
  j["notes"] = d.checks.notes;
  j["monitor_seconds"] = d.record.seconds;
  if (!d.checks.off_scale.empty()) {
    j["data"]["off_scale_features"] = d.checks.off_scale;
    j["data"]["detail"] = d.checks.data_detail;
  }
  j["data"]["feature_mean"] = d.checks.feature_mean;
  j["data"]["feature_std"] = d.checks.feature_std;
  for (const auto& l : d.checks.layers)
    j["layers"].push_back({{"node", l.node},
                           {"op_type", l.op_type},
                           {"weight", l.weight},
                           {"fan_in", l.fan_in},
                           {"fan_out", l.fan_out},
                           {"gain", l.gain},
                           {"bias_mean", l.bias_mean},
                           {"activation", text_or_null(l.activation)}});
  return j;
}

void print_diagnosis(std::FILE* out, const TrainSetup& s, const DiagnoseResult& r) {
  const auto& rec = r.run.record;
  const auto& o = s.config.optimizer;
  fmt::print(out, "{}: {} of {} steps under --bind {} ({} lr {:g}, batch {}), loss {}\n", s.model,
             rec.losses.size(), rec.total, s.bind, o.kind, o.lr, s.config.batch_size, s.loss);
  for (const auto& line : r.injected) fmt::print(out, "{}\n", line);
  if (!r.run.trained)
    fmt::print(out, "not trained: the static checks found labels the loss cannot take\n");
  print_run_diagnosis(out, r.run);
  if (r.healthy()) return;
  if (!r.split.note.empty()) fmt::print(out, "model or framework: {}\n", r.split.note);
}

nlohmann::json diagnose_to_json(const TrainSetup& s, const DiagnoseResult& r) {
  nlohmann::json j = run_diagnosis_to_json(r.run);
  const auto& rec = r.run.record;
  j["schema"] = "metaop-diagnose/1";
  j["model"] = s.model;
  j["plan"] = s.bind;
  j["loss"] = s.loss;
  j["optimizer"] = optimizer_to_json(s.config.optimizer);
  j["steps"] = rec.losses.size();
  j["total_steps"] = rec.total;
  j["window"] = rec.window;
  j["losses"] = nlohmann::json::array();
  for (double l : rec.losses) j["losses"].push_back(json_number(l));
  j["injected"] = r.injected;
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
  j["monitors"] = m;
  nlohmann::json sp;
  sp["done"] = r.split.done;
  sp["note"] = r.split.note;
  sp["replayed_steps"] = r.split.steps;
  sp["vanished"] = r.split.vanished;
  sp["replay_symptoms"] = nlohmann::json::array();
  for (const auto& x : r.split.replay_symptoms)
    sp["replay_symptoms"].push_back({{"kind", x.kind}, {"step", x.step}, {"node", x.node}});
  sp["checked_steps"] = r.split.checked_steps;
  sp["findings"] = nlohmann::json::array();
  if (r.split.check)
    for (const auto& f : r.split.check->findings)
      sp["findings"].push_back({{"node", f.node},
                                {"op_type", f.op_type},
                                {"binding", f.binding},
                                {"phase", f.phase},
                                {"kind", f.kind},
                                {"score", json_number(f.score)},
                                {"step", f.step},
                                {"detail", f.detail},
                                {"repro", text_or_null(f.repro)}});
  j["replay"] = sp;
  j["repairs"] = nlohmann::json::array();
  for (const auto& a : r.repairs) {
    nlohmann::json sy = nlohmann::json::array();
    for (const auto& x : a.symptoms) sy.push_back(x.kind + (x.node.empty() ? "" : "@" + x.node));
    j["repairs"].push_back({{"diagnosis", a.diagnosis + 1},
                            {"change", a.description},
                            {"steps", a.steps},
                            {"symptoms", sy},
                            {"static_faults_left", a.remaining},
                            {"loss_first_quarter", json_number(a.loss_first)},
                            {"loss_last_quarter", json_number(a.loss_last)},
                            {"verified", a.verified},
                            {"result", a.result}});
  }
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
