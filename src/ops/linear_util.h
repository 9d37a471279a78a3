#pragma once
#include <cstdint>
#include <optional>

#include "tensor/dtype.h"

namespace metaop {

// Row-major C = alpha * op(A) * op(B) + beta * C in float64 (OpenBLAS dgemm).
void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              double alpha, const double* a, const double* b, double beta, double* c);

// Threads of the float64 GEMM (OpenBLAS); the CLI ties it to --threads, like the frameworks'.
void set_reference_threads(int n);

// Fault injection only (`--inject OP:half_acc`): while alive, gemm_f64 on this thread sums
// every dot product sequentially and rounds the running sum to `dtype` after each term, as a
// kernel that accumulates in float16 would. The reference kernels never use it otherwise.
class ScopedLowPrecisionAccumulation {
 public:
  explicit ScopedLowPrecisionAccumulation(DType dtype);
  ~ScopedLowPrecisionAccumulation();
  ScopedLowPrecisionAccumulation(const ScopedLowPrecisionAccumulation&) = delete;
  ScopedLowPrecisionAccumulation& operator=(const ScopedLowPrecisionAccumulation&) = delete;

 private:
  std::optional<DType> previous_;
};

}  // namespace metaop
