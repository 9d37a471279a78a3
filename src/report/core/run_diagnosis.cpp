#include "report/core/run_diagnosis.h"

#include <fmt/format.h>

#include "report/core/format.h"

namespace metaop {

namespace {

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
  j["data"]["constant_features"] = d.checks.constant_features;
  j["data"]["samples"] = d.checks.samples;
  j["data"]["distinct_inputs"] = d.checks.distinct_inputs;
  j["data"]["floor_loss"] = json_number(d.checks.floor_loss);
  j["linear_layers"] = d.checks.linear_layers;
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

}  // namespace metaop
