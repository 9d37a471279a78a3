// The ONNX Runtime bindings: `ort`, the current release from PyPI (its Python API, in the Python
// adapter worker: ort_adapter.py), and the npm builds of 1.30 in the Node.js worker
// (ort_worker.js): `ort-1.30` (onnxruntime-node, the CPU library with MLAS) and `ort-wasm`
// (onnxruntime-web, the kernels compiled for WebAssembly SIMD). The three share --ort-opt.
#include <fmt/format.h>

#include <cstdlib>

#include "bindings/onnx_import/import_binding.h"

#ifndef METAOP_ORT_NPM_VERSION
#define METAOP_ORT_NPM_VERSION "unknown"
#endif
#ifndef METAOP_NODE_MODULES
#define METAOP_NODE_MODULES "third_party/node/node_modules"
#endif

namespace metaop {

namespace {

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return v && *v ? v : dflt;
}

// What the three builds share: the levels of --ort-opt.
void ort_levels(ImportBindingSpec& s) {
  s.levels = {"disabled", "basic", "extended", "all"};
  s.default_level = "all";
  s.level_option = "--ort-opt";
  s.level_help =
      "ONNX Runtime's graph optimization level (ort, ort-1.30, ort-wasm): disabled, basic, "
      "extended or all";
  // ONNX Runtime fuses Conv and its activation from "extended" on.
  s.first_fusing_level = 2;
}

// The npm packages, in the Node.js worker.
ImportBindingSpec ort_npm(const std::string& name, const std::string& flavor) {
  ImportBindingSpec s;
  s.name = name;
  s.framework = "ONNX Runtime";
  ort_levels(s);
  std::string package = flavor == "wasm" ? "onnxruntime-web" : "onnxruntime-node";
  s.source = "npm " + package;
  s.version = METAOP_ORT_NPM_VERSION;
  std::string modules = env_or("METAOP_NODE_MODULES", METAOP_NODE_MODULES);
  std::string script = env_or("METAOP_ORT_WORKER", metaop_source("src/bindings/ort/ort_worker.js"));
  s.command.framework = s.framework;
  s.command.argv = {env_or("METAOP_NODE", "node"), script, flavor};
  s.command.env = {"NODE_PATH=" + modules};
  s.command.need_files = {script, modules + "/" + package + "/package.json"};
  s.command.install_hint =
      "run scripts/install-deps.sh (Debian's nodejs and npm, then the npm packages), or set "
      "METAOP_NODE and METAOP_NODE_MODULES";
  s.worker_source = "src/bindings/ort/ort_worker.js";
  return s;
}

}  // namespace

std::vector<ImportBindingSpec> ort_specs() {
  ImportBindingSpec pypi =
      python_import_spec("ort", "ONNX Runtime", "onnxruntime", "CPU execution provider",
                         "src/bindings/ort/ort_adapter.py");
  ort_levels(pypi);
  return {pypi, ort_npm("ort-1.30", "cpu"), ort_npm("ort-wasm", "wasm")};
}

}  // namespace metaop
