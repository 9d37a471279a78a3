#include "cli/ort_options.h"

#include "bindings/isolate.h"
#include "bindings/ort/ort_binding.h"

namespace metaop::cli {

void add_ort_options(CLI::App* cmd, OrtOptions& o) {
  cmd->add_option("--ort-opt", o.level,
                  "ONNX Runtime graph optimization level of the ort bindings' one-node sessions: "
                  "disabled, basic, extended or all")
      ->capture_default_str();
  cmd->add_option("--kernel-timeout", o.kernel_timeout,
                  "Seconds a kernel run out of process (ort, opencv) may take before it is killed "
                  "and reported as a hang; 0: no limit")
      ->capture_default_str();
}

void apply_ort_options(const OrtOptions& o) {
  OrtBinding::set_level(o.level);
  set_kernel_timeout(o.kernel_timeout);
}

}  // namespace metaop::cli
