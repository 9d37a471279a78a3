// metaop: finds, localizes and verifies numerical defects in DL models and frameworks.
#include <fmt/core.h>

#include "cli/commands.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  CLI::App app{"metaop: op-by-op numerical checking of ONNX models against a float64 oracle"};
  app.set_version_flag("--version", "metaop 0.1.0");
  app.require_subcommand(1);
  metaop::cli::Action action;
  metaop::cli::add_run_command(app, action);
  metaop::cli::add_conform_command(app, action);
  metaop::cli::add_ops_command(app, action);
  metaop::cli::add_check_command(app, action);
  metaop::cli::add_probe_command(app, action);
  metaop::cli::add_train_command(app, action);
  metaop::cli::add_repro_command(app, action);
  metaop::cli::add_expose_command(app, action);
  metaop::cli::add_diagnose_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    return action();
  } catch (const metaop::Error& e) {
    fmt::print(stderr, "metaop: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "metaop: internal error: {}\n", e.what());
    return 2;
  }
}
