#pragma once
// Copies between MetaOp tensors and ATen tensors, for the torch binding's files only (ATen
// headers are costly: nothing outside src/bindings/torch includes this).
#include <ATen/core/Tensor.h>

#include <string>

#include "tensor/tensor.h"

namespace metaop {

at::ScalarType to_aten(DType t);
at::Tensor to_aten(const Tensor& t);  // a contiguous copy; undefined stays undefined
// `who` names the node or weight in the error for a dtype MetaOp does not have.
DType from_aten(at::ScalarType t, const std::string& who);
Tensor from_aten(const at::Tensor& a, const std::string& who);

}  // namespace metaop
