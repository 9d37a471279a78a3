#pragma once
// What `metaop train` hands to people: the console summary and the JSON document of a training
// run (with --check's findings) or of a comparison (--compare), the reproducers, the HTML
// report (report/train/train_report.h) and the trained model.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/train/train_session.h"

namespace metaop {

struct TrainOutputs {
  std::string json_file, report_dir, repro_dir, save;  // empty: not asked for
};

void print_train_summary(std::FILE* out, const TrainSetup& s, const TrainSession& r);
nlohmann::json train_to_json(const TrainSetup& s, const TrainSession& r);
// A reproducer folder per --check finding under `root` (REPORT/repro or ./metaop-repro when
// empty), each finding's `repro` set.
void write_train_reproducers(TrainSession& r, const TrainSetup& s, const std::string& root);
// Reproducers, console summary, JSON, HTML report and the trained model, as `o` asks; returns
// the exit code (1 when --check found something or --diagnose diagnosed something).
int report_training(TrainSession& r, const TrainSetup& s, const TrainOutputs& o);

void print_comparison(std::FILE* out, const TrainSetup& s, const TrainComparison& c);
nlohmann::json comparison_to_json(const TrainSetup& s, const TrainComparison& c);
// Console table, JSON and HTML report of a comparison; returns the exit code (0).
int report_comparison(const TrainComparison& c, const TrainSetup& s, const TrainOutputs& o);

}  // namespace metaop
