// Shape and data-movement meta operators. They move elements bytewise (no float64 round trip),
// so int64 shape arithmetic stays exact.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <source_location>
#include <utility>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/vjp_util.h"
#include "tensor/heap.h"

// GCC 12 at -O2 reports a false -Wfree-nonheap-object on std::vector<int64_t> locals here
// (GCC bug 108088); the vectors are ordinary heap allocations.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif

namespace metaop {

namespace {

Tensor i64_tensor(const std::vector<std::int64_t>& v) {
  return Tensor::from_i64(v, {static_cast<std::int64_t>(v.size())});
}

Tensors reshape(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto target = c.opset >= 5 ? input(c, in, 1).to_i64() : c.node.attr_ints("shape");
  bool allowzero = attr_i_or(c, "allowzero", 0) != 0;  // from opset 14
  Shape s;
  std::int64_t infer = -1, known = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::int64_t d = target[i];
    if (d == 0 && !allowzero) {
      if (i >= x.shape().size())
        fail("{}: shape {} copies dim {} of input {}", c.node.label(), shape_str(target), i,
             shape_str(x.shape()));
      d = x.shape()[i];
    }
    if (d == -1) {
      if (infer >= 0) fail("{}: shape {} has more than one -1", c.node.label(), shape_str(target));
      infer = static_cast<std::int64_t>(i);
      s.push_back(1);
      continue;
    }
    if (d < 0) fail("{}: invalid dimension {} in shape {}", c.node.label(), d, shape_str(target));
    known *= d;
    s.push_back(d);
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known)
      fail("{}: cannot reshape {} to {}", c.node.label(), shape_str(x.shape()), shape_str(target));
    s[infer] = x.numel() / known;
  }
  if (shape_numel(s) != x.numel())
    fail("{}: cannot reshape {} ({} elements) to {}", c.node.label(), shape_str(x.shape()),
         x.numel(), shape_str(target));
  return {x.reshaped(s)};
}

Tensors flatten(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::int64_t axis = attr_i(c, "axis");
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank())
    fail("{}: axis {} out of range for rank {}", c.node.label(), axis, x.rank());
  std::int64_t a = 1;
  for (std::int64_t d = 0; d < axis; ++d) a *= x.shape()[d];
  return {x.reshaped({a, a ? x.numel() / a : 0})};
}

Tensors transpose(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::vector<std::int64_t> perm(x.rank());
  std::iota(perm.rbegin(), perm.rend(), 0);
  perm = attr_ints_or(c, "perm", perm);  // no schema default: reversed
  if (static_cast<std::int64_t>(perm.size()) != x.rank())
    fail("{}: perm {} for rank {}", c.node.label(), shape_str(perm), x.rank());
  perm = norm_axes(c, perm, x.rank());
  Shape os(x.rank());
  auto st = strides_of(x.shape());
  std::vector<std::int64_t> pst(x.rank());
  for (std::int64_t d = 0; d < x.rank(); ++d) {
    os[d] = x.shape()[perm[d]];
    pst[d] = st[perm[d]];
  }
  std::vector<std::int64_t> idx(x.numel());
  IndexIter it(os);
  for (std::int64_t i = 0; i < x.numel(); ++i, it.next()) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < x.rank(); ++d) off += it.idx()[d] * pst[d];
    idx[i] = off;
  }
  return {take(x, os, idx)};
}

}  // namespace

namespace {

Tensors squeeze(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto axes = norm_axes(c, axes_arg(c, in, 1, 13), x.rank());
  Shape s;
  for (std::int64_t d = 0; d < x.rank(); ++d) {
    bool listed = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (listed && x.shape()[d] != 1)
      fail("{}: cannot squeeze axis {} of size {}", c.node.label(), d, x.shape()[d]);
    if ((axes.empty() && x.shape()[d] == 1) || listed) continue;
    s.push_back(x.shape()[d]);
  }
  return {x.reshaped(s)};
}

Tensors unsqueeze(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto axes = axes_arg(c, in, 1, 13);
  std::int64_t r = x.rank() + static_cast<std::int64_t>(axes.size());
  axes = norm_axes(c, axes, r);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    fail("{}: repeated axes", c.node.label());
  Shape s;
  std::size_t src = 0;
  for (std::int64_t d = 0; d < r; ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d))
      s.push_back(1);
    else
      s.push_back(x.shape()[src++]);
  }
  return {x.reshaped(s)};
}

Tensors concat(const KernelContext& c, const Tensors& in) {
  if (in.empty()) fail("{}: no inputs", c.node.label());
  const Tensor& x0 = input(c, in, 0);
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis"), x0.rank());
  Shape os = x0.shape();
  os[axis] = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = input(c, in, i);
    if (t.rank() != x0.rank() || t.dtype() != x0.dtype())
      fail("{}: input #{} is {} {}, input #0 is {} {}", c.node.label(), i, dtype_name(t.dtype()),
           shape_str(t.shape()), dtype_name(x0.dtype()), shape_str(x0.shape()));
    for (std::int64_t d = 0; d < t.rank(); ++d)
      if (d != axis && t.shape()[d] != x0.shape()[d])
        fail("{}: input #{} has shape {}, input #0 {} (axis {})", c.node.label(), i,
             shape_str(t.shape()), shape_str(x0.shape()), axis);
    os[axis] += t.shape()[axis];
  }
  Tensor out(x0.dtype(), os);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= os[d];
  for (std::int64_t d = axis + 1; d < x0.rank(); ++d) inner *= os[d];
  std::size_t es = dtype_size(x0.dtype());
  std::int64_t out_row = os[axis] * inner, pos = 0;
  for (const auto& t : in) {
    std::int64_t row = t.shape()[axis] * inner;
    for (std::int64_t o = 0; o < outer; ++o)
      std::memcpy(out.raw() + (o * out_row + pos) * es, t.raw() + o * row * es, row * es);
    pos += row;
  }
  return {out};
}

// Elements [start, start+len) along axis of x.
Tensor narrow(const Tensor& x, std::int64_t axis, std::int64_t start, std::int64_t len) {
  Shape os = x.shape();
  os[axis] = len;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= os[d];
  for (std::int64_t d = axis + 1; d < x.rank(); ++d) inner *= os[d];
  Tensor out(x.dtype(), os);
  std::size_t es = dtype_size(x.dtype());
  for (std::int64_t o = 0; o < outer; ++o)
    std::memcpy(out.raw() + o * len * inner * es,
                x.raw() + (o * x.shape()[axis] + start) * inner * es, len * inner * es);
  return out;
}

Tensors split(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto [axis, sizes] = split_sizes(c, in, x.shape());
  Tensors out;
  std::int64_t start = 0;
  for (auto s : sizes) {
    out.push_back(narrow(x, axis, start, s));
    start += s;
  }
  return out;
}

Tensors slice(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.node.attr_ints("starts");
    ends = c.node.attr_ints("ends");
    axes = attr_ints_or(c, "axes", {});  // no schema default: the first axes
  } else {
    starts = input(c, in, 1).to_i64();
    ends = input(c, in, 2).to_i64();
    if (has_input(in, 3)) axes = in[3].to_i64();
    if (has_input(in, 4)) steps = in[4].to_i64();
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail("{}: starts, ends, axes and steps differ in length", c.node.label());
  axes = norm_axes(c, axes, x.rank());
  std::vector<std::int64_t> st(x.rank(), 0), step(x.rank(), 1);
  Shape os = x.shape();
  for (std::size_t i = 0; i < axes.size(); ++i) {
    std::int64_t a = axes[i], dim = x.shape()[a], s = starts[i], e = ends[i], k = steps[i];
    if (k == 0) fail("{}: step 0", c.node.label());
    if (s < 0) s += dim;
    if (e < 0 && e > std::numeric_limits<std::int64_t>::min() + dim)
      e += dim;
    else if (e < 0)
      e = -1;
    if (k > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      os[a] = e > s ? (e - s + k - 1) / k : 0;
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      os[a] = s > e ? (s - e - k - 1) / (-k) : 0;
    }
    st[a] = s;
    step[a] = k;
  }
  return {take_mapped(x, os, [&](std::int64_t d, std::int64_t i) { return st[d] + i * step[d]; })};
}

Tensors expand(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  Shape os = broadcast_shapes(c, {x.shape(), input(c, in, 1).to_i64()});
  return {take(x, os, broadcast_map(x.shape(), os))};
}

Tensors tile(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  auto reps = input(c, in, 1).to_i64();
  if (static_cast<std::int64_t>(reps.size()) != x.rank())
    fail("{}: repeats {} for rank {}", c.node.label(), shape_str(reps), x.rank());
  Shape os = x.shape();
  for (std::int64_t d = 0; d < x.rank(); ++d) os[d] *= reps[d];
  return {take_mapped(x, os, [&](std::int64_t d, std::int64_t i) { return i % x.shape()[d]; })};
}

// The input position that padded position j, outside [0, dim), reads in edge mode (the edge)
// or reflect mode (mirrored, without repeating the edge).
std::int64_t pad_source(const std::string& mode, std::int64_t j, std::int64_t dim) {
  if (mode == "edge") return std::clamp<std::int64_t>(j, 0, dim - 1);
  if (dim == 1) j = 0;
  std::int64_t period = 2 * (dim - 1);
  while (dim > 1 && (j < 0 || j >= dim)) {
    j = ((j % period) + period) % period;
    if (j >= dim) j = period - j;
  }
  return j;
}

Tensors pad(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::string mode = attr_s(c, "mode");
  const bool from_inputs = c.opset >= 11;
  const std::vector<std::int64_t> pads =
      from_inputs ? input(c, in, 1).to_i64() : c.node.attr_ints("pads");
  double value = from_inputs ? (has_input(in, 2) && in[2].numel() > 0 ? in[2].f64_at(0) : 0.0)
                             : attr_f(c, "value");
  std::vector<std::int64_t> all_axes(static_cast<std::size_t>(x.rank()));
  std::iota(all_axes.begin(), all_axes.end(), 0);
  const std::vector<std::int64_t> axes =
      from_inputs && has_input(in, 3) ? norm_axes(c, in[3].to_i64(), x.rank()) : all_axes;
  std::size_t na = axes.size();
  if (pads.size() != 2 * na) fail("{}: {} pads for {} axes", c.node.label(), pads.size(), na);
  // Pads at the beginning ([0, r)) and end ([r, 2r)) of each axis, in one vector.
  const std::size_t r = x.shape().size();
  std::vector<std::int64_t> pbe(2 * r + 1, 0);
  for (std::size_t i = 0; i < na; ++i) {
    pbe.at(static_cast<std::size_t>(axes[i])) = pads[i];
    pbe.at(r + static_cast<std::size_t>(axes[i])) = pads[i + na];
  }
  const std::int64_t* pb = pbe.data();
  const std::int64_t* pe = pbe.data() + r;
  Shape os = x.shape();
  for (std::int64_t d = 0; d < x.rank(); ++d) {
    os[d] += pb[d] + pe[d];
    if (os[d] < 0) fail("{}: pads make axis {} negative", c.node.label(), d);
    if (mode != "constant" && x.shape()[d] == 0 && os[d] > 0)
      fail("{}: {} padding of an empty axis", c.node.label(), mode);
  }
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    throw Unsupported(fmt::format("{}: pad mode '{}'", c.node.label(), mode));
  auto xs = strides_of(x.shape());
  std::int64_t n = shape_numel(os);
  std::vector<std::int64_t> idx(n);
  IndexIter it(os);
  for (std::int64_t i = 0; i < n; ++i, it.next()) {
    std::int64_t off = 0;
    bool outside = false;
    for (std::int64_t d = 0; d < x.rank(); ++d) {
      std::int64_t j = it.idx()[d] - pb[d], dim = x.shape()[d];
      if (j < 0 || j >= dim) {
        if (mode == "constant") {
          outside = true;
          break;
        }
        j = pad_source(mode, j, dim);
      }
      off += j * xs[d];
    }
    idx[i] = outside ? -1 : off;
  }
  Tensor fill = Tensor::scalar(value, x.dtype());
  return {take(x, os, idx, &fill)};
}

Tensors depth_space(const KernelContext& c, const Tensors& in, bool to_space) {
  const Tensor& x = input(c, in, 0);
  if (x.rank() != 4) fail("{}: input must be 4-D, got {}", c.node.label(), shape_str(x.shape()));
  std::int64_t b = c.node.attr_i("blocksize"), N = x.dim(0), C = x.dim(1), H = x.dim(2),
               W = x.dim(3);
  // DepthToSpace's mode from opset 11; SpaceToDepth has none.
  bool crd = attr_s_or(c, "mode", "DCR") == "CRD";
  Shape os;
  if (to_space) {
    if (C % (b * b))
      fail("{}: channels {} not divisible by blocksize^2 = {}", c.node.label(), C, b * b);
    os = {N, C / (b * b), H * b, W * b};
  } else {
    if (H % b || W % b)
      fail("{}: spatial size {}x{} not divisible by blocksize {}", c.node.label(), H, W, b);
    os = {N, C * b * b, H / b, W / b};
  }
  std::vector<std::int64_t> idx(x.numel());
  std::int64_t i = 0;
  for (std::int64_t n = 0; n < os[0]; ++n)
    for (std::int64_t oc = 0; oc < os[1]; ++oc)
      for (std::int64_t oh = 0; oh < os[2]; ++oh)
        for (std::int64_t ow = 0; ow < os[3]; ++ow, ++i) {
          std::int64_t ic, ih, iw;
          if (to_space) {
            std::int64_t bh = oh % b, bw = ow % b, Co = os[1];
            ic = crd ? oc * b * b + bh * b + bw : (bh * b + bw) * Co + oc;
            ih = oh / b;
            iw = ow / b;
          } else {
            std::int64_t blk = oc / C, ch = oc % C, bh = blk / b, bw = blk % b;
            ic = ch;
            ih = oh * b + bh;
            iw = ow * b + bw;
          }
          idx[i] = ((n * C + ic) * H + ih) * W + iw;
        }
  return {take(x, os, idx)};
}

Tensors shape_op(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  std::int64_t r = x.rank();
  // From opset 15; end has no schema default (the last dimension).
  std::int64_t start = attr_i_or(c, "start", 0), end = attr_i_or(c, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<std::int64_t>(start, 0, r);
  end = std::clamp<std::int64_t>(end, 0, r);
  std::vector<std::int64_t> s;
  for (std::int64_t d = start; d < end; ++d) s.push_back(x.shape()[d]);
  return {i64_tensor(s)};
}

Tensors constant(const KernelContext& c, const Tensors&) {
  const Node& n = c.node;
  if (n.has_attr("value")) return {n.attr_t("value")};
  if (n.has_attr("value_float")) return {Tensor::scalar(n.attr_f("value_float"), DType::Float32)};
  if (n.has_attr("value_int")) return {Tensor::from_i64({n.attr_i("value_int")}, {})};
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return {Tensor::from_f64(v, {static_cast<std::int64_t>(v.size())}, DType::Float32)};
  }
  if (n.has_attr("value_ints")) return {i64_tensor(n.attr_ints("value_ints"))};
  throw Unsupported(fmt::format("{}: only tensor, float(s) and int(s) constants", n.label()));
}

Tensors constant_of_shape(const KernelContext& c, const Tensors& in) {
  Shape s = input(c, in, 0).to_i64();
  Tensor v =
      c.node.has_attr("value") ? c.node.attr_t("value") : Tensor::scalar(0.0, DType::Float32);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape_numel(s)), 0);
  return {take(v, s, idx)};
}

Tensors range(const KernelContext& c, const Tensors& in) {
  const Tensor& st = input(c, in, 0);
  double start = st.f64_at(0), limit = input(c, in, 1).f64_at(0), delta = input(c, in, 2).f64_at(0);
  if (delta == 0) fail("{}: delta is 0", c.node.label());
  // The count as a double first: (limit - start) / delta can be past what int64 holds, or NaN.
  double count = std::ceil((limit - start) / delta);
  if (std::isnan(count))
    fail("{}: start {}, limit {}, delta {} give no element count", c.node.label(), start, limit,
         delta);
  if (count > 0x1p62)
    fail("{}: start {}, limit {}, delta {} make {:g} elements", c.node.label(), start, limit, delta,
         count);
  auto n = static_cast<std::int64_t>(std::max(0.0, count));
  check_budget(shape_nbytes({n}, DType::Float64),
               fmt::format("{}: output of {} elements", c.node.label(), n));
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * delta;
  return {Tensor::from_f64(v, {n}, st.dtype())};
}

Tensors eye_like(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  if (x.rank() != 2) fail("{}: input must be 2-D, got {}", c.node.label(), shape_str(x.shape()));
  DType dt = c.node.has_attr("dtype")
                 ? dtype_from_onnx(static_cast<int>(c.node.attr_i("dtype"))).value_or(x.dtype())
                 : x.dtype();
  std::int64_t k = attr_i(c, "k");
  std::vector<double> v(x.numel(), 0.0);
  for (std::int64_t i = 0; i < x.dim(0); ++i)
    if (i + k >= 0 && i + k < x.dim(1)) v[i * x.dim(1) + i + k] = 1.0;
  return {Tensor::from_f64(v, x.shape(), dt)};
}

Tensors one_hot(const KernelContext& c, const Tensors& in) {
  const Tensor& ind = input(c, in, 0);
  auto depth = static_cast<std::int64_t>(input(c, in, 1).f64_at(0));
  const Tensor& vals = input(c, in, 2);
  std::int64_t r = ind.rank() + 1;
  std::int64_t axis = norm_axis(c, attr_i(c, "axis"), r);
  Shape os = ind.shape();
  os.insert(os.begin() + axis, depth);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= os[d];
  for (std::int64_t d = axis + 1; d < r; ++d) inner *= os[d];
  auto iv = ind.to_f64();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape_numel(os)));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < depth; ++j)
      for (std::int64_t i = 0; i < inner; ++i) {
        auto k = static_cast<std::int64_t>(iv[o * inner + i]);
        if (k < 0) k += depth;
        idx[(o * depth + j) * inner + i] = k == j ? 1 : 0;
      }
  return {take(vals, os, idx)};
}

Tensors trilu(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  if (x.rank() < 2) fail("{}: input must have rank >= 2", c.node.label());
  std::int64_t k = has_input(in, 1) ? in[1].to_i64().at(0) : 0;
  bool upper = attr_i(c, "upper") != 0;
  std::int64_t R = x.dim(-2), C = x.dim(-1);
  std::vector<std::int64_t> idx(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::int64_t col = i % C, row = (i / C) % R;
    bool keep = upper ? col - row >= k : col - row <= k;
    idx[i] = keep ? i : -1;
  }
  Tensor zero = Tensor::scalar(0.0, x.dtype());
  return {take(x, x.shape(), idx, &zero)};
}

Tensors depth_to_space(const KernelContext& c, const Tensors& in) {
  return depth_space(c, in, true);
}

Tensors space_to_depth(const KernelContext& c, const Tensors& in) {
  return depth_space(c, in, false);
}

// CenterCropPad (opset 18): each listed axis cropped or zero-padded to its target length, about
// the centre (the extra element of an odd difference at the end, as ONNX's reference).
Tensors center_crop_pad(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const auto target = input(c, in, 1).to_i64();
  std::vector<std::int64_t> axes = attr_ints_or(c, "axes", {});
  if (axes.empty())
    for (std::int64_t d = 0; d < x.rank(); ++d) axes.push_back(d);
  axes = norm_axes(c, axes, x.rank());
  if (target.size() != axes.size())
    fail("{}: shape has {} lengths for {} axes", c.node.label(), target.size(), axes.size());
  Shape os = x.shape();
  std::vector<std::int64_t> start(static_cast<std::size_t>(x.rank()), 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto d = static_cast<std::size_t>(axes[i]);
    if (target[i] < 0) fail("{}: target length {} is negative", c.node.label(), target[i]);
    const std::int64_t dim = x.shape()[d];
    start[d] = dim >= target[i] ? (dim - target[i]) / 2 : -((target[i] - dim) / 2);
    os[d] = target[i];
  }
  const auto xs = strides_of(x.shape());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape_numel(os)));
  IndexIter it(os);
  for (auto& v : idx) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < x.rank() && off >= 0; ++d) {
      const std::int64_t j = it.idx()[d] + start[d];
      off = j < 0 || j >= x.shape()[d] ? -1 : off + j * xs[d];
    }
    v = off;
    it.next();
  }
  const Tensor zero = Tensor::from_f64({0.0}, {}, x.dtype());
  return {take(x, os, idx, &zero)};
}

// Compress (opset 11): the slices along `axis` (of the flattened input without it) whose
// condition is true; a condition shorter than the axis leaves the rest out.
Tensors compress(const KernelContext& c, const Tensors& in) {
  const Tensor& x0 = input(c, in, 0);
  const auto cond = input(c, in, 1).to_i64();
  const bool flat = !c.node.has_attr("axis");
  const Tensor x = flat ? x0.reshaped({x0.numel()}) : x0;
  const std::int64_t axis = flat ? 0 : norm_axis(c, attr_i(c, "axis"), x.rank());
  const std::int64_t dim = x.dim(axis);
  std::vector<std::int64_t> kept;
  for (std::size_t i = 0; i < cond.size(); ++i) {
    if (!cond[i]) continue;
    if (static_cast<std::int64_t>(i) >= dim)
      fail("{}: condition is true at {}, past the {} slices along axis {}", c.node.label(), i, dim,
           axis);
    kept.push_back(static_cast<std::int64_t>(i));
  }
  Shape os = x.shape();
  os[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(kept.size());
  return {take_mapped(x, os, [&](std::int64_t d, std::int64_t i) {
    return d == axis ? kept[static_cast<std::size_t>(i)] : i;
  })};
}

// ReverseSequence (opset 10): along time_axis, the first sequence_lens[b] elements of each batch
// entry b reversed, the rest as they are.
Tensors reverse_sequence(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const auto lens = input(c, in, 1).to_i64();
  if (x.rank() < 2) fail("{}: input of rank {}: at least 2", c.node.label(), x.rank());
  const std::int64_t b_axis = norm_axis(c, attr_i(c, "batch_axis"), x.rank());
  const std::int64_t t_axis = norm_axis(c, attr_i(c, "time_axis"), x.rank());
  if (b_axis == t_axis || b_axis > 1 || t_axis > 1)
    fail("{}: batch_axis {} and time_axis {}: one is 0, the other 1", c.node.label(), b_axis,
         t_axis);
  if (static_cast<std::int64_t>(lens.size()) != x.dim(b_axis))
    fail("{}: {} sequence lengths for a batch of {}", c.node.label(), lens.size(), x.dim(b_axis));
  for (std::size_t b = 0; b < lens.size(); ++b)
    if (lens[b] < 0 || lens[b] > x.dim(t_axis))
      fail("{}: sequence length {} of batch entry {} is outside [0, {}]", c.node.label(), lens[b],
           b, x.dim(t_axis));
  const auto st = strides_of(x.shape());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(x.numel()));
  IndexIter it(x.shape());
  for (auto& v : idx) {
    const auto& i = it.idx();
    const std::int64_t len = lens[static_cast<std::size_t>(i[static_cast<std::size_t>(b_axis)])];
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < x.rank(); ++d) {
      std::int64_t j = i[static_cast<std::size_t>(d)];
      if (d == t_axis && j < len) j = len - 1 - j;
      off += j * st[static_cast<std::size_t>(d)];
    }
    v = off;
    it.next();
  }
  return {take(x, x.shape(), idx)};
}

// NonZero (opset 9): the indices of the nonzero elements in row-major order, one row per axis
// (a 0-d input counts as 1-D, as NumPy's nonzero).
Tensors nonzero(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  const auto v = x.to_f64();
  const auto r = static_cast<std::int64_t>(shape.size());
  std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(r));
  IndexIter it(shape);
  for (double e : v) {
    if (e != 0)  // NaN is nonzero
      for (std::int64_t d = 0; d < r; ++d)
        rows[static_cast<std::size_t>(d)].push_back(it.idx()[static_cast<std::size_t>(d)]);
    it.next();
  }
  std::vector<std::int64_t> out;
  for (const auto& row : rows) out.insert(out.end(), row.begin(), row.end());
  const auto n = r > 0 ? static_cast<std::int64_t>(rows[0].size()) : 0;
  return {Tensor::from_i64(out, {r, n})};
}

Tensors size_op(const KernelContext& c, const Tensors& in) {
  return Tensors{Tensor::from_i64({input(c, in, 0).numel()}, {})};
}

// start + i * delta: implementations that accumulate delta may drift by i roundings.
Magnitudes range_magnitude(const KernelContext&, const Tensors& in, const Tensors& ref,
                           const AccumulationBound&) {
  double start = std::fabs(in[0].to_f64().at(0));
  double delta = std::fabs(in[2].to_f64().at(0));
  std::vector<double> m(static_cast<std::size_t>(ref[0].numel()));
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = 2 * (start + static_cast<double>(i) * delta) * static_cast<double>(i + 1);
  return Magnitudes{m};
}

// One row per shape op but Range, everything about the op in it. All are exact (they copy
// elements bit for bit); the VJP sends each output element's gradient back to the input element
// it came from.
struct ShapeRow {
  const char* name;
  ReferenceForward reference;
  std::vector<int> grad;       // inputs the gradient flows back to; empty: not differentiable
  std::vector<int> probe;      // the data inputs the probe perturbs; empty: none
  std::vector<int> zero_fill;  // inputs that hold a fill constant, set to 0 for the probe
  std::source_location where;  // the row (ops --where)
};

// A function rather than a braced row so that `where` is the row's line (GCC 12 gives a braced
// row's default source_location the end of the table).
ShapeRow row(const char* name, ReferenceForward reference, std::vector<int> grad,
             std::vector<int> probe = {0}, std::vector<int> zero_fill = {},
             std::source_location where = std::source_location::current()) {
  return {name, std::move(reference), std::move(grad), std::move(probe), std::move(zero_fill),
          where};
}

// Concat: its inputs, as many as a node may have.
std::vector<int> every_input() {
  std::vector<int> all(64);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// clang-format off
const std::vector<ShapeRow>& shape_rows() {
  static const std::vector<ShapeRow> rows = {
      // Shape, Size, Constant, ConstantOfShape, EyeLike, OneHot: not differentiable, and no data
      // input to probe (their inputs are shapes, sizes or a value to repeat).
      //  name               reference          gradient to    probed inputs  zero-filled
      row("Reshape",         reshape,           {0}),
      row("Flatten",         flatten,           {0}),
      row("Transpose",       transpose,         {0}),
      row("Squeeze",         squeeze,           {0}),
      row("Unsqueeze",       unsqueeze,         {0}),
      row("Concat",          concat,            every_input(), {0, 1, 2}),
      row("Split",           split,             {0}),
      row("Slice",           slice,             {0}),
      row("Expand",          expand,            {0}),
      row("Tile",            tile,              {0}),
      // Pad's constant input fills, set to 0 for the probe.
      row("Pad",             pad,               {0},           {0},           {2}),
      row("DepthToSpace",    depth_to_space,    {0}),
      row("SpaceToDepth",    space_to_depth,    {0}),
      row("Shape",           shape_op,          {},            {}),
      row("Size",            size_op,           {},            {}),
      row("Constant",        constant,          {},            {}),
      row("ConstantOfShape", constant_of_shape, {},            {}),
      row("EyeLike",         eye_like,          {},            {}),
      row("OneHot",          one_hot,           {},            {}),
      row("Trilu",           trilu,             {0}),
      row("CenterCropPad",   center_crop_pad,   {0}),
      row("Compress",        compress,          {0}),
      row("ReverseSequence", reverse_sequence,  {0}),
      row("NonZero",         nonzero,           {},            {0}),
  };
  return rows;
}
// clang-format on

void add_row(OpRegistry& r, const ShapeRow& row) {
  OpBuilder op = r.op(row.name, Family::shape, row.reference, row.where);
  op.error(error_models::data_movement(), row.where);
  if (!row.grad.empty()) op.data_movement_vjp(row.grad, row.zero_fill, row.where);
  // Input 0 alone is the default domain.
  if (row.probe != std::vector<int>{0}) op.domain(Domain(row.probe), row.where);
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  for (const auto& row : shape_rows()) add_row(r, row);
  // Beyond the table's columns.
  r.amend("Concat").inputs(InputRoles::combine());
  // Element e of the output is element e of the input: an explanation walks through.
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    r.amend(op).explain({.form = ExplainForm::relay});
  r.amend("Slice").faults({"offbyone"});
  r.amend("Pad").faults({"offbyone"});
  r.amend("Squeeze").cases({{13, {case_input::floats({2, 1, 4, 1}), case_input::ints({1}, {1})}}});
  // Cropped and padded, odd and even differences; every axis and two of them.
  r.amend("CenterCropPad")
      .cases({{18,
               {case_input::floats({3, 8, 6}), case_input::ints({2}, {5, 9})},
               {{"axes", Attribute::of_ints({1, -1})}}},
              {18, {case_input::floats({2, 5, 4}), case_input::ints({3}, {2, 3, 7})}}});

  // No data input to probe: its inputs are sizes.
  r.op("Range", Family::shape, range)
      .domain({{}, {}})
      .error(error_models::condition(range_magnitude,
                                     "2(i+1)(|start| + i|delta|) for element i, 1 ulp", 1));
}

}  // namespace metaop
