// Indexing meta operators: Gather, GatherElements, GatherND, ScatterElements (and the older
// Scatter), ScatterND, MaxUnpool, Unique. Negative indices count from the end; out-of-range ones
// are errors.
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

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
Float32VjpEvaluate scatter_vjp_f32() {
  return [movement = data_movement_vjp_f32({0, 2})](const KernelContext& c, const Tensors& in,
                                                    const Tensors& out, const Tensors& g,
                                                    SumOrder order) {
    if (attr_s_or(c, "reduction", "none") != "none")
      throw Unsupported(c.node.label() + ": no reference VJP for scatter with reduction");
    return movement(c, in, out, g, order);
  };
}
const char* const kScatterVjp = "the gradient moved back (data movement)";

// MaxUnpool (opset 9): zeros of the output shape, X's elements written at the flat positions I
// names (the last one written where two name the same position). I's positions are in the
// pooling's inverse shape, (in - 1) * stride + kernel - pads; a given output_shape (larger where
// pooling rounded down) places that shape at its start, as ONNX's test data does.
// `output_layout`: I's positions in output_shape's own layout instead (the convention below).
Tensors max_unpool(const KernelContext& c, const Tensors& in, bool output_layout = false) {
  const Tensor& x = input(c, in, 0);
  const auto ind = input(c, in, 1).to_i64();
  if (x.rank() < 3) fail("{}: X of rank {}: at least 3", c.node.label(), x.rank());
  if (static_cast<std::int64_t>(ind.size()) != x.numel())
    fail("{}: I has {} elements for X's {}", c.node.label(), ind.size(), x.numel());
  const auto spatial = static_cast<std::size_t>(x.rank() - 2);
  const auto k = attr_ints(c, "kernel_shape");
  auto pads = attr_ints_or(c, "pads", std::vector<std::int64_t>(2 * spatial, 0));
  auto strides = attr_ints_or(c, "strides", std::vector<std::int64_t>(spatial, 1));
  if (k.size() != spatial || pads.size() != 2 * spatial || strides.size() != spatial)
    fail("{}: kernel_shape, strides and pads do not fit {} spatial axes", c.node.label(), spatial);
  Shape inverse{x.dim(0), x.dim(1)};
  for (std::size_t d = 0; d < spatial; ++d)
    inverse.push_back((x.shape()[d + 2] - 1) * strides[d] + k[d] - pads[d] - pads[d + spatial]);
  for (auto d : inverse)
    if (d < 0) fail("{}: output shape {} is negative", c.node.label(), shape_str(inverse));
  Shape os = inverse;
  if (has_input(in, 2)) {
    os = in[2].to_i64();
    bool fits = os.size() == inverse.size();
    for (std::size_t d = 0; fits && d < os.size(); ++d) fits = os[d] >= inverse[d];
    if (!fits || os[0] != x.dim(0) || os[1] != x.dim(1))
      fail("{}: output_shape {} is smaller than the pooling's inverse {}", c.node.label(),
           shape_str(os), shape_str(inverse));
  }
  const Shape& layout = output_layout ? os : inverse;
  const std::int64_t n = shape_numel(layout);
  const auto inv_strides = strides_of(layout), out_strides = strides_of(os);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape_numel(os)), -1);
  for (std::size_t i = 0; i < ind.size(); ++i) {
    if (ind[i] < 0 || ind[i] >= n)
      fail("{}: I[{}] = {} is outside the unpooled {} elements", c.node.label(), i, ind[i], n);
    std::int64_t rest = ind[i], off = 0;
    for (std::size_t d = 0; d < os.size(); ++d) {
      off += rest / inv_strides[d] * out_strides[d];
      rest %= inv_strides[d];
    }
    idx[static_cast<std::size_t>(off)] = static_cast<std::int64_t>(i);
  }
  const Tensor zero = Tensor::from_f64({0.0}, {}, x.dtype());
  return {take(x, os, idx, &zero)};
}

// Which layout I's flat positions refer to when output_shape is larger than the pooling's inverse
// shape: the text says only that they are flat positions, and its test data reads them in the
// inverse shape (placed at the start of the larger output); PyTorch's max_unpool and ONNX Runtime
// read them in output_shape's layout (the shape of the tensor that was pooled). Explains a
// finding when the kernel's output is exactly that reading.
Convention unpool_index_layout() {
  return {"unpool-index-layout",
          "the ONNX text says I holds flat positions but not in which shape when output_shape "
          "differs from the pooling's inverse shape; its test data reads them in the inverse "
          "shape",
          [](const KernelContext& c, const Tensors& in, const Tensors&, const Tensors& got,
             const std::vector<std::vector<bool>>&) {
            if (!has_input(in, 2) || got.empty() || !got[0].defined()) return false;
            Tensor other = max_unpool(c, in, true)[0];
            if (other.shape() != got[0].shape()) return false;
            auto a = other.to_f64(), b = got[0].to_f64();
            for (std::size_t i = 0; i < a.size(); ++i)
              if (a[i] != b[i] && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
            return true;
          }};
}

// Unique (opset 11): the distinct elements (or slices along `axis`), sorted ascending or in order
// of first occurrence, with the index of each one's first occurrence, each input element's (or
// slice's) index among them, and the counts.
template <typename Key>
Tensors unique_of(const KernelContext& c, const Tensor& x, const std::vector<Key>& v) {
  const bool flat = !c.node.has_attr("axis");
  const bool sorted = attr_i_or(c, "sorted", 1) != 0;
  const std::int64_t axis = flat ? 0 : norm_axis(c, attr_i(c, "axis"), x.rank());
  const Shape shape = flat ? Shape{x.numel()} : x.shape();
  if (shape.empty()) fail("{}: a 0-d input needs no axis", c.node.label());
  const std::int64_t n = shape[static_cast<std::size_t>(axis)];
  std::int64_t inner = 1;
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t outer = n == 0 ? 0 : static_cast<std::int64_t>(v.size()) / (n * inner);
  // Slice s: the elements at (o, s, i) for every outer o and inner i, in that order.
  auto slice = [&](std::int64_t s) {
    std::vector<Key> e;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i)
        e.push_back(v[static_cast<std::size_t>((o * n + s) * inner + i)]);
    return e;
  };
  std::vector<std::vector<Key>> slices;
  for (std::int64_t s = 0; s < n; ++s) slices.push_back(slice(s));
  std::vector<std::int64_t> first, inverse(static_cast<std::size_t>(n)), counts;
  std::map<std::vector<Key>, std::int64_t> seen;
  for (std::int64_t s = 0; s < n; ++s) {
    auto [it, fresh] = seen.try_emplace(slices[static_cast<std::size_t>(s)],
                                        static_cast<std::int64_t>(first.size()));
    if (fresh) {
      first.push_back(s);
      counts.push_back(0);
    }
    inverse[static_cast<std::size_t>(s)] = it->second;
    ++counts[static_cast<std::size_t>(it->second)];
  }
  // Order of the output: first occurrence, or ascending (std::map's order).
  std::vector<std::int64_t> order(first.size());
  std::iota(order.begin(), order.end(), 0);
  if (sorted) {
    std::size_t k = 0;
    for (const auto& [key, id] : seen) order[k++] = id;
  }
  std::vector<std::int64_t> rank(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) rank[static_cast<std::size_t>(order[k])] = k;
  std::vector<std::int64_t> indices, counts_out;
  for (auto id : order) {
    indices.push_back(first[static_cast<std::size_t>(id)]);
    counts_out.push_back(counts[static_cast<std::size_t>(id)]);
  }
  for (auto& i : inverse) i = rank[static_cast<std::size_t>(i)];
  Shape ys = shape;
  ys[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(indices.size());
  const Tensor src = flat ? x.reshaped(shape) : x;
  Tensor y = take_mapped(src, ys, [&](std::int64_t d, std::int64_t i) {
    return d == axis ? indices[static_cast<std::size_t>(i)] : i;
  });
  const auto u = static_cast<std::int64_t>(indices.size());
  return {y, Tensor::from_i64(indices, {u}), Tensor::from_i64(inverse, {n}),
          Tensor::from_i64(counts_out, {u})};
}

Tensors unique(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  // Floating values compare as numbers (-0 equals 0); NaN is refused (see unique_undefined).
  if (is_floating(x.dtype())) return unique_of(c, x, x.to_f64());
  return unique_of(c, x, x.to_i64());
}

// NaN equals nothing, itself included: whether NaNs are one unique value or many, ONNX leaves
// open (NumPy's unique changed its answer in 1.21).
Undefined unique_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.empty() || !in[0].defined() || !is_floating(in[0].dtype())) return "";
    auto v = in[0].to_f64();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (std::isnan(v[i]))
        return fmt::format("{}: X is NaN at {}: ONNX does not say whether NaNs are one value",
                           node.label(), i);
    return "";
  };
  return u;
}

}  // namespace

void register_index_ops(OpRegistry& r) {
  using error_models::data_movement;

  r.op("Gather", Family::index, gather)
      .data_movement_vjp({0})
      .error(data_movement())
      .faults({"offbyone"})
      .cases({{13,
               {case_input::floats({3, 4, 5}), case_input::ints({2}, {0, 2})},
               {{"axis", Attribute::of_int(1)}}}});

  r.op("GatherElements", Family::index, gather_elements)
      .data_movement_vjp({0})
      .error(data_movement())
      .faults({"offbyone"});

  r.op("GatherND", Family::index, gather_nd).data_movement_vjp({0}).error(data_movement());

  r.op("ScatterElements", Family::index, scatter_elements)
      .vjp(scatter_vjp())
      .vjp_float32(scatter_vjp_f32(), kScatterVjp, "none needed")
      .error(scatter_error_model());

  // The older Scatter (opsets 9 and 10) has no reduction: data movement.
  r.op("Scatter", Family::index, scatter_elements)
      .vjp(scatter_vjp())
      .vjp_float32(scatter_vjp_f32(), kScatterVjp, "none needed")
      .error(data_movement());

  r.op("ScatterND", Family::index, scatter_nd)
      .vjp(scatter_vjp())
      .vjp_float32(scatter_vjp_f32(), kScatterVjp, "none needed")
      .error(scatter_error_model());

  r.op("MaxUnpool", Family::index,
       [](const KernelContext& c, const Tensors& in) { return max_unpool(c, in); })
      .data_movement_vjp({0})
      .error(data_movement())
      .conventions({unpool_index_layout()});
  r.op("Unique", Family::index, unique)
      .error(data_movement())
      .undefined(unique_undefined())
      .float32_rounded()
      .cases({{11, {CaseInput{{2, 3}, DType::Float32, {2, 1, 1, 3, 4, 3}}}, {}, 4},
              {11,
               {CaseInput{{3, 2}, DType::Float32, {1, 0, 1, 0, 2, 2}}},
               {{"axis", Attribute::of_int(0)}, {"sorted", Attribute::of_int(0)}},
               4}});
}

}  // namespace metaop
