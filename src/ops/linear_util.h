#pragma once
#include <cstdint>

namespace metaop {

// Row-major C = alpha * op(A) * op(B) + beta * C in float64 (OpenBLAS dgemm).
void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              double alpha, const double* a, const double* b, double beta, double* c);

}  // namespace metaop
