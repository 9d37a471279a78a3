#include "ops/window.h"

#include <algorithm>

namespace metaop {

Shape spatial_tail(const std::array<std::int64_t, 3>& a, int nsp, std::int64_t minus) {
  Shape d;
  for (int i = 3 - nsp; i < 3; ++i) d.push_back(a[i] - minus);
  return d;
}

Window window_geometry(const KernelContext& c, const Shape& x_shape,
                       const std::vector<std::int64_t>& kernel, bool ceil_mode) {
  const Node& n = c.node;
  if (x_shape.size() < 3)
    fail("{}: input must be [N, C, spatial...], got {}", n.label(), shape_str(x_shape));
  int nsp = static_cast<int>(x_shape.size()) - 2;
  if (nsp > 3)
    throw Unsupported(
        fmt::format("{}: {} spatial dimensions (MetaOp handles 1 to 3)", n.label(), nsp));
  if (static_cast<int>(kernel.size()) != nsp)
    fail("{}: kernel {} does not match input {}", n.label(), shape_str(kernel), shape_str(x_shape));
  auto ones = std::vector<std::int64_t>(nsp, 1);
  // No schema default for these; the global pools (float32 evaluation) have no auto_pad.
  auto strides = attr_ints_or(c, "strides", ones);
  auto dil = attr_ints_or(c, "dilations", ones);
  auto pads = attr_ints_or(c, "pads", std::vector<std::int64_t>(2 * nsp, 0));
  if (strides.empty()) strides = ones;
  if (dil.empty()) dil = ones;
  if (pads.empty()) pads.assign(2 * nsp, 0);
  if (static_cast<int>(strides.size()) != nsp || static_cast<int>(dil.size()) != nsp ||
      static_cast<int>(pads.size()) != 2 * nsp)
    fail("{}: strides/dilations/pads do not match {} spatial dims", n.label(), nsp);
  std::string auto_pad = attr_s_or(c, "auto_pad", "NOTSET");

  Window w;
  w.nsp = nsp;
  int off = 3 - nsp;
  for (int i = 0; i < nsp; ++i) {
    int j = i + off;
    w.in[j] = x_shape[2 + i];
    w.k[j] = kernel[i];
    w.s[j] = strides[i];
    w.d[j] = dil[i];
    if (w.s[j] <= 0 || w.d[j] <= 0 || w.k[j] <= 0)
      fail("{}: kernel, strides and dilations must be positive", n.label());
    std::int64_t ext = (w.k[j] - 1) * w.d[j] + 1;
    if (auto_pad == "NOTSET") {
      w.pb[j] = pads[i];
      w.pe[j] = pads[i + nsp];
      std::int64_t span = w.in[j] + w.pb[j] + w.pe[j] - ext;
      if (span < 0)
        fail("{}: window {} larger than padded input {}", n.label(), ext,
             w.in[j] + w.pb[j] + w.pe[j]);
      w.out[j] = (ceil_mode ? (span + w.s[j] - 1) / w.s[j] : span / w.s[j]) + 1;
      // A last window that would start in the end padding is dropped (as PyTorch and ONNX do).
      if (ceil_mode && (w.out[j] - 1) * w.s[j] >= w.in[j] + w.pb[j]) --w.out[j];
    } else if (auto_pad == "VALID") {
      w.out[j] = (w.in[j] - ext + w.s[j]) / w.s[j];
      if (ceil_mode) w.out[j] = (w.in[j] - ext) / w.s[j] + 1 + ((w.in[j] - ext) % w.s[j] != 0);
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[j] = (w.in[j] + w.s[j] - 1) / w.s[j];
      std::int64_t total = std::max<std::int64_t>(0, (w.out[j] - 1) * w.s[j] + ext - w.in[j]);
      w.pb[j] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pe[j] = total - w.pb[j];
    } else {
      fail("{}: unknown auto_pad '{}'", n.label(), auto_pad);
    }
    if (w.out[j] <= 0) fail("{}: output spatial size {} is not positive", n.label(), w.out[j]);
  }
  return w;
}

}  // namespace metaop
