#pragma once
// OpenCV DNN binding: each node is exported as a one-node ONNX model (constant inputs as
// initializers), imported with OpenCV's own ONNX importer and run, so that OpenCV's importer
// and its layers are what is tested. Forward only; float32 data.
#include "bindings/binding.h"

namespace metaop {

class OpenCVBinding final : public Binding {
 public:
  std::string name() const override { return "opencv"; }
  Support supports(const std::string& op_type) const override;
  std::vector<std::string> where(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
};

}  // namespace metaop
