// metaop train: trains a model under a binding plan (forward and backward node by node).
#include "analysis/diagnose/diagnose.h"
#include "analysis/train/train_session.h"
#include "bindings/factory.h"
#include "cli/commands.h"
#include "cli/plan_options.h"
#include "cli/train_options.h"
#include "report/train/train_summary.h"

namespace metaop::cli {

namespace {

struct TrainCommand {
  TrainArgs train;
  TrainOutputs out;
  bool check = false;
  std::size_t check_every = 1;
  std::string compare;
  bool diagnose = false;
  DiagnoseThresholds thresholds;
};

int run(TrainCommand& a) {
  TrainSetup s = make_train_setup(a.train);
  s.check = a.check || a.train.cmd->count("--check-every");
  s.check_every = a.check_every;
  if (a.diagnose) {
    validate(a.thresholds);
    s.diagnose = diagnose_watch(a.thresholds);
  }
  if (a.compare.empty()) {
    TrainSession r = run_training(s);
    return report_training(r, s, a.out);
  }
  // --compare B1,B2,...: the same training under each binding.
  std::vector<std::string> plans = split_list(a.compare);
  auto known = binding_names();
  for (const auto& b : plans)
    if (std::find(known.begin(), known.end(), b) == known.end())
      fail("--compare {}: unknown binding '{}'", a.compare, b);
  if (plans.size() < 2) fail("--compare {}: name at least two bindings", a.compare);
  require_separate_processes("--compare", a.compare, plans);
  return report_comparison(compare_training(s, plans), s, a.out);
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<TrainCommand>();
  auto* cmd = app.add_subcommand(
      "train", "Train a model under a binding plan, forward and backward node by node");
  add_train_options(cmd, a->train);
  cmd->add_option("--json", a->out.json_file, "Write the per-step losses as JSON");
  cmd->add_option("--save", a->out.save, "Write the model with its trained weights");
  cmd->add_option("--report", a->out.report_dir,
                  "Write an HTML report (loss curves; per-node forward and gradient error with "
                  "--check) into this folder");
  cmd->add_option("--repro", a->out.repro_dir,
                  "Folder for the reproducers of --check's findings (default: REPORT/repro, else "
                  "./metaop-repro)");
  cmd->add_flag("--check", a->check,
                "Check every node's forward and backward against the reference (exit 1 on "
                "findings)");
  cmd->add_option("--check-every", a->check_every, "Check every K-th step (implies --check)")
      ->capture_default_str();
  cmd->add_option("--compare", a->compare,
                  "Train under each of these bindings (B1,B2,...) and report where they diverge");
  cmd->add_flag("--diagnose", a->diagnose,
                "Watch every step for training faults (metaop diagnose's static checks, monitors "
                "and rules; exit 1 when something is diagnosed)");
  add_train_plan_options(cmd, a->train);
  add_threshold_options(cmd, a->thresholds);
  cmd->callback([a, &action] { action = [a] { return run(*a); }; });
}

}  // namespace metaop::cli
