#include "bindings/factory.h"

#include <fmt/format.h>

#include "bindings/isolate.h"
#include "bindings/onednn/onednn_binding.h"
#include "bindings/opencv/opencv_binding.h"
#include "bindings/ort/ort_binding.h"
#include "bindings/reference/reference_binding.h"
#include "bindings/torch/torch_binding.h"
#include "ops/linear_util.h"

namespace metaop {

void set_threads(int n) {
  TorchBinding::set_threads(n);
  OrtBinding::set_threads(n);
  set_reference_threads(n);
}

std::vector<std::string> binding_names() {
  return {"reference", "torch", "onednn", "opencv", "ort", "ort-wasm"};
}

std::unique_ptr<Binding> make_binding(const std::string& name) {
  if (name == "reference") return std::make_unique<ReferenceBinding>();
  // Framework kernels run in worker processes unless the user asked for them in process
  // (isolate.h); ONNX Runtime runs in its own Node.js worker already.
  if (name == "torch") return isolated(std::make_unique<TorchBinding>());
  if (name == "opencv") return isolated(std::make_unique<OpenCVBinding>());
  if (name == "onednn") return isolated(std::make_unique<OneDNNBinding>());
  if (name == "ort") return std::make_unique<OrtBinding>(false);
  if (name == "ort-wasm") return std::make_unique<OrtBinding>(true);
  std::string known;
  for (const auto& n : binding_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown binding '{}' (available: {})", name, known);
}

}  // namespace metaop
