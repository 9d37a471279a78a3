#pragma once
// The options of a training run, shared by `metaop train` and `metaop diagnose`: model, data,
// loss, optimizer and its hyperparameters (flags or --hparams), epochs, batch size, seed, the
// binding plan, update kernels and injected faults.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/train/train_session.h"

namespace metaop::cli {

struct TrainArgs {
  std::string model, data, labels, loss, hparams;
  std::string lr_schedule = "none";
  TrainConfig config;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  std::vector<std::string> bind_update;  // BINDING, or WEIGHT_NODE_OR_OP=BINDING
  int threads = 1;
  std::vector<std::string> inject;
  CLI::App* cmd = nullptr;
};

// Registers the options on `cmd` (which must outlive the parse): the model, data, loss and
// hyperparameters, and apart (to come after a command's own options in its help) the plan,
// update kernels and injected faults.
void add_train_options(CLI::App* cmd, TrainArgs& a);
void add_train_plan_options(CLI::App* cmd, TrainArgs& a);
// The thresholds of the diagnosis monitors (docs/diagnose.md cites their sources).
void add_threshold_options(CLI::App* cmd, DiagnoseThresholds& t);

// Reads the model and the data and turns the options into a setup (--hparams applied, flags on
// the command line winning; the loss parsed; a progress bar on stderr when it is a terminal).
TrainSetup make_train_setup(TrainArgs& a);

}  // namespace metaop::cli
