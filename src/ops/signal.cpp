// The signal ops: DFT (opsets 17 and 20: forward, inverse, one-sided and its inverse, dft_length
// padding or truncating, any signal axis), STFT (opset 17: frames of a real or complex signal,
// an optional window, one-sided) and the window generators HannWindow, HammingWindow and
// BlackmanWindow (periodic or symmetric). The transforms are written as the text defines them,
// a direct sum over the exact twiddle factors exp(-2 pi j k n / N) (computed from k n mod N, so
// that the argument stays small): the reference runs the loop in double, the float32 twin
// (triage) in float with each twiddle rounded to float, and the error model bounds a sum of 2N
// products plus a radix-2 FFT's normwise error (fft_allowance). The windows are their formulas in
// double. The VJPs are the adjoint transforms (the conjugate twiddles), summed back over a
// one-sided spectrum's mirrored half and over overlapping frames.
#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/conventions.h"
#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// A scalar (or one-element) input's value.
double scalar_value(const KernelContext& c, const Tensors& in, std::size_t i, const char* what) {
  const Tensor& t = input(c, in, i);
  if (t.numel() != 1)
    fail("{}: {} must be a scalar (got shape {})", c.node.label(), what, shape_str(t.shape()));
  return t.to_f64()[0];
}

// A scalar (or one-element) integer input.
std::int64_t scalar_input(const KernelContext& c, const Tensors& in, std::size_t i,
                          const char* what) {
  const double v = scalar_value(c, in, i, what);
  if (!std::isfinite(v) || std::fabs(v) > 1e15)
    fail("{}: {} is {}, not a usable length", c.node.label(), what, v);
  return static_cast<std::int64_t>(v);
}

// The N twiddles exp(sign 2 pi j m / N), m < N: a transform reads the one of k n mod N, so each
// is computed once per node, not per line and product.
// At the quarter turns (4 m a multiple of N) the twiddle is exactly 1, -j, -1 or j: written
// exactly, since cos and sin of a rounded multiple of pi give 6e-17 where the part is 0, which
// decides what an infinite sample times that part is.
std::vector<std::complex<double>> twiddles(std::int64_t N, int sign) {
  std::vector<std::complex<double>> w(static_cast<std::size_t>(N));
  for (std::int64_t m = 0; m < N; ++m) {
    double t = 2 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(N);
    std::complex<double> v{std::cos(t), sign * std::sin(t)};
    if (4 * m % N == 0) {
      const std::complex<double> quarter[] = {{1, 0}, {0, 1.0 * sign}, {-1, 0}, {0, -1.0 * sign}};
      v = quarter[4 * m / N];
    }
    w[static_cast<std::size_t>(m)] = v;
  }
  return w;
}

// A correct float32 FFT's error beyond a direct sum's, per output element, in units of u times
// ||x||_2: Higham's bound for a radix-2 FFT (Accuracy and Stability of Numerical Algorithms,
// 2nd ed., Theorem 24.2: ||dy||_2 <= log2(n) (4 sqrt 2 + twiddle error) u ||y||_2, with ||y||_2
// = sqrt(n) ||x||_2), rounded up to 6 log2(n) sqrt(n); for a length that is not a power of two,
// three transforms of the power of two M >= 2N - 1, as Bluestein's algorithm runs.
double fft_allowance(std::int64_t N) {
  const bool pow2 = (N & (N - 1)) == 0;
  double M = 1;
  while (M < static_cast<double>(pow2 ? N : 2 * N - 1)) M *= 2;
  return (pow2 ? 1 : 3) * 6 * std::max(1.0, std::log2(M)) * std::sqrt(static_cast<double>(N));
}

// One transform along a line: `len` complex inputs in, `out_len` outputs of the N-point sum
// (inputs past len are zeros; past N ignored); `scale` multiplies each output. In float (the
// triage twin) the 2N products of each output are added in `order`. With `err`, each output's
// first-order bound (units of u): ((kappa(2N) + 3) sum|x| + fft_allowance(N) ||x||_2) |scale|.
// `structural` (T = double) leaves out the products by a twiddle's part that is exactly 0, as
// a transform that knows them does (an infinite sample adds nothing there, not NaN); `err` then
// holds each output's real and imaginary part's own bound (2 out_len values): (kappa(2N) + 3 +
// fft_allowance(N)) times the sum of |products| that part adds.
template <typename T>
void transform(const std::vector<std::complex<double>>& x,
               const std::vector<std::complex<double>>& twiddle, std::int64_t out_len, double scale,
               std::vector<std::complex<T>>& y, const AccumulationBound* bound,
               std::vector<double>* err, SumOrder order = SumOrder::written,
               bool structural = false) {
  const auto N = static_cast<std::int64_t>(twiddle.size());
  const auto used = static_cast<std::int64_t>(std::min<std::size_t>(x.size(), twiddle.size()));
  y.assign(static_cast<std::size_t>(out_len), {});
  double abs = 0, norm2 = 0;
  for (std::int64_t n = 0; n < used; ++n) {
    abs += std::fabs(x[n].real()) + std::fabs(x[n].imag());
    norm2 += std::norm(x[n]);
  }
  std::vector<float> re_terms, im_terms;
  std::vector<double> terms(structural && err ? static_cast<std::size_t>(2 * out_len) : 0);
  for (std::int64_t k = 0; k < out_len; ++k) {
    T re = 0, im = 0;
    re_terms.clear();
    im_terms.clear();
    for (std::int64_t n = 0; n < used; ++n) {
      const std::complex<double> w = twiddle[static_cast<std::size_t>(k * n % N)];
      const T wr = static_cast<T>(w.real()), wi = static_cast<T>(w.imag());
      const T xr = static_cast<T>(x[n].real()), xi = static_cast<T>(x[n].imag());
      if constexpr (std::is_same_v<T, float>) {
        re_terms.insert(re_terms.end(), {xr * wr, -(xi * wi)});
        im_terms.insert(im_terms.end(), {xr * wi, xi * wr});
      } else if (structural) {
        const auto add = [&](T& to, double& abs_sum, T a, T b) {
          if (b == 0) return;
          to += a * b;
          abs_sum += std::fabs(a * b);
        };
        double unused[2] = {0, 0};
        double* abs_sum = err ? &terms[2 * k] : unused;
        add(re, abs_sum[0], xr, wr);
        add(re, abs_sum[0], -xi, wi);
        add(im, abs_sum[1], xr, wi);
        add(im, abs_sum[1], xi, wr);
      } else {
        re += xr * wr - xi * wi;
        im += xr * wi + xi * wr;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      re = float32_sum(re_terms, order);
      im = float32_sum(im_terms, order);
    }
    y[k] = {re * static_cast<T>(scale), im * static_cast<T>(scale)};
  }
  if (!err) return;
  if (structural) {
    for (auto& t : terms) t *= (bound->kappa(2.0 * N) + 3 + fft_allowance(N)) * scale;
    *err = std::move(terms);
    return;
  }
  err->assign(static_cast<std::size_t>(out_len),
              ((bound->kappa(2.0 * N) + 3) * abs + fft_allowance(N) * std::sqrt(norm2)) * scale);
}

// The input's lines along `axis` as complex numbers (the last dimension: 1 real, 2 complex), and
// the output written back with the same outer and inner strides.
struct Lines {
  Shape shape;  // the input's shape without the last dimension
  std::int64_t axis = 0, outer = 1, len = 0, inner = 1;
  bool complex = false;
  std::vector<double> v;
  std::vector<std::complex<double>> line(std::int64_t o, std::int64_t i) const {
    std::vector<std::complex<double>> x(static_cast<std::size_t>(len));
    const std::int64_t c = complex ? 2 : 1;
    for (std::int64_t n = 0; n < len; ++n) {
      auto at = static_cast<std::size_t>(((o * len + n) * inner + i) * c);
      x[n] = {v[at], complex ? v[at + 1] : 0.0};
    }
    return x;
  }
};

Lines lines_of(const KernelContext& c, const Tensor& x, std::int64_t axis) {
  if (x.rank() < 2 || (x.shape().back() != 1 && x.shape().back() != 2))
    fail("{}: the input's last dimension must be 1 (real) or 2 (complex); its shape is {}",
         c.node.label(), shape_str(x.shape()));
  Lines l;
  l.shape.assign(x.shape().begin(), x.shape().end() - 1);
  const auto r = static_cast<std::int64_t>(l.shape.size());
  if (axis < -r - 1 || axis > r - 1 || axis == -1)
    fail(
        "{}: axis {} is not a signal axis of the input {} (the last dimension holds the real "
        "and imaginary parts)",
        c.node.label(), axis, shape_str(x.shape()));
  l.axis = axis < 0 ? axis + r + 1 : axis;
  for (std::int64_t d = 0; d < l.axis; ++d) l.outer *= l.shape[d];
  l.len = l.shape[l.axis];
  for (std::int64_t d = l.axis + 1; d < r; ++d) l.inner *= l.shape[d];
  l.complex = x.shape().back() == 2;
  l.v = x.to_f64();
  return l;
}

struct DftSpec {
  Lines l;
  std::int64_t N = 0, out_len = 0;
  bool inverse = false, onesided = false;
};

DftSpec dft_spec(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  std::int64_t axis =
      c.opset >= 20 ? (has_input(in, 2) ? scalar_input(c, in, 2, "axis") : -2) : attr_i(c, "axis");
  DftSpec s;
  s.l = lines_of(c, x, axis);
  s.inverse = attr_i(c, "inverse") != 0;
  s.onesided = attr_i(c, "onesided") != 0;
  s.N = has_input(in, 1) ? scalar_input(c, in, 1, "dft_length")
                         : (s.inverse && s.onesided ? 2 * (s.l.len - 1) : s.l.len);
  if (s.N < 1) fail("{}: dft_length {} is not positive", c.node.label(), s.N);
  s.out_len = s.onesided && !s.inverse ? s.N / 2 + 1 : s.N;
  return s;
}

// One line's transform: forward, inverse (1/N), one-sided forward (the first N/2 + 1), or the
// inverse of a one-sided spectrum (its Hermitian extension, the real part).
template <typename T>
void dft_line(const DftSpec& s, const std::vector<std::complex<double>>& twiddle,
              std::vector<std::complex<double>> x, std::vector<std::complex<T>>& y,
              const AccumulationBound* bound, std::vector<double>* err, SumOrder order,
              bool structural) {
  if (s.inverse && s.onesided) {
    std::vector<std::complex<double>> full(static_cast<std::size_t>(s.N));
    for (std::int64_t k = 0; k <= s.N / 2 && k < static_cast<std::int64_t>(x.size()); ++k) {
      full[k] = x[k];
      if (k > 0 && s.N - k != k) full[s.N - k] = std::conj(x[k]);
    }
    x = std::move(full);
  }
  transform<T>(x, twiddle, s.out_len, s.inverse ? 1.0 / static_cast<double>(s.N) : 1.0, y, bound,
               err, order, structural);
}

template <typename T>
Tensors dft_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                std::vector<double>* err, SumOrder order = SumOrder::written,
                bool structural = false) {
  DftSpec s = dft_spec(c, in);
  const Lines& l = s.l;
  const std::int64_t parts = s.inverse && s.onesided ? 1 : 2;
  Shape out_shape = l.shape;
  out_shape[l.axis] = s.out_len;
  out_shape.push_back(parts);
  std::vector<double> out(static_cast<std::size_t>(shape_numel(out_shape)));
  if (err) err->assign(out.size(), 0.0);
  const auto twiddle = twiddles(s.N, s.inverse ? 1 : -1);
  std::vector<std::complex<T>> y;
  std::vector<double> e;
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      dft_line<T>(s, twiddle, l.line(o, i), y, bound, err ? &e : nullptr, order, structural);
      for (std::int64_t k = 0; k < s.out_len; ++k) {
        auto at = static_cast<std::size_t>(((o * s.out_len + k) * l.inner + i) * parts);
        out[at] = static_cast<double>(y[k].real());
        if (parts == 2) out[at + 1] = static_cast<double>(y[k].imag());
        if (err) {
          (*err)[at] = structural ? e[2 * k] : e[k];
          if (parts == 2) (*err)[at + 1] = structural ? e[2 * k + 1] : e[k];
        }
      }
    }
  return {Tensor::from_f64(out, out_shape, in[0].dtype())};
}

// The adjoint of one line's transform: for y_k = scale sum_n x_n w^(k n) it is x'_n = scale
// sum_k g_k w^(-k n), the transform of the output's gradient with the conjugate twiddles, for
// the len input positions (the ones past N, truncated away, get none). The inverse of a
// one-sided spectrum read x_k twice (as itself and, conjugated, as x_(N-k)): x'_k = s_k +
// conj(s_(N-k)). With `err`, each gradient's bound (units of u): the adjoint transform's, as the
// forward's; a mirrored pair adds both and one rounding.
std::vector<std::complex<double>> dft_line_adjoint(const DftSpec& s,
                                                   const std::vector<std::complex<double>>& conj_tw,
                                                   const std::vector<std::complex<double>>& g,
                                                   const AccumulationBound* bound,
                                                   std::vector<double>* err) {
  std::vector<std::complex<double>> a;
  std::vector<double> e;
  const double scale = s.inverse ? 1.0 / static_cast<double>(s.N) : 1.0;
  transform<double>(g, conj_tw, s.N, scale, a, bound, err ? &e : nullptr);
  std::vector<std::complex<double>> gx(static_cast<std::size_t>(s.l.len));
  if (err) err->assign(gx.size(), 0.0);
  const bool mirrored = s.inverse && s.onesided;
  for (std::int64_t n = 0; n < std::min(s.l.len, mirrored ? s.N / 2 + 1 : s.N); ++n) {
    gx[n] = a[n];
    if (err) (*err)[n] = e[n];
    if (mirrored && n > 0 && s.N - n != n) {
      gx[n] += std::conj(a[s.N - n]);
      if (err) (*err)[n] += e[s.N - n] + std::abs(a[n]) + std::abs(a[s.N - n]);
    }
  }
  return gx;
}

// The DFT's VJP (`bound` null), or the bound on its rounding per gradient element.
Tensors dft_adjoint(const KernelContext& c, const Tensors& in, const Tensors& out,
                    const Tensors& grads, const AccumulationBound* bound, Magnitudes* m) {
  const DftSpec s = dft_spec(c, in);
  const Lines& l = s.l;
  const std::int64_t parts = s.inverse && s.onesided ? 1 : 2, cin = l.complex ? 2 : 1;
  const auto go = grad_of(grads, out, 0);
  const auto conj_tw = twiddles(s.N, s.inverse ? -1 : 1);
  std::vector<double> gx(l.v.size(), 0.0), ex;
  if (m) ex.assign(l.v.size(), 0.0);
  std::vector<std::complex<double>> g(static_cast<std::size_t>(s.out_len));
  std::vector<double> e;
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      for (std::int64_t k = 0; k < s.out_len; ++k) {
        auto at = static_cast<std::size_t>(((o * s.out_len + k) * l.inner + i) * parts);
        g[k] = {go[at], parts == 2 ? go[at + 1] : 0.0};
      }
      const auto a = dft_line_adjoint(s, conj_tw, g, bound, m ? &e : nullptr);
      for (std::int64_t n = 0; n < l.len; ++n) {
        auto at = static_cast<std::size_t>(((o * l.len + n) * l.inner + i) * cin);
        gx[at] = a[n].real();
        if (l.complex) gx[at + 1] = a[n].imag();
        if (m) ex[at] = l.complex ? (ex[at + 1] = e[n]) : e[n];
      }
    }
  if (m) *m = {ex};
  Tensors res(in.size());
  res[0] = grad_like(gx, in[0]);
  return res;
}

Tensors dft_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                const Tensors& grads) {
  return dft_adjoint(c, in, out, grads, nullptr, nullptr);
}

Magnitudes dft_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                             const Tensors& grads, const AccumulationBound& bound) {
  Magnitudes m;
  dft_adjoint(c, in, out, grads, &bound, &m);
  return m;
}

// ---- STFT: frames of `frame_length` samples every `frame_step`, each times the window, each
// transformed (one-sided for a real signal when asked).
struct StftSpec {
  std::int64_t B = 0, L = 0, step = 0, frame = 0, frames = 0, bins = 0;
  bool complex = false;
  std::vector<double> x, window;
};

StftSpec stft_spec(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "signal");
  // [batch, length, 1 or 2], or a real signal as [batch, length] (as PyTorch's exporter writes
  // torch.stft, and as the current onnx package's shape inference reads it).
  if ((x.rank() != 3 && x.rank() != 2) || (x.rank() == 3 && x.shape()[2] != 1 && x.shape()[2] != 2))
    fail("{}: the signal must be [batch, length, 1 or 2] or [batch, length] (got {})",
         c.node.label(), shape_str(x.shape()));
  StftSpec s;
  s.B = x.shape()[0];
  s.L = x.shape()[1];
  s.complex = x.rank() == 3 && x.shape()[2] == 2;
  s.step = scalar_input(c, in, 1, "frame_step");
  if (has_input(in, 2)) {
    if (in[2].rank() != 1)
      fail("{}: the window must be 1-D (got {})", c.node.label(), shape_str(in[2].shape()));
    s.window = in[2].to_f64();
  }
  s.frame = has_input(in, 3)
                ? scalar_input(c, in, 3, "frame_length")
                : (has_input(in, 2) ? static_cast<std::int64_t>(s.window.size()) : s.L);
  if (has_input(in, 2) && static_cast<std::int64_t>(s.window.size()) != s.frame)
    fail("{}: the window has {} values but frame_length is {}", c.node.label(), s.window.size(),
         s.frame);
  if (s.window.empty())
    s.window.assign(static_cast<std::size_t>(std::max<std::int64_t>(s.frame, 0)), 1.0);
  if (s.step < 1 || s.frame < 1 || s.frame > s.L)
    fail("{}: frame_step {} and frame_length {} do not frame a signal of {} samples",
         c.node.label(), s.step, s.frame, s.L);
  const bool onesided = attr_i(c, "onesided") != 0;
  if (onesided && s.complex)
    fail("{}: onesided output needs a real signal (the signal is complex)", c.node.label());
  s.frames = (s.L - s.frame) / s.step + 1;
  s.bins = onesided ? s.frame / 2 + 1 : s.frame;
  s.x = x.to_f64();
  return s;
}

template <typename T>
Tensors stft_run(const KernelContext& c, const Tensors& in, const AccumulationBound* bound,
                 std::vector<double>* err, SumOrder order = SumOrder::written,
                 bool structural = false) {
  StftSpec s = stft_spec(c, in);
  const Shape out_shape{s.B, s.frames, s.bins, 2};
  std::vector<double> out(static_cast<std::size_t>(shape_numel(out_shape)));
  if (err) err->assign(out.size(), 0.0);
  const std::int64_t parts = s.complex ? 2 : 1;
  const auto twiddle = twiddles(s.frame, -1);
  std::vector<std::complex<T>> y;
  std::vector<double> e;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t f = 0; f < s.frames; ++f) {
      std::vector<std::complex<double>> x(static_cast<std::size_t>(s.frame));
      for (std::int64_t n = 0; n < s.frame; ++n) {
        auto at = static_cast<std::size_t>((b * s.L + f * s.step + n) * parts);
        // The windowed sample, rounded in T as the function body multiplies before the DFT.
        const T w = static_cast<T>(s.window[n]);
        x[n] = {static_cast<double>(static_cast<T>(s.x[at]) * w),
                s.complex ? static_cast<double>(static_cast<T>(s.x[at + 1]) * w) : 0.0};
      }
      transform<T>(x, twiddle, s.bins, 1.0, y, bound, err ? &e : nullptr, order, structural);
      double windowed = 0;  // the window's products, one rounding each: sum|x w|
      if (!structural)      // (structural: in each output's own bound)
        for (const auto& v : x) windowed += std::fabs(v.real()) + std::fabs(v.imag());
      for (std::int64_t k = 0; k < s.bins; ++k) {
        auto at = static_cast<std::size_t>(((b * s.frames + f) * s.bins + k) * 2);
        out[at] = static_cast<double>(y[k].real());
        out[at + 1] = static_cast<double>(y[k].imag());
        if (err && structural) {
          (*err)[at] = e[2 * k];
          (*err)[at + 1] = e[2 * k + 1];
        } else if (err) {
          (*err)[at] = (*err)[at + 1] = e[k] + windowed;
        }
      }
    }
  return {Tensor::from_f64(out, out_shape, in[0].dtype())};
}

// The adjoint of STFT: each frame's spectrum gradient transformed back (conjugate twiddles)
// gives the windowed frame's s_n; the signal gets w_n s_n at each position the frame covers
// (summed where frames overlap), the window Re(conj(s_n) x) summed over frames. With `bound`,
// the bound on the rounding per gradient element instead (units of u): s_n's as DFT's adjoint,
// then the window's product, the sums over frames and the window's 2 F products.
Tensors stft_adjoint(const KernelContext& c, const Tensors& in, const Tensors& out,
                     const Tensors& grads, const AccumulationBound* bound, Magnitudes* m) {
  const StftSpec s = stft_spec(c, in);
  const std::int64_t parts = s.complex ? 2 : 1;
  const auto go = grad_of(grads, out, 0);
  const auto conj_tw = twiddles(s.frame, 1);
  std::vector<double> gx(s.x.size(), 0.0), gw(s.window.size(), 0.0), ex, absx, ew, absw, e;
  if (m) {
    ex.assign(gx.size(), 0.0);
    absx.assign(gx.size(), 0.0);
    ew.assign(gw.size(), 0.0);
    absw.assign(gw.size(), 0.0);
  }
  std::vector<std::complex<double>> g(static_cast<std::size_t>(s.bins)), a;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t f = 0; f < s.frames; ++f) {
      for (std::int64_t k = 0; k < s.bins; ++k) {
        auto at = static_cast<std::size_t>(((b * s.frames + f) * s.bins + k) * 2);
        g[k] = {go[at], go[at + 1]};
      }
      transform<double>(g, conj_tw, s.frame, 1.0, a, bound, m ? &e : nullptr);
      for (std::int64_t n = 0; n < s.frame; ++n) {
        auto at = static_cast<std::size_t>((b * s.L + f * s.step + n) * parts);
        const double xr = s.x[at], xi = s.complex ? s.x[at + 1] : 0.0, w = s.window[n];
        gx[at] += w * a[n].real();
        if (s.complex) gx[at + 1] += w * a[n].imag();
        gw[n] += a[n].real() * xr + a[n].imag() * xi;
        if (m) {
          const double t = std::fabs(w) * (e[n] + std::abs(a[n]));
          ex[at] += t;
          absx[at] += std::fabs(w * a[n].real());
          if (s.complex) {
            ex[at + 1] += t;
            absx[at + 1] += std::fabs(w * a[n].imag());
          }
          ew[n] += (std::fabs(xr) + std::fabs(xi)) * e[n];
          absw[n] += std::fabs(a[n].real() * xr) + std::fabs(a[n].imag() * xi);
        }
      }
    }
  if (m) {
    // Overlapping frames add up to ceil(frame / step) terms per sample.
    const std::int64_t per_sample = (s.frame + s.step - 1) / s.step;
    const double overlap = bound->kappa(static_cast<double>(per_sample));
    for (std::size_t i = 0; i < gx.size(); ++i) ex[i] += overlap * absx[i];
    const double frames = bound->kappa(2.0 * static_cast<double>(s.B * s.frames));
    for (std::size_t n = 0; n < gw.size(); ++n) ew[n] += frames * absw[n];
    *m = {ex, {}, has_input(in, 2) ? ew : std::vector<double>{}};
  }
  Tensors res(in.size());
  res[0] = grad_like(gx, in[0]);
  if (has_input(in, 2)) res[2] = grad_like(gw, in[2]);
  return res;
}

Tensors stft_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                 const Tensors& grads) {
  return stft_adjoint(c, in, out, grads, nullptr, nullptr);
}

Magnitudes stft_vjp_magnitude(const KernelContext& c, const Tensors& in, const Tensors& out,
                              const Tensors& grads, const AccumulationBound& bound) {
  Magnitudes m;
  stft_adjoint(c, in, out, grads, &bound, &m);
  return m;
}

// ---- The windows: w[n] for n < size, with N = size (periodic) or size - 1 (symmetric).
enum class Window { hann, hamming, blackman };

struct WindowSpec {
  std::int64_t size = 0;
  double N = 0;
  DType dtype = DType::Float32;
};

WindowSpec window_spec(const KernelContext& c, const Tensors& in) {
  WindowSpec s;
  s.size = scalar_input(c, in, 0, "size");
  if (s.size < 0) fail("{}: size {} is negative", c.node.label(), s.size);
  auto dt = dtype_from_onnx(static_cast<int>(attr_i(c, "output_datatype")));
  if (!dt || !is_floating(*dt))
    fail("{}: output_datatype {} is not a floating type MetaOp handles", c.node.label(),
         attr_i(c, "output_datatype"));
  s.dtype = *dt;
  s.N = static_cast<double>(attr_i(c, "periodic") ? s.size : s.size - 1);
  return s;
}

// Each window as a sum of cosines a_m cos(2 pi m n / N) (Hann: 0.5 - 0.5 cos(2 pi n / N), the
// same function as the text's sin^2(pi n / N)); its float32 error (units of u), for either
// form: each cosine's argument is rounded (|arg| |a_m| |sin|, at most |arg| |a_m|) and so are
// the cosine and its product, then the sums: sum_m |a_m| (|arg_m| + 3) + 2 |w|.
std::vector<double> window_coefficients(Window w) {
  switch (w) {
    case Window::hann:
      return {0.5, -0.5};
    case Window::hamming:
      return {25.0 / 46.0, -21.0 / 46.0};
    case Window::blackman:
      return {0.42, -0.5, 0.08};
  }
  return {};
}

template <typename T>
std::vector<double> window_values(Window kind, const WindowSpec& s, std::vector<double>* err) {
  auto a = window_coefficients(kind);
  const T pi = static_cast<T>(std::numbers::pi), N = static_cast<T>(s.N);
  std::vector<double> w(static_cast<std::size_t>(s.size));
  if (err) err->assign(w.size(), 0.0);
  for (std::int64_t n = 0; n < s.size; ++n) {
    T v = 0;
    if (kind == Window::hann) {  // the text's form, which does not cancel near n = 0
      T t = std::sin(pi * static_cast<T>(n) / N);
      v = t * t;
    } else {
      for (std::size_t m = 0; m < a.size(); ++m)
        v += static_cast<T>(a[m]) * std::cos(T(2) * pi * static_cast<T>(m) * static_cast<T>(n) / N);
    }
    w[n] = static_cast<double>(v);
    if (err) {
      double e = 2 * std::fabs(w[n]);
      for (std::size_t m = 0; m < a.size(); ++m)
        e += std::fabs(a[m]) * (2 * std::numbers::pi * static_cast<double>(m * n) / s.N + 3);
      (*err)[n] = e;
    }
  }
  return w;
}

// ONNX's symmetric window of one point divides by N - 1 = 0.
Undefined window_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (in.empty() || !in[0].defined() || in[0].numel() != 1 || in[0].to_f64()[0] != 1) return "";
    for (const auto& [name, a] : node.attrs)
      if (name == "periodic" && a.i == 0)
        return fmt::format(
            "{}: a symmetric window of size 1 divides by size - 1 = 0 "
            "(undefined in ONNX)",
            node.label());
    return "";
  };
  return u;
}

template <typename T>
Tensors window_op(Window kind, const KernelContext& c, const Tensors& in) {
  WindowSpec s = window_spec(c, in);
  return {Tensor::from_f64(window_values<T>(kind, s, nullptr), {s.size}, s.dtype)};
}

CaseInput scalar_int(std::int64_t v) {
  return CaseInput{{}, DType::Int64, {v}};
}

void register_transforms(OpRegistry& r) {
  using case_input::floats;
  using error_models::condition;
  const AccumulationBound* none = nullptr;
  r.op("DFT", Family::linear,
       [none](const KernelContext& c, const Tensors& in) {
         return dft_run<double>(c, in, none, nullptr);
       })
      .vjp(dft_vjp)
      .error(condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            dft_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "(kappa(2N) + 3) sum|x| + 6 log2(M) sqrt(N) ||x||_2 (times 1/N inverse): a sum of 2N "
          "products by twiddles of modulus 1, and a radix-2 FFT's error (Higham, Theorem 24.2; "
          "M = N for a power of two, else three transforms of M >= 2N - 1, as Bluestein's); 4 "
          "ulp"))
      .backward_error(
          dft_vjp_magnitude,
          "the adjoint transform (conjugate twiddles) of the output's gradient, bounded as the "
          "forward; a one-sided spectrum's mirrored bins add both halves' bounds and one rounding")
      .float32(
          [none](const KernelContext& c, const Tensors& in, SumOrder order) {
            return dft_run<float>(c, in, none, nullptr, order);
          },
          "the sum over n of x[n] exp(-2 pi j k n / N) in float32, each twiddle rounded to float",
          "an FFT, whose error grows with log N rather than N")
      .cases({// complex, along axis 1, padded to 8
              {20, {floats({2, 5, 3, 2}), scalar_int(8), scalar_int(1)}},
              // real, one-sided, the default axis (-2)
              {20, {floats({3, 10, 1})}, {{"onesided", Attribute::of_int(1)}}},
              // the inverse of a one-sided spectrum (a real signal of 8)
              {20,
               {floats({2, 5, 2})},
               {{"onesided", Attribute::of_int(1)}, {"inverse", Attribute::of_int(1)}}},
              // opset 17's axis attribute, inverse, truncated to 4
              {17,
               {floats({4, 6, 2}), scalar_int(4)},
               {{"axis", Attribute::of_int(1)}, {"inverse", Attribute::of_int(1)}}}});

  r.op("STFT", Family::linear,
       [none](const KernelContext& c, const Tensors& in) {
         return stft_run<double>(c, in, none, nullptr);
       })
      .vjp(stft_vjp)
      .error(condition(
          [](const KernelContext& c, const Tensors& in, const Tensors&,
             const AccumulationBound& bound) {
            std::vector<double> e;
            stft_run<double>(c, in, &bound, &e);
            return Magnitudes{e};
          },
          "each frame's DFT as DFT's bound on x w, plus the window's product, sum|x w|; 4 ulp"))
      .backward_error(
          stft_vjp_magnitude,
          "each frame's adjoint transform s bounded as DFT's; signal: |w| (e_s + |s|) plus the sum "
          "over overlapping frames; window: |x| e_s plus kappa(2 frames) sum|s x|")
      .float32([none](const KernelContext& c, const Tensors& in,
                      SumOrder order) { return stft_run<float>(c, in, none, nullptr, order); },
               "each frame times the window, then its DFT, in float32", "an FFT")
      .cases({// a real signal, a Hann-like window, one-sided
              {17,
               {floats({2, 32, 1}), scalar_int(4), floats({8}, 0, 1)},
               {{"onesided", Attribute::of_int(1)}}},
              // a complex signal, frame_length given with the window
              {17,
               {floats({1, 20, 2}), scalar_int(5), floats({6}, 0, 1), scalar_int(6)},
               {{"onesided", Attribute::of_int(0)}}}});
}

void register_windows(OpRegistry& r) {
  using error_models::condition;
  struct Row {
    const char* op;
    Window kind;
    const char* formula;
  };
  for (const Row& w : {Row{"HannWindow", Window::hann, "sin^2(pi n / N)"},
                       Row{"HammingWindow", Window::hamming, "25/46 - 21/46 cos(2 pi n / N)"},
                       Row{"BlackmanWindow", Window::blackman,
                           "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)"}}) {
    Window kind = w.kind;
    r.op(w.op, Family::elementwise,
         [kind](const KernelContext& c, const Tensors& in) {
           return window_op<double>(kind, c, in);
         })
        .error(condition(
            [kind](const KernelContext& c, const Tensors& in, const Tensors&,
                   const AccumulationBound&) {
              std::vector<double> e;
              window_values<double>(kind, window_spec(c, in), &e);
              return Magnitudes{e};
            },
            std::string(w.formula) +
                " as cosines a_m cos(2 pi m n / N): sum_m |a_m| (|2 pi m n / N| + 3) + 2|w|, "
                "4 ulp"))
        .float32([kind](const KernelContext& c, const Tensors& in,
                        SumOrder) { return window_op<float>(kind, c, in); },
                 std::string(w.formula) + " in float32", "none needed")
        // The size is a constant in the models that use them: the one-node model has no input.
        .inputs(InputRoles{{}})
        .undefined(window_undefined())
        .cases(
            {{17, {scalar_int(10)}}, {17, {scalar_int(9)}, {{"periodic", Attribute::of_int(0)}}}});
  }
}

// ---- MelWeightMatrix (opset 17): [dft_length / 2 + 1, num_mel_bins] triangular filters. As the
// text and its reference evaluator compute it: the edges in mel (2595 log10(1 + f / 700)), the
// num_mel_bins + 2 points low_mel + k (high_mel - low_mel) / (num_mel_bins + 2) (the step divides
// by the number of points, not the gaps: the reference's reading, which never reaches high_mel),
// back to hertz and to the bin floor((dft_length + 1) f / sample_rate); filter i rises from bin
// b_i to b_{i+1} ((j - b_i) / (b_{i+1} - b_i); 1 at b_{i+1} when they meet) and falls to b_{i+2}.
// The outputs are ratios of small integers rounded once (exact error model); a framework whose
// float32 mel arithmetic floors a point into the next bin is judged by the float32 twin (T).
template <typename T>
Tensors mel_weight_matrix(const KernelContext& c, const Tensors& in) {
  const std::int64_t mels = scalar_input(c, in, 0, "num_mel_bins");
  const std::int64_t dft = scalar_input(c, in, 1, "dft_length");
  const std::int64_t rate = scalar_input(c, in, 2, "sample_rate");
  if (mels < 1 || dft < 1 || rate < 1)
    fail("{}: num_mel_bins {}, dft_length {} and sample_rate {} must be positive", c.node.label(),
         mels, dft, rate);
  const auto lo = static_cast<T>(scalar_value(c, in, 3, "lower_edge_hertz"));
  const auto hi = static_cast<T>(scalar_value(c, in, 4, "upper_edge_hertz"));
  auto dt = dtype_from_onnx(static_cast<int>(attr_i(c, "output_datatype")));
  if (!dt)
    fail("{}: output_datatype {} is not a type MetaOp handles", c.node.label(),
         attr_i(c, "output_datatype"));
  const T ln10 = static_cast<T>(std::log(10.0));
  const T low_mel = T(2595) * std::log1p(lo / T(700)) / ln10;
  const T high_mel = T(2595) * std::log1p(hi / T(700)) / ln10;
  const T step = (high_mel - low_mel) / static_cast<T>(mels + 2);
  const std::int64_t bins = dft / 2 + 1;
  std::vector<std::int64_t> b;
  for (std::int64_t k = 0; k < mels + 2; ++k) {
    const T hz = T(700) * std::expm1((static_cast<T>(k) * step + low_mel) / T(2595) * ln10);
    const T at = std::floor(static_cast<T>(dft + 1) * hz / static_cast<T>(rate));
    if (!(at >= 0 && at < static_cast<T>(bins)))
      fail(
          "{}: mel point {} ({} Hz) falls in bin {}, outside the {} bins of a {}-point DFT "
          "(edges {} and {} Hz at sample rate {})",
          c.node.label(), k, static_cast<double>(hz), static_cast<double>(at), bins, dft,
          static_cast<double>(lo), static_cast<double>(hi), rate);
    b.push_back(static_cast<std::int64_t>(at));
  }
  std::vector<double> w(static_cast<std::size_t>(bins * mels), 0.0);
  auto at = [&](std::int64_t j, std::int64_t i) -> double& {
    return w[static_cast<std::size_t>(j * mels + i)];
  };
  for (std::int64_t i = 0; i < mels; ++i) {
    const std::int64_t l = b[static_cast<std::size_t>(i)], m = b[static_cast<std::size_t>(i + 1)],
                       h = b[static_cast<std::size_t>(i + 2)];
    if (m == l) at(m, i) = 1;
    for (std::int64_t j = l; m > l && j <= m; ++j)
      at(j, i) = static_cast<double>(static_cast<T>(j - l) / static_cast<T>(m - l));
    for (std::int64_t j = m; j < h; ++j)
      at(j, i) = static_cast<double>(static_cast<T>(h - j) / static_cast<T>(h - m));
  }
  return {Tensor::from_f64(w, {bins, mels}, *dt)};
}

void register_mel_weight_matrix(OpRegistry& r) {
  auto ints = [](std::int64_t mels, std::int64_t dft, std::int64_t rate) {
    return std::vector<CaseInput>{scalar_int(mels), scalar_int(dft), scalar_int(rate)};
  };
  auto with_edges = [](std::vector<CaseInput> v, double lo, double hi) {
    v.push_back(case_input::scalar(lo));
    v.push_back(case_input::scalar(hi));
    return v;
  };
  r.op("MelWeightMatrix", Family::elementwise, mel_weight_matrix<double>)
      .error(error_models::exact("exact: integer bins and ratios of small integers, rounded once"))
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return mel_weight_matrix<float>(c, in); },
               "the mel edges, points, hertz and bins in float32",
               "none: a point within float32's rounding of a bin edge may floor either way")
      // Its inputs are constants in the models that use them: the one-node model has no input.
      .inputs(InputRoles{{}})
      .cases({{17, with_edges(ints(8, 16, 8192), 0, 4096)},
              {17, with_edges(ints(10, 64, 16000), 100, 7000)},
              {17, with_edges(ints(4, 9, 100), 5, 45)}});
}
}  // namespace

Convention zero_twiddle_parts() {
  return {"zero-twiddle-parts",
          "the ONNX text defines every output as the sum of products by complex twiddles; at the "
          "quarter turns a twiddle's real or imaginary part is exactly 0 (for a real signal every "
          "twiddle of bin 0, and of bin N/2 for an even N, is real), so the product of an infinite "
          "sample by it is 0 x inf = NaN in the text's sum; it does not say whether a kernel may "
          "leave those products out, as a transform that knows they vanish does",
          [](const KernelContext& c, const Tensors& in, const Tensors& ref, const Tensors& got,
             const std::vector<std::vector<bool>>& bad) {
            if (in.empty() || !in[0].defined() || ref.empty() || !ref[0].defined() || got.empty() ||
                !got[0].defined() || ref[0].shape() != got[0].shape() || bad.empty())
              return false;
            if (c.node.op_type == "DFT") {
              const DftSpec s = dft_spec(c, in);
              if (s.inverse && s.onesided) return false;  // a Hermitian extension: not this reading
            }
            // The transform without the products by exactly-0 parts, and each output's bound.
            const AccumulationBound bound;
            std::vector<double> tol;
            const Tensors other =
                c.node.op_type == "STFT"
                    ? stft_run<double>(c, in, &bound, &tol, SumOrder::written, true)
                    : dft_run<double>(c, in, &bound, &tol, SumOrder::written, true);
            const auto o = other[0].to_f64();
            const double u = unit_roundoff(got[0].dtype());
            return nonfinite_explains(
                in, ref, got, bad, [](double v) { return !std::isfinite(v); },
                [&](std::size_t i, double, double k) {
                  if (!std::isfinite(o[i])) return !std::isfinite(k);
                  return std::isfinite(k) && std::fabs(k - o[i]) <= u * tol[i];
                });
          }};
}

void register_signal_ops(OpRegistry& r) {
  register_transforms(r);
  register_windows(r);
  register_mel_weight_matrix(r);
}

}  // namespace metaop
