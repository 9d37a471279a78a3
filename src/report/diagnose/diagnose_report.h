#pragma once
// What `metaop diagnose` (and `train --diagnose`) hands to people: the console summary (symptoms,
// the model-or-framework split, ranked diagnoses with evidence, fixes and whether they verified),
// the JSON document (schema in docs/diagnose.md), and the outputs of
// report/diagnose/diagnose_html.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/diagnose/diagnose.h"
#include "report/core/run_diagnosis.h"

namespace metaop {

struct DiagnoseOutputs {
  std::string json_file, report_dir, out_dir, repro_dir;  // empty: not asked for
};

void print_diagnosis(std::FILE* out, const TrainSetup& s, const DiagnoseResult& r);
nlohmann::json diagnose_to_json(const TrainSetup& s, const DiagnoseResult& r);

// Reproducers of the framework diagnoses, repaired setups (--out), console, JSON and HTML, as
// `o` asks; returns the exit code: 0 healthy, 1 something diagnosed.
int report_diagnosis(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOutputs& o);

}  // namespace metaop
