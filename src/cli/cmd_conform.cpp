// metaop conform: runs ONNX backend-test folders with the reference.
#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/conform.h"
#include "cli/commands.h"
#include "cli/plan_options.h"
#include "graph/onnx_io.h"
#include "tensor/error.h"
#include "tensor/files.h"
#include "tensor/text.h"

namespace metaop::cli {

namespace {

struct ConformArgs {
  std::vector<std::string> paths;
  std::string json;
  int min_pass = -1;
  bool quiet = false;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  int threads = 1;
};

int run(const ConformArgs& a) {
  if (!a.json.empty()) check_writable_file("--json", a.json);
  auto tests = find_conformance_tests(a.paths);
  Plan plan;
  configure_plan(plan, a.bind, a.bind_ops, a.threads);
  int on_binding = 0;
  int pass = 0, failed = 0, unsupported = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tests) {
    ConformResult r = run_conformance_test(t, plan);
    if (r.status == "pass" && r.bound_nodes > 0) ++on_binding;
    if (r.status == "pass")
      ++pass;
    else if (r.status == "fail")
      ++failed;
    else
      ++unsupported;
    if (!a.quiet || r.status == "fail")
      fmt::print("{:<12} {}{}{}\n", r.status, printable(r.test), r.reason.empty() ? "" : "  ",
                 printable(r.reason, 4000));
    out.push_back({{"test", r.test},
                   {"status", r.status},
                   {"reason", r.reason},
                   {"bound_nodes", r.bound_nodes}});
  }
  fmt::print("{} tests: {} passed, {} failed, {} unsupported\n", tests.size(), pass, failed,
             unsupported);
  if (a.bind != "reference" || !a.bind_ops.empty())
    fmt::print(
        "{} of the passing tests ran at least one node on a binding other than the reference\n",
        on_binding);
  if (!a.json.empty()) {
    write_file(a.json, out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (a.min_pass >= 0) {
    if (pass < a.min_pass) {
      fmt::print("{} passed, fewer than the required {}\n", pass, a.min_pass);
      return 1;
    }
    return 0;
  }
  return failed ? 1 : 0;
}

}  // namespace

void add_conform_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConformArgs>();
  auto* cmd = app.add_subcommand("conform", "Run ONNX backend-test folders with the reference");
  cmd->add_option("paths", args->paths, "Test folders, or folders of test folders")->required();
  cmd->add_option("--json", args->json, "Write [{test, status, reason}] to this file");
  cmd->add_option("--min-pass", args->min_pass,
                  "Exit 1 unless at least this many tests pass (default: exit 1 on any failure)");
  cmd->add_flag("--quiet", args->quiet, "Print only failures and the totals");
  add_plan_options(cmd, args->bind, args->bind_ops, args->threads);
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
