// ATen kernels of the spatial (GridSample, AffineGrid, Col2Im, MaxUnpool), signal (DFT, STFT,
// the windows), selection (NonZero, Compress, ReverseSequence, CenterCropPad), recurrent (LSTM,
// GRU, RNN) and attention (Attention, on PyTorch 2's scaled_dot_product_attention) meta
// operators.
// Where ATen's operator covers only part of the ONNX one (2-D col2im, symmetric pads, 4-D and
// 5-D grids), the rest is refused as unsupported, naming what.
#include <ATen/TensorOperators.h>
#include <ATen/ops/affine_grid_generator.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/blackman_window.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/col2im.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/fft_fft.h>
#include <ATen/ops/fft_ifft.h>
#include <ATen/ops/fft_irfft.h>
#include <ATen/ops/fft_rfft.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/grid_sampler.h>
#include <ATen/ops/gru.h>
#include <ATen/ops/hamming_window.h>
#include <ATen/ops/hann_window.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/lstm.h>
#include <ATen/ops/max_unpool2d.h>
#include <ATen/ops/max_unpool3d.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/rnn_relu.h>
#include <ATen/ops/rnn_tanh.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#endif
#include <ATen/ops/stft.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>

#include "bindings/torch/aten_convert.h"
#include "bindings/torch/torch_kernels.h"
#include "ops/kernel_util.h"

namespace metaop::torch_kernels {

namespace {

std::int64_t scalar_of(const Ctx& c, std::size_t i) {
  auto v = c.raw.at(i).to_i64();
  if (v.size() != 1) c.unsupported(fmt::format("input #{} holds {} values, not one", i, v.size()));
  return v[0];
}

at::Tensor long_tensor(const std::vector<std::int64_t>& v, const Shape& shape) {
  return to_aten(Tensor::from_i64(v, shape));
}

ATs grid_sample(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  if (!at::isFloatingType(x.scalar_type())) c.unsupported("a non-float X");
  const std::string mode = attr_s(c.k, "mode"), padding = attr_s(c.k, "padding_mode");
  // ATen's codes: interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border,
  // 2 reflection. Opset 16 names the modes bilinear and bicubic, opset 20 linear and cubic.
  const std::int64_t m = mode == "bilinear" || mode == "linear" ? 0
                         : mode == "nearest"                    ? 1
                         : mode == "bicubic" || mode == "cubic" ? 2
                                                                : -1;
  const std::int64_t p = padding == "zeros"        ? 0
                         : padding == "border"     ? 1
                         : padding == "reflection" ? 2
                                                   : -1;
  if (m < 0 || p < 0) c.unsupported("mode " + mode + ", padding_mode " + padding);
  if (x.dim() != 4 && x.dim() != 5) c.unsupported("a grid of other than 2 or 3 spatial dims");
  if (x.dim() == 5 && m == 2) c.unsupported("cubic interpolation of a 3-D grid");
  return {
      at::grid_sampler(x, c.in(1).to(x.scalar_type()), m, p, attr_i(c.k, "align_corners") != 0)};
}

ATs col2im(const Ctx& c) {
  const auto image = c.raw.at(1).to_i64(), block = c.raw.at(2).to_i64();
  if (image.size() != 2) c.unsupported("an image of other than 2 dims (ATen's col2im)");
  const auto dil = attr_ints_or(c.k, "dilations", {1, 1});
  const auto strides = attr_ints_or(c.k, "strides", {1, 1});
  const auto pads = attr_ints_or(c.k, "pads", {0, 0, 0, 0});
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3])
    c.unsupported("asymmetric pads");
  return {at::col2im(c.in(0), image, block, dil, {pads[0], pads[1]}, strides)};
}

ATs max_unpool(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const std::int64_t nsp = x.dim() - 2;
  if (nsp != 2 && nsp != 3) c.unsupported("other than 2 or 3 spatial dims (ATen's max_unpool)");
  const auto k = c.node().attr_ints("kernel_shape");
  const auto s = attr_ints_or(c.k, "strides", std::vector<std::int64_t>(nsp, 1));
  const auto pads = attr_ints_or(c.k, "pads", std::vector<std::int64_t>(2 * nsp, 0));
  std::vector<std::int64_t> out(static_cast<std::size_t>(nsp));
  for (std::int64_t d = 0; d < nsp; ++d)
    out[d] = (x.size(2 + d) - 1) * s[d] + k[d] - pads[d] - pads[d + nsp];
  if (c.has(2)) {
    auto os = c.raw[2].to_i64();
    if (static_cast<std::int64_t>(os.size()) != x.dim() || os[0] != x.size(0) ||
        os[1] != x.size(1) || !std::equal(out.begin(), out.end(), os.begin() + 2, os.end()))
      c.unsupported(
          "output_shape other than the pooling's inverse shape (ATen reads the indices in "
          "output_shape's layout: the unpool-index-layout convention)");
  }
  // ONNX's indices are flat positions in the whole output, ATen's within each (n, c) plane.
  const std::int64_t plane =
      std::accumulate(out.begin(), out.end(), std::int64_t{1}, std::multiplies<>());
  const at::Tensor& i = c.in(1);
  std::vector<std::int64_t> base_shape(static_cast<std::size_t>(x.dim()), 1);
  base_shape[0] = x.size(0);
  base_shape[1] = x.size(1);
  at::Tensor idx =
      i.to(at::kLong) -
      at::arange(x.size(0) * x.size(1), i.options().dtype(at::kLong)).reshape(base_shape) * plane;
  if (nsp == 2) return {at::max_unpool2d(x, idx, out)};
  return {at::max_unpool3d(x, idx, out, s, {pads[0], pads[1], pads[2]})};
}

// DFT (opsets 17 and 20) on ATen's FFTs: the last dim holds 1 (real) or 2 (real, imaginary)
// parts; dft_length pads or truncates; the inverse scales by 1/N, as ONNX's ("backward", ATen's
// default, named: GCC 12 warns of the defaulted optional's copy in LibTorch 1.13's headers).
constexpr const char* kNorm = "backward";

ATs dft(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const std::int64_t r = x.dim() - 1;
  std::int64_t axis = c.k.opset >= 20 ? (c.has(2) ? scalar_of(c, 2) : -2) : attr_i(c.k, "axis");
  if (axis < 0) axis += r + 1;
  if (r < 1 || axis < 0 || axis >= r) c.unsupported(fmt::format("axis {}", axis));
  const bool inverse = attr_i(c.k, "inverse") != 0, onesided = attr_i(c.k, "onesided") != 0;
  const bool complex = x.size(-1) == 2;
  const std::int64_t len = x.size(axis);
  const std::int64_t n = c.has(1) ? scalar_of(c, 1) : (inverse && onesided ? 2 * (len - 1) : len);
  at::Tensor sig = complex ? at::view_as_complex(x.contiguous()) : x.select(-1, 0);
  if (inverse && onesided)  // the Hermitian extension's inverse: real, one part
    return {at::fft_irfft(sig, n, axis, kNorm).unsqueeze(-1)};
  if (onesided) {
    if (complex) c.unsupported("a one-sided transform of a complex signal");
    return {at::view_as_real(at::fft_rfft(sig, n, axis, kNorm)).contiguous()};
  }
  at::Tensor y = inverse ? at::fft_ifft(sig, n, axis, kNorm) : at::fft_fft(sig, n, axis, kNorm);
  return {at::view_as_real(y).contiguous()};
}

// STFT on at::stft (no centering, no normalization): ATen's [batch, bins, frames] complex
// spectrum transposed to ONNX's [batch, frames, bins, 2]; no window is a window of ones.
ATs stft(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const bool complex = x.dim() == 3 && x.size(2) == 2;
  if (x.dim() != 2 && !(x.dim() == 3 && (x.size(2) == 1 || complex)))
    c.unsupported("a signal of other than [batch, length(, 1 or 2)]");
  at::Tensor sig = complex        ? at::view_as_complex(x.contiguous())
                   : x.dim() == 3 ? x.select(2, 0)
                                  : x;
  const std::int64_t step = scalar_of(c, 1);
  const std::int64_t frame = c.has(3) ? scalar_of(c, 3) : c.has(2) ? c.in(2).size(0) : x.size(1);
  if (step < 1 || frame < 1 || frame > x.size(1)) c.unsupported("frame_step or frame_length");
  at::Tensor window = c.has(2) ? c.in(2) : at::ones({frame}, x.options());
  if (window.dim() != 1 || window.size(0) != frame) c.unsupported("a window not of frame_length");
  const bool onesided = attr_i(c.k, "onesided") != 0;
  if (onesided && complex) c.unsupported("a one-sided transform of a complex signal");
  at::Tensor y = at::stft(sig, frame, step, frame, window, false, onesided, true);
  return {at::view_as_real(y.transpose(1, 2)).contiguous()};
}

#if TORCH_VERSION_MAJOR >= 2
// Attention (opset 23) on at::scaled_dot_product_attention: 3-D Q, K, V split into heads, the
// cache concatenated (present_key and present_value), grouped-query heads repeated for ATen,
// and is_causal as a mask whose frontier is i + past (ATen's own is_causal is i), combined with
// attn_mask (boolean: both must allow; additive: -inf where the frontier forbids). Refused:
// softcap and the qk_matmul_output output, which ATen's attention has no counterpart for.
ATs attention(const Ctx& c) {
  const auto& outs = c.node().outputs;
  if (attr_f_or(c.k, "softcap", 0) != 0) c.unsupported("softcap");
  if (outs.size() > 3 && !outs[3].empty()) c.unsupported("the qk_matmul_output output");
  at::Tensor q = c.in(0), k = c.in(1), v = c.in(2);
  if (!at::isFloatingType(q.scalar_type())) c.unsupported("non-float Q");
  const bool three_d = q.dim() == 3;
  if ((q.dim() != 3 && q.dim() != 4) || k.dim() != q.dim() || v.dim() != q.dim())
    c.unsupported("Q, K and V not all 3-D or all 4-D");
  if (three_d) {
    const std::int64_t hq = attr_i_or(c.k, "q_num_heads", 0),
                       hkv = attr_i_or(c.k, "kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0) c.unsupported("3-D inputs without q_num_heads and kv_num_heads");
    auto heads = [](const at::Tensor& t, std::int64_t h) {
      return t.reshape({t.size(0), t.size(1), h, t.size(2) / h}).transpose(1, 2);
    };
    q = heads(q, hq);
    k = heads(k, hkv);
    v = heads(v, hkv);
  }
  if (c.has(4) != c.has(5)) c.unsupported("past_key without past_value");
  const std::int64_t past = c.has(4) ? c.in(4).size(2) : 0;
  if (c.has(4)) {
    k = at::cat({c.in(4), k}, 2);
    v = at::cat({c.in(5), v}, 2);
  }
  const std::int64_t hq = q.size(1), hkv = k.size(1), sq = q.size(2), t = k.size(2);
  if (hkv <= 0 || hq % hkv) c.unsupported("query heads not a multiple of the key/value heads");
  std::optional<at::Tensor> mask;
  if (c.has(3)) mask = c.in(3);
  if (attr_i(c.k, "is_causal") != 0) {
    at::Tensor allowed =
        at::ones({sq, t}, q.options().dtype(at::kBool)).tril(past);  // j <= i + past
    if (!mask)
      mask = allowed;
    else if (mask->scalar_type() == at::kBool)
      mask = at::logical_and(*mask, allowed);
    else
      mask = at::where(allowed, *mask, -std::numeric_limits<double>::infinity());
  }
  if (mask && mask->scalar_type() != at::kBool) mask = mask->to(q.scalar_type());
  const double scale_attr = attr_f_or(c.k, "scale", std::nan(""));
  const std::optional<double> scale =
      std::isnan(scale_attr) ? std::nullopt : std::optional<double>(scale_attr);
  at::Tensor kk = hq == hkv ? k : at::repeat_interleave(k, hq / hkv, 1);
  at::Tensor vv = hq == hkv ? v : at::repeat_interleave(v, hq / hkv, 1);
  at::Tensor y = at::scaled_dot_product_attention(q, kk, vv, mask, 0.0, false, scale);
  if (three_d) y = y.transpose(1, 2).reshape({y.size(0), sq, hq * y.size(3)});
  ATs res{y.contiguous()};
  if (outs.size() > 1) res.push_back(k.contiguous());
  if (outs.size() > 2) res.push_back(v.contiguous());
  return res;
}
#endif

// ---- The recurrent cells on ATen's at::lstm, at::gru and at::rnn_tanh / at::rnn_relu (one
// layer, one direction or both). ONNX's gate blocks are reordered into ATen's (LSTM: ONNX i o f
// c, ATen i f g o; GRU: ONNX z r h, ATen r z n) and B split into b_ih and b_hh; a reverse node
// runs forward on the time-flipped sequence. What ATen's cells cannot express is refused:
// peepholes other than zeros, clip, input_forget, other activations than the cell's defaults
// (RNN: Tanh or Relu), a GRU without linear_before_reset (ATen resets after the recurrent
// product), sequence lengths shorter than the sequence.
at::Tensor gate_blocks(const at::Tensor& t, const std::vector<std::int64_t>& order,
                       std::int64_t h) {
  std::vector<at::Tensor> parts;
  for (auto k : order) parts.push_back(t.narrow(0, k * h, h));
  return at::cat(parts, 0);
}

void check_activations(const Ctx& c, bool lstm, bool gru, bool& relu) {
  const std::vector<std::string> cell = lstm  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                        : gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                              : std::vector<std::string>{};
  relu = false;
  if (!c.node().has_attr("activations")) return;
  const auto& acts = c.node().attrs.at("activations").strings;
  for (std::size_t k = 0; k < acts.size(); ++k) {
    const bool ok = cell.empty() ? (acts[k] == acts[0] && (acts[0] == "Tanh" || acts[0] == "Relu"))
                                 : acts[k] == cell[k % cell.size()];
    if (!ok) c.unsupported("activation " + acts[k] + " (ATen's cells have fixed activations)");
  }
  relu = cell.empty() && !acts.empty() && acts[0] == "Relu";
}

ATs recurrent(const Ctx& c) {
  const std::string& op = c.node().op_type;
  const bool lstm = op == "LSTM", gru = op == "GRU";
  const std::int64_t G = lstm ? 4 : gru ? 3 : 1, H = attr_i(c.k, "hidden_size");
  at::Tensor x = c.in(0);
  if (!at::isFloatingType(x.scalar_type()) || x.dim() != 3) c.unsupported("X not 3-D float");
  const bool layout1 = attr_i_or(c.k, "layout", 0) != 0;
  const std::string direction = attr_s(c.k, "direction");
  const bool both = direction == "bidirectional", reverse = direction == "reverse";
  const std::int64_t dirs = both ? 2 : 1, time = layout1 ? 1 : 0;
  if (attr_f_or(c.k, "clip", 0) > 0) c.unsupported("clip (ATen's cells do not clip)");
  if (lstm && attr_i(c.k, "input_forget") != 0) c.unsupported("input_forget");
  if (gru && attr_i(c.k, "linear_before_reset") == 0)
    c.unsupported("linear_before_reset 0 (ATen's GRU resets after the recurrent product)");
  bool relu = false;
  check_activations(c, lstm, gru, relu);
  if (c.has(4))
    for (auto len : c.raw.at(4).to_i64())
      if (len != x.size(time)) c.unsupported("sequence lengths shorter than the sequence");
  if (lstm && c.has(7))
    for (double p : c.raw.at(7).to_f64())
      if (p != 0) c.unsupported("peepholes (ATen's LSTM has none)");
  const std::vector<std::int64_t> order = lstm  ? std::vector<std::int64_t>{0, 2, 3, 1}
                                          : gru ? std::vector<std::int64_t>{1, 0, 2}
                                                : std::vector<std::int64_t>{0};
  std::vector<at::Tensor> params;
  for (std::int64_t d = 0; d < dirs; ++d) {
    params.push_back(gate_blocks(c.in(1)[d], order, H));
    params.push_back(gate_blocks(c.in(2)[d], order, H));
    if (c.has(3)) {
      params.push_back(gate_blocks(c.in(3)[d].narrow(0, 0, G * H), order, H));
      params.push_back(gate_blocks(c.in(3)[d].narrow(0, G * H, G * H), order, H));
    }
  }
  const std::int64_t batch = x.size(layout1 ? 0 : 1);
  auto state = [&](std::size_t i) {
    if (!c.has(i)) return at::zeros({dirs, batch, H}, x.options());
    return layout1 ? c.in(i).permute({1, 0, 2}).contiguous() : c.in(i);
  };
  if (reverse) x = at::flip(x, {time});
  at::Tensor y, hy, cy;
  if (lstm)
    std::tie(y, hy, cy) =
        at::lstm(x, {state(5), state(6)}, params, c.has(3), 1, 0.0, false, both, layout1);
  else if (gru)
    std::tie(y, hy) = at::gru(x, state(5), params, c.has(3), 1, 0.0, false, both, layout1);
  else if (relu)
    std::tie(y, hy) = at::rnn_relu(x, state(5), params, c.has(3), 1, 0.0, false, both, layout1);
  else
    std::tie(y, hy) = at::rnn_tanh(x, state(5), params, c.has(3), 1, 0.0, false, both, layout1);
  if (reverse) y = at::flip(y, {time});
  // ATen's [seq, batch, dirs * H] (batch first: [batch, seq, dirs * H]) to ONNX's Y.
  y = layout1 ? y.reshape({batch, y.size(1), dirs, H}).contiguous()
              : y.reshape({y.size(0), batch, dirs, H}).permute({0, 2, 1, 3}).contiguous();
  auto out_state = [&](const at::Tensor& s) {
    return layout1 ? s.permute({1, 0, 2}).contiguous() : s.contiguous();
  };
  ATs out{y, out_state(hy)};
  if (lstm) out.push_back(out_state(cy));
  return out;
}

// The windows: N = size (periodic) or size - 1; ONNX's Hamming coefficients are 25/46 and
// 21/46, not ATen's default 0.54 and 0.46.
template <typename F>
TorchOp window(F make) {
  return TorchOp{[make](const Ctx& c) {
                   const auto dt =
                       dtype_from_onnx(static_cast<int>(attr_i(c.k, "output_datatype")));
                   if (!dt || !is_floating(*dt)) c.unsupported("a window of a non-float type");
                   return ATs{make(scalar_of(c, 0), attr_i(c.k, "periodic") != 0,
                                   at::TensorOptions().dtype(to_aten(*dt)))};
                 },
                 false};
}

ATs reverse_sequence(const Ctx& c) {
  const at::Tensor& x = c.in(0);
  const std::int64_t b_axis = norm_axis(c.k, attr_i(c.k, "batch_axis"), x.dim());
  const std::int64_t t_axis = norm_axis(c.k, attr_i(c.k, "time_axis"), x.dim());
  const auto lens = c.raw.at(1).to_i64();
  const std::int64_t B = x.size(b_axis), T = x.size(t_axis);
  if (b_axis == t_axis || static_cast<std::int64_t>(lens.size()) != B)
    c.unsupported("batch_axis, time_axis or sequence_lens out of shape");
  // The time index each (batch, time) position reads, in the order of the two axes in x.
  Shape shape(static_cast<std::size_t>(x.dim()), 1);
  shape[static_cast<std::size_t>(b_axis)] = B;
  shape[static_cast<std::size_t>(t_axis)] = T;
  for (std::int64_t len : lens)
    if (len < 0 || len > T) c.unsupported(fmt::format("sequence length {}", len));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t len = lens[static_cast<std::size_t>(b)];
      const std::int64_t at = b_axis < t_axis ? b * T + t : t * B + b;
      idx[static_cast<std::size_t>(at)] = t < len ? len - 1 - t : t;
    }
  return {at::gather(x, t_axis, long_tensor(idx, shape).expand(x.sizes()).contiguous())};
}

ATs compress(const Ctx& c) {
  const bool flat = !c.node().has_attr("axis");
  at::Tensor x = flat ? c.in(0).reshape({-1}) : c.in(0);
  const std::int64_t axis = flat ? 0 : norm_axis(c.k, attr_i(c.k, "axis"), x.dim());
  const auto cond = c.raw.at(1).to_i64();
  std::vector<std::int64_t> kept;
  for (std::size_t i = 0; i < cond.size(); ++i)
    if (cond[i]) {
      if (static_cast<std::int64_t>(i) >= x.size(axis)) c.unsupported("condition past the axis");
      kept.push_back(static_cast<std::int64_t>(i));
    }
  return {at::index_select(x, axis, long_tensor(kept, {static_cast<std::int64_t>(kept.size())}))};
}

ATs center_crop_pad(const Ctx& c) {
  at::Tensor y = c.in(0);
  const auto target = c.raw.at(1).to_i64();
  std::vector<std::int64_t> axes = attr_ints_or(c.k, "axes", {});
  if (axes.empty()) {
    axes.resize(static_cast<std::size_t>(y.dim()));
    std::iota(axes.begin(), axes.end(), 0);
  }
  axes = norm_axes(c.k, axes, y.dim());
  if (target.size() != axes.size()) c.unsupported("shape and axes of different lengths");
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const std::int64_t d = axes[i], dim = y.size(d), want = target[i];
    if (dim >= want) {
      y = y.narrow(d, (dim - want) / 2, want);
      continue;
    }
    // at::constant_pad_nd's pads: the last dim first, (begin, end) pairs.
    std::vector<std::int64_t> pads(static_cast<std::size_t>(2 * (y.dim() - d)), 0);
    pads[pads.size() - 2] = (want - dim) / 2;
    pads[pads.size() - 1] = want - dim - (want - dim) / 2;
    y = at::constant_pad_nd(y, pads, 0);
  }
  return {y.contiguous()};
}

}  // namespace

// GridSample's and AffineGrid's backward are judged with bounds of their own
// (ops/grid_sample.cpp: the coordinates' errors carried into the weights and their slopes).
void add_spatial(TorchTable& t) {
  t.add("GridSample", TorchOp{grid_sample});
  t.add("AffineGrid", TorchOp{[](const Ctx& c) {
          return ATs{at::affine_grid_generator(c.in(0), c.raw.at(1).to_i64(),
                                               attr_i(c.k, "align_corners") != 0)};
        }});
  t.add("Col2Im", TorchOp{col2im});
  t.add("MaxUnpool", TorchOp{max_unpool});
}

void add_signal(TorchTable& t) {
  t.add("DFT", TorchOp{dft});
  t.add("STFT", TorchOp{stft});
  t.add("HannWindow", window([](std::int64_t n, bool periodic, at::TensorOptions o) {
          return at::hann_window(n, periodic, o);
        }));
  t.add("HammingWindow", window([](std::int64_t n, bool periodic, at::TensorOptions o) {
          return at::hamming_window(n, periodic, 25.0 / 46.0, 21.0 / 46.0, o);
        }));
  t.add("BlackmanWindow", window([](std::int64_t n, bool periodic, at::TensorOptions o) {
          return at::blackman_window(n, periodic, o);
        }));
}

void add_recurrent(TorchTable& t) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) t.add(op, TorchOp{recurrent});
}

void add_attention([[maybe_unused]] TorchTable& t) {
#if TORCH_VERSION_MAJOR >= 2
  t.add("Attention", TorchOp{attention});
#endif
}

void add_selection(TorchTable& t) {
  t.add("NonZero",
        TorchOp{[](const Ctx& c) { return ATs{at::nonzero(c.in(0)).t().contiguous()}; }, false});
  t.add("Compress", TorchOp{compress});
  t.add("ReverseSequence", TorchOp{reverse_sequence});
  t.add("CenterCropPad", TorchOp{center_crop_pad});
}

}  // namespace metaop::torch_kernels
