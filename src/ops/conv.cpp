// Convolution meta operators: Conv (im2col + float64 GEMM), ConvTranspose (GEMM + col2im) and
// Col2Im.
#include "ops/danger.h"
#include "ops/linear_util.h"
#include "ops/vjp_util.h"
#include "ops/window.h"

namespace metaop {

namespace {

std::vector<std::int64_t> kernel_from_weight(const KernelContext& c, const Tensor& w) {
  auto ks = attr_ints_or(c, "kernel_shape", {});  // no schema default: the weight's
  Shape from_w(w.shape().begin() + 2, w.shape().end());
  if (ks.empty()) return from_w;
  if (ks != from_w)
    fail("{}: kernel_shape {} does not match weight {}", c.node.label(), shape_str(ks),
         shape_str(w.shape()));
  return ks;
}

// Columns [C * K, P]: for each channel and kernel offset, the input under each output position.
void im2col(const double* x, std::int64_t channels, const Window& w, double* col) {
  std::int64_t P = w.out_size();
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    const double* xc = x + ch * w.in_size();
    for (std::int64_t k0 = 0; k0 < w.k[0]; ++k0)
      for (std::int64_t k1 = 0; k1 < w.k[1]; ++k1)
        for (std::int64_t k2 = 0; k2 < w.k[2]; ++k2) {
          double* row = col + ((ch * w.k[0] + k0) * w.k[1] * w.k[2] + k1 * w.k[2] + k2) * P;
          for (std::int64_t o0 = 0; o0 < w.out[0]; ++o0) {
            std::int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
            for (std::int64_t o1 = 0; o1 < w.out[1]; ++o1) {
              std::int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
              double* r = row + (o0 * w.out[1] + o1) * w.out[2];
              if (i0 < 0 || i0 >= w.in[0] || i1 < 0 || i1 >= w.in[1]) {
                std::fill(r, r + w.out[2], 0.0);
                continue;
              }
              const double* xr = xc + (i0 * w.in[1] + i1) * w.in[2];
              for (std::int64_t o2 = 0; o2 < w.out[2]; ++o2) {
                std::int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
                r[o2] = (i2 >= 0 && i2 < w.in[2]) ? xr[i2] : 0.0;
              }
            }
          }
        }
  }
}

Tensors conv(const KernelContext& c, const Tensors& in, GemmFn gemm = gemm_f64) {
  const Tensor& x = input(c, in, 0);
  const Tensor& wt = input(c, in, 1);
  require_float(c, x, "input X");
  std::int64_t group = attr_i(c, "group");
  if (wt.rank() != x.rank())
    fail("{}: weight {} vs input {}", c.node.label(), shape_str(wt.shape()), shape_str(x.shape()));
  Window w = window_geometry(c, x.shape(), kernel_from_weight(c, wt), false);
  std::int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0);
  if (group <= 0 || C % group || M % group || wt.dim(1) * group != C)
    fail("{}: input channels {}, weight {}, group {} do not fit", c.node.label(), C,
         shape_str(wt.shape()), group);
  std::int64_t Cg = C / group, Mg = M / group, K = Cg * w.k_size(), P = w.out_size();
  auto vx = x.to_f64(), vw = wt.to_f64();
  std::vector<double> bias(static_cast<std::size_t>(M), 0.0);
  if (has_input(in, 2)) {
    if (in[2].numel() != M)
      fail("{}: bias has {} elements, expected {}", c.node.label(), in[2].numel(), M);
    bias = in[2].to_f64();
  }
  std::vector<double> out(static_cast<std::size_t>(N * M * P));
  bool direct = w.k_size() == 1 && w.s == std::array<std::int64_t, 3>{1, 1, 1} &&
                w.pb == std::array<std::int64_t, 3>{0, 0, 0} && w.pe == w.pb;
  std::vector<double> col(direct ? 0 : static_cast<std::size_t>(K * P));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t g = 0; g < group; ++g) {
      const double* xg = vx.data() + (n * C + g * Cg) * w.in_size();
      const double* cols = xg;  // a 1x1, stride-1, unpadded conv reads the input as columns
      if (!direct) {
        im2col(xg, Cg, w, col.data());
        cols = col.data();
      }
      double* og = out.data() + (n * M + g * Mg) * P;
      for (std::int64_t m = 0; m < Mg; ++m)
        std::fill(og + m * P, og + (m + 1) * P, bias[g * Mg + m]);
      gemm(false, false, Mg, P, K, 1.0, vw.data() + g * Mg * K, cols, 1.0, og);
    }
  return {Tensor::from_f64(out, w.out_shape(N, M), x.dtype())};
}

// --- gradients

// One row of col2im: the column entries of kernel offset (k0, k1, k2), each added back to the
// element of channel `xc` it was read from.
void col2im_row(const double* row, const Window& w, std::int64_t k0, std::int64_t k1,
                std::int64_t k2, double* xc, bool float32) {
  for (std::int64_t o0 = 0; o0 < w.out[0]; ++o0) {
    std::int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
    if (i0 < 0 || i0 >= w.in[0]) continue;
    for (std::int64_t o1 = 0; o1 < w.out[1]; ++o1) {
      std::int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
      if (i1 < 0 || i1 >= w.in[1]) continue;
      const double* r = row + (o0 * w.out[1] + o1) * w.out[2];
      double* xr = xc + (i0 * w.in[1] + i1) * w.in[2];
      for (std::int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        std::int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
        if (i2 >= 0 && i2 < w.in[2])
          xr[i2] = float32 ? static_cast<float>(xr[i2] + r[o2]) : xr[i2] + r[o2];
      }
    }
  }
}

// The adjoint of im2col: each column entry is added back to the input element it was read from
// (with `float32`, each addition rounded to float32: float32 values' sum in float64 rounds to
// their float32 sum).
void col2im(const double* col, std::int64_t channels, const Window& w, double* x,
            bool float32 = false) {
  std::int64_t P = w.out_size();
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    double* xc = x + ch * w.in_size();
    for (std::int64_t k0 = 0; k0 < w.k[0]; ++k0)
      for (std::int64_t k1 = 0; k1 < w.k[1]; ++k1)
        for (std::int64_t k2 = 0; k2 < w.k[2]; ++k2) {
          const double* row = col + ((ch * w.k[0] + k0) * w.k[1] * w.k[2] + k1 * w.k[2] + k2) * P;
          col2im_row(row, w, k0, k1, k2, xc, float32);
        }
  }
}

// Adds each of `channels` rows of `positions` gradients to its bias gradient (in float32, each
// addition rounded).
void add_bias_gradient(const double* go, std::int64_t channels, std::int64_t positions, double* gb,
                       bool float32) {
  for (std::int64_t m = 0; m < channels; ++m)
    for (std::int64_t p = 0; p < positions; ++p) {
      double s = gb[m] + go[m * positions + p];
      gb[m] = float32 ? static_cast<float>(s) : s;
    }
}

// Conv: out_g = W_g col(x_g) + b, so dW_g = g col^T, dx_g = col2im(W_g^T g), db = sum g.
// With a float32 `gemm` (float32: true), col2im's overlaps and the bias sums in float32 too.
Tensors conv_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                 const Tensors& grads, GemmFn gemm = gemm_f64, bool float32 = false) {
  const Tensor &x = in[0], &wt = in[1];
  std::int64_t group = attr_i(c, "group");
  Window w = window_geometry(c, x.shape(), kernel_from_weight(c, wt), false);
  std::int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0);
  std::int64_t Cg = C / group, Mg = M / group, K = Cg * w.k_size(), P = w.out_size();
  auto vx = x.to_f64(), vw = wt.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> gx(vx.size(), 0.0), gw(vw.size(), 0.0), gb(static_cast<std::size_t>(M), 0.0);
  std::vector<double> col(static_cast<std::size_t>(K * P)), dcol(col.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t gr = 0; gr < group; ++gr) {
      const double* xg = vx.data() + (n * C + gr * Cg) * w.in_size();
      const double* go = g.data() + (n * M + gr * Mg) * P;
      im2col(xg, Cg, w, col.data());
      gemm(false, true, Mg, K, P, 1.0, go, col.data(), 1.0, gw.data() + gr * Mg * K);
      gemm(true, false, K, P, Mg, 1.0, vw.data() + gr * Mg * K, go, 0.0, dcol.data());
      col2im(dcol.data(), Cg, w, gx.data() + (n * C + gr * Cg) * w.in_size(), float32);
      add_bias_gradient(go, Mg, P, gb.data() + gr * Mg, float32);
    }
  Tensors r{grad_like(gx, x), grad_like(gw, wt)};
  if (has_input(in, 2)) r.push_back(grad_like(gb, in[2]));
  return r;
}

void register_conv(OpRegistry& r) {
  r.op("Conv", Family::conv, [](const KernelContext& c, const Tensors& in) { return conv(c, in); })
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return conv_vjp(c, in, out, grads);
      })
      .domain(Domain({0, 1}))
      .danger({danger::output_overflow()})
      .error(error_models::accumulation(
          [](const KernelContext&, const Tensors& in) {
            const Tensor& w = in[1];
            std::int64_t per_output = w.numel() / w.dim(0);  // C/group * prod(kernel)
            return static_cast<double>(per_output + 1);
          },
          "kappa(C/group * prod(kernel) + 1) * (conv(|x|, |w|) + |b|), 2 ulp"))
      .faults({"half_acc", "offbyone", "drop_bias"});
}

}  // namespace

Window conv_transpose_geometry(const KernelContext& c, const Shape& x_shape, const Shape& w_shape) {
  const Node& node = c.node;
  std::int64_t rank = static_cast<std::int64_t>(x_shape.size());
  if (rank < 3 || rank > 5 || static_cast<std::int64_t>(w_shape.size()) != rank)
    fail("{}: input {} and weight {} must be [N, C, 1-3 spatial dims]", node.label(),
         shape_str(x_shape), shape_str(w_shape));
  int nsp = static_cast<int>(rank) - 2, off = 3 - nsp;
  std::int64_t group = attr_i(c, "group");
  if (w_shape[0] != x_shape[1] || group <= 0 || x_shape[1] % group)
    fail("{}: weight {} does not fit {} input channels and group {}", node.label(),
         shape_str(w_shape), x_shape[1], group);
  // No schema default for kernel_shape, strides, dilations, output_padding, pads, output_shape.
  auto kernel = attr_ints_or(c, "kernel_shape", {});
  Shape from_w(w_shape.begin() + 2, w_shape.end());
  if (kernel.empty()) kernel = from_w;
  if (kernel != from_w)
    fail("{}: kernel_shape {} does not match weight {}", node.label(), shape_str(kernel),
         shape_str(w_shape));
  auto ones = std::vector<std::int64_t>(nsp, 1), zeros = std::vector<std::int64_t>(nsp, 0);
  auto strides = attr_ints_or(c, "strides", ones), dil = attr_ints_or(c, "dilations", ones);
  auto out_pad = attr_ints_or(c, "output_padding", zeros);
  auto pads = attr_ints_or(c, "pads", std::vector<std::int64_t>(2 * nsp, 0));
  auto output_shape = attr_ints_or(c, "output_shape", {});
  std::string auto_pad = attr_s(c, "auto_pad");
  if (strides.empty()) strides = ones;
  if (dil.empty()) dil = ones;
  if (out_pad.empty()) out_pad = zeros;
  if (pads.empty()) pads.assign(2 * nsp, 0);
  if (output_shape.size() == static_cast<std::size_t>(nsp) + 2)
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);

  Window w;  // here `in` is the transposed conv's input and `out` its (larger) output
  w.nsp = nsp;
  for (int i = 0; i < nsp; ++i) {
    int j = i + off;
    w.in[j] = x_shape[2 + i];
    w.k[j] = kernel[i];
    w.s[j] = strides[i];
    w.d[j] = dil[i];
    std::int64_t ext = (w.k[j] - 1) * w.d[j] + 1;
    std::int64_t full = w.s[j] * (w.in[j] - 1) + out_pad[i] + ext;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      std::int64_t target = !output_shape.empty() ? output_shape[i] : w.in[j] * w.s[j];
      std::int64_t total = full - target;
      // As ONNX's reference does: the extra pad goes last, except with SAME_LOWER.
      w.pb[j] = auto_pad != "SAME_LOWER" ? total / 2 : total - total / 2;
      w.pe[j] = total - w.pb[j];
      w.out[j] = target;
    } else {
      if (auto_pad == "NOTSET") {
        w.pb[j] = pads[i];
        w.pe[j] = pads[i + nsp];
      }
      w.out[j] = full - w.pb[j] - w.pe[j];
    }
    w.extra[j] = out_pad[i];
    if (w.out[j] <= 0) fail("{}: output spatial size {} is not positive", node.label(), w.out[j]);
  }
  return w;
}

namespace {

Tensors conv_transpose(const KernelContext& c, const Tensors& in, GemmFn gemm = gemm_f64) {
  const Tensor& x = input(c, in, 0);
  const Tensor& wt = input(c, in, 1);
  require_float(c, x, "input X");
  Window w = conv_transpose_geometry(c, x.shape(), wt.shape());
  std::int64_t group = attr_i(c, "group");
  std::int64_t N = x.dim(0), C = x.dim(1), Mg = wt.dim(1), M = Mg * group;
  std::int64_t Cg = C / group, K = Mg * w.k_size(), Pin = w.in_size(), Pout = w.out_size();
  auto vx = x.to_f64(), vw = wt.to_f64();
  std::vector<double> bias(static_cast<std::size_t>(M), 0.0);
  if (has_input(in, 2)) bias = in[2].to_f64();
  std::vector<double> out(static_cast<std::size_t>(N * M * Pout), 0.0),
      col(static_cast<std::size_t>(K * Pin));
  // The scatter of each column entry to the output is col2im with the transposed conv's input
  // and output swapped (its output is the conv's input): same additions, in the same order.
  Window swapped = w;
  swapped.in = w.out;
  swapped.out = w.in;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t g = 0; g < group; ++g) {
      // col[K, Pin] = W_g^T [K, Cg] * x_g [Cg, Pin]
      gemm(true, false, K, Pin, Cg, 1.0, vw.data() + g * Cg * K, vx.data() + (n * C + g * Cg) * Pin,
           0.0, col.data());
      double* og = out.data() + (n * M + g * Mg) * Pout;
      col2im(col.data(), Mg, swapped, og);
      for (std::int64_t m = 0; m < Mg; ++m)
        for (std::int64_t p = 0; p < Pout; ++p) og[m * Pout + p] += bias[g * Mg + m];
    }
  return {Tensor::from_f64(out, w.out_shape(N, M), x.dtype())};
}

// ConvTranspose: out_g = scatter(W_g^T x_g) + b. Its adjoint reads the output gradient at the
// positions each input element was scattered to (im2col with input and output swapped):
// dcol = gather(g), dx_g = W_g dcol, dW_g = x_g dcol^T, db = sum g.
Tensors conv_transpose_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                           const Tensors& grads, GemmFn gemm = gemm_f64, bool float32 = false) {
  const Tensor &x = in[0], &wt = in[1];
  Window w = conv_transpose_geometry(c, x.shape(), wt.shape());
  std::int64_t group = attr_i(c, "group");
  std::int64_t N = x.dim(0), C = x.dim(1), Mg = wt.dim(1), M = Mg * group;
  std::int64_t Cg = C / group, K = Mg * w.k_size(), Pin = w.in_size(), Pout = w.out_size();
  Window swapped = w;
  swapped.in = w.out;
  swapped.out = w.in;
  auto vx = x.to_f64(), vw = wt.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> gx(vx.size(), 0.0), gw(vw.size(), 0.0), gb(static_cast<std::size_t>(M), 0.0);
  std::vector<double> dcol(static_cast<std::size_t>(K * Pin));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t gr = 0; gr < group; ++gr) {
      const double* go = g.data() + (n * M + gr * Mg) * Pout;
      im2col(go, Mg, swapped, dcol.data());
      gemm(false, false, Cg, Pin, K, 1.0, vw.data() + gr * Cg * K, dcol.data(), 0.0,
           gx.data() + (n * C + gr * Cg) * Pin);
      gemm(false, true, Cg, K, Pin, 1.0, vx.data() + (n * C + gr * Cg) * Pin, dcol.data(), 1.0,
           gw.data() + gr * Cg * K);
      add_bias_gradient(go, Mg, Pout, gb.data() + gr * Mg, float32);
    }
  Tensors r{grad_like(gx, x), grad_like(gw, wt)};
  if (has_input(in, 2)) r.push_back(grad_like(gb, in[2]));
  return r;
}

void register_conv_transpose(OpRegistry& r) {
  r.op("ConvTranspose", Family::conv,
       [](const KernelContext& c, const Tensors& in) { return conv_transpose(c, in); })
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return conv_transpose_vjp(c, in, out, grads);
      })
      .domain(Domain({0, 1}))
      .danger({danger::output_overflow()})
      .error(error_models::accumulation(
          [](const KernelContext& c, const Tensors& in) {
            const Tensor& w = in[1];
            auto g = std::max<std::int64_t>(1, attr_i(c, "group"));
            std::int64_t per_output = w.numel() / (w.dim(1) * g);  // C/group * prod(kernel)
            return static_cast<double>(per_output + 1);
          },
          "kappa(C/group * prod(kernel) + 1) * (conv_transpose(|x|, |w|) + |b|), 2 ulp"))
      .faults({"half_acc", "offbyone", "drop_bias"});
}

}  // namespace

Tensors conv_forward_with_gemm(const KernelContext& c, const Tensors& in, GemmFn gemm) {
  return c.node.op_type == "Conv" ? conv(c, in, gemm) : conv_transpose(c, in, gemm);
}

Tensors conv_vjp_with_gemm(const KernelContext& c, const Tensors& in, const Tensors& out,
                           const Tensors& grads, GemmFn gemm, bool float32) {
  return c.node.op_type == "Conv" ? conv_vjp(c, in, out, grads, gemm, float32)
                                  : conv_transpose_vjp(c, in, out, grads, gemm, float32);
}

namespace {

// ---- Col2Im (opset 18): the blocks of a [N, C * prod(block), L] input summed back into images
// of image_shape: block l's element k lands at l * stride - pad_begin + k * dilation (per spatial
// axis), where it is inside the image; elements on the padding are dropped.
struct Col2ImGeometry {
  Shape image, block, blocks;  // per spatial axis: image size, block size, blocks along it
  std::vector<std::int64_t> stride, dilation, pad;
  std::int64_t n = 0, channels = 0, block_size = 1, count = 1;  // count: L
};

Col2ImGeometry col2im_geometry(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  Col2ImGeometry g;
  g.image = input(c, in, 1).to_i64();
  g.block = input(c, in, 2).to_i64();
  const std::size_t d = g.image.size();
  if (x.rank() != 3 || d == 0 || g.block.size() != d)
    fail(
        "{}: input {} with image_shape {} and block_shape {}: a [N, C * prod(block), L] input "
        "and one size per spatial axis",
        c.node.label(), shape_str(x.shape()), shape_str(g.image), shape_str(g.block));
  g.stride = attr_ints_or(c, "strides", std::vector<std::int64_t>(d, 1));
  g.dilation = attr_ints_or(c, "dilations", std::vector<std::int64_t>(d, 1));
  g.pad = attr_ints_or(c, "pads", std::vector<std::int64_t>(2 * d, 0));
  if (g.stride.size() != d || g.dilation.size() != d || g.pad.size() != 2 * d)
    fail("{}: strides, dilations and pads do not fit {} spatial axes", c.node.label(), d);
  for (std::size_t i = 0; i < d; ++i) {
    if (g.block[i] < 1 || g.image[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1 || g.pad[i] < 0 ||
        g.pad[i + d] < 0)
      fail(
          "{}: image {}, block {}, stride {}, dilation {} and pads {}, {} along axis {}: sizes "
          "at least 1, pads at least 0",
          c.node.label(), g.image[i], g.block[i], g.stride[i], g.dilation[i], g.pad[i],
          g.pad[i + d], i);
    std::int64_t span = g.dilation[i] * (g.block[i] - 1) + 1;
    std::int64_t room = g.image[i] + g.pad[i] + g.pad[i + d] - span;
    if (room < 0)
      fail("{}: a block spans {} along axis {}, more than the padded image's {}", c.node.label(),
           span, i, g.image[i] + g.pad[i] + g.pad[i + d]);
    g.blocks.push_back(room / g.stride[i] + 1);
    g.block_size *= g.block[i];
    g.count *= g.blocks.back();
  }
  g.n = x.dim(0);
  if (x.dim(1) % g.block_size != 0 || x.dim(2) != g.count)
    fail("{}: input {} does not fit blocks {} ({} blocks of {} elements per channel)",
         c.node.label(), shape_str(x.shape()), shape_str(g.block), g.count, g.block_size);
  g.channels = x.dim(1) / g.block_size;
  return g;
}

// For each input element (n, c * K + k, l), in order, the flat image position it adds to within
// its (n, c) image, or -1 on the padding.
std::vector<std::int64_t> col2im_targets(const Col2ImGeometry& g) {
  const std::size_t d = g.image.size();
  std::vector<std::int64_t> where(static_cast<std::size_t>(g.block_size * g.count));
  IndexIter k(g.block);
  for (std::int64_t kk = 0; kk < g.block_size; ++kk, k.next()) {
    IndexIter l(g.blocks);
    for (std::int64_t ll = 0; ll < g.count; ++ll, l.next()) {
      std::int64_t pos = 0;
      for (std::size_t i = 0; i < d && pos >= 0; ++i) {
        std::int64_t at = l.idx()[i] * g.stride[i] - g.pad[i] + k.idx()[i] * g.dilation[i];
        pos = at < 0 || at >= g.image[i] ? -1 : pos * g.image[i] + at;
      }
      where[static_cast<std::size_t>(kk * g.count + ll)] = pos;
    }
  }
  return where;
}

Tensors col2im_op(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  Col2ImGeometry g = col2im_geometry(c, in);
  const auto where = col2im_targets(g);
  const std::int64_t pixels = shape_numel(g.image), per_image = g.block_size * g.count;
  auto v = x.to_f64();
  std::vector<double> out(static_cast<std::size_t>(g.n * g.channels * pixels), 0.0);
  for (std::int64_t img = 0; img < g.n * g.channels; ++img)
    for (std::int64_t e = 0; e < per_image; ++e)
      if (auto pos = where[static_cast<std::size_t>(e)]; pos >= 0)
        out[static_cast<std::size_t>(img * pixels + pos)] +=
            v[static_cast<std::size_t>(img * per_image + e)];
  Shape os{g.n, g.channels};
  os.insert(os.end(), g.image.begin(), g.image.end());
  return {Tensor::from_f64(out, os, x.dtype())};
}

// Its float32 twin (triage): each image position's terms summed in float32 in `order`.
Tensors col2im_float32(const KernelContext& c, const Tensors& in, SumOrder order) {
  const Tensor& x = input(c, in, 0);
  Col2ImGeometry g = col2im_geometry(c, in);
  const auto where = col2im_targets(g);
  const std::int64_t pixels = shape_numel(g.image), per_image = g.block_size * g.count;
  auto v = x.to_f64();
  std::vector<std::vector<float>> terms(static_cast<std::size_t>(g.n * g.channels * pixels));
  for (std::int64_t img = 0; img < g.n * g.channels; ++img)
    for (std::int64_t e = 0; e < per_image; ++e)
      if (auto pos = where[static_cast<std::size_t>(e)]; pos >= 0)
        terms[static_cast<std::size_t>(img * pixels + pos)].push_back(
            static_cast<float>(v[static_cast<std::size_t>(img * per_image + e)]));
  std::vector<double> out;
  out.reserve(terms.size());
  for (auto& t : terms) out.push_back(t.empty() ? 0.0 : float32_sum(std::move(t), order));
  Shape os{g.n, g.channels};
  os.insert(os.end(), g.image.begin(), g.image.end());
  return {Tensor::from_f64(out, os, x.dtype())};
}

// The adjoint: each input element gets the gradient of the image position it added to.
Tensors col2im_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads) {
  Col2ImGeometry g = col2im_geometry(c, in);
  const auto where = col2im_targets(g);
  const std::int64_t pixels = shape_numel(g.image), per_image = g.block_size * g.count;
  auto go = grad_of(grads, out, 0);
  std::vector<double> gx(static_cast<std::size_t>(in[0].numel()), 0.0);
  for (std::int64_t img = 0; img < g.n * g.channels; ++img)
    for (std::int64_t e = 0; e < per_image; ++e)
      if (auto pos = where[static_cast<std::size_t>(e)]; pos >= 0)
        gx[static_cast<std::size_t>(img * per_image + e)] =
            go[static_cast<std::size_t>(img * pixels + pos)];
  return {grad_like(gx, in[0])};
}

void register_col2im(OpRegistry& r) {
  r.op("Col2Im", Family::conv, col2im_op)
      .vjp(col2im_vjp)
      .error(error_models::accumulation(
          [](const KernelContext&, const Tensors& in) {
            // At most prod(block) elements land on one image position.
            double k = 1;
            for (auto b : in[2].to_i64()) k *= static_cast<double>(b);
            return k;
          },
          "kappa(prod(block_shape)) * col2im(|x|), 2 ulp"))
      .float32(col2im_float32, "each image position's sum of the block elements that land on it",
               "none needed beyond a float32 sum's (an order that adds like magnitudes first)")
      .cases({{18,
               {case_input::floats({1, 4, 9}), case_input::ints({2}, {4, 4}),
                case_input::ints({2}, {2, 2})}},
              {18,
               {case_input::floats({2, 6, 2}), case_input::ints({2}, {3, 4}),
                case_input::ints({2}, {1, 3})},
               {{"strides", Attribute::of_ints({2, 1})},
                {"dilations", Attribute::of_ints({1, 2})},
                {"pads", Attribute::of_ints({1, 0, 0, 1})}}}});
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  register_conv(r);
  register_conv_transpose(r);
  register_col2im(r);
}

}  // namespace metaop
