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
  std::string expect, write_status, errata;
  int min_pass = -1;
  bool quiet = false;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  int threads = 1;
};

// "STATUS TEST" lines (pass, fail, unsupported, erratum), '#' comments: the statuses a run must
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
    if ((status != "pass" && status != "fail" && status != "unsupported" && status != "erratum") ||
        test.empty() || (ss >> extra))
      fail("{}:{}: expected 'pass|fail|unsupported|erratum TEST', got '{}'", path, n, line);
    if (!expected.emplace(test, status).second) fail("{}:{}: {} listed twice", path, n, test);
  }
  return expected;
}

// A test whose expected data is known to be wrong: the failure it must show (a part of the
// failure's words, so that no other failure of the test hides behind it) and why.
struct Erratum {
  std::string failure, why;
};

// "TEST<TAB>FAILURE<TAB>WHY" lines, '#' comments.
std::map<std::string, Erratum> read_errata(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open the errata", path);
  std::map<std::string, Erratum> errata;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    auto t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos || t1 == 0 || t2 == t1 + 1 || t2 + 1 >= line.size())
      fail("{}:{}: expected 'TEST<tab>FAILURE<tab>WHY', got '{}'", path, n, line);
    std::string test = line.substr(0, t1);
    if (!errata.emplace(test, Erratum{line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1)})
             .second)
      fail("{}:{}: {} listed twice", path, n, test);
  }
  return errata;
}

// What a run has seen: statuses per test, their counts, the tests whose status is not as
// --expect or --errata say, and the JSON rows.
struct Tally {
  std::map<std::string, std::string> statuses;
  std::map<std::string, int> count;  // pass, fail, unsupported, erratum
  int on_binding = 0;
  std::vector<std::string> changed;
  nlohmann::json rows = nlohmann::json::array();
};

// The status word of a result: "erratum" where --errata names the test and its failure shows
// the words given there (the reason then says why); a named test that does not fail so is a
// change.
std::string status_of(ConformResult& r, const std::map<std::string, Erratum>& errata,
                      const std::string& errata_file, Tally& t) {
  std::string status(to_string(r.status));
  auto e = errata.find(r.test);
  if (e == errata.end()) return status;
  if (r.status == ConformStatus::Fail && r.reason.find(e->second.failure) != std::string::npos) {
    r.reason = fmt::format("{} (the expected data is wrong: {})", r.reason, e->second.why);
    return "erratum";
  }
  t.changed.push_back(fmt::format("{}: {}, not the failure {} names ('{}'){}{}", r.test, status,
                                  errata_file, e->second.failure, r.reason.empty() ? "" : ": ",
                                  r.reason));
  return status;
}

// The totals, the files asked for, what moved; exit 1 on a failure, a change or too few passes.
int finish(const ConformArgs& a, Tally& t, const std::map<std::string, std::string>& expected,
           std::size_t tests) {
  const int pass = t.count["pass"], failed = t.count["fail"], erratum = t.count["erratum"];
  fmt::print(
      "{} tests: {} passed, {} failed, {} unsupported{}\n", tests, pass, failed,
      t.count["unsupported"],
      erratum ? fmt::format(", {} failing as {} says the expected data is wrong", erratum, a.errata)
              : "");
  if (a.bind != "reference" || !a.bind_ops.empty())
    fmt::print(
        "{} of the passing tests ran at least one node on a binding other than the reference\n",
        t.on_binding);
  if (!a.json.empty())
    write_file(a.json, t.rows.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (!a.write_status.empty()) {
    std::ofstream f(a.write_status);
    if (!f) fail("{}: cannot open for writing", a.write_status);
    for (const auto& [test, status] : t.statuses) f << status << " " << test << "\n";
  }
  for (const auto& [test, status] : expected)
    if (!t.statuses.count(test))
      t.changed.push_back(fmt::format("{}: expected {}, not run", test, status));
  for (const auto& c : t.changed) fmt::print("UNEXPECTED {}\n", c);
  if (!a.expect.empty())
    fmt::print("{} of {} tests as {} expects\n", tests - t.changed.size(), tests, a.expect);
  bool short_of = a.min_pass >= 0 && pass < a.min_pass;
  if (short_of) fmt::print("{} passed, fewer than the required {}\n", pass, a.min_pass);
  return failed || short_of || !t.changed.empty() ? 1 : 0;
}

int run(const ConformArgs& a) {
  if (!a.json.empty()) check_writable_file("--json", a.json);
  auto tests = find_conformance_tests(a.paths);
  std::map<std::string, std::string> expected;
  if (!a.expect.empty()) expected = read_expected(a.expect);
  std::map<std::string, Erratum> errata;
  if (!a.errata.empty()) errata = read_errata(a.errata);
  Tally t;
  Plan plan;
  configure_plan(plan, a.bind, a.bind_ops, a.threads);
  for (const auto& dir : tests) {
    ConformResult r = run_conformance_test(dir, plan);
    std::string status = status_of(r, errata, a.errata, t);
    ++t.count[status];
    if (r.status == ConformStatus::Pass && r.bound_nodes > 0) ++t.on_binding;
    if (!a.quiet || status == "fail")
      fmt::print("{:<12} {}{}{}\n", status, printable(r.test), r.reason.empty() ? "" : "  ",
                 printable(r.reason, 4000));
    t.statuses[r.test] = status;
    if (!a.expect.empty()) {
      auto it = expected.find(r.test);
      if (it == expected.end())
        t.changed.push_back(fmt::format("{}: {}, not in {}", r.test, status, a.expect));
      else if (it->second != status)
        t.changed.push_back(fmt::format("{}: {} where {} expects {}{}{}", r.test, status, a.expect,
                                        it->second, r.reason.empty() ? "" : ": ", r.reason));
    }
    t.rows.push_back({{"test", r.test},
                      {"status", status},
                      {"reason", r.reason},
                      {"bound_nodes", r.bound_nodes}});
  }
  return finish(a, t, expected, tests.size());
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
  cmd->add_option("--errata", args->errata,
                  "File of 'TEST<tab>FAILURE<tab>WHY' lines: tests whose expected data is known "
                  "to be wrong; such a test failing with FAILURE in its words counts as an "
                  "erratum, not a failure, and exit 1 when it passes or fails otherwise")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--quiet", args->quiet, "Print only failures and the totals");
  add_plan_options(cmd, args->bind, args->bind_ops, args->threads);
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
