// metaop repro DIR: judges a reproducer folder again (repro.json, written by `metaop check`,
// `probe` and `train --check`): the node's forward, its backward or a weight's update under the
// binding, against the float64 reference with the error model.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/check/check.h"
#include "analysis/core/minimize.h"
#include "analysis/core/train_check.h"
#include "analysis/core/triage.h"
#include "bindings/dispatch.h"
#include "bindings/factory.h"
#include "bindings/fault_injection.h"
#include "bindings/onnx_import/import_binding.h"
#include "bindings/update_kernel.h"
#include "cli/commands.h"
#include "cli/repro_minimize.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "ops/kernel_util.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "tensor/files.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop::cli {

namespace {

struct ReproArgs {
  std::string dir, bind;
  std::string minimize;  // where to write the minimized reproducer ("": not asked)
  int budget = 400;      // --minimize-budget: runs of the binding at most
};

// What replaying the finding gave: the local check, the names of its outputs, a description of
// what was judged and the binding's crash ("" when it did not crash).
struct Replay {
  LocalCheck lc;
  std::vector<std::string> names;
  std::string what, crash;
};

// The binding to judge: --bind, else the finding's; it must be a known binding for the phase.
std::string replay_binding(const ReproArgs& a, const ReproManifest& m,
                           const std::string& manifest) {
  std::string binding = a.bind.empty() ? m.binding : a.bind;
  auto known = m.phase == Phase::Update ? update_binding_names() : binding_names();
  if (std::find(known.begin(), known.end(), binding) == known.end())
    fail("{}: binding '{}' is not one of {}", a.bind.empty() ? manifest : "--bind",
         printable(binding, 80), fmt::join(known, ", "));
  return binding;
}

// The tensors of one role (inputs, outputs, output_grads) in the manifest; an omitted one is
// left undefined, one that was bfloat16 is converted back.
Tensors role_files(const ReproManifest& m, const std::string& role) {
  Tensors ts;
  auto it = m.files.find(role);
  if (it == m.files.end()) return ts;
  for (const auto& f : it->second) {
    if (!f) {
      ts.emplace_back();
      continue;
    }
    Tensor t = read_npy(f->path);
    bool was_bf16 = std::find(m.bfloat16.begin(), m.bfloat16.end(), f->name) != m.bfloat16.end();
    ts.push_back(was_bf16 ? t.to(DType::BFloat16) : t);
  }
  return ts;
}

// Runs the binding's kernel: an exception it throws (other than Unsupported) is the crash.
template <class Kernel>
void guarded(std::string& crash, Kernel&& kernel) {
  try {
    kernel();
  } catch (const Unsupported&) {
    throw;
  } catch (const std::exception& e) {
    crash = e.what();
  }
}

// The optimizer of an update's manifest, after checking each of its fields' types.
OptimizerConfig manifest_optimizer(const ReproManifest& m, const std::string& manifest) {
  for (const char* key :
       {"kind", "lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps"}) {
    auto it = m.optimizer.find(key);
    bool ok = it != m.optimizer.end() && (std::string(key) == "kind"       ? it->is_string()
                                          : std::string(key) == "nesterov" ? it->is_boolean()
                                                                           : it->is_number());
    if (!ok) fail("{}: 'optimizer.{}' is missing or of the wrong type", manifest, key);
  }
  return optimizer_from_json(m.optimizer);
}

// A weight's update by the binding's optimizer, against the float64 rule.
Replay replay_update(const ReproArgs& a, const ReproManifest& m, const std::string& manifest,
                     const std::string& binding, const std::vector<FaultSpec>& faults,
                     const Tensors& inputs) {
  Replay out;
  const std::string& weight = m.node;
  long t = m.step;
  OptimizerConfig c = manifest_optimizer(m, manifest);
  if (inputs.size() < 2) fail("{}: an update needs the weight and its gradient", a.dir);
  Tensors before(inputs.begin() + 2, inputs.end());
  auto kernel = make_update_kernel(binding, c);
  std::map<std::string, FaultSpec> mine;
  for (const auto& f : faults)
    if (f.phase == Phase::Update) mine.emplace(weight, f);
  if (!mine.empty()) kernel = std::make_unique<FaultyUpdate>(std::move(kernel), std::move(mine));
  out.what = fmt::format("the {} update of '{}' at step {}", c.kind, weight, t);
  out.names = {weight};
  for (const auto& s : optimizer_slots(c)) out.names.push_back(s);
  guarded(out.crash, [&] {
    if (!before.empty()) kernel->set_state(weight, t - 1, before);
    Tensor after = kernel->step(weight, t, inputs[0], inputs[1]);
    out.lc = check_update(c, t, inputs[0], inputs[1], before, after, kernel->state(weight));
  });
  return out;
}

// A node's reproducer loaded: the one-node model, its inputs (files, then initializers) and
// which of them came from files.
struct NodeCase {
  Graph g;
  Tensors inputs;
  std::vector<bool> from_file;
};

NodeCase load_node_case(const ReproArgs& a, const ReproManifest& m, const std::string& manifest,
                        Tensors inputs) {
  NodeCase c;
  Graph& g = c.g;
  g = load_onnx(confined_path(a.dir, "model.onnx", manifest));
  if (g.nodes.size() != 1) fail("{}/model.onnx: expected one node", a.dir);
  const Node& node = g.nodes[0];
  // Inputs without a file are the model's initializers (or omitted).
  if (inputs.size() > node.inputs.size())
    fail("{}: {} input files for a node of {} inputs", manifest, inputs.size(), node.inputs.size());
  inputs.resize(node.inputs.size());
  c.from_file.assign(node.inputs.size(), false);
  std::map<std::string, Tensor> given;
  std::map<std::string, std::string> sources;
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      if (auto it = g.initializers.find(node.inputs[i]); it != g.initializers.end())
        inputs[i] = it->second;
    } else if (!g.initializers.count(node.inputs[i])) {
      given[node.inputs[i]] = inputs[i];
      c.from_file[i] = true;
      // A defined input was read from its file (role_files).
      const auto& file = m.files.at("inputs")[i];
      sources[node.inputs[i]] = file ? file->path : "";
    }
  }
  // The files must be what model.onnx declares (a kernel fed other shapes may crash).
  validate_inputs(g, given, sources);
  c.inputs = std::move(inputs);
  return c;
}

std::unique_ptr<Binding> replay_kernels(const std::string& binding,
                                        const std::vector<FaultSpec>& faults) {
  std::unique_ptr<Binding> b = make_binding(binding);
  if (!faults.empty()) b = std::make_unique<FaultyBinding>(std::move(b), faults);
  return b;
}

// The node's forward or backward under the binding, against the float64 reference.
Replay replay_node(const ReproArgs& a, const ReproManifest& m, const std::string& manifest,
                   const std::string& binding, const std::vector<FaultSpec>& faults, Tensors in) {
  Replay out;
  NodeCase c = load_node_case(a, m, manifest, std::move(in));
  const Graph& g = c.g;
  const Node& node = g.nodes[0];
  const Tensors& inputs = c.inputs;
  std::unique_ptr<Binding> b = replay_kernels(binding, faults);
  out.what = fmt::format("the {} of node '{}' ({})", m.phase, node.name, node.op_type);
  if (m.phase == Phase::Forward) {
    out.names = node.outputs;
    guarded(out.crash, [&] {
      Tensors got = b->forward(node, g.opset, inputs);
      out.lc = check_local(node, g.opset, inputs, got);
    });
  } else {
    for (const auto& i : node.inputs) out.names.push_back("grad " + i);
    Tensors outs = role_files(m, "outputs"), grads = role_files(m, "output_grads");
    guarded(out.crash, [&] {
      Tensors got = b->backward(node, g.opset, inputs, outs, grads);
      out.lc = check_local_backward(node, g.opset, inputs, outs, grads, got);
    });
  }
  return out;
}

// A folder's own name ("relu_1" for "out/relu_1/" or for "." inside it): what a reproducer may
// say of another without naming the machine's paths.
std::string folder_name(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// What the worst element's failure looks like: the binding's value (NaN, +inf, -inf or finite)
// against the exact one (0, finite or not). A minimization keeps it, so that it does not trade
// the finding for another of the same kind and class (an overflow of finite values for a NaN
// read from the one input element left, which was NaN).
int failure_mode(const Score& s) {
  int got = std::isnan(s.worst_got) ? 0 : std::isinf(s.worst_got) ? (s.worst_got > 0 ? 1 : 2) : 3;
  int ref = !std::isfinite(s.worst_ref) ? 2 : s.worst_ref == 0 ? 0 : 1;
  return got * 3 + ref;
}

// A node's forward judged on candidate inputs: outside the error model or not, of which kind
// and class.
struct Judged {
  bool bad = false;
  FindingKind kind = FindingKind::Accuracy;
  Triage triage;
  LocalCheck lc;
  Tensors got;
};

// The forward finding's inputs minimized (repro_minimize.h): `a.minimize` is where to write.
MinimizedRepro minimize_node(const ReproArgs& a, const ReproManifest& m,
                             const std::string& manifest, const std::string& binding,
                             const std::vector<FaultSpec>& faults, Tensors in) {
  if (m.phase != Phase::Forward)
    fail("--minimize: {} holds a {} finding; only forward findings are minimized", manifest,
         m.phase);
  NodeCase c = load_node_case(a, m, manifest, std::move(in));
  const Node& node = c.g.nodes[0];
  const std::int64_t opset = c.g.opset;
  std::unique_ptr<Binding> b = replay_kernels(binding, faults);
  auto judge = [&](const Tensors& x) {
    Judged j;
    j.got = b->forward(node, opset, x);
    j.lc = check_local(node, opset, x, j.got);
    j.bad = j.lc.score.bad();
    if (j.bad) {
      j.kind = score_kind(j.lc.score);
      j.triage = triage_local(node, opset, x, j.lc, j.got);
    }
    return j;
  };
  Judged first;
  std::string crash;
  guarded(crash, [&] { first = judge(c.inputs); });
  if (!crash.empty())
    fail("--minimize: node '{}' ({}) under {} crashed: {}; only numerical findings are minimized",
         printable(node.name), node.op_type, binding, printable(crash, 4000));
  MinimizedRepro out;
  if (!first.bad) {
    out.summary = fmt::format(
        "not reproduced: the {} of node '{}' ({}) under {} is within the error model; nothing "
        "to minimize",
        m.phase, printable(node.name), node.op_type, binding);
    return out;
  }
  MinimizeOptions opt;
  opt.free = c.from_file;
  opt.budget = a.budget;
  auto shows = [&](const Tensors& x) {
    try {
      Judged j = judge(x);
      return j.bad && j.kind == first.kind && j.triage.cls == first.triage.cls &&
             failure_mode(j.lc.score) == failure_mode(first.lc.score);
    } catch (const std::exception&) {  // shapes the op refuses, or a crash: not this finding
      return false;
    }
  };
  MinimizeResult r = minimize_inputs(c.inputs, opt, shows);
  Judged last = judge(r.inputs);
  std::int64_t before = 0, after = 0;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (c.from_file[i]) before += c.inputs[i].numel(), after += r.inputs[i].numel();
  Finding f;
  f.op_type = node.op_type;
  f.binding = binding;
  f.kind = last.kind;
  f.score = last.lc.score.score;
  f.detail = describe_worst(node, last.lc.score, r.inputs, last.lc.reference, binding);
  std::move(last.triage).apply_to(f);
  f.node_name = node.name;
  f.verification = fmt::format(
      "minimized by metaop repro --minimize from the inputs of {}/{} ({} element(s) to {}; {} "
      "run(s) of the binding{}): {}",
      folder_name(a.dir), "repro.json", before, after, r.calls,
      r.exhausted ? ", its budget spent" : "",
      r.steps.empty() ? "nothing could go" : fmt::format("{}", fmt::join(r.steps, "; ")));
  f.inputs = r.inputs;
  f.reference_outputs = last.lc.reference;
  f.binding_outputs = last.got;
  out.reproduced = true;
  out.folder = write_check_reproducer(c.g, f, a.minimize, m.inject);
  out.summary = fmt::format(
      "minimized: the {} of node '{}' ({}) under {}, {} {}: {} input element(s) to {} in {} "
      "run(s){}\n  {}\n  {}",
      m.phase, printable(node.name), node.op_type, binding, f.kind, to_string(f.cls), before, after,
      r.calls, r.exhausted ? " (budget spent)" : "",
      r.steps.empty() ? "nothing could go" : fmt::format("{}", fmt::join(r.steps, "; ")),
      printable(f.detail, 4000));
  return out;
}

// A reproducer folder read: its manifest, the binding to judge and the faults that apply to it.
struct ReproFolder {
  std::string manifest;
  ReproManifest m;
  std::string binding;
  std::vector<FaultSpec> faults;
};

ReproFolder read_folder(const ReproArgs& a) {
  ReproFolder r;
  r.manifest = (std::filesystem::path(a.dir) / "repro.json").string();
  r.m = read_repro_manifest(a.dir);
  r.binding = replay_binding(a, r.m, r.manifest);
  // The kernels the finding was made on (--onednn-isa, --torch-isa), set before the worker
  // starts.
  apply_dispatch_environment(r.m.environment, r.manifest);
  // And the level its framework ran at (--ort-opt ...), for the binding that recorded it.
  if (!r.m.level_option.empty()) {
    std::string option = import_binding_level(r.m.binding).first;
    if (!option.empty() && option != r.m.level_option)
      fail("{}: 'level.option' {} is not {}'s level option", r.manifest,
           printable(r.m.level_option, 80), printable(r.m.binding, 80));
    if (import_binding_level(r.binding).first == r.m.level_option)
      set_import_level(r.m.level_option, r.m.level);
  }
  for (const auto& s : r.m.inject) {
    FaultSpec f = parse_fault(s);
    if (f.binding.empty() || f.binding == r.binding) r.faults.push_back(f);
  }
  return r;
}

int run(const ReproArgs& a) {
  ReproFolder rf = read_folder(a);
  const ReproManifest& m = rf.m;
  const std::string& binding = rf.binding;
  const std::vector<FaultSpec>& faults = rf.faults;
  const std::string& manifest = rf.manifest;
  Tensors inputs = role_files(m, "inputs");
  if (!a.minimize.empty()) {
    MinimizedRepro r = minimize_node(a, m, manifest, binding, faults, inputs);
    fmt::print("{}\n", r.summary);
    if (r.reproduced) fmt::print("wrote {}\n", r.folder);
    return r.reproduced ? 1 : 0;
  }
  Replay r = m.phase == Phase::Update ? replay_update(a, m, manifest, binding, faults, inputs)
                                      : replay_node(a, m, manifest, binding, faults, inputs);
  if (!r.crash.empty()) {
    fmt::print("reproduced: {} under {} crashed: {}\n", printable(r.what), binding,
               printable(r.crash, 4000));
    return 1;
  }
  const Score& s = r.lc.score;
  std::string worst = describe_worst(s, r.lc.reference, r.names, binding);
  fmt::print("{}: {} under {}{}: score {} ({})\n{}", s.bad() ? "reproduced" : "not reproduced",
             printable(r.what), binding, faults.empty() ? "" : " (with the injected faults)",
             fmt_score(s.score), s.bad() ? "outside the error model" : "within the error model",
             worst.empty() ? "" : "  " + printable(worst, 4000) + "\n");
  return s.bad() ? 1 : 0;
}

}  // namespace

MinimizedRepro minimize_reproducer(const std::string& dir, const std::string& out_root, int budget,
                                   const std::string& bind) {
  ReproArgs a;
  a.dir = dir;
  a.bind = bind;
  a.minimize = out_root;
  a.budget = budget;
  ReproFolder rf = read_folder(a);
  return minimize_node(a, rf.m, rf.manifest, rf.binding, rf.faults, role_files(rf.m, "inputs"));
}

std::string minimize_in_place(const std::string& repro, int budget, const std::string& what) {
  try {
    MinimizedRepro m =
        minimize_reproducer(repro, (std::filesystem::path(repro) / "minimized").string(), budget);
    if (m.reproduced) return m.folder;
    fmt::print(stderr, "{}: {}: {}\n", what, repro, m.summary);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: minimizing {} failed: {}\n", what, repro, e.what());
  }
  return "";
}

void add_minimize_options(CLI::App* cmd, MinimizeArgs& m) {
  cmd->add_flag("--minimize", m.on,
                "Minimize each numerical forward finding's reproducer (delta debugging over its "
                "inputs' shapes and values, as metaop repro --minimize) into REPRO/minimized");
  cmd->add_option("--minimize-budget", m.budget,
                  "Runs of the binding --minimize may make per finding")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
}

void add_repro_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<ReproArgs>();
  auto* cmd = app.add_subcommand(
      "repro",
      "Judge a reproducer folder of check, probe or train --check again (exit 1 when the "
      "defect reproduces, 0 when the binding is within the error model)");
  cmd->add_option("dir", a->dir, "Reproducer folder (holds repro.json)")->required();
  cmd->add_option("--bind", a->bind, "Judge this binding instead of the finding's");
  cmd->add_option("--minimize", a->minimize,
                  "Shrink a forward finding's inputs (delta debugging over shapes, then values) "
                  "while it shows with the same kind and class; write the smallest as a "
                  "reproducer folder under this folder");
  cmd->add_option("--minimize-budget", a->budget, "Runs of the binding --minimize may make")
      ->default_val(400)
      ->check(CLI::Range(1, 1000000));
  cmd->callback([a, &action] { action = [a] { return run(*a); }; });
}

}  // namespace metaop::cli
