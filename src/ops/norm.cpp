// Normalization meta operators: BatchNormalization (inference and training mode),
// InstanceNormalization, LayerNormalization, LRN, MeanVarianceNormalization.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/params.h"

namespace metaop {

bool batch_norm_training(const KernelContext& c) {
  return c.opset >= 14 ? c.node.attr_i("training_mode", 0) != 0
                       : (c.opset >= 9 && c.node.outputs.size() > 1);
}

namespace {

Tensors batch_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  if (x.rank() < 2)
    fail("{}: input must be [N, C, ...], got {}", c.node.label(), shape_str(x.shape()));
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  auto mean = input(c, in, 3).to_f64(), var = input(c, in, 4).to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5), momentum = c.node.attr_f("momentum", 0.9);
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  for (auto* v : {&scale, &bias, &mean, &var})
    if (static_cast<std::int64_t>(v->size()) != C)
      fail("{}: scale, B, mean and var need {} elements (channels)", c.node.label(), C);
  bool training = batch_norm_training(c);
  auto vx = x.to_f64();
  std::vector<double> use_mean = mean, use_var = var;
  if (training) {
    for (std::int64_t ch = 0; ch < C; ++ch) {
      double s = 0, ss = 0;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < S; ++j) s += vx[(n * C + ch) * S + j];
      double m = s / static_cast<double>(N * S);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < S; ++j) {
          double d = vx[(n * C + ch) * S + j] - m;
          ss += d * d;
        }
      use_mean[ch] = m;
      use_var[ch] = ss / static_cast<double>(N * S);  // population variance, as the spec's np.var
    }
  }
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch) {
      double a = scale[ch] / std::sqrt(use_var[ch] + eps);
      for (std::int64_t j = 0; j < S; ++j) {
        std::int64_t i = (n * C + ch) * S + j;
        y[i] = (vx[i] - use_mean[ch]) * a + bias[ch];
      }
    }
  Tensors out{Tensor::from_f64(y, x.shape(), x.dtype())};
  if (training) {
    std::vector<double> rm(C), rv(C);
    for (std::int64_t ch = 0; ch < C; ++ch) {
      rm[ch] = mean[ch] * momentum + use_mean[ch] * (1 - momentum);
      rv[ch] = var[ch] * momentum + use_var[ch] * (1 - momentum);
    }
    out.push_back(Tensor::from_f64(rm, {C}, in[3].dtype()));
    out.push_back(Tensor::from_f64(rv, {C}, in[4].dtype()));
  }
  return out;
}

Tensors instance_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto scale = input(c, in, 1).to_f64(), bias = input(c, in, 2).to_f64();
  double eps = c.node.attr_f("epsilon", 1e-5);
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch) {
      const double* xs = vx.data() + (n * C + ch) * S;
      double m = 0, v = 0;
      for (std::int64_t j = 0; j < S; ++j) m += xs[j];
      m /= static_cast<double>(S);
      for (std::int64_t j = 0; j < S; ++j) v += (xs[j] - m) * (xs[j] - m);
      v /= static_cast<double>(S);
      double a = scale[ch] / std::sqrt(v + eps);
      for (std::int64_t j = 0; j < S; ++j) y[(n * C + ch) * S + j] = (xs[j] - m) * a + bias[ch];
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Tensors layer_norm(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  std::int64_t axis = norm_axis(c, c.node.attr_i("axis", -1), x.rank());
  double eps = c.node.attr_f("epsilon", 1e-5);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < x.rank(); ++d) (d < axis ? outer : inner) *= x.shape()[d];
  Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  const Tensor& sc = input(c, in, 1);
  auto scale = sc.to_f64();
  auto smap = broadcast_map(sc.shape(), norm_shape);
  std::vector<double> bias(static_cast<std::size_t>(inner), 0.0);
  if (has_input(in, 2)) {
    auto b = in[2].to_f64();
    auto bmap = broadcast_map(in[2].shape(), norm_shape);
    for (std::int64_t j = 0; j < inner; ++j) bias[j] = b[bmap[j]];
  }
  auto vx = x.to_f64();
  std::vector<double> y(vx.size()), mean(static_cast<std::size_t>(outer)),
      inv_std(static_cast<std::size_t>(outer));
  for (std::int64_t o = 0; o < outer; ++o) {
    const double* xs = vx.data() + o * inner;
    double m = 0, v = 0;
    for (std::int64_t j = 0; j < inner; ++j) m += xs[j];
    m /= static_cast<double>(inner);
    for (std::int64_t j = 0; j < inner; ++j) v += (xs[j] - m) * (xs[j] - m);
    v /= static_cast<double>(inner);
    double is = 1.0 / std::sqrt(v + eps);
    mean[o] = m;
    inv_std[o] = is;
    for (std::int64_t j = 0; j < inner; ++j)
      y[o * inner + j] = (xs[j] - m) * is * scale[smap[j]] + bias[j];
  }
  Shape stat_shape = x.shape();
  for (std::int64_t d = axis; d < x.rank(); ++d) stat_shape[d] = 1;
  // Mean and InvStdDev come out in the stash type (float32 by default).
  auto stash =
      dtype_from_onnx(static_cast<int>(c.node.attr_i("stash_type", 1))).value_or(DType::Float32);
  return {Tensor::from_f64(y, x.shape(), x.dtype()), Tensor::from_f64(mean, stat_shape, stash),
          Tensor::from_f64(inv_std, stat_shape, stash)};
}

Tensors lrn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  double alpha = c.node.attr_f("alpha", 1e-4), beta = c.node.attr_f("beta", 0.75),
         bias = c.node.attr_f("bias", 1.0);
  std::int64_t size = c.node.attr_i("size");
  std::int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<std::int64_t>(N * C, 1);
  std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // floor and ceil of (size-1)/2
  auto vx = x.to_f64();
  std::vector<double> y(vx.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ch = 0; ch < C; ++ch)
      for (std::int64_t j = 0; j < S; ++j) {
        double sq = 0;
        for (std::int64_t k = std::max<std::int64_t>(0, ch - lo); k <= std::min(C - 1, ch + hi);
             ++k) {
          double v = vx[(n * C + k) * S + j];
          sq += v * v;
        }
        std::int64_t i = (n * C + ch) * S + j;
        y[i] = vx[i] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

Tensors mvn(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input");
  auto axes = norm_axes(c, c.node.attr_ints("axes", {0, 2, 3}), x.rank());
  std::vector<bool> reduced(x.rank(), false);
  for (auto a : axes) reduced[a] = true;
  Shape kept = x.shape();
  for (auto a : axes) kept[a] = 1;
  auto map = broadcast_map(kept, x.shape());
  std::int64_t groups = shape_numel(kept), per = x.numel() / std::max<std::int64_t>(groups, 1);
  auto vx = x.to_f64();
  std::vector<double> sum(groups, 0.0), sq(groups, 0.0);
  for (std::int64_t i = 0; i < x.numel(); ++i) sum[map[i]] += vx[i];
  for (auto& s : sum) s /= static_cast<double>(per);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    sq[map[i]] += (vx[i] - sum[map[i]]) * (vx[i] - sum[map[i]]);
  std::vector<double> y(vx.size());
  for (std::int64_t i = 0; i < x.numel(); ++i)
    y[i] = (vx[i] - sum[map[i]]) / (std::sqrt(sq[map[i]] / static_cast<double>(per)) + 1e-9);
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.add({"BatchNormalization", "norm", batch_norm});
  r.add({"InstanceNormalization", "norm", instance_norm});
  r.add({"LayerNormalization", "norm", layer_norm});
  r.add({"LRN", "norm", lrn});
  r.add({"MeanVarianceNormalization", "norm", mvn});
}

}  // namespace metaop
