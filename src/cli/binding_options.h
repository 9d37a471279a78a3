#pragma once
// Options the bindings bring, shared by run, check and probe: each framework reached through the
// ONNX-import base names its optimization-level option (--ort-opt for the ONNX Runtime builds)
// in its spec (bindings/onnx_import/import_binding.h), and the option appears here. Bindings
// that share an option share its value. The options that choose a framework's CPU kernels
// (--onednn-isa, --torch-isa: bindings/dispatch.h) come here too. --kernel-timeout is one of every
// subcommand's process options (process_options.h).
#include <CLI/CLI.hpp>
#include <map>
#include <string>

namespace metaop::cli {

struct BindingOptions {
  std::map<std::string, std::string> levels;    // option -> level given
  std::map<std::string, std::string> dispatch;  // --onednn-isa, --torch-isa -> value given
};

void add_binding_options(CLI::App* cmd, BindingOptions& o);
void apply_binding_options(const BindingOptions& o);

}  // namespace metaop::cli
