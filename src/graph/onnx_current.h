#pragma once
// The current ONNX package's shape inference (src/graph/onnx_current.py, in the project's Python
// environment) for models past the opsets the linked ONNX library knows (kMaxLinkedOnnxOpset).
#include <string>

namespace onnx {
class ModelProto;
}

namespace metaop {

// m's graph outputs typed by the current ONNX package's shape inference; fails naming `label`.
void infer_outputs_with_current_onnx(onnx::ModelProto& m, const std::string& label);
// Whether the project's Python environment (and so the current ONNX package) is there.
bool current_onnx_available();

}  // namespace metaop
