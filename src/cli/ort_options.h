#pragma once
// Options of the ONNX Runtime bindings, shared by run, check and probe: --ort-opt (ONNX
// Runtime's graph optimization level for its one-node sessions). --kernel-timeout is one of
// every subcommand's process options (process_options.h).
#include <CLI/CLI.hpp>
#include <string>

namespace metaop::cli {

struct OrtOptions {
  std::string level = "all";
};

void add_ort_options(CLI::App* cmd, OrtOptions& o);
void apply_ort_options(const OrtOptions& o);

}  // namespace metaop::cli
