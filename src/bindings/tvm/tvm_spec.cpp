// The TVM binding: Apache TVM from PyPI, its Relax ONNX frontend, compiled for the CPU (target
// llvm) and run on the Relax VM, through the Python adapter worker (tvm_adapter.py). What is
// under test is TVM's lowering, fusion and code generation.
#include "bindings/onnx_import/import_binding.h"

namespace metaop {

std::vector<ImportBindingSpec> tvm_specs() {
  ImportBindingSpec s = python_import_spec("tvm", "TVM", "apache-tvm", "Relax, llvm",
                                           "src/bindings/tvm/tvm_adapter.py");
  // PassContext's opt_level: FuseOps tells 0 from the rest only; O2 is TVM's default.
  s.levels = {"O0", "O2"};
  s.default_level = "O2";
  s.level_option = "--tvm-opt";
  s.level_help = "TVM's optimization level (tvm): O0 (no fusion) or O2 (TVM's default)";
  s.first_fusing_level = 1;
  const std::string no_converter =
      "TVM 0.27's Relax ONNX frontend has no converter for it (OpNotImplemented)";
  for (const char* op : {"Celu",
                         "LpNormalization",
                         "NegativeLogLikelihoodLoss",
                         "SoftmaxCrossEntropyLoss",
                         "RNN",
                         "GRU",
                         "LSTM",
                         "RotaryEmbedding",
                         "DFT",
                         "STFT",
                         "HannWindow",
                         "HammingWindow",
                         "BlackmanWindow",
                         "CenterCropPad",
                         "ConvInteger",
                         "QLinearMatMul",
                         "QLinearConv",
                         "ReverseSequence",
                         "Col2Im",
                         "Det",
                         "TfIdfVectorizer",
                         "MelWeightMatrix",
                         "DeformConv"})
    s.lacking[op] = no_converter;
  // Converters that refuse every case of the ONNX tests.
  s.lacking["OneHot"] =
      "TVM 0.27's Relax ONNX frontend refuses every case ('Only constant depth currently "
      "supported')";
  s.lacking["Upsample"] =
      "TVM 0.27's Relax ONNX frontend fails converting every case (a TypeError in its Upsample "
      "converter)";
  // Its "Attention" converter is Microsoft's contrib op of that name (attribute num_heads, a
  // packed QKV weight): ONNX's opset-23 Attention fails there with KeyError 'num_heads'.
  s.lacking["Attention"] =
      "TVM 0.27's Relax ONNX frontend converts Microsoft's contrib Attention under that name, "
      "not ONNX's (KeyError 'num_heads')";
  return {s};
}

}  // namespace metaop
