#pragma once
// Helpers shared by the reference kernels: input access with node-naming errors, axes,
// numpy broadcasting, strides.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace metaop {

const Tensor& input(const KernelContext& c, const Tensors& in, std::size_t i);
bool has_input(const Tensors& in, std::size_t i);
// Attribute `name` of the node, or where the node leaves it out the ONNX schema's default for its
// op at c.opset (schema_default, graph/onnx_io.h): kernels restate no default. Fails, naming the
// node, where neither gives one.
double attr_f(const KernelContext& c, const std::string& name);
std::int64_t attr_i(const KernelContext& c, const std::string& name);
std::string attr_s(const KernelContext& c, const std::string& name);
std::vector<std::int64_t> attr_ints(const KernelContext& c, const std::string& name);
// Only for attributes the schema gives no default for at some op or opset the code serves (Conv's
// strides, pads, dilations and kernel_shape, Transpose's perm, the legacy broadcast axis, Clip's
// min and max before opset 11, Shape's end, attributes older opsets lack): as above, but `absent`
// where neither the node nor the schema gives a value, i.e. what the op does without it.
double attr_f_or(const KernelContext& c, const std::string& name, double absent);
std::int64_t attr_i_or(const KernelContext& c, const std::string& name, std::int64_t absent);
std::string attr_s_or(const KernelContext& c, const std::string& name, const std::string& absent);
std::vector<std::int64_t> attr_ints_or(const KernelContext& c, const std::string& name,
                                       const std::vector<std::int64_t>& absent);
std::int64_t norm_axis(const KernelContext& c, std::int64_t axis, std::int64_t rank);
std::vector<std::int64_t> norm_axes(const KernelContext& c, std::vector<std::int64_t> axes,
                                    std::int64_t rank);
std::vector<std::int64_t> strides_of(const Shape& s);
Shape broadcast_shapes(const KernelContext& c, const std::vector<Shape>& shapes);
// `s` with leading dims of size 1 up to rank `r` (unchanged when it has r or more).
Shape with_rank(const Shape& s, std::size_t r);
// For each flat index of `out`, the flat index of an `in` broadcast to it.
std::vector<std::int64_t> broadcast_map(const Shape& in, const Shape& out);
// Elements grouped over `axes` (as a reduction over them groups them): the shape with those axes
// set to 1, and each element's group, its position in that shape.
struct AxisGroups {
  Shape kept;
  std::vector<std::int64_t> map;
};
AxisGroups groups_over(const Shape& s, const std::vector<std::int64_t>& axes);
// Broadcasting n-ary map: out[i] = f(in0[map0[i]], in1[map1[i]], ...), rounded to out_dtype.
Tensor broadcast_apply(const KernelContext& c, const std::vector<const Tensor*>& ins,
                       DType out_dtype, const std::function<double(const double*)>& f);
// Fails naming the node when the defined inputs do not all have input 0's dtype.
void check_same_dtype(const KernelContext& c, const Tensors& in);
// Requires a floating-point dtype (or, with allow_int, any numeric one).
void require_float(const KernelContext& c, const Tensor& t, const char* what);

// Iterates over all multi-indices of a shape in row-major order.
class IndexIter {
 public:
  explicit IndexIter(const Shape& s) : shape_(s), idx_(s.size(), 0) {}
  const std::vector<std::int64_t>& idx() const { return idx_; }
  void next() {
    for (std::size_t d = shape_.size(); d-- > 0;) {
      if (++idx_[d] < shape_[d]) return;
      idx_[d] = 0;
    }
  }

 private:
  Shape shape_;
  std::vector<std::int64_t> idx_;
};

}  // namespace metaop

namespace metaop {

// Data movement without arithmetic: out[i] = src[index[i]] copied bytewise (exact for every
// dtype, int64 included); index -1 takes `fill` (a one-element tensor of src's dtype).
Tensor take(const Tensor& src, const Shape& out_shape, const std::vector<std::int64_t>& index,
            const Tensor* fill = nullptr);

// out[o] = src[c] where c[d] = coord(d, o[d]) for each dimension d (transpose, slice, tile...).
template <typename Coord>
Tensor take_mapped(const Tensor& src, const Shape& out_shape, Coord coord) {
  auto st = strides_of(src.shape());
  std::int64_t n = shape_numel(out_shape), r = static_cast<std::int64_t>(out_shape.size());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  IndexIter it(out_shape);
  for (std::int64_t i = 0; i < n; ++i, it.next()) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < r; ++d) off += coord(d, it.idx()[d]) * st[d];
    idx[i] = off;
  }
  return take(src, out_shape, idx);
}

}  // namespace metaop
