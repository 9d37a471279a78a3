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
  for (const char* op : {"LpPool", "GlobalLpPool", "MeanVarianceNormalization"})
    s.lacking[op] = std::string("OpenCV 5's new DNN engine has no layer for ") + op;
  // Half-precision models are computed in float32 and return float32 outputs.
  s.dtypes = {DType::Float32};
  return {s};
}

}  // namespace metaop
