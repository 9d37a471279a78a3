// Indexing meta operators: Gather, GatherElements, GatherND, ScatterElements (and the older
// Scatter), ScatterND. Negative indices count from the end; out-of-range ones are errors.
#include <cstring>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

std::int64_t fix_index(const KernelContext& c, std::int64_t i, std::int64_t dim) {
  if (i < -dim || i >= dim)
    fail("{}: index {} out of range for a dimension of size {}", c.node.label(), i, dim);
  return i < 0 ? i + dim : i;
}

Tensors gather(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto ind = input(c, in, 1).to_i64();
  const Shape& is = in[1].shape();
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  Shape os(x.shape().begin(), x.shape().begin() + axis);
  os.insert(os.end(), is.begin(), is.end());
  os.insert(os.end(), x.shape().begin() + axis + 1, x.shape().end());
  std::int64_t outer = 1, inner = 1, dim = x.shape()[axis],
               ni = static_cast<std::int64_t>(ind.size());
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (std::int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
  for (auto& i : ind) i = fix_index(c, i, dim);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(outer * ni * inner));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < ni; ++j)
      for (std::int64_t i = 0; i < inner; ++i)
        idx[(o * ni + j) * inner + i] = (o * dim + ind[j]) * inner + i;
  return {take(x, os, idx)};
}

Tensors gather_elements(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const Tensor& it = input(c, in, 1);
  auto ind = it.to_i64();
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  if (it.rank() != x.rank())
    fail("{}: indices rank {} differs from data rank {}", c.node.label(), it.rank(), x.rank());
  auto xs = strides_of(x.shape());
  std::vector<std::int64_t> idx(ind.size());
  IndexIter iter(it.shape());
  for (std::size_t i = 0; i < ind.size(); ++i, iter.next()) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < x.rank(); ++d)
      off += (d == axis ? fix_index(c, ind[i], x.shape()[d]) : iter.idx()[d]) * xs[d];
    idx[i] = off;
  }
  return {take(x, it.shape(), idx)};
}

Tensors gather_nd(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const Tensor& it = input(c, in, 1);
  auto ind = it.to_i64();
  // batch_dims from opset 12.
  std::int64_t b = attr_i_or(c, "batch_dims", 0), q = it.rank(), k = it.shape().back();
  if (k > x.rank() - b)
    fail("{}: index depth {} too large for data rank {}", c.node.label(), k, x.rank());
  Shape os(it.shape().begin(), it.shape().end() - 1);
  os.insert(os.end(), x.shape().begin() + b + k, x.shape().end());
  std::int64_t batch = 1, slice = 1;
  for (std::int64_t d = 0; d < b; ++d) batch *= x.shape()[d];
  for (std::int64_t d = b + k; d < x.rank(); ++d) slice *= x.shape()[d];
  std::int64_t per_batch_x = 1;
  for (std::int64_t d = b; d < x.rank(); ++d) per_batch_x *= x.shape()[d];
  std::int64_t tuples = static_cast<std::int64_t>(ind.size()) / std::max<std::int64_t>(k, 1);
  if (k == 0) tuples = shape_numel(Shape(it.shape().begin(), it.shape().end() - 1));
  std::int64_t per_batch_t = tuples / std::max<std::int64_t>(batch, 1);
  auto xs = strides_of(x.shape());
  std::vector<std::int64_t> idx;
  idx.reserve(static_cast<std::size_t>(tuples * slice));
  (void)q;
  for (std::int64_t t = 0; t < tuples; ++t) {
    std::int64_t bi = t / std::max<std::int64_t>(per_batch_t, 1), off = bi * per_batch_x;
    for (std::int64_t j = 0; j < k; ++j)
      off += fix_index(c, ind[t * k + j], x.shape()[b + j]) * xs[b + j];
    for (std::int64_t s = 0; s < slice; ++s) idx.push_back(off + s);
  }
  return {take(x, os, idx)};
}

double combine(const std::string& red, double a, double b) {
  if (red == "add") return a + b;
  if (red == "mul") return a * b;
  if (red == "max") return std::max(a, b);
  if (red == "min") return std::min(a, b);
  return b;
}

Tensors scatter_elements(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const Tensor& it = input(c, in, 1);
  const Tensor& up = input(c, in, 2);
  auto ind = it.to_i64();
  // reduction from opset 16; Scatter has none.
  std::string red = attr_s_or(c, "reduction", "none");
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), x.rank());
  if (it.shape() != up.shape())
    fail("{}: indices {} and updates {} differ", c.node.label(), shape_str(it.shape()),
         shape_str(up.shape()));
  auto xs = strides_of(x.shape());
  auto out = x.to_f64();
  auto uv = up.to_f64();
  IndexIter iter(it.shape());
  for (std::size_t i = 0; i < ind.size(); ++i, iter.next()) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < x.rank(); ++d)
      off += (d == axis ? fix_index(c, ind[i], x.shape()[d]) : iter.idx()[d]) * xs[d];
    out[off] = combine(red, out[off], uv[i]);
  }
  return {Tensor::from_f64(out, x.shape(), x.dtype())};
}

Tensors scatter_nd(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const Tensor& it = input(c, in, 1);
  const Tensor& up = input(c, in, 2);
  auto ind = it.to_i64();
  std::string red = attr_s_or(c, "reduction", "none");
  std::int64_t k = it.shape().back(), slice = 1;
  for (std::int64_t d = k; d < x.rank(); ++d) slice *= x.shape()[d];
  auto xs = strides_of(x.shape());
  auto out = x.to_f64();
  auto uv = up.to_f64();
  std::int64_t tuples = static_cast<std::int64_t>(ind.size()) / std::max<std::int64_t>(k, 1);
  if (static_cast<std::int64_t>(uv.size()) != tuples * slice)
    fail("{}: updates {} do not fit indices {} and data {}", c.node.label(), shape_str(up.shape()),
         shape_str(it.shape()), shape_str(x.shape()));
  for (std::int64_t t = 0; t < tuples; ++t) {
    std::int64_t off = 0;
    for (std::int64_t j = 0; j < k; ++j) off += fix_index(c, ind[t * k + j], x.shape()[j]) * xs[j];
    for (std::int64_t s = 0; s < slice; ++s)
      out[off + s] = combine(red, out[off + s], uv[t * slice + s]);
  }
  return {Tensor::from_f64(out, x.shape(), x.dtype())};
}

// Scatter with reduction add or mul computes: each position takes its k updates one after
// another, a (k+1)-term sum (kappa(k+1) sum|terms|, the scatter run on absolute values) or
// product (k+1 roundings of |y|); none, max and min move elements only.
Magnitudes scatter_magnitude(const KernelContext& c, const Tensors& in, const Tensors& ref,
                             const AccumulationBound& bound) {
  std::string red = attr_s_or(c, "reduction", "none");
  if (red != "add" && red != "mul") return {{}};
  const MetaOp* op = OpRegistry::instance().find(c.node.op_type);
  // Updates per position: add-scatter ones onto zeros.
  Tensors ones = in;
  Node add = c.node;
  add.attrs["reduction"].s = "add";
  ones[0] = Tensor(DType::Float64, in[0].shape());
  ones[2] = Tensor::from_f64(std::vector<double>(static_cast<std::size_t>(in[2].numel()), 1.0),
                             in[2].shape(), DType::Float64);
  auto count = op->reference(KernelContext{add, c.opset}, ones)[0].to_f64();
  auto abs = red == "add" ? op->reference(c, absolute_f64(in))[0].to_f64() : ref[0].to_f64();
  std::vector<double> mag(count.size(), 0.0);
  for (std::size_t i = 0; i < mag.size(); ++i)
    if (count[i] > 0)
      mag[i] = (red == "add" ? bound.kappa(count[i] + 1) : count[i] + 1) * std::fabs(abs[i]);
  return {mag};
}

ErrorModel scatter_error_model() {
  ErrorModel m = error_models::condition(
      scatter_magnitude,
      "data movement; reduction add: kappa(k+1) * scatter(|data|, |updates|), mul: (k+1)|y| "
      "at positions with k updates",
      0);
  m.flush_ok = false;
  return m;
}

// Data and updates: positions overwritten by an update pass their gradient to the update.
ReferenceVjp scatter_vjp() {
  return [movement = data_movement_vjp({0, 2})](const KernelContext& c, const Tensors& in,
                                                const Tensors& out, const Tensors& g) {
    if (attr_s_or(c, "reduction", "none") != "none")
      throw Unsupported(c.node.label() + ": no reference VJP for scatter with reduction");
    return movement(c, in, out, g);
  };
}

}  // namespace

void register_index_ops(OpRegistry& r) {
  using error_models::data_movement;

  r.op("Gather", Family::index, gather)
      .vjp(data_movement_vjp({0}))
      .error(data_movement())
      .faults({"offbyone"})
      .cases({{13,
               {case_input::floats({3, 4, 5}), case_input::ints({2}, {0, 2})},
               {{"axis", Attribute::of_int(1)}}}});

  r.op("GatherElements", Family::index, gather_elements)
      .vjp(data_movement_vjp({0}))
      .error(data_movement())
      .faults({"offbyone"});

  r.op("GatherND", Family::index, gather_nd).vjp(data_movement_vjp({0})).error(data_movement());

  r.op("ScatterElements", Family::index, scatter_elements)
      .vjp(scatter_vjp())
      .error(scatter_error_model());

  // The older Scatter (opsets 9 and 10) has no reduction: data movement.
  r.op("Scatter", Family::index, scatter_elements).vjp(scatter_vjp()).error(data_movement());

  r.op("ScatterND", Family::index, scatter_nd).vjp(scatter_vjp()).error(scatter_error_model());
}

}  // namespace metaop
