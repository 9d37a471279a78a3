// metaop probe: op-level sweep of edge values over the ONNX node tests' attribute settings.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "analysis/core/triage.h"
#include "analysis/probe/probe.h"
#include "bindings/binding.h"
#include "cli/binding_options.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/plan_options.h"
#include "cli/repro_minimize.h"
#include "graph/onnx_io.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "tensor/files.h"
#include "tensor/text.h"

#ifndef METAOP_ONNX_NODE_TESTS
#define METAOP_ONNX_NODE_TESTS "/usr/share/libonnx-testdata/data/node"
#endif

namespace metaop::cli {

namespace {

struct ProbeArgs {
  std::vector<std::string> ops;
  std::string bind = "torch,onednn,opencv-4.6";
  std::vector<std::string> dtypes;
  std::string json_file;
  std::string out_dir = "metaop-probe";
  std::string testdata = METAOP_ONNX_NODE_TESTS;
  BindingOptions binding_opts;
  std::string journal;  // default OUT/journal.jsonl
  bool resume = false;
  bool fail_on_float32_limit = false;
  MinimizeArgs minimize;
  std::string bind_note;  // default_bindings' note, printed once the options are checked
};

// The dtypes named by --dtype (each must be a floating-point dtype).
std::vector<DType> probe_dtypes(const std::vector<std::string>& names) {
  std::vector<DType> dtypes;
  for (const auto& d : names) {
    bool found = false;
    for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
      if (dtype_name(t) == d) {
        dtypes.push_back(t);
        found = true;
      }
    if (!found) fail("--dtype {}: expected float32, float64, float16 or bfloat16", d);
  }
  return dtypes;
}

// The probe's options from the command line, checking its files, folders, ops and bindings.
ProbeOptions probe_options(const ProbeArgs& a) {
  if (!a.json_file.empty()) check_writable_file("--json", a.json_file);
  check_writable_dir("--out", a.out_dir);
  ProbeOptions opt;
  opt.journal =
      a.journal.empty() ? (std::filesystem::path(a.out_dir) / "journal.jsonl").string() : a.journal;
  check_writable_file("--journal", opt.journal);
  opt.resume = a.resume;
  opt.reproducer = [&a](const ProbeFinding& f) { return write_probe_reproducer(f, a.out_dir); };
  opt.testdata = a.testdata;
  if (!std::filesystem::is_directory(a.testdata))
    fail("--testdata {}: no such folder (ONNX node tests, from libonnx-testdata)", a.testdata);
  opt.bindings = framework_bindings("--bind", a.bind);
  for (const auto& op : a.ops)
    if (op != "update" && !OpRegistry::instance().find(op))
      fail("--op {}: no such meta operator (or 'update', the optimizers)", op);
  opt.ops = a.ops;
  opt.dtypes = probe_dtypes(a.dtypes);
  if (progress_shown()) opt.progress = [](const std::string& s) { show_progress(s); };
  return opt;
}

// Prints each finding and returns them as JSON.
nlohmann::json print_findings(const ProbeResult& r) {
  nlohmann::json fs = nlohmann::json::array();
  for (const auto& f : r.findings) {
    const std::string& repro = f.repro;
    fmt::print("  {:<22} {:<7} {:<10} {:<13} {:>4} case(s)  worst: {} / {} score {}\n      {}\n",
               f.op_type, f.binding, f.kind, to_string(f.cls), f.cases, printable(f.test),
               f.pattern, fmt_score(f.score), printable(f.detail, 4000));
    if (!f.class_basis.empty()) fmt::print("      why {}: {}\n", to_string(f.cls), f.class_basis);
    if (!f.agreement.empty()) fmt::print("      others {}\n", printable(f.agreement, 4000));
    fmt::print("      {}\n", printable(repro, 4000));
    if (!f.minimized.empty()) fmt::print("      minimized: {}\n", printable(f.minimized, 4000));
    nlohmann::json o = finding_json(f);
    o["cases"] = f.cases;
    o["test"] = f.test;
    o["pattern"] = f.pattern;
    o["repro"] = repro;  // "" when none was written
    if (!f.minimized.empty()) o["minimized"] = f.minimized;
    fs.push_back(o);
  }
  return fs;
}

int run(const ProbeArgs& a) {
  apply_binding_options(a.binding_opts);
  ProbeOptions opt = probe_options(a);
  if (!a.bind_note.empty()) fmt::print(stderr, "{}", a.bind_note);
  ProbeResult r = probe(opt);
  end_progress();
  minimize_findings(r.findings, a.minimize, "probe");

  fmt::print("probe: {} cases (node test x input pattern), {} op(s), bindings {}\n", r.cases,
             r.counts.size(), fmt::join(opt.bindings, ", "));
  nlohmann::json j;
  j["schema"] = "metaop-probe/1";
  j["cases"] = r.cases;
  j["counts"] = r.counts;
  j["findings"] = print_findings(r);
  j["classes"] = class_tally(r.findings);
  bool fails = false;
  for (const auto& f : r.findings) fails = fails || fails_run(f, a.fail_on_float32_limit);
  fmt::print("{} finding(s) (op x binding x kind x class{}); reproducers in {}\n",
             r.findings.size(), class_counts(r.findings), a.out_dir);
  if (!a.json_file.empty()) {
    write_file(a.json_file, dump_json(j));
    fmt::print("wrote {}\n", a.json_file);
  }
  return fails ? 1 : 0;
}

}  // namespace

void add_probe_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<ProbeArgs>();
  auto* cmd = app.add_subcommand(
      "probe",
      "Sweep ops with edge-value inputs (zeros, subnormals, tiny/huge, NaN/INF, each op's "
      "critical points) over the ONNX node tests' attribute settings, judging every binding "
      "against the reference; each finding is triaged: defect, float32-limit, convention or "
      "untriaged (exit 0 clean, 1 defect or untriaged findings, 2 bad input)");
  cmd->add_option("--op", a->ops,
                  "Op type to probe, or 'update' for the optimizers (repeatable; default: every "
                  "op and the optimizers)");
  auto* bind = cmd->add_option("--bind", a->bind, "Comma-separated framework bindings")
                   ->capture_default_str();
  cmd->add_option("--dtype", a->dtypes, "Only tests whose data inputs have this dtype");
  cmd->add_option("--json", a->json_file, "Write the findings and per-op counts as JSON");
  cmd->add_option("--out", a->out_dir, "Folder for reproducers")->capture_default_str();
  cmd->add_option("--testdata", a->testdata, "ONNX node tests folder")->capture_default_str();
  cmd->add_option("--journal", a->journal,
                  "Append each case's outcome here as it is done, one JSON line each (default: "
                  "OUT/journal.jsonl)");
  cmd->add_flag("--resume", a->resume,
                "Go on from the journal of a run that was stopped: its cases are not run again, "
                "their counts and findings are read back");
  cmd->add_flag("--fail-on-float32-limit", a->fail_on_float32_limit,
                "Exit 1 on float32-limit findings too (default: on defect and untriaged ones)");
  add_minimize_options(cmd, a->minimize);
  add_binding_options(cmd, a->binding_opts);
  cmd->callback([a, bind, &action] {
    if (!bind->count()) a->bind = default_bindings(a->bind, a->bind_note);
    action = [a] { return run(*a); };
  });
}

}  // namespace metaop::cli
