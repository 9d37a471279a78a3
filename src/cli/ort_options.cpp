#include "cli/ort_options.h"

#include "bindings/ort/ort_binding.h"

namespace metaop::cli {

void add_ort_options(CLI::App* cmd, OrtOptions& o) {
  cmd->add_option("--ort-opt", o.level,
                  "ONNX Runtime graph optimization level of the ort bindings' one-node sessions: "
                  "disabled, basic, extended or all")
      ->capture_default_str();
}

void apply_ort_options(const OrtOptions& o) {
  OrtBinding::set_level(o.level);
}

}  // namespace metaop::cli
