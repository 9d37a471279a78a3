#include "bindings/factory.h"

#include <fmt/format.h>

#include <algorithm>

#include "bindings/isolate.h"
#include "bindings/onnx_import/import_binding.h"
#include "bindings/reference/reference_binding.h"
#include "ops/linear_util.h"

namespace metaop {

void set_threads(int n) {
  set_framework_threads(n);
  set_import_threads(n);
  set_reference_threads(n);
}

namespace {

// A built-in binding's info, from the binding itself.
BindingInfo builtin_info(const Binding& b, std::string framework, std::string version, bool update,
                         bool whole_model) {
  BindingInfo info;
  info.name = b.name();
  info.framework = std::move(framework);
  info.version = std::move(version);
  info.isolate = false;
  info.update = update;
  info.whole_model = whole_model;
  describe_ops(b, info);
  return info;
}

}  // namespace

const std::vector<BindingInfo>& binding_infos() {
  static const std::vector<BindingInfo> all = [] {
    std::vector<BindingInfo> v;
    v.push_back(builtin_info(ReferenceBinding(), "MetaOp", "float64 reference", true, false));
    for (const auto& spec : import_binding_specs())
      v.push_back(
          builtin_info(ImportBinding(spec), spec.framework,
                       fmt::format("{} ({})", spec.version.empty() ? "not installed" : spec.version,
                                   spec.source),
                       false, true));
    for (const auto& p : plugin_infos()) {
      bool taken = false;
      for (const auto& b : v) taken |= b.name == p.name;
      if (!taken) v.push_back(p);
    }
    // Tables and reports list the bindings in the order they joined MetaOp (torch-1.13, the
    // LibTorch torch was first built against, beside it, and likewise onednn-2.6 and opencv-4.6);
    // others after them, in the order found.
    static const std::vector<std::string> order{"reference",  "torch",    "torch-1.13", "onednn",
                                                "onednn-2.6", "opencv",   "opencv-4.6", "ort",
                                                "ort-1.30",   "ort-wasm", "openvino",   "tvm"};
    auto rank = [](const BindingInfo& b) {
      return std::find(order.begin(), order.end(), b.name) - order.begin();
    };
    std::stable_sort(v.begin(), v.end(),
                     [&](const BindingInfo& a, const BindingInfo& b) { return rank(a) < rank(b); });
    return v;
  }();
  return all;
}

const BindingInfo* find_binding_info(const std::string& name) {
  for (const auto& b : binding_infos())
    if (b.name == name) return &b;
  return nullptr;
}

std::vector<std::string> binding_names() {
  std::vector<std::string> names;
  for (const auto& b : binding_infos()) names.push_back(b.name);
  return names;
}

std::string binding_version(const std::string& name) {
  const BindingInfo* b = find_binding_info(name);
  return b ? b->version : std::string();
}

const BindingInfo& binding_info(const std::string& name) {
  if (const BindingInfo* b = find_binding_info(name)) return *b;
  std::string why;
  for (const auto& [file, reason] : plugin_problems()) why += fmt::format("; {}", reason);
  fail("unknown binding '{}' (available: {}){}", name, fmt::join(binding_names(), ", "), why);
}

std::unique_ptr<Binding> make_binding(const std::string& name) {
  const BindingInfo& info = binding_info(name);
  if (name == "reference") return std::make_unique<ReferenceBinding>();
  // Frameworks that import ONNX run in their own adapter worker already.
  if (const ImportBindingSpec* spec = find_import_spec(name))
    return std::make_unique<ImportBinding>(*spec);
  // Framework kernels run in worker processes unless the user asked for them in process
  // (isolate.h); the plugin is loaded where they run.
  auto b = plugin_binding(info);
  return info.isolate ? isolated(std::move(b)) : std::move(b);
}

}  // namespace metaop
