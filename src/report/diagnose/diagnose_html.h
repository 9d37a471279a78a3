#pragma once
// Files `metaop diagnose` writes: the offline HTML report (loss curve, per-layer gradient norms,
// dead and saturated fractions over the steps, symptoms, diagnoses, repairs), the verified
// repaired setups (--out), and the reproducers of framework diagnoses.
#include <string>
#include <vector>

#include "analysis/diagnose/diagnose.h"

namespace metaop {

// Writes DIR/index.html (self-contained: inline SVG and CSS, no scripts or network).
void write_diagnose_html(const TrainSetup& s, const DiagnoseResult& r, const std::string& dir);

// One folder per verified repair under `dir`: hparams.json (for train --hparams), and what the
// repair changed -- model.onnx, the standardized inputs (x.npy, with standardization.json), the
// relabelled labels (y.npy) -- with a README holding the command that trains the repaired
// setup. Returns the folders.
std::vector<std::string> write_repaired(const DiagnoseResult& r, const TrainSetup& s,
                                        const std::string& dir);

// The reproducer of each framework diagnosis's kernel finding (`metaop repro DIR`), under root;
// sets the diagnoses' and findings' `repro`.
void write_framework_reproducers(DiagnoseResult& r, const TrainSetup& s, const std::string& root);

}  // namespace metaop
