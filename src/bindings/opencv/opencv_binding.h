#pragma once
// OpenCV DNN binding: each node is exported as a one-node ONNX model (constant inputs as
// initializers), imported with OpenCV's own ONNX importer and run, so that OpenCV's importer
// and its layers are what is tested. Forward only; float32 data. Imported nets are cached by
// node signature; make_binding runs the binding in a worker process (isolate.h).
#include "bindings/binding.h"
#include "bindings/whole_model.h"

namespace metaop {

class OpenCVBinding final : public Binding {
 public:
  std::string name() const override { return "opencv-4.6"; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  // Imported nets kept (least recently used dropped first); 0: none, every node imported anew.
  static void set_cache_capacity(std::size_t nets);
};

// The whole model imported by OpenCV (opencv_model.cpp): levels "nofusion" and "fusion".
std::unique_ptr<WholeModelRunner> make_opencv_model_runner();

}  // namespace metaop
