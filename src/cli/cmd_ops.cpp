// metaop ops: the coverage matrix, meta op x binding x {forward, backward}.
#include <fmt/core.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bindings/binding.h"
#include "cli/commands.h"
#include "ops/registry.h"

namespace metaop::cli {

namespace {

struct OpsArgs {
  bool json = false;
  bool error_models = false;
  bool danger = false;
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
    fmt::print("| {} | {} | {} | {} |\n", type, op->family, cell(op->error.doc), bwd);
  }
  return 0;
}

int run(const OpsArgs& a) {
  if (a.error_models) return print_error_models();
  if (a.danger) return print_danger_zones(a.json);
  const auto& reg = OpRegistry::instance();
  auto names = binding_names();
  std::vector<std::unique_ptr<Binding>> bindings;
  for (const auto& n : names) bindings.push_back(make_binding(n));
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, std::pair<int, int>> totals;
  if (!a.json) {
    fmt::print("{:<28} {:<12}", "op", "family");
    for (const auto& n : names) fmt::print(" {:<12}", n);
    fmt::print("\n");
  }
  for (const auto& type : reg.types()) {
    if (!a.json) fmt::print("{:<28} {:<12}", type, reg.find(type)->family);
    for (const auto& b : bindings) {
      Support s = b->supports(type);
      std::vector<std::string> dts;
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
  cmd->add_flag("--error-models", args->error_models,
                "Print each op's error model (tolerance of a correct float32 kernel) as Markdown");
  cmd->add_flag("--danger", args->danger,
                "List each op's danger zones (where finite inputs give NaN/INF), as `metaop "
                "expose` aims at them; with --json, as JSON");
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace metaop::cli
