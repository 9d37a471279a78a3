#pragma once
// Sliding-window geometry shared by convolutions and pools: kernel, strides, dilations, pads
// (explicit or auto_pad), output size with floor or ceil rounding. Spatial ranks 1 to 3 are
// promoted to 3 (leading dims of size 1) so the kernels are three plain nested loops.
#include <array>

#include "ops/kernel_util.h"

namespace metaop {

struct Window {
  int nsp = 0;  // spatial rank before promotion
  std::array<std::int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0},
      pe{0, 0, 0}, out{1, 1, 1};
  std::array<std::int64_t, 3> extra{0, 0, 0};  // ConvTranspose: output_padding
  std::int64_t in_size() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_size() const { return out[0] * out[1] * out[2]; }
  std::int64_t k_size() const { return k[0] * k[1] * k[2]; }
  Shape out_shape(std::int64_t n, std::int64_t c) const {
    Shape sh{n, c};
    for (int i = 3 - nsp; i < 3; ++i) sh.push_back(out[i]);
    return sh;
  }
};

// The spatial part of one of a Window's promoted arrays (its last `nsp` entries), each minus
// `minus` (oneDNN counts dilation from 0).
Shape spatial_tail(const std::array<std::int64_t, 3>& a, int nsp, std::int64_t minus = 0);

// x_shape is [N, C, spatial...]; kernel has the spatial rank.
Window window_geometry(const KernelContext& c, const Shape& x_shape,
                       const std::vector<std::int64_t>& kernel, bool ceil_mode);

// ConvTranspose: `in` is its input, `out` its output; pads from pads, auto_pad or output_shape.
Window conv_transpose_geometry(const KernelContext& c, const Shape& x_shape, const Shape& w_shape);

}  // namespace metaop
