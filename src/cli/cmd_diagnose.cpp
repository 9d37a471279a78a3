// metaop diagnose: trains with monitors, says what goes wrong and where (model or framework),
// and repairs what it can.
#include <fmt/core.h>

#include <algorithm>

#include "analysis/diagnose/diagnose.h"
#include "bindings/factory.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/train_options.h"
#include "report/diagnose/diagnose_report.h"

namespace metaop::cli {

namespace {

struct DiagnoseCommand {
  TrainArgs train;
  DiagnoseOptions options;
  DiagnoseOutputs out;
  bool no_repair = false;
};

int run(DiagnoseCommand& a) {
  TrainSetup s = make_train_setup(a.train);
  validate(a.options.thresholds);
  a.options.repair = !a.no_repair;
  if (progress_shown()) a.options.status = [](const std::string& line) { show_progress(line); };
  DiagnoseResult r = diagnose(s, a.options);
  end_progress();
  return report_diagnosis(r, s, a.out);
}

}  // namespace

void add_diagnose_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<DiagnoseCommand>();
  auto* cmd = app.add_subcommand(
      "diagnose",
      "Train with monitors and diagnose training faults: symptom, root cause (category and "
      "place), model or framework, and a verified repair (exit 0 healthy, 1 diagnosed, 2 bad "
      "input)");
  // What a diagnosis needs by default: the precision users train in (float32 on a framework;
  // the float64 reference is the split's), and epochs enough for the slow symptoms.
  a->train.config.epochs = 10;
  auto names = binding_names();
  if (std::find(names.begin(), names.end(), "torch") != names.end()) a->train.bind = "torch";
  add_train_options(cmd, a->train);
  cmd->add_option("--json", a->out.json_file, "Write symptoms, diagnoses and repairs as JSON");
  cmd->add_option("--report", a->out.report_dir,
                  "Write an HTML report (loss, gradient norms, dead and saturated units, "
                  "diagnoses) into this folder");
  cmd->add_option("--out", a->out.out_dir,
                  "Write each verified repair (model, hyperparameters, data) into this folder");
  cmd->add_option("--repro", a->out.repro_dir,
                  "Folder for the reproducers of framework diagnoses (default: REPORT/repro, "
                  "else ./metaop-repro)");
  cmd->add_flag("--no-repair", a->no_repair, "Diagnose only: no repair, no retraining");
  add_train_plan_options(cmd, a->train);
  add_threshold_options(cmd, a->options.thresholds);
  cmd->callback([a, &action] { action = [a] { return run(*a); }; });
}

}  // namespace metaop::cli
