#pragma once
// Each subcommand registers itself on the app and sets `run` to its action, which returns the
// exit code: 0 clean, 1 defects or failures found, 2 bad usage or input.
#include <CLI/CLI.hpp>
#include <functional>

namespace metaop::cli {

using Action = std::function<int()>;

void add_run_command(CLI::App& app, Action& action);
void add_conform_command(CLI::App& app, Action& action);
void add_ops_command(CLI::App& app, Action& action);
void add_check_command(CLI::App& app, Action& action);
void add_probe_command(CLI::App& app, Action& action);
void add_train_command(CLI::App& app, Action& action);
void add_repro_command(CLI::App& app, Action& action);
void add_diagnose_command(CLI::App& app, Action& action);

}  // namespace metaop::cli
