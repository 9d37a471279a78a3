// The frameworks reached through the ONNX-import base: one line each.
#include "bindings/onnx_import/import_binding.h"

namespace metaop {

// In each framework's folder (its *_spec.cpp).
std::vector<ImportBindingSpec> ort_specs();
std::vector<ImportBindingSpec> opencv5_specs();
std::vector<ImportBindingSpec> openvino_specs();
std::vector<ImportBindingSpec> tvm_specs();

const std::vector<ImportBindingSpec>& import_binding_specs() {
  static const std::vector<ImportBindingSpec> all = [] {
    std::vector<ImportBindingSpec> v;
    for (auto* specs : {&ort_specs, &opencv5_specs, &openvino_specs, &tvm_specs}) {
      auto more = specs();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }();
  return all;
}

}  // namespace metaop
