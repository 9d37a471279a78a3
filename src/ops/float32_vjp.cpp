// Triage's float32 evaluations of the ops' VJPs (Float32Vjp, ops/registry.h) that their family
// files do not declare next to the VJP (the element-wise unary rows, Softmax and LogSoftmax and
// the data movements do). A backward finding whose kernel is no worse than the VJP's formula in
// float32 is a float32 limit of that formula (the products' VJPs are themselves products, whose
// sums overflow as the forward's do), not a defect of the kernel (analysis/core/triage.h).
// Written by hand for the reason float32.cpp gives.
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// Add, Sub and Mul: g times an exact derivative (1, -1, the other operand), rounded once per
// element, then summed back over broadcasting in float32.
Tensors binary_vjp_f32(const KernelContext& c, const Tensors& in, const Tensors& out,
                       const Tensors& grads, SumOrder order) {
  if (c.opset < 7)
    throw Unsupported(c.node.label() + ": no reference VJP for legacy broadcasting (opset < 7)");
  const std::string& op = c.node.op_type;
  const Tensor &a = in[0], &b = in[1];
  const Shape& os = out[0].shape();
  auto va = a.to_f64(), vb = b.to_f64(), g = grad_of(grads, out, 0);
  auto ma = broadcast_map(a.shape(), os), mb = broadcast_map(b.shape(), os);
  std::vector<double> ga(g.size()), gb(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    auto gi = static_cast<float>(g[i]);
    if (gi == 0) continue;  // as the reference: no gradient, no 0 * inf
    ga[i] = op == "Mul" ? gi * static_cast<float>(vb[mb[i]]) : gi;
    gb[i] = op == "Mul" ? gi * static_cast<float>(va[ma[i]]) : (op == "Sub" ? -gi : gi);
  }
  Tensors r(in.size());
  if (is_floating(a.dtype())) r[0] = grad_like(unbroadcast_f32(ga, os, a.shape(), order), a);
  if (is_floating(b.dtype())) r[1] = grad_like(unbroadcast_f32(gb, os, b.shape(), order), b);
  return r;
}

}  // namespace

void register_float32_vjps(OpRegistry& r) {
  for (const char* op : {"MatMul", "Gemm", "Conv", "ConvTranspose"})
    r.amend(op).vjp_float32(
        [](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
           SumOrder order) { return vjp_with_gemm(c, in, out, grads, float32_gemm(order), true); },
        "the VJP's products (g times the other operand, transposed) and their sums",
        "a wider accumulator avoids the overflow of the sums");
  for (const char* op : {"Add", "Sub", "Mul"})
    r.amend(op).vjp_float32(binary_vjp_f32,
                            "g times the derivative (1, -1 or the other operand), summed over "
                            "the broadcast axes",
                            "a wider accumulator for the sums over broadcasting");
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
