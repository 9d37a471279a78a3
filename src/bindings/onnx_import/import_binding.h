#pragma once
// Bindings to frameworks that import ONNX (ONNX Runtime, OpenVINO, TVM, OpenCV 5): one base for
// all of them. Each node is exported as a one-node ONNX model -- data inputs as graph inputs,
// parameters (weights, shapes, axes) as initializers, as exporters write them, the split coming
// from the op's manifest (ops/manifest.h) -- and run in the framework's adapter worker
// (adapter_process.h) at the optimization level the user chose; sessions are cached per node
// signature (op, attributes, input types and shapes, the parameters' values), so a model's nodes
// pay session creation once per process. Whole models and the sub-models that localization cuts
// out run the same way (whole-graph mode). Forward only.
//
// A framework joins by describing itself in an ImportBindingSpec (its folder's *_spec.cpp) and
// one line in import_binding_specs() (import_specs.cpp).
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings/binding.h"
#include "bindings/onnx_import/adapter_process.h"
#include "bindings/whole_model.h"
#include "tensor/files.h"

namespace metaop {

struct ImportBindingSpec {
  std::string name;       // "openvino"
  std::string framework;  // "OpenVINO", for messages
  std::string source;     // where it comes from, for `ops`: "PyPI openvino"
  std::string version;    // the framework's version ("" when it is not installed)
  AdapterCommand command;
  // Optimization levels, lowest first; users get `default_level`. Bindings that share an option
  // (--ort-opt for the three ONNX Runtime builds) share its value.
  std::vector<std::string> levels;
  std::string default_level;
  std::string level_option;  // "--ort-opt"
  std::string level_help;    // what the option chooses, for --help
  // The first level at which the framework fuses an op with the activation after it.
  std::size_t first_fusing_level = 0;
  // Meta operators the framework has no kernel for (every case refused), with why.
  std::map<std::string, std::string> lacking;
  std::vector<DType> dtypes = {DType::Float32};
  // Dtypes the framework does not compute in (OpenVINO's CPU plugin computes float64 in
  // float32): a node with such an input or output is declined, with the reason, not judged.
  std::map<DType, std::string> declined_dtypes;
  // Source of the worker side, for `ops --where`.
  std::string worker_source;
};

// Every framework reached through the ONNX-import base (import_specs.cpp), in the order the
// bindings joined MetaOp.
const std::vector<ImportBindingSpec>& import_binding_specs();
const ImportBindingSpec* find_import_spec(const std::string& name);

class ImportBinding final : public Binding {
 public:
  explicit ImportBinding(const ImportBindingSpec& spec) : spec_(spec) {}
  std::string name() const override { return spec_.name; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;

 private:
  const ImportBindingSpec& spec_;
};

// The whole-model runner of an import binding.
std::unique_ptr<WholeModelRunner> make_import_model_runner(const ImportBindingSpec& spec);

// The level users get from `option` ("--ort-opt"), process-wide, and setting it (fails naming
// the value and the levels when it is not one of them).
std::string import_level(const std::string& option);
void set_import_level(const std::string& option, const std::string& level);
// The level option of the import binding named `binding` ("--ort-opt") and the level it runs at
// here (the chosen one, else its default): what a reproducer records. Empty for other bindings.
std::pair<std::string, std::string> import_binding_level(const std::string& binding);
// Intra-op threads of every import binding's sessions (--threads).
void set_import_threads(int n);

// Empty when the binding can run here; else what is missing (the framework, its worker).
std::string import_binding_problem(const ImportBindingSpec& spec);

// The version of a package in the project's Python environment (its dist-info folder), "" when
// the package is not there. Does not start Python.
std::string pypi_version(const std::string& distribution);
// A Python adapter worker's command: the generic worker with the binding's adapter module
// (`module_path` in the source tree; the environment's METAOP_ADAPTER_<BINDING>, for example
// METAOP_ADAPTER_ORT, names another), in the project's Python, whose `distribution` package
// (PyPI name) is the framework.
AdapterCommand python_adapter(const std::string& binding, const std::string& framework,
                              const std::string& module_path, const std::string& distribution);
// The spec of a framework from the project's Python environment, run by its adapter module:
// name, framework, source ("PyPI <distribution>, <what>"), version, worker command and source
// filled in; the caller adds levels, lacking ops and dtypes.
ImportBindingSpec python_import_spec(const std::string& binding, const std::string& framework,
                                     const std::string& distribution, const std::string& what,
                                     const std::string& adapter_path);

}  // namespace metaop
