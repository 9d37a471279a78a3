// The `opencv` binding: OpenCV 5's DNN module with its new graph engine, from PyPI
// (opencv-python-headless), through the Python API its users call (opencv5_adapter.py). Debian's
// OpenCV 4.6 is the `opencv-4.6` plugin (src/bindings/opencv).
#include "bindings/onnx_import/import_binding.h"

namespace metaop {

std::vector<ImportBindingSpec> opencv5_specs() {
  ImportBindingSpec s =
      python_import_spec("opencv", "OpenCV", "opencv-python-headless", "new DNN engine",
                         "src/bindings/opencv5/opencv5_adapter.py");
  // The new engine fuses at import (Conv with its activation, batch normalization into Conv)
  // and cannot be told not to: Net.enableFusion(false) on an imported net empties it (5.0.0).
  s.levels = {"fusion"};
  s.default_level = "fusion";
  s.first_fusing_level = 0;
  // Refused on every case: the importer has no layer for them.
  for (const char* op :
       {"LpPool", "GlobalLpPool", "MeanVarianceNormalization", "STFT", "Compress",
        "ReverseSequence", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "Col2Im",
        "TfIdfVectorizer", "MelWeightMatrix", "DeformConv", "MaxRoiPool"})
    s.lacking[op] = std::string("OpenCV 5's new DNN engine has no layer for ") + op;
  // GroupNormalization: OpenCV 5.0's importer needs every graph output's shape, which ONNX's
  // shape inference does not give for this op (a context-dependent function: only the element
  // type, by infer_node_outputs), and it refuses opset 18's per-group scale outright ("scale
  // must be a 1d tensor and match the channel of input"). A model whose exporter wrote the output
  // shape runs at opset 21.
  s.lacking["GroupNormalization"] =
      "the one-node model has no output shape (ONNX infers none for GroupNormalization), which "
      "OpenCV 5's importer requires; opset 18's per-group scale it refuses";
  // RNN: the one-node model spells out the schema's default activations (["Tanh", "Tanh"]: a
  // strings attribute, as every attribute MetaOp fills in at import), which OpenCV 5.0's
  // importer does not read ("Attribute[activations]: 'Strings' are not supported"); a model that
  // leaves the attribute out may import. A limit of MetaOp's export as much as OpenCV's.
  s.lacking["RNN"] =
      "OpenCV 5's importer reads no strings attribute, and MetaOp's one-node model spells out "
      "RNN's default activations";
  // Half-precision models are computed in float32 and return float32 outputs.
  s.dtypes = {DType::Float32};
  return {s};
}

}  // namespace metaop
