// metaop: finds, localizes and verifies numerical defects in DL models and frameworks.
#include <fmt/core.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/process_options.h"
#include "tensor/error.h"
#include "tensor/heap.h"
#include "tensor/text.h"

int main(int argc, char** argv) {
  metaop::keep_freed_memory();
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
  // Usage errors are one line too.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("metaop: error: {} (see --help)\n", metaop::printable(e.what(), 4000));
  });
  metaop::cli::ProcessOptions process;
  for (auto* cmd : app.get_subcommands([](CLI::App*) { return true; }))
    metaop::cli::add_process_options(cmd, process);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  // Messages quote names from models and files: escaped, so that they stay one line and send
  // no terminal controls.
  auto say = [](const char* kind, std::string what) {
    // nlohmann-json's messages carry an internal tag, "[json.exception.type_error.302] ".
    for (auto at = what.find("[json.exception."); at != std::string::npos;
         at = what.find("[json.exception.")) {
      auto end = what.find("] ", at);
      if (end == std::string::npos) break;
      what.erase(at, end + 2 - at);
    }
    fmt::print(stderr, "metaop: {}: {}\n", kind, metaop::printable(what, 4000));
  };
  try {
    metaop::cli::apply_process_options(process);
    return action();
  } catch (const metaop::Error& e) {
    say("error", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    say("error", fmt::format("out of memory: an allocation of {} was refused (memory budget {}; "
                             "--max-memory)",
                             metaop::format_bytes(metaop::refused_allocation()),
                             metaop::format_bytes(metaop::memory_budget())));
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    say("error",
        e.path1().empty() ? e.code().message() : e.path1().string() + ": " + e.code().message());
    return 2;
  } catch (const std::exception& e) {
    say("internal error", e.what());
    return 2;
  }
}
