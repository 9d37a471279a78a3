#pragma once
// Element-wise comparison of a result with an expected tensor under rtol/atol (the ONNX
// backend-test rule: |a - e| <= atol + rtol * |e|; NaN matches NaN; integers and bools exact).
#include <string>

#include "tensor/tensor.h"

namespace metaop {

struct Comparison {
  bool ok = true;
  std::string reason;  // first failure, with index and values
  double max_abs_err = 0;
  double max_rel_err = 0;  // |a - e| / |e| over elements with e != 0
  std::int64_t mismatches = 0;
};

Comparison compare_tensors(const Tensor& actual, const Tensor& expected, double rtol, double atol);

}  // namespace metaop
