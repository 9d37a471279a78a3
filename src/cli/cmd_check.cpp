// metaop check: op-by-op differential testing of inference against the float64 oracle, with
// localization, verification by replacement, reproducers and per-node time.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "analysis/check/check.h"
#include "analysis/whole_graph/whole_graph.h"
#include "bindings/factory.h"
#include "cli/binding_options.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/inputs.h"
#include "cli/plan_options.h"
#include "cli/process_options.h"
#include "cli/repro_minimize.h"
#include "engine/control_flow.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "report/check/check_report.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "report/whole_graph/whole_graph_report.h"
#include "tensor/files.h"
#include "tensor/heap.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop::cli {

namespace {

struct CheckArgs {
  std::string model;
  std::string bind = "torch,onednn,opencv-4.6";
  std::vector<std::string> inputs;
  int samples = 1;
  std::uint64_t seed = 0;
  std::string range = "-1,1";
  std::string json_file;
  std::string report_dir;
  std::string repro_dir;
  std::vector<std::string> inject;
  std::string bound = "probabilistic";
  int threads = 1;
  bool no_verify = false;
  bool fail_on_float32_limit = false;
  MinimizeArgs minimize;
  std::string bind_note;  // default_bindings' note, printed once the options are checked
  BindingOptions binding_opts;
  bool whole_graph = false;
  std::vector<std::string> inject_fusion;
};

// Whole-graph mode: each binding runs the model whole; discrepancies are localized by
// reduction, their reduced models written and re-run from the written files.
WholeGraphResult run_whole_graph(const CheckArgs& a, const Graph& g,
                                 const std::vector<Inputs>& samples, const std::string& repro_root,
                                 WholeGraphOptions& wopt) {
  if (progress_shown()) wopt.progress = [](const std::string& s) { show_progress(s); };
  WholeGraphResult w = check_whole_graph(g, a.model, samples, wopt);
  end_progress();
  for (auto& v : w.verdicts) {
    if (!v.reduction || v.reduction->window.empty()) continue;
    Reduction& red = *v.reduction;
    red.repro = write_whole_graph_reproducer(v, repro_root, wopt.extra_args);
    // Verification: the reduced model and its inputs as read back from the reproducer.
    namespace fs = std::filesystem;
    Graph reduced = load_onnx((fs::path(red.repro) / "model.onnx").string());
    Inputs in, ref;
    for (const auto& vi : reduced.inputs)
      in[vi.name] =
          read_npy((fs::path(red.repro) / ("input_" + safe_file_name(vi.name) + ".npy")).string());
    for (const auto& vi : reduced.outputs)
      ref[vi.name] = read_npy(
          (fs::path(red.repro) / ("reference_" + safe_file_name(vi.name) + ".npy")).string());
    TensorVerdict evidence;
    red.verify_runs = 1;
    bool refusal = v.status == WholeGraphStatus::Refused;
    red.verified = verify_reduced(reduced, in, ref, v.binding, red.level, wopt, evidence, refusal);
    if (!red.verified)
      red.verification =
          fmt::format("the reduced model read back from {} does not show it at level '{}'",
                      red.repro, red.level);
    else if (refusal)
      red.verification =
          fmt::format("the reduced model read back from {} is refused at level '{}': {}", red.repro,
                      red.level, evidence.mismatch);
    else
      red.verification = fmt::format(
          "the reduced model read back from {} shows it at level '{}': {} {:.3g} vs node-by-node "
          "{:.3g}",
          red.repro, red.level, evidence.value, evidence.whole, evidence.node_by_node);
  }
  print_whole_graph_summary(stdout, w, wopt.factor);
  return w;
}

// The op-by-op check's options; the model must be one the reference runs.
CheckOptions check_options(const CheckArgs& a, const Graph& g) {
  CheckOptions opt;
  opt.bindings = framework_bindings("--bind", a.bind);
  if (a.samples < 1) fail("--samples {}: must be at least 1", a.samples);
  check_threads(a.threads);
  if (a.bound != "probabilistic" && a.bound != "rigorous")
    fail("--bound {}: expected probabilistic or rigorous", a.bound);
  opt.bound.kind =
      a.bound == "rigorous" ? AccumulationBound::Rigorous : AccumulationBound::Probabilistic;
  set_threads(a.threads);
  for (const auto& s : a.inject) opt.faults.push_back(parse_fault(s));
  opt.verify = !a.no_verify;
  Plan reference_only;
  check_supported(g, reference_only);
  return opt;
}

// Whole-graph options, checked before anything runs (empty without --whole-graph).
WholeGraphOptions whole_graph_options(const CheckArgs& a,
                                      const std::vector<std::string>& bindings) {
  WholeGraphOptions wopt;
  if (!a.inject_fusion.empty() && !a.whole_graph) fail("--inject-fusion needs --whole-graph");
  if (!a.whole_graph) return wopt;
  wopt.bindings = bindings;
  for (const auto& b : wopt.bindings)
    if (!has_whole_model_runner(b)) {
      std::vector<std::string> with;
      for (const auto& info : binding_infos())
        if (info.whole_model) with.push_back(info.name);
      fail("--whole-graph --bind {}: binding '{}' has no whole-model mode ({} have)", a.bind, b,
           fmt::join(with, ", "));
    }
  for (const auto& s : a.inject_fusion) {
    wopt.faults.push_back(parse_fusion_fault(s));
    wopt.extra_args.push_back("--inject-fusion " + shell_quote(s));
  }
  return wopt;
}

// Writes --json and --report.
void write_check_outputs(const CheckArgs& a, const Graph& g, const CheckResult& r,
                         const std::optional<WholeGraphResult>& whole, double factor) {
  if (!a.json_file.empty()) {
    nlohmann::json j = check_to_json(g, r);
    if (whole) j["whole_graph"] = whole_graph_to_json(*whole, factor);
    write_file(a.json_file, dump_json(j));
    fmt::print("wrote {}\n", a.json_file);
  }
  if (!a.report_dir.empty()) {
    CheckReportExtra extra;
    if (whole) {
      extra.html = whole_graph_html(*whole, factor);
      std::size_t bad = 0;
      for (const auto& v : whole->verdicts) {
        bad += v.status != WholeGraphStatus::Ok;
        if (v.reduction)
          extra.nodes.insert(extra.nodes.end(), v.reduction->window.begin(),
                             v.reduction->window.end());
      }
      if (bad) extra.verdict = fmt::format("{} whole-graph verdict(s) not ok (below)", bad);
    }
    write_html_report(g, r, a.report_dir, extra);
    fmt::print("wrote {}/index.html\n", a.report_dir);
  }
}

// A model with If, Loop or Scan: g becomes the graph inlined as the first sample takes it
// (engine/control_flow.h); the samples that take the same path are checked on it, and the first
// that takes another ends the check's samples (a note says where the paths part). Returns how
// many samples to check.
std::size_t inline_for_samples(const CheckArgs& a, Graph& g, const Inputs& first, std::size_t count,
                               const std::function<Inputs(std::size_t)>& make_sample) {
  if (a.whole_graph)
    throw Unsupported(fmt::format(
        "{}: --whole-graph does not run models with If, Loop or Scan or with sequences yet; check "
        "them node by node (without --whole-graph)",
        a.model));
  InlinedGraph in = inline_control_flow(g, first);
  for (const auto& p : in.path) fmt::print(stderr, "control flow: {}\n", p);
  for (std::size_t s = 1; s < count; ++s) {
    auto path = inline_control_flow(g, make_sample(s)).path;
    if (path == in.path) continue;
    std::size_t k = 0;
    while (k < path.size() && k < in.path.size() && path[k] == in.path[k]) ++k;
    fmt::print(stderr,
               "note: sample {} takes another path through the control flow ({}, where sample 0 "
               "took {}): only {} checked; check the others with --seed {} --samples {}\n",
               s, k < path.size() ? path[k] : "fewer nodes",
               k < in.path.size() ? in.path[k] : "fewer nodes",
               s == 1 ? std::string("sample 0 is") : fmt::format("samples 0 to {} are", s - 1),
               a.seed + s, count - s);
    count = s;
    break;
  }
  g = std::move(in.graph);
  return count;
}

int run(const CheckArgs& a) {
  apply_binding_options(a.binding_opts);
  // Where results go is checked before anything runs: a long check must not end in a write
  // that fails.
  if (!a.json_file.empty()) check_writable_file("--json", a.json_file);
  if (!a.report_dir.empty()) check_writable_dir("--report", a.report_dir);
  if (!a.repro_dir.empty()) check_writable_dir("--repro", a.repro_dir);
  Graph g = load_onnx(a.model);
  CheckOptions opt = check_options(a, g);
  WholeGraphOptions wopt = whole_graph_options(a, opt.bindings);
  if (!a.bind_note.empty()) fmt::print(stderr, "{}", a.bind_note);

  // Samples: the given files (one sample), else seeded random inputs per sample, made one at a
  // time as the check reaches them. The first is made here, so that bad inputs fail at once.
  auto make_sample = [&](std::size_t s) {
    InputSpec spec{a.inputs, a.inputs.empty(), a.seed + static_cast<std::uint64_t>(s),
                   parse_range(a.range)};
    auto [inputs, sources] = gather_inputs(g, spec);
    validate_inputs(g, inputs, sources);
    return inputs;
  };
  std::size_t count = a.inputs.empty() ? static_cast<std::size_t>(a.samples) : 1;
  Inputs first = make_sample(0);
  if (!a.inputs.empty() && a.samples > 1)
    fmt::print(stderr, "note: --input given, so --samples {} is ignored (one sample)\n", a.samples);
  if (needs_inlining(g)) count = inline_for_samples(a, g, first, count, make_sample);
  // Whole-graph mode takes every sample at once: their size is checked first.
  std::vector<Inputs> samples;
  if (a.whole_graph) {
    std::int64_t bytes = 0;
    for (const auto& [n, t] : first) bytes += static_cast<std::int64_t>(t.nbytes());
    check_budget(bytes * static_cast<std::int64_t>(count),
                 fmt::format("--whole-graph with --samples {}", count));
    for (std::size_t s = 0; s < count; ++s) samples.push_back(s == 0 ? first : make_sample(s));
  }

  if (progress_shown()) opt.progress = [](const std::string& s) { show_progress(s); };
  CheckResult r = check_model(
      g, count, [&](std::size_t s) { return s == 0 ? first : make_sample(s); }, opt);
  end_progress();

  std::string repro_root = !a.repro_dir.empty()    ? a.repro_dir
                           : !a.report_dir.empty() ? a.report_dir + "/repro"
                                                   : "metaop-repro";
  for (auto& f : r.findings)
    if (f.verified &&
        (f.numerical() || f.kind == FindingKind::Crash || f.kind == FindingKind::Hang))
      f.repro = write_check_reproducer(g, f, repro_root, a.inject);
  minimize_findings(r.findings, a.minimize, "check");
  print_check_summary(stdout, g, r);
  std::optional<WholeGraphResult> whole;
  if (a.whole_graph) whole = run_whole_graph(a, g, samples, repro_root, wopt);
  write_check_outputs(a, g, r, whole, wopt.factor);
  return r.defects(a.fail_on_float32_limit) || (whole && whole->defects()) ? 1 : 0;
}

}  // namespace

void add_check_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<CheckArgs>();
  auto* cmd = app.add_subcommand(
      "check",
      "Run a model under framework bindings op by op against the float64 oracle: find, localize "
      "and verify numerical defects, each triaged: defect, float32-limit, convention or untriaged "
      "(exit 0 clean, 1 defect or untriaged findings, 2 bad input)");
  cmd->add_option("model", a->model, "ONNX model")->required();
  auto* bind = cmd->add_option("--bind", a->bind, "Comma-separated framework bindings to check")
                   ->capture_default_str();
  cmd->add_option("--input", a->inputs,
                  "Input file (.npy or .pb) as FILE or NAME=FILE; default: seeded random inputs");
  cmd->add_option("--samples", a->samples,
                  "Random input samples (seeds seed, seed+1, ...), made one at a time")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the first random sample")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--range", a->range, "LO,HI range of random inputs")->capture_default_str();
  cmd->add_option("--json", a->json_file, "Write the findings and per-node errors as JSON");
  cmd->add_option("--report", a->report_dir, "Write an HTML report (index.html) into this folder");
  cmd->add_option("--repro", a->repro_dir,
                  "Folder for reproducers (default: REPORT/repro, else ./metaop-repro)");
  cmd->add_option(
      "--inject", a->inject,
      "Inject a fault: OPTYPE_OR_NODE:FAULT[@BINDING]; faults: bias, eps, nomax, "
      "half_acc, offbyone, drop_bias, nan, swap; abort, segv, hang (the kernel's process)");
  cmd->add_option("--bound", a->bound,
                  "Accumulation error bound: probabilistic (lambda sqrt(n) u) or rigorous (n u)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Intra-op threads of the framework bindings")
      ->capture_default_str();
  cmd->add_flag("--no-verify", a->no_verify, "Skip verification by replacement");
  add_minimize_options(cmd, a->minimize);
  cmd->add_flag("--fail-on-float32-limit", a->fail_on_float32_limit,
                "Exit 1 on float32-limit findings too (default: on defect and untriaged ones)");
  add_binding_options(cmd, a->binding_opts);
  cmd->add_flag(
      "--whole-graph", a->whole_graph,
      "Also run the model whole in each binding (those with a whole-model mode) as its users do, "
      "judge it against the reference and the node-by-node run, and localize a "
      "discrepancy by reduction (docs/whole-graph.md)");
  cmd->add_option("--inject-fusion", a->inject_fusion,
                  "Plant a whole-graph defect: FIRST+SECOND:scale[@BINDING] scales FIRST's output "
                  "by 1+2^-8 where it feeds only a SECOND, FIRST+SECOND:refuse[@BINDING] makes "
                  "the framework refuse such a model, in whole-model runs from the fusing level "
                  "on (evaluation)");
  cmd->callback([a, bind, &action] {
    if (!bind->count()) a->bind = default_bindings(a->bind, a->bind_note);
    action = [a] { return run(*a); };
  });
}

}  // namespace metaop::cli
