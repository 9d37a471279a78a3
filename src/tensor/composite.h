#pragma once
// Values of ONNX's sequence and optional types (a sequence of tensors, an optional tensor or an
// optional sequence), which engine/control_flow lowers to their tensors, and string tensors, which
// it evaluates as it lowers a model (engine/strings).
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace metaop {

struct CompositeValue {
  bool optional = false;  // an optional value; `has` says whether it holds one
  bool has = true;
  bool sequence = false;  // a sequence (or an optional one) of `tensors`; else one tensor
  std::vector<Tensor> tensors;
};

// A tensor of ONNX's STRING element type: its shape and its values in row-major order (bytes,
// UTF-8 where text).
struct StringTensor {
  Shape shape;
  std::vector<std::string> values;
};

}  // namespace metaop
