#include "cli/plan_options.h"

#include <fmt/core.h>

#include <map>
#include <thread>

#include "bindings/factory.h"
#include "bindings/isolate.h"
#include "bindings/onnx_import/import_binding.h"
#include "ops/linear_util.h"
#include "tensor/text.h"

namespace metaop::cli {

void add_plan_options(CLI::App* cmd, std::string& bind, std::vector<std::string>& bind_ops,
                      int& threads) {
  std::string names;
  for (const auto& n : binding_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option(
         "--bind", bind,
         "Binding for every node (" + names + "); nodes it lacks fall back to the reference")
      ->capture_default_str();
  cmd->add_option("--bind-op", bind_ops,
                  "Override per op type or node name: OPTYPE=BINDING or NODE=BINDING");
  cmd->add_option("--threads", threads, "Intra-op threads of the framework bindings")
      ->capture_default_str();
}

void check_threads(int threads) {
  // Past a few per core, threads only contend; 100,000 of them exhaust the process.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int most = std::max(64, 4 * cores);
  if (threads < 1 || threads > most)
    fail("--threads {}: must be between 1 and {} (this machine has {} hardware threads)", threads,
         most, cores);
}

void configure_plan(Plan& plan, const std::string& bind, const std::vector<std::string>& bind_ops,
                    int threads) {
  check_threads(threads);
  plan.set_default(bind);
  for (const auto& spec : bind_ops) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      fail("--bind-op '{}': expected OPTYPE=BINDING or NODE_NAME=BINDING", spec);
    plan.bind_op(spec.substr(0, eq), spec.substr(eq + 1));
  }
  set_threads(threads);
  std::vector<std::string> named = split_list(bind);
  for (const auto& spec : bind_ops) named.push_back(spec.substr(spec.find('=') + 1));
  for (const auto& b : named) require_installed(b);
  if (bind_ops.empty())
    require_separate_processes("--bind", bind, named);
  else
    require_separate_processes("--bind with --bind-op", fmt::format("{}", fmt::join(named, ",")),
                               named);
}

void require_separate_processes(const std::string& option, const std::string& value,
                                const std::vector<std::string>& bindings) {
  if (isolation() != Isolation::None) return;
  for (std::size_t i = 0; i < bindings.size(); ++i)
    for (std::size_t j = i + 1; j < bindings.size(); ++j) {
      const BindingInfo* a = find_binding_info(bindings[i]);
      const BindingInfo* b = find_binding_info(bindings[j]);
      if (a && b && !a->plugin.empty() && a->plugin != b->plugin && a->framework == b->framework)
        fail(
            "{} {}: '{}' ({} {}) and '{}' ({} {}) cannot share one process, so not with "
            "--isolation none (without it each runs in its own worker)",
            option, value, a->name, a->framework, a->version, b->name, b->framework, b->version);
    }
}

void require_installed(const std::string& binding) {
  const ImportBindingSpec* spec = find_import_spec(binding);
  if (!spec) return;
  if (std::string p = import_binding_problem(*spec); !p.empty())
    fail("--bind {}: {} cannot run here: {}", binding, spec->framework, p);
}

void print_plan_summary(const Graph& g, const std::vector<NodeRecord>& records) {
  std::map<std::string, int> ran;
  std::map<std::string, std::pair<int, std::string>> fallbacks;  // op type -> count, first reason
  for (const auto& r : records) {
    ++ran[r.binding];
    if (!r.fallback_reason.empty()) {
      auto& f = fallbacks[g.nodes[r.node].op_type];
      if (f.first++ == 0) f.second = r.fallback_reason;
    }
  }
  std::string line;
  for (const auto& [b, n] : ran)
    line += fmt::format("{}{} nodes on {}", line.empty() ? "" : ", ", n, b);
  fmt::print("ran {}\n", line);
  for (const auto& [op, f] : fallbacks)
    fmt::print("  fell back to the reference: {} x{} ({})\n", printable(op, 64), f.first,
               printable(f.second, 2000));
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto comma = s.find(',', start);
    std::string item = s.substr(start, comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string default_bindings(const std::string& preferred, std::string& note) {
  auto known = binding_names();
  std::vector<std::string> out;
  for (const auto& b : split_list(preferred)) {
    if (std::find(known.begin(), known.end(), b) != known.end()) {
      out.push_back(b);
      continue;
    }
    // Another version of the same framework (onednn-2.6 for onednn), where this build has one.
    auto other = std::find_if(known.begin(), known.end(),
                              [&](const std::string& k) { return k.rfind(b + "-", 0) == 0; });
    if (other != known.end() && std::find(out.begin(), out.end(), *other) == out.end()) {
      note += fmt::format("note: binding {} is not built here; the default binds {} instead\n", b,
                          *other);
      out.push_back(*other);
    } else {
      note += fmt::format("note: binding {} is not built here; the default leaves it out\n", b);
    }
  }
  return fmt::format("{}", fmt::join(out, ","));
}

std::vector<std::string> framework_bindings(const std::string& option, const std::string& value) {
  auto known = binding_names();
  std::vector<std::string> out;
  for (const auto& b : split_list(value)) {
    if (std::find(known.begin(), known.end(), b) == known.end() || b == "reference")
      fail("{} {}: '{}' is not a framework binding (known: {})", option, value, b,
           fmt::join(known.begin() + 1, known.end(), ", "));
    require_installed(b);
    out.push_back(b);
  }
  if (out.empty()) fail("{} '{}': no binding named", option, value);
  require_separate_processes(option, value, out);
  return out;
}

}  // namespace metaop::cli
