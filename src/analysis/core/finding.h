#pragma once
// One finding, whatever found it: `check` (a node of a model under a binding), `probe` (an op on
// edge values) and `train --check` (a node's forward or backward, or a weight's update, during
// training) share this core -- what went wrong, where, how badly, in words, whether replacement
// verified it, the reproducer -- and its JSON. Each keeps only its own fields (check.h, probe.h,
// train_check.h). Reproducers are written and read in report/core/repro.h.
#include <fmt/core.h>

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "bindings/phase.h"

namespace metaop {

enum class FindingKind {
  Accuracy,     // outside the error model
  Nonfinite,    // NaN or infinity on one side only, reference or binding
  Crash,        // the kernel died or threw
  Hang,         // the kernel was killed after the kernel timeout
  Unsupported,  // the binding lacks the op (the reference ran it): not a defect
  Hazard,       // the exact result is non-finite on finite inputs: the model's, not a kernel's
};

// The words of the JSON documents, the probe journal and repro.json: accuracy, nonfinite, crash,
// hang, unsupported, hazard (a phase's words: bindings/phase.h).
const char* to_string(FindingKind k);
// The reverse, for what is read back; fails (Error) on any other word, as
// "WHERE: kind 'WORD' (expected ...)".
FindingKind parse_finding_kind(std::string_view word, std::string_view where);
// JSON holds both as their words (the build makes an enum without to_json a compile error).
void to_json(nlohmann::json& j, FindingKind k);
void to_json(nlohmann::json& j, Phase p);

// Triage (analysis/core/triage.h) of a numerical, crash or hang finding: what a maintainer would
// make of it. `defect`: the kernel is worse than a faithful float32 evaluation of the op's
// definition (or crashed, hung); `float32-limit`: that evaluation fails the same way (the
// formula's, not the kernel's); `convention`: a choice the ONNX text leaves open explains it;
// `untriaged`: the op declares no float32 evaluation (or the data is float64), so neither can be
// said. Unsupported ops and hazards get none.
enum class FindingClass { Defect, Float32Limit, Convention, Untriaged, None };
// defect, float32-limit, convention, untriaged ("" for None); and the reverse (Error on others).
const char* to_string(FindingClass c);
FindingClass parse_finding_class(std::string_view word, std::string_view where);

struct FindingCore {
  std::string op_type, binding;
  Phase phase = Phase::Forward;
  FindingKind kind = FindingKind::Accuracy;
  double score = 0;          // local score: error / tolerance of the worst element
  std::string detail;        // the worst element, or what crashed, in words
  bool verified = false;     // by replacement (check, train --check)
  std::string verification;  // how the verification went, in words
  std::string repro;         // the reproducer's folder, when written
  std::string minimized;     // its minimized copy's folder (--minimize), when written
  FindingClass cls = FindingClass::None;
  std::string class_basis;  // why, in words: the float32 evaluation's value, the convention
  // What the other frameworks of the run give at the worst element on the same inputs, in words
  // ("at y[1, 0, 3]: ort-1.30 0 (the same), openvino 2.1e-09 (exact)"); "" when none ran it.
  std::string agreement;
  bool defect() const { return kind != FindingKind::Unsupported; }
  bool numerical() const { return kind == FindingKind::Accuracy || kind == FindingKind::Nonfinite; }
};

// A number for JSON, which has no infinity: non-finite ones become "inf", "-inf", "nan".
nlohmann::json json_number(double v);
// The reverse: a number, or one of those words; NaN for anything else.
double number_from_json(const nlohmann::json& v);

// The common fields as the JSON of check, probe and train --check and the probe journal have
// them: op_type, binding, phase, kind, score and detail, and class and class_basis when triaged.
// The framework version a finding's JSON names beside its binding (torch and torch-1.13 are two
// LibTorches): set by what knows the bindings (binding_versions.cpp, linked into every program
// that has them); a reader built without the bindings (the fuzz targets) writes none.
void set_binding_version_lookup(std::string (*lookup)(const std::string& binding));
nlohmann::json finding_json(const FindingCore& f);
// The same with the verification: verified, verification, and repro (null when none written).
nlohmann::json verified_finding_json(const FindingCore& f);

}  // namespace metaop

template <>
struct fmt::formatter<metaop::FindingKind> : fmt::formatter<std::string_view> {
  auto format(metaop::FindingKind k, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(metaop::to_string(k), ctx);
  }
};
