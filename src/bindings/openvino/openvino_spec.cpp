// The OpenVINO binding: OpenVINO's CPU plugin from PyPI, its ONNX frontend and graph
// transformations, through its Python API in the Python adapter worker (openvino_adapter.py).
#include "bindings/onnx_import/import_binding.h"

namespace metaop {

std::vector<ImportBindingSpec> openvino_specs() {
  ImportBindingSpec s = python_import_spec("openvino", "OpenVINO", "openvino", "CPU plugin",
                                           "src/bindings/openvino/openvino_adapter.py");
  // The CPU plugin's inference precision. MetaOp's error models are float32's, so f32 is the
  // default here; OpenVINO's own default on a CPU with bfloat16 instructions is bf16.
  s.levels = {"f32", "bf16"};
  s.default_level = "f32";
  s.level_option = "--openvino-precision";
  s.level_help =
      "OpenVINO CPU plugin's inference precision (openvino): f32, or bf16 (OpenVINO's own default "
      "on CPUs with bfloat16 instructions)";
  // The plugin fuses Conv and MatMul with the activation after them at every precision.
  s.first_fusing_level = 0;
  s.declined_dtypes = {
      {DType::Float64,
       "OpenVINO's CPU plugin computes float64 in float32 (inputs converted with saturation)"}};
  s.lacking = {
      {"Einsum",
       "no case to judge: ONNX's Einsum tests are float64, which the CPU plugin computes in "
       "float32"},
      {"MaxUnpool", "OpenVINO 2026.4's ONNX frontend has no conversion rule for MaxUnpool-11"},
      {"Det", "OpenVINO 2026.4's ONNX frontend has no conversion rule for Det-11"},
      {"TfIdfVectorizer",
       "OpenVINO 2026.4's ONNX frontend has no conversion rule for TfIdfVectorizer-9"},
      {"MelWeightMatrix",
       "OpenVINO 2026.4's ONNX frontend has no conversion rule for MelWeightMatrix-17"},
      {"DeformConv",
       "OpenVINO 2026.4's ONNX frontend has no conversion rule for DeformConv-19 or DeformConv-22 "
       "(its own DeformableConvolution is not mapped)"}};
  return {s};
}

}  // namespace metaop
