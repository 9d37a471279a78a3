#pragma once
// The symptoms and the diagnoses of one watched training run, for `train --diagnose` (after its
// summary) and `metaop diagnose` (report/diagnose): console and JSON.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "analysis/diagnose/diagnose.h"

namespace metaop {

// The symptoms and the diagnoses of one run (train --diagnose prints this after its summary).
void print_run_diagnosis(std::FILE* out, const RunDiagnosis& d);
// {"healthy", "symptoms", "diagnoses", "notes"}: the part every diagnosis document shares.
nlohmann::json run_diagnosis_to_json(const RunDiagnosis& d);

}  // namespace metaop
