#include "cli/binding_options.h"

#include <fmt/format.h>

#include <set>

#include "bindings/dispatch.h"
#include "bindings/onnx_import/import_binding.h"

namespace metaop::cli {

void add_binding_options(CLI::App* cmd, BindingOptions& o) {
  std::set<std::string> added;
  for (const auto& spec : import_binding_specs()) {
    if (spec.level_option.empty() || !added.insert(spec.level_option).second) continue;
    std::string& value = o.levels[spec.level_option];
    value = spec.default_level;
    cmd->add_option(spec.level_option, value, spec.level_help)->capture_default_str();
  }
  for (const auto& v : dispatch_variables()) {
    std::vector<std::string> names;
    names.reserve(v.values.size());
    for (const auto& [name, env] : v.values) names.push_back(name);
    std::string& value = o.dispatch[v.option];
    value = "all";
    cmd->add_option(v.option, value, v.help)->capture_default_str()->check(CLI::IsMember(names));
  }
}

void apply_binding_options(const BindingOptions& o) {
  for (const auto& [option, level] : o.levels) set_import_level(option, level);
  for (const auto& v : dispatch_variables())
    if (auto it = o.dispatch.find(v.option); it != o.dispatch.end()) set_dispatch(v, it->second);
}

}  // namespace metaop::cli
