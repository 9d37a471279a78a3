#include "ops/kernel_util.h"

#include <algorithm>
#include <cstring>

#include "graph/onnx_io.h"

namespace metaop {

const Tensor& input(const KernelContext& c, const Tensors& in, std::size_t i) {
  if (i >= in.size() || !in[i].defined()) fail("{}: missing required input #{}", c.node.label(), i);
  return in[i];
}

namespace {

// The node's attribute, or the schema's default in a copy of the node.
const Node& with_default(const KernelContext& c, const std::string& name, Node& scratch) {
  if (c.node.has_attr(name)) return c.node;
  scratch.name = c.node.name;
  scratch.op_type = c.node.op_type;
  scratch.domain = c.node.domain;
  scratch.attrs.clear();
  if (is_other_onnx_domain(c.node.domain)) {
    fill_schema_defaults(scratch, c.opset);  // that domain's schema (one version)
    return scratch.has_attr(name) ? scratch : c.node;
  }
  auto d = schema_default(c.node.op_type, c.opset, name);
  if (!d) return c.node;  // the read fails, naming the node and the attribute
  scratch.attrs = {{name, *d}};
  return scratch;
}

// attr_X(c, name) where the node or the schema gives the attribute, else `absent`.
template <typename T, typename Read>
T attr_or(const KernelContext& c, const std::string& name, const T& absent, Read read) {
  Node scratch;
  const Node& n = with_default(c, name, scratch);
  return n.has_attr(name) ? read(n) : absent;
}

}  // namespace

double attr_f(const KernelContext& c, const std::string& name) {
  Node scratch;
  return with_default(c, name, scratch).attr_f(name);
}
std::int64_t attr_i(const KernelContext& c, const std::string& name) {
  Node scratch;
  return with_default(c, name, scratch).attr_i(name);
}
std::string attr_s(const KernelContext& c, const std::string& name) {
  Node scratch;
  return with_default(c, name, scratch).attr_s(name);
}
std::vector<std::int64_t> attr_ints(const KernelContext& c, const std::string& name) {
  Node scratch;
  return with_default(c, name, scratch).attr_ints(name);
}

double attr_f_or(const KernelContext& c, const std::string& name, double absent) {
  return attr_or(c, name, absent, [&](const Node& n) { return n.attr_f(name); });
}
std::int64_t attr_i_or(const KernelContext& c, const std::string& name, std::int64_t absent) {
  return attr_or(c, name, absent, [&](const Node& n) { return n.attr_i(name); });
}
std::string attr_s_or(const KernelContext& c, const std::string& name, const std::string& absent) {
  return attr_or(c, name, absent, [&](const Node& n) { return n.attr_s(name); });
}
std::vector<std::int64_t> attr_ints_or(const KernelContext& c, const std::string& name,
                                       const std::vector<std::int64_t>& absent) {
  return attr_or(c, name, absent, [&](const Node& n) { return n.attr_ints(name); });
}

bool has_input(const Tensors& in, std::size_t i) {
  return i < in.size() && in[i].defined();
}

std::int64_t norm_axis(const KernelContext& c, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1))
    fail("{}: axis {} out of range for rank {}", c.node.label(), axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<std::int64_t> norm_axes(const KernelContext& c, std::vector<std::int64_t> axes,
                                    std::int64_t rank) {
  for (auto& a : axes) {
    if (a < -rank || a >= rank)
      fail("{}: axis {} out of range for rank {}", c.node.label(), a, rank);
    if (a < 0) a += rank;
  }
  return axes;
}

std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

Shape with_rank(const Shape& s, std::size_t r) {
  Shape o(r - std::min(r, s.size()), 1);
  o.insert(o.end(), s.begin(), s.end());
  return o;
}

Shape broadcast_shapes(const KernelContext& c, const std::vector<Shape>& shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      auto& o = out[rank - s.size() + i];
      auto d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const auto& x : shapes) all += shape_str(x) + " ";
      fail("{}: shapes {}cannot be broadcast together", c.node.label(), all);
    }
  }
  return out;
}

AxisGroups groups_over(const Shape& s, const std::vector<std::int64_t>& axes) {
  Shape kept = s;
  for (auto a : axes) kept[a] = 1;
  auto map = broadcast_map(kept, s);
  return {std::move(kept), std::move(map)};
}

std::vector<std::int64_t> broadcast_map(const Shape& in, const Shape& out) {
  std::int64_t n = shape_numel(out);
  std::vector<std::int64_t> map(n);
  if (in == out) {
    for (std::int64_t i = 0; i < n; ++i) map[i] = i;
    return map;
  }
  // Stride of each output dimension in the input (0 where broadcast).
  std::size_t r = out.size(), off = r - in.size();
  auto in_st = strides_of(in);
  std::vector<std::int64_t> st(r, 0);
  for (std::size_t d = 0; d < in.size(); ++d) st[d + off] = in[d] == 1 ? 0 : in_st[d];
  if (n == 0) return map;
  IndexIter it(out);
  std::int64_t inner = r ? out[r - 1] : 1;
  std::int64_t inner_st = r ? st[r - 1] : 0;
  for (std::int64_t i = 0; i < n; i += inner) {
    std::int64_t base = 0;
    for (std::size_t d = 0; d + 1 < r; ++d) base += it.idx()[d] * st[d];
    for (std::int64_t j = 0; j < inner; ++j) map[i + j] = base + j * inner_st;
    // Advance the outer dimensions by one row.
    for (std::int64_t j = 0; j < inner; ++j) it.next();
  }
  return map;
}

void require_float(const KernelContext& c, const Tensor& t, const char* what) {
  if (!is_floating(t.dtype()))
    throw Unsupported(fmt::format("{}: {} of type {} (only floating-point types)", c.node.label(),
                                  what, dtype_name(t.dtype())));
}

}  // namespace metaop

namespace metaop {

Tensor take(const Tensor& src, const Shape& out_shape, const std::vector<std::int64_t>& index,
            const Tensor* fill) {
  Tensor out(src.dtype(), out_shape);
  std::size_t es = dtype_size(src.dtype());
  const std::byte* s = src.raw();
  std::byte* d = out.raw();
  for (std::size_t i = 0; i < index.size(); ++i) {
    const std::byte* from = index[i] < 0 ? fill->raw() : s + index[i] * es;
    std::memcpy(d + i * es, from, es);
  }
  return out;
}

Tensor broadcast_apply(const KernelContext& c, const std::vector<const Tensor*>& ins,
                       DType out_dtype, const std::function<double(const double*)>& f) {
  std::vector<Shape> shapes;
  shapes.reserve(ins.size());
  for (auto* t : ins) shapes.push_back(t->shape());
  Shape out = broadcast_shapes(c, shapes);
  std::int64_t n = shape_numel(out);
  std::vector<std::vector<double>> vals;
  std::vector<std::vector<std::int64_t>> maps;
  vals.reserve(ins.size());
  maps.reserve(ins.size());
  for (auto* t : ins) {
    vals.push_back(t->to_f64());
    maps.push_back(t->shape() == out ? std::vector<std::int64_t>{}
                                     : broadcast_map(t->shape(), out));
  }
  std::vector<double> res(n), args(ins.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < ins.size(); ++k)
      args[k] = vals[k][maps[k].empty() ? i : maps[k][i]];
    res[i] = f(args.data());
  }
  return Tensor::from_f64(res, out, out_dtype);
}

void check_same_dtype(const KernelContext& c, const Tensors& in) {
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != in[0].dtype())
      fail("{}: input #{} is {} but input #0 is {}", c.node.label(), i, dtype_name(in[i].dtype()),
           dtype_name(in[0].dtype()));
}

}  // namespace metaop
