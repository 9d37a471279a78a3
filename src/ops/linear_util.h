#pragma once
#include <cstdint>

#include "ops/registry.h"

namespace metaop {

// Row-major C = alpha * op(A) * op(B) + beta * C in float64 (OpenBLAS dgemm).
void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              double alpha, const double* a, const double* b, double beta, double* c);

// Threads of the float64 GEMM (OpenBLAS); the CLI ties it to --threads, like the frameworks'.
void set_reference_threads(int n);

// A row-major GEMM with gemm_f64's arguments. The products of MatMul, Gemm, Conv and
// ConvTranspose go through one: the reference's is gemm_f64; evaluation (fault injection) may
// bring its own, e.g. one that accumulates in float16.
using GemmFn = void (*)(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        double alpha, const double* a, const double* b, double beta, double* c);

// The forward of MatMul, Gemm, Conv or ConvTranspose (by the node's op type) with its products
// summed by `gemm`.
Tensors forward_with_gemm(const KernelContext& c, const Tensors& in, GemmFn gemm);

// Their VJP (the reference's formula) with its products summed by `gemm`; with `float32`, the
// sums outside the GEMM (bias and C gradients, col2im's overlaps) are rounded to float32 too,
// in the order written (their float32 twins).
Tensors vjp_with_gemm(const KernelContext& c, const Tensors& in, const Tensors& out,
                      const Tensors& grads, GemmFn gemm, bool float32);

// The float32 GEMM of triage's twins: products rounded to float32 and summed in float32 in
// `order` (ops/float32.cpp).
GemmFn float32_gemm(SumOrder order);

}  // namespace metaop
