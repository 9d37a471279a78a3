#include "bindings/factory.h"

#include <fmt/format.h>

#include <algorithm>

#include "bindings/isolate.h"
#include "bindings/ort/ort_binding.h"
#include "bindings/reference/reference_binding.h"
#include "ops/linear_util.h"

#ifndef METAOP_ORT_VERSION
#define METAOP_ORT_VERSION "unknown"
#endif

namespace metaop {

void set_threads(int n) {
  set_framework_threads(n);
  OrtBinding::set_threads(n);
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
    v.push_back(builtin_info(OrtBinding(false), "ONNX Runtime (npm onnxruntime-node)",
                             METAOP_ORT_VERSION, false, true));
    v.push_back(builtin_info(OrtBinding(true), "ONNX Runtime (npm onnxruntime-web)",
                             METAOP_ORT_VERSION, false, true));
    for (const auto& p : plugin_infos()) {
      bool taken = false;
      for (const auto& b : v) taken |= b.name == p.name;
      if (!taken) v.push_back(p);
    }
    // Tables and reports list the bindings in the order they joined MetaOp (torch-1.13, the
    // LibTorch torch was first built against, beside it); others after them, in the order found.
    static const std::vector<std::string> order{"reference", "torch", "torch-1.13", "onednn",
                                                "opencv",    "ort",   "ort-wasm"};
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
  // ONNX Runtime runs in its own Node.js worker already.
  if (name == "ort") return std::make_unique<OrtBinding>(false);
  if (name == "ort-wasm") return std::make_unique<OrtBinding>(true);
  // Framework kernels run in worker processes unless the user asked for them in process
  // (isolate.h); the plugin is loaded where they run.
  auto b = plugin_binding(info);
  return info.isolate ? isolated(std::move(b)) : std::move(b);
}

}  // namespace metaop
