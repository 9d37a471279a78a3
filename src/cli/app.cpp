#include "cli/app.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <new>

#include "cli/commands.h"
#include "cli/process_options.h"
#include "tensor/error.h"
#include "tensor/heap.h"
#include "tensor/text.h"

namespace metaop::cli {

namespace {

std::string usage_message(const CLI::Error& e) {
  return fmt::format("{} (see --help)", printable(e.what(), 4000));
}

int run(const std::vector<std::string>& args, bool host) {
  CLI::App app{"metaop: op-by-op numerical checking of ONNX models against a float64 oracle"};
  app.set_version_flag("--version", "metaop 0.1.0");
  app.require_subcommand(1);
  Action action;
  add_run_command(app, action);
  add_conform_command(app, action);
  add_ops_command(app, action);
  add_check_command(app, action);
  add_probe_command(app, action);
  add_train_command(app, action);
  add_repro_command(app, action);
  add_expose_command(app, action);
  add_diagnose_command(app, action);
  // Usage errors are one line too.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("metaop: error: {}\n", usage_message(e));
  });
  ProcessOptions process;
  for (auto* cmd : app.get_subcommands([](CLI::App*) { return true; }))
    add_process_options(cmd, process);
  try {
    // CLI11 takes the arguments last first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (host) throw Error(usage_message(e));
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  apply_process_options(process);
  return action();
}

}  // namespace

int run_command_line(const std::vector<std::string>& args) {
  return run(args, false);
}

int run_command(const std::vector<std::string>& args) {
  return run(args, true);
}

const char* Failure::label() const {
  return kind == Internal ? "internal error" : "error";
}

Failure describe_failure(const std::exception_ptr& e) {
  // Messages quote names from models and files: escaped, so that they stay one line and send no
  // terminal controls.
  auto line = [](std::string what) {
    // nlohmann-json's messages carry an internal tag, "[json.exception.type_error.302] ".
    for (auto at = what.find("[json.exception."); at != std::string::npos;
         at = what.find("[json.exception.")) {
      auto end = what.find("] ", at);
      if (end == std::string::npos) break;
      what.erase(at, end + 2 - at);
    }
    return printable(what, 4000);
  };
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return {Failure::Input, line(x.what())};
  } catch (const std::bad_alloc&) {
    return {Failure::Memory,
            line(fmt::format("out of memory: an allocation of {} was refused (memory budget {}; "
                             "--max-memory)",
                             format_bytes(refused_allocation()), format_bytes(memory_budget())))};
  } catch (const std::filesystem::filesystem_error& x) {
    return {Failure::Input,
            line(x.path1().empty() ? x.code().message()
                                   : x.path1().string() + ": " + x.code().message())};
  } catch (const std::exception& x) {
    return {Failure::Internal, line(x.what())};
  } catch (...) {
    return {Failure::Internal, "an exception that is not a std::exception"};
  }
}

}  // namespace metaop::cli
