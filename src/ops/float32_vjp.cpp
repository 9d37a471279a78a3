// Triage's float32 evaluations of the ops' VJPs (Float32Vjp, ops/registry.h) that their family
// files do not declare next to the VJP (the element-wise rows, Softmax, the pools, the
// normalizations and the data movements do). A backward finding whose kernel is no worse than the
// VJP's formula in float32 is a float32 limit of that formula (the products' VJPs are themselves
// products, whose sums overflow as the forward's do), not a defect of the kernel
// (analysis/core/triage.h). Written by hand for the reason float32.cpp gives.
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/vjp_util.h"

namespace metaop {

void register_float32_vjps(OpRegistry& r) {
  for (const char* op : {"MatMul", "Gemm", "Conv", "ConvTranspose"})
    r.amend(op).vjp_float32(
        [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
           SumOrder order) { return vjp_with_gemm(c, in, out, grads, float32_gemm(order), true); },
        "the VJP's products (g times the other operand, transposed) and their sums",
        "a wider accumulator avoids the overflow of the sums");
  // Each gradient element is one operation on exact values: g (ReduceSum), g / n (ReduceMean,
  // GlobalAveragePool), sign(x) g (ReduceL1), 2 x g (ReduceSumSquare), a gather (Col2Im's
  // adjoint), g or 0 at the selected element (ReduceMax, ReduceMin, GlobalMaxPool: one window
  // each; TopK: distinct indices), g cast back (Cast, CastLike).
  for (const char* op :
       {"ReduceSum", "ReduceMean", "GlobalAveragePool", "ReduceL1", "ReduceSumSquare", "Col2Im",
        "ReduceMax", "ReduceMin", "GlobalMaxPool", "TopK", "Cast", "CastLike"})
    r.amend(op).vjp_float32_rounded();
}

}  // namespace metaop
