// metaop ops: the coverage matrix, meta op x binding x {forward, backward}.
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bindings/binding.h"
#include "bindings/factory.h"
#include "bindings/fault_injection.h"
#include "cli/commands.h"
#include "graph/onnx_io.h"
#include "ops/registry.h"
#include "tensor/files.h"

namespace metaop::cli {

namespace {

struct OpsArgs {
  bool json = false;
  bool missing = false;
  bool error_models = false;
  bool danger = false;
  bool faults = false;
  std::string where;
};

// The danger zones `metaop expose` aims at, one row per zone (docs/expose.md lists them).
int print_danger_zones(bool json) {
  const auto& reg = OpRegistry::instance();
  nlohmann::json out = nlohmann::json::array();
  if (!json) fmt::print("{:<26} {:<20} {:<10} {}\n", "op", "kind", "watches", "condition");
  for (const auto& type : reg.types()) {
    for (const auto& z : reg.find(type)->domain.danger) {
      std::string watches = fmt::format("{} {}", z.watches_output ? "output" : "input", z.index);
      std::string cond = z.condition + (z.kernel_dependent ? " [kernel-dependent]" : "");
      if (json)
        out.push_back({{"op", type},
                       {"kind", danger_kind_name(z.kind)},
                       {"watches", watches},
                       {"unit", z.unit},
                       {"kernel_dependent", z.kernel_dependent},
                       {"condition", z.condition}});
      else
        fmt::print("{:<26} {:<20} {:<10} {}\n", type, danger_kind_name(z.kind), watches, cond);
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}

// The planted faults `--inject` knows, each with its phase and the ops it applies to (the ops
// name their op-specific faults in their blocks; the others apply to any op).
int print_faults(bool json) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : fault_catalog()) {
    std::string phase = to_string(fault_phase(f.name));
    if (json) {
      out.push_back({{"fault", f.name},
                     {"phase", phase},
                     {"ops", f.op_specific ? nlohmann::json(f.op_types) : nlohmann::json()},
                     {"what", f.what}});
    } else {
      fmt::print("{:<12} {:<8} {}\n", f.name, phase, f.what);
      if (f.op_specific) fmt::print("{:<21} ops: {}\n", "", fmt::join(f.op_types, ", "));
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}

// The error models as a Markdown table (docs/error-models.md is this output).
int print_error_models() {
  const auto& reg = OpRegistry::instance();
  auto cell = [](const std::string& text) {
    std::string out;
    for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  fmt::print(
      "| op | family | forward: tolerance of a correct float32 kernel | backward |\n"
      "|---|---|---|---|\n");
  for (const auto& type : reg.types()) {
    const MetaOp* op = reg.find(type);
    std::string bwd = !op->vjp             ? "-"
                      : op->error.backward ? cell(op->error.backward_doc)
                                           : "generic: kappa(n) * VJP(\\|x\\|, \\|g\\|), 4 ulp";
    if (op->subgradient) bwd += "; kinks/ties: the subgradient set";
    fmt::print("| {} | {} | {} | {} |\n", type, family_name(op->family), cell(op->error.doc), bwd);
  }
  return 0;
}

// The regression-list lines that name `op` (the lists key their entries by op).
std::vector<std::string> known_entries(const std::string& file, const std::string& op) {
  std::vector<std::string> out;
  std::ifstream f(std::string(METAOP_SOURCE_DIR) + "/" + file);
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string binding, entry_op;
    ss >> binding >> entry_op;
    if (entry_op == op) out.push_back(fmt::format("{}:{}: {}", file, n, line));
  }
  return out;
}

// Everything about one meta operator: where each concern is declared, each binding's kernels,
// and its entries in the regression lists of known framework defects.
int print_where(const std::string& type) {
  const MetaOp* op = OpRegistry::instance().find(type);
  if (!op) fail("--where {}: not a meta operator (metaop ops lists them)", type);
  fmt::print("{} ({}{})\n", type, family_name(op->family),
             op->onnx_domain.empty() ? "" : ", domain " + op->onnx_domain);
  for (const auto& [concern, loc] : op->where) fmt::print("  {:<22} {}\n", concern, location(loc));
  for (const auto& name : binding_names()) {
    auto b = make_binding(name);
    auto lines = b->where(type);
    if (lines.empty()) {
      fmt::print("  {:<22} - ({})\n", name, b->supports(type).reason);
      continue;
    }
    for (const auto& l : lines) fmt::print("  {:<22} {}\n", name, l);
  }
  for (const char* file : {"tests/known_findings.txt", "tests/known_probe_findings.txt"})
    for (const auto& e : known_entries(file, type)) fmt::print("  {:<22} {}\n", "known defect", e);
  return 0;
}

// Why an operator of the default domain has no meta operator: left out on purpose, or not yet.
std::string why_missing(const std::string& op) {
  static const std::set<std::string> random = {"Bernoulli",     "Multinomial",
                                               "RandomNormal",  "RandomNormalLike",
                                               "RandomUniform", "RandomUniformLike"};
  if (random.count(op))
    return "left out: random draws, which no reference predicts (each framework has its own "
           "generator)";
  if (op == "ImageDecoder")
    return "left out: decodes image files (JPEG, PNG ...), a codec's output rather than a "
           "kernel's arithmetic";
  return "not yet";
}

// The default domain's operators through the newest opset MetaOp reads that are not meta
// operators (If, Loop and Scan run inlined, the sequence and optional operators lowered to
// tensor operators, the string operators evaluated as a model is lowered), from the current onnx
// package of the project's Python environment: its schema list is the one to compare with.
int print_missing(bool json) {
  std::string python = venv_python();
  if (::access(python.c_str(), X_OK) != 0 || python.find('\'') != std::string::npos)
    fail(
        "--missing reads ONNX's operator list from the current onnx package of the project's "
        "Python environment, {} (run scripts/install-deps.sh, or set METAOP_PYTHON)",
        python);
  std::string cmd = fmt::format(
      "'{}' -s -c \"import onnx, onnx.defs as d; print(onnx.__version__); print('\\n'.join("
      "sorted({{s.name for s in d.get_all_schemas_with_history() if s.domain == '' and "
      "s.since_version <= {}}})))\"",
      python, kMaxOpset);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  if (!pipe) fail("--missing: cannot run {}", python);
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) text.append(buf, n);
  std::istringstream lines(text);
  std::string version, op;
  std::getline(lines, version);
  std::vector<std::pair<std::string, std::string>> missing;
  std::size_t all = 0;
  while (std::getline(lines, op)) {
    if (op.empty()) continue;
    ++all;
    Node node;
    node.op_type = op;
    if (OpRegistry::instance().find(op) || is_control_flow(node) || is_sequence_op(node) ||
        is_string_op(node))
      continue;
    missing.emplace_back(op, why_missing(op));
  }
  if (all == 0) fail("--missing: the onnx package of {} listed no operators", python);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [name, why] : missing) out.push_back({{"op", name}, {"reason", why}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  fmt::print(
      "{} of the {} operators of ONNX's default domain through opset {} (onnx {}) have no "
      "meta operator (If, Loop and Scan run inlined, the sequence and optional operators lowered "
      "to tensor operators, the string operators evaluated as a model is lowered):\n",
      missing.size(), all, kMaxOpset, version);
  for (const auto& [name, why] : missing) fmt::print("  {:<22} {}\n", name, why);
  return 0;
}

int run(const OpsArgs& a) {
  if (a.missing) return print_missing(a.json);
  if (a.error_models) return print_error_models();
  if (a.danger) return print_danger_zones(a.json);
  if (a.faults) return print_faults(a.json);
  if (!a.where.empty()) return print_where(a.where);
  const auto& reg = OpRegistry::instance();
  auto names = binding_names();
  std::vector<std::unique_ptr<Binding>> bindings;
  bindings.reserve(names.size());
  for (const auto& n : names) bindings.push_back(make_binding(n));
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, std::pair<int, int>> totals;
  if (!a.json) {
    fmt::print("{:<28} {:<12}", "op", "family");
    for (const auto& n : names) fmt::print(" {:<12}", n);
    fmt::print("\n");
  }
  for (const auto& type : reg.types()) {
    if (!a.json) fmt::print("{:<28} {:<12}", type, family_name(reg.find(type)->family));
    for (const auto& b : bindings) {
      Support s = b->supports(type);
      std::vector<std::string> dts;
      dts.reserve(s.dtypes.size());
      for (auto d : s.dtypes) dts.emplace_back(dtype_name(d));
      out.push_back({{"op", type},
                     {"binding", b->name()},
                     {"forward", s.forward},
                     {"backward", s.backward},
                     {"dtypes", dts},
                     {"error_model", reg.find(type)->error.doc},
                     {"reason", s.reason}});
      totals[b->name()].first += s.forward;
      totals[b->name()].second += s.backward;
      if (!a.json)
        fmt::print(" {:<12}", std::string(s.forward ? "fwd" : "-") + (s.backward ? "+bwd" : ""));
    }
    if (!a.json) fmt::print("\n");
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    for (const auto& [b, t] : totals)
      fmt::print("{}: forward {} ops, backward {} ops\n", b, t.first, t.second);
    fmt::print(
        "control flow: If, Loop and Scan are not meta operators: run, check and "
        "conform inline their bodies as the reference runs them on the inputs given, and every "
        "binding runs the bodies' nodes, checked like any other node; the sequence and optional "
        "operators are lowered there too (a sequence becomes its tensors, SplitToSequence a "
        "Split, ConcatFromSequence a Concat), and the string operators evaluated there (strings "
        "have no numerics to judge); the operators without a meta operator: metaop ops "
        "--missing\n");
  }
  return 0;
}

}  // namespace

void add_ops_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<OpsArgs>();
  auto* cmd = app.add_subcommand("ops", "Coverage matrix: meta operators x bindings");
  cmd->add_flag(
      "--json", args->json,
      "Print a JSON list of {op, binding, forward, backward, dtypes, error_model, reason}");
  cmd->add_flag("--missing", args->missing,
                "List the operators of ONNX's default domain (through the newest opset MetaOp "
                "reads) that have no meta operator, each with why (left out, or not yet); with "
                "--json, as JSON");
  cmd->add_option("--where", args->where,
                  "Print where everything about one op is declared: each concern, each binding's "
                  "kernels, its known defects");
  cmd->add_flag("--error-models", args->error_models,
                "Print each op's error model (tolerance of a correct float32 kernel) as Markdown");
  cmd->add_flag("--danger", args->danger,
                "List each op's danger zones (where finite inputs give NaN/INF), as `metaop "
                "expose` aims at them; with --json, as JSON");
  cmd->add_flag("--faults", args->faults,
                "List the faults --inject plants, each with its phase and the ops it applies to; "
                "with --json, as JSON");
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
