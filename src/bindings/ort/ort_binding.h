#pragma once
// ONNX Runtime binding (ONNX Runtime 1.30 from the npm packages, through their JavaScript API in
// a worker process: ort_process.h). `ort` runs the CPU build (onnxruntime-node: MLAS kernels),
// `ort-wasm` the WebAssembly build (onnxruntime-web: kernels compiled for WebAssembly SIMD).
// Each node is exported as a one-node ONNX model -- data inputs as graph inputs, parameters
// (weights, shapes, axes) as initializers, as exporters write them -- and run in a session
// created at the graph optimization level of --ort-opt; sessions are cached per node
// signature (op, attributes, input types and shapes, the parameters' values), so a model's
// nodes pay session creation once per process. Forward only.
#include <map>
#include <string>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

// ONNX Runtime's graph optimization levels, lowest first.
const std::vector<std::string>& ort_levels();
int ort_level_index(const std::string& level);  // fails naming the value

class OrtBinding final : public Binding {
 public:
  explicit OrtBinding(bool wasm = false) : wasm_(wasm) {}
  std::string name() const override { return wasm_ ? "ort-wasm" : "ort"; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;

  // Process-wide settings (from --ort-opt and --threads): the optimization level of the
  // one-node sessions ("all" by default, what users get) and the CPU build's intra-op threads.
  static void set_level(const std::string& level);
  static std::string level();
  static void set_threads(int n);

 private:
  bool wasm_;
};

// Runs a whole serialized model in ONNX Runtime ("cpu" or "wasm") at the given level, as its
// users run it: the named inputs in, the named outputs back. Sessions are cached by the model's
// bytes and level. Unsupported when ONNX Runtime refuses the model; Crash or Hang as for a node.
std::map<std::string, Tensor> ort_run_model(const std::string& flavor, const std::string& model,
                                            const std::map<std::string, Tensor>& inputs,
                                            const std::vector<std::string>& outputs,
                                            const std::string& level, const std::string& what);

// Empty when the binding can run here; else what is missing (Node.js, the npm package).
std::string ort_binding_problem(const std::string& binding);

}  // namespace metaop
