#pragma once
// Options of the out-of-process bindings, shared by run, check and probe: --ort-opt (ONNX
// Runtime's graph optimization level for its one-node sessions) and --kernel-timeout (seconds
// before a kernel run out of process is killed and reported as a hang).
#include <CLI/CLI.hpp>
#include <string>

namespace metaop::cli {

struct OrtOptions {
  std::string level = "all";
  double kernel_timeout = 120;
};

void add_ort_options(CLI::App* cmd, OrtOptions& o);
void apply_ort_options(const OrtOptions& o);

}  // namespace metaop::cli
