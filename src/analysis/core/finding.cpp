#include "analysis/core/finding.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

#include "tensor/error.h"
#include "tensor/text.h"

namespace metaop {

namespace {

constexpr std::array<std::pair<FindingKind, const char*>, 6> kKinds{{
    {FindingKind::Accuracy, "accuracy"},
    {FindingKind::Nonfinite, "nonfinite"},
    {FindingKind::Crash, "crash"},
    {FindingKind::Hang, "hang"},
    {FindingKind::Unsupported, "unsupported"},
    {FindingKind::Hazard, "hazard"},
}};

constexpr std::array<std::pair<FindingClass, const char*>, 4> kClasses{{
    {FindingClass::Defect, "defect"},
    {FindingClass::Float32Limit, "float32-limit"},
    {FindingClass::Convention, "convention"},
    {FindingClass::Untriaged, "untriaged"},
}};

template <typename E, std::size_t N>
const char* word_of(const std::array<std::pair<E, const char*>, N>& words, E e) {
  for (const auto& [value, word] : words)
    if (value == e) return word;
  return "?";
}

}  // namespace

const char* to_string(FindingKind k) {
  return word_of(kKinds, k);
}

FindingKind parse_finding_kind(std::string_view word, std::string_view where) {
  for (const auto& [value, w] : kKinds)
    if (word == w) return value;
  fail("{}: kind '{}' (expected accuracy, nonfinite, crash, hang, unsupported or hazard)", where,
       printable(word, 80));
}

const char* to_string(FindingClass c) {
  return c == FindingClass::None ? "" : word_of(kClasses, c);
}

FindingClass parse_finding_class(std::string_view word, std::string_view where) {
  for (const auto& [value, w] : kClasses)
    if (word == w) return value;
  fail("{}: class '{}' (expected defect, float32-limit, convention or untriaged)", where,
       printable(word, 80));
}

void to_json(nlohmann::json& j, FindingKind k) {
  j = to_string(k);
}

void to_json(nlohmann::json& j, Phase p) {
  j = to_string(p);
}

nlohmann::json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

double number_from_json(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return std::strtod(v.get<std::string>().c_str(), nullptr);
  return NAN;
}

namespace {
std::string (*g_binding_version)(const std::string&) = nullptr;
}  // namespace

void set_binding_version_lookup(std::string (*lookup)(const std::string& binding)) {
  g_binding_version = lookup;
}

nlohmann::json finding_json(const FindingCore& f) {
  nlohmann::json j = {{"op_type", f.op_type},          {"binding", f.binding},
                      {"phase", to_string(f.phase)},   {"kind", to_string(f.kind)},
                      {"score", json_number(f.score)}, {"detail", f.detail}};
  if (f.cls != FindingClass::None) {
    j["class"] = to_string(f.cls);
    j["class_basis"] = f.class_basis;
  }
  if (!f.agreement.empty()) j["agreement"] = f.agreement;
  // The framework's version beside the binding (torch and torch-1.13 are two LibTorches).
  if (g_binding_version)
    if (std::string v = g_binding_version(f.binding); !v.empty()) j["binding_version"] = v;
  return j;
}

nlohmann::json verified_finding_json(const FindingCore& f) {
  nlohmann::json j = finding_json(f);
  j["verified"] = f.verified;
  j["verification"] = f.verification;
  j["repro"] = f.repro.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.repro);
  if (!f.minimized.empty()) j["minimized"] = f.minimized;
  return j;
}

}  // namespace metaop
