// metaop ops: the coverage matrix, meta op x binding x {forward, backward}.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bindings/binding.h"
#include "bindings/factory.h"
#include "bindings/fault_injection.h"
#include "cli/commands.h"
#include "ops/registry.h"

namespace metaop::cli {

namespace {

struct OpsArgs {
  bool json = false;
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
  fmt::print("{} ({})\n", type, family_name(op->family));
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

int run(const OpsArgs& a) {
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
