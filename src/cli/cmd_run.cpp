// metaop run: runs a model under a binding plan and summarizes (and saves) its outputs.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/core/propagate.h"
#include "bindings/factory.h"
#include "bindings/fault_injection.h"
#include "cli/binding_options.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/inputs.h"
#include "cli/plan_options.h"
#include "cli/process_options.h"
#include "engine/control_flow.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "report/core/format.h"
#include "tensor/files.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop::cli {

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  bool random_inputs = false;
  std::uint64_t seed = 0;
  std::string range = "-1,1";
  std::string out_dir;
  std::string dump_dir;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  int threads = 1;
  BindingOptions binding_opts;
  int propagate = 0;
  std::vector<std::string> inject;
};

void print_summary(const std::string& name, const Tensor& t) {
  auto v = t.to_f64();
  std::int64_t nan = 0, inf = 0, finite = 0;
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (double x : v) {
    if (std::isnan(x))
      ++nan;
    else if (std::isinf(x))
      ++inf;
    else {
      ++finite;
      mn = std::min(mn, x);
      mx = std::max(mx, x);
      sum += x;
    }
  }
  if (finite)
    fmt::print("{:<24} {:<18} {:<8} min {:>12.6g}  max {:>12.6g}  mean {:>12.6g}  nan {}  inf {}\n",
               printable(name), shape_str(t.shape()), dtype_name(t.dtype()), mn, mx,
               sum / static_cast<double>(finite), nan, inf);
  else
    fmt::print("{:<24} {:<18} {:<8} no finite values  nan {}  inf {}\n", printable(name),
               shape_str(t.shape()), dtype_name(t.dtype()), nan, inf);
}

// .npy has no bfloat16: such a value is written widened to float32, which holds every bfloat16
// value exactly.
Tensor npy_ready(const Tensor& t) {
  return t.dtype() == DType::BFloat16 ? Tensor::from_f64(t.to_f64(), t.shape(), DType::Float32) : t;
}

// Every value of the run (--dump), one file per value, with an index in run order.
void write_dump(const Graph& g, const RunResult& res, const std::string& dir) {
  std::string index;
  std::size_t k = 0;
  for (const auto& rec : res.records)
    for (const auto& o : g.nodes[rec.node].outputs) {
      auto it = res.values.find(o);
      if (o.empty() || it == res.values.end()) continue;
      // Numbered in run order, so that names that differ only in punctuation stay apart; a
      // bfloat16 value's file says it holds float32.
      bool bf16 = it->second.dtype() == DType::BFloat16;
      std::string file =
          fmt::format("{:05}_{}{}.npy", k++, safe_file_name(o), bf16 ? ".bfloat16_as_float32" : "");
      write_npy((std::filesystem::path(dir) / file).string(), npy_ready(it->second));
      // Names escaped: a tab or newline in a name would break the table.
      index += fmt::format("{}\t{}\t{}\t{}\t{}\n", printable(g.nodes[rec.node].name, 1 << 20),
                           printable(g.nodes[rec.node].op_type), rec.binding, printable(o, 1 << 20),
                           file);
    }
  write_file((std::filesystem::path(dir) / "index.txt").string(), index);
  fmt::print("wrote every intermediate value into {} (index.txt lists them in run order)\n", dir);
}

// The graph's outputs (--out), one .npy each.
void write_outputs(const Graph& g, const RunResult& res, const std::string& dir) {
  for (const auto& o : g.outputs) {
    auto path = (std::filesystem::path(dir) / (safe_file_name(o.name) + ".npy")).string();
    const Tensor& t = res.outputs.at(o.name);
    write_npy(path, npy_ready(t));
    fmt::print("wrote {}{}\n", path,
               t.dtype() == DType::BFloat16
                   ? " (bfloat16 as float32: .npy has no bfloat16; the values are exact)"
                   : "");
  }
}

int run(const RunArgs& a) {
  if (!a.out_dir.empty()) check_writable_dir("--out", a.out_dir);
  if (!a.dump_dir.empty()) check_writable_dir("--dump", a.dump_dir);
  Graph g = load_onnx(a.model);
  apply_binding_options(a.binding_opts);
  Plan plan;
  configure_plan(plan, a.bind, a.bind_ops, a.threads);
  // Injected faults (evaluation; the commands of a reproducer made with --inject pass them on):
  // every framework binding of the plan wrapped with the faults meant for it.
  std::vector<FaultSpec> faults;
  faults.reserve(a.inject.size());
  for (const auto& s : a.inject) faults.push_back(parse_fault(s));
  for (const auto& b : binding_names()) {
    std::vector<FaultSpec> mine;
    for (const auto& f : faults)
      if (f.phase == Phase::Forward && (f.binding.empty() || f.binding == b)) mine.push_back(f);
    if (b != "reference" && !mine.empty())
      plan.add_binding(std::make_unique<FaultyBinding>(make_binding(b), mine));
  }
  check_supported(g, plan);
  InputSpec spec{a.inputs, a.random_inputs, a.seed, parse_range(a.range)};
  auto [inputs, sources] = gather_inputs(g, spec);
  validate_inputs(g, inputs, sources);
  if (needs_inlining(g)) g = inline_for_inputs(g, inputs);

  RunOptions opts;
  opts.keep_all = !a.dump_dir.empty();
  if (progress_shown())
    opts.progress = [](std::size_t done, std::size_t total) {
      show_progress(
          fmt::format("[{}/{} nodes]", done, total),
          static_cast<double>(done) / static_cast<double>(std::max<std::size_t>(total, 1)));
      if (done == total) end_progress();
    };
  RunResult res = run_graph(g, inputs, plan, opts);
  if (Host* h = host(); h && h->outputs) *h->outputs = res.outputs;
  fmt::print("{}: {} nodes, opset {}\n", a.model, g.nodes.size(), g.opset);
  print_plan_summary(g, res.records);
  for (const auto& o : g.outputs) print_summary(o.name, res.outputs.at(o.name));
  if (!a.dump_dir.empty()) write_dump(g, res, a.dump_dir);
  if (a.propagate > 0) {
    // What the error models predict end to end: every node's outputs moved within its
    // tolerance, on the reference (analysis/core/propagate).
    PropagatedError p = propagate_tolerances(g, inputs, a.propagate, a.seed);
    for (const auto& [name, v] : p.normwise)
      fmt::print("propagated tolerance of {} ({} samples): normwise {:.3e} (largest sample)\n",
                 name, v.size(), *std::max_element(v.begin(), v.end()));
  }
  if (!a.out_dir.empty()) write_outputs(g, res, a.out_dir);
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd =
      app.add_subcommand("run", "Run a model with the float64 reference and summarize its outputs");
  cmd->add_option("model", args->model, "ONNX model")->required();
  cmd->add_option("--input", args->inputs,
                  "Input file (.npy or TensorProto .pb), as FILE (binds to graph inputs in order) "
                  "or NAME=FILE");
  cmd->add_flag("--random-inputs", args->random_inputs,
                "Fill inputs not given with seeded random values");
  cmd->add_option("--seed", args->seed, "Seed for random inputs")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--range", args->range, "LO,HI range of random inputs")->capture_default_str();
  cmd->add_option("--out", args->out_dir, "Write each output as NAME.npy into this folder");
  cmd->add_option("--dump", args->dump_dir,
                  "Write every intermediate value as .npy into this folder (with index.txt)");
  cmd->add_option("--propagate", args->propagate,
                  "Also run the model N times on the reference with every node's outputs moved "
                  "within its error model's tolerance, and print the normwise deviation of the "
                  "outputs: the end-to-end error correct float32 kernels may reach")
      ->check(CLI::Range(1, 100));
  add_plan_options(cmd, args->bind, args->bind_ops, args->threads);
  add_binding_options(cmd, args->binding_opts);
  cmd->add_option("--inject", args->inject,
                  "Inject a fault (evaluation): OPTYPE_OR_NODE:FAULT[@BINDING], as check takes it");
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
