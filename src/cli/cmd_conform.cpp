// metaop conform: runs ONNX backend-test folders with the reference.
#include <fmt/core.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/conform/conform.h"
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
  std::string expect, write_status;
  int min_pass = -1;
  bool quiet = false;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  int threads = 1;
};

// "STATUS TEST" lines (pass, fail, unsupported), '#' comments: the statuses a run must
// reproduce exactly.
std::map<std::string, std::string> read_expected(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open the expected statuses", path);
  std::map<std::string, std::string> expected;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string status, test, extra;
    ss >> status >> test;
    if ((status != "pass" && status != "fail" && status != "unsupported") || test.empty() ||
        (ss >> extra))
      fail("{}:{}: expected 'pass|fail|unsupported TEST', got '{}'", path, n, line);
    if (!expected.emplace(test, status).second) fail("{}:{}: {} listed twice", path, n, test);
  }
  return expected;
}

int run(const ConformArgs& a) {
  if (!a.json.empty()) check_writable_file("--json", a.json);
  auto tests = find_conformance_tests(a.paths);
  std::map<std::string, std::string> expected;
  if (!a.expect.empty()) expected = read_expected(a.expect);
  std::vector<std::string> changed;
  std::map<std::string, std::string> statuses;
  Plan plan;
  configure_plan(plan, a.bind, a.bind_ops, a.threads);
  int on_binding = 0;
  int pass = 0, failed = 0, unsupported = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tests) {
    ConformResult r = run_conformance_test(t, plan);
    std::string status(to_string(r.status));
    if (r.status == ConformStatus::Pass && r.bound_nodes > 0) ++on_binding;
    if (r.status == ConformStatus::Pass)
      ++pass;
    else if (r.status == ConformStatus::Fail)
      ++failed;
    else
      ++unsupported;
    if (!a.quiet || r.status == ConformStatus::Fail)
      fmt::print("{:<12} {}{}{}\n", status, printable(r.test), r.reason.empty() ? "" : "  ",
                 printable(r.reason, 4000));
    statuses[r.test] = status;
    if (!a.expect.empty()) {
      auto it = expected.find(r.test);
      if (it == expected.end())
        changed.push_back(fmt::format("{}: {}, not in {}", r.test, status, a.expect));
      else if (it->second != status)
        changed.push_back(fmt::format("{}: {} where {} expects {}{}{}", r.test, status, a.expect,
                                      it->second, r.reason.empty() ? "" : ": ", r.reason));
    }
    out.push_back({{"test", r.test},
                   {"status", status},
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
  if (!a.write_status.empty()) {
    std::ofstream f(a.write_status);
    if (!f) fail("{}: cannot open for writing", a.write_status);
    for (const auto& [test, status] : statuses) f << status << " " << test << "\n";
  }
  for (const auto& [test, status] : expected)
    if (!statuses.count(test))
      changed.push_back(fmt::format("{}: expected {}, not run", test, status));
  for (const auto& c : changed) fmt::print("UNEXPECTED {}\n", c);
  if (!a.expect.empty())
    fmt::print("{} of {} tests as {} expects\n", tests.size() - changed.size(), tests.size(),
               a.expect);
  bool short_of = a.min_pass >= 0 && pass < a.min_pass;
  if (short_of) fmt::print("{} passed, fewer than the required {}\n", pass, a.min_pass);
  return failed || short_of || !changed.empty() ? 1 : 0;
}

}  // namespace

void add_conform_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConformArgs>();
  auto* cmd = app.add_subcommand("conform", "Run ONNX backend-test folders with the reference");
  cmd->add_option("paths", args->paths, "Test folders, or folders of test folders")->required();
  cmd->add_option("--json", args->json, "Write [{test, status, reason}] to this file");
  cmd->add_option("--min-pass", args->min_pass,
                  "Exit 1 unless at least this many tests pass (a failure exits 1 in any case)");
  cmd->add_option("--expect", args->expect,
                  "File of 'STATUS TEST' lines: exit 1 when any test's status differs")
      ->check(CLI::ExistingFile);
  cmd->add_option("--write-status", args->write_status,
                  "Write every test's status as 'STATUS TEST' lines (the --expect format)");
  cmd->add_flag("--quiet", args->quiet, "Print only failures and the totals");
  add_plan_options(cmd, args->bind, args->bind_ops, args->threads);
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
