// Unit tests of the error models and the local judgement (analysis/core/accuracy) on known kernels.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/core/accuracy.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_static.h"
#include "bindings/isolate.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "ops/error_model.h"
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/optimizer.h"
#include "ops/registry.h"
#include "tensor/heap.h"
#include "tensor/npy.h"
#include "tensor/tensor_proto.h"
#include "unit_util.h"

using namespace metaop;
using namespace metaop::unit;

TEST(ErrorModel, EveryOpDeclaresOne) {
  for (const auto& t : OpRegistry::instance().types())
    EXPECT_TRUE(OpRegistry::instance().find(t)->error.declared()) << t;
}

TEST(ErrorModel, UlpSpacing) {
  EXPECT_EQ(ulp_of(1.0, DType::Float32), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(1.5, DType::Float32), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(0.75, DType::Float32), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(0.0, DType::Float32), std::ldexp(1.0, -149));
  EXPECT_EQ(ulp_of(1.0, DType::Float16), std::ldexp(1.0, -10));
  EXPECT_EQ(unit_roundoff(DType::BFloat16), std::ldexp(1.0, -8));
}

namespace {

Score score_of(const Node& n, const Tensors& in, const Tensors& got,
               AccumulationBound::Kind kind = AccumulationBound::Probabilistic) {
  AccumulationBound b;
  b.kind = kind;
  return check_local(n, 17, in, got, b).score;
}

// The op with every dot product summed sequentially, the running sum rounded to float32 (a
// correct float32 kernel) or float16 (a faulty one) after each term.
template <DType acc>
void sequential_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                     const double* a, const double* b, double beta, double* c) {
  auto round = [](double x) {
    return acc == DType::Float16 ? half_bits_to_f64(f64_to_half_bits(x))
                                 : static_cast<double>(static_cast<float>(x));
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p)
        s = round(s + (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]));
      c[i * n + j] = round(alpha * s + beta * c[i * n + j]);
    }
}

Tensors accumulate_in(DType acc, const Node& n, const Tensors& in) {
  return forward_with_gemm(
      KernelContext{n, 17}, in,
      acc == DType::Float16 ? sequential_gemm<DType::Float16> : sequential_gemm<DType::Float32>);
}

}  // namespace

TEST(ErrorModel, ConvToleranceSeparatesFloat32FromFloat16Accumulation) {
  Node n = make_node("Conv", {"x", "w", "b"}, {"y"});
  n.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  Tensor x = Tensor::from_f64(random_values(64 * 64, 1), {1, 64, 8, 8}, DType::Float32);
  Tensor w = Tensor::from_f64(random_values(32 * 64 * 9, 2), {32, 64, 3, 3}, DType::Float32);
  Tensor b = Tensor::from_f64(random_values(32, 3), {32}, DType::Float32);
  Tensors in{x, w, b};
  for (auto kind : {AccumulationBound::Probabilistic, AccumulationBound::Rigorous}) {
    Score ok = score_of(n, in, accumulate_in(DType::Float32, n, in), kind);
    EXPECT_GT(ok.max_abs_err, 0);  // sequential float32 sums do round
    EXPECT_LE(ok.score, 1) << "a correct float32 convolution must pass";
    Score bad = score_of(n, in, accumulate_in(DType::Float16, n, in), kind);
    EXPECT_GT(bad.score, 1) << "float16 accumulation must fail";
    EXPECT_GT(bad.over, 0);
  }
}

TEST(ErrorModel, SoftmaxFloat32PassesAndOverflowIsANonFiniteMismatch) {
  Node n = make_node("Softmax", {"x"}, {"y"});
  n.attrs["axis"] = Attribute::of_int(-1);
  auto v = random_values(4 * 1000, 4);
  for (auto& e : v) e *= 100;  // logits up to 100: exp overflows float32 above 88.7
  Tensor x = Tensor::from_f64(v, {4, 1000}, DType::Float32);
  // Float32 with the max subtracted, as frameworks do.
  std::vector<double> y(v.size());
  auto xf = x.to_f64();
  for (int r = 0; r < 4; ++r) {
    float m = -INFINITY, s = 0;
    for (int j = 0; j < 1000; ++j) m = std::max(m, static_cast<float>(xf[r * 1000 + j]));
    for (int j = 0; j < 1000; ++j) s += std::exp(static_cast<float>(xf[r * 1000 + j]) - m);
    for (int j = 0; j < 1000; ++j)
      y[r * 1000 + j] = std::exp(static_cast<float>(xf[r * 1000 + j]) - m) / s;
  }
  Score ok = score_of(n, {x}, {Tensor::from_f64(y, {4, 1000}, DType::Float32)});
  EXPECT_LE(ok.score, 1);
  // Without the max, exp overflows float32 at these magnitudes: NaN where the reference is finite.
  for (int r = 0; r < 4; ++r) {
    float s = 0;
    for (int j = 0; j < 1000; ++j) s += std::exp(static_cast<float>(xf[r * 1000 + j]));
    for (int j = 0; j < 1000; ++j)
      y[r * 1000 + j] = std::exp(static_cast<float>(xf[r * 1000 + j])) / s;
  }
  Score bad = score_of(n, {x}, {Tensor::from_f64(y, {4, 1000}, DType::Float32)});
  EXPECT_GT(bad.new_nonfinite, 0);
  EXPECT_TRUE(bad.bad());
}

TEST(ErrorModel, LayerNormOnePassVarianceLosesPrecision) {
  // Rows with a large mean and unit spread: the two-pass float32 variance is fine; the one-pass
  // E[x^2] - E[x]^2 cancels catastrophically, which the error model must flag.
  Node n = make_node("LayerNormalization", {"x", "s", "b"}, {"y"});
  auto v = random_values(8 * 256, 5);
  for (auto& e : v) e = 3000 + e;
  Tensor x = Tensor::from_f64(v, {8, 256}, DType::Float32);
  Tensor s = Tensor::from_f64(std::vector<double>(256, 1.0), {256}, DType::Float32);
  Tensor b = Tensor::from_f64(std::vector<double>(256, 0.0), {256}, DType::Float32);
  auto xf = x.to_f64();
  std::vector<double> two(v.size()), one(v.size());
  for (int r = 0; r < 8; ++r) {
    const double* row = xf.data() + r * 256;
    float sum = 0, sq = 0, dev = 0;
    for (int j = 0; j < 256; ++j) {
      sum += static_cast<float>(row[j]);
      sq += static_cast<float>(row[j]) * static_cast<float>(row[j]);
    }
    float mean = sum / 256;
    for (int j = 0; j < 256; ++j)
      dev += (static_cast<float>(row[j]) - mean) * (static_cast<float>(row[j]) - mean);
    float var2 = dev / 256, var1 = sq / 256 - mean * mean;
    for (int j = 0; j < 256; ++j) {
      two[r * 256 + j] = (static_cast<float>(row[j]) - mean) / std::sqrt(var2 + 1e-5f);
      one[r * 256 + j] = (static_cast<float>(row[j]) - mean) / std::sqrt(std::fabs(var1) + 1e-5f);
    }
  }
  Tensors in{x, s, b};
  Score ok = score_of(n, in, {Tensor::from_f64(two, {8, 256}, DType::Float32)});
  EXPECT_LE(ok.score, 1);
  Score bad = score_of(n, in, {Tensor::from_f64(one, {8, 256}, DType::Float32)});
  EXPECT_GT(bad.score, 1);
}

TEST(Accuracy, ExactOpsMayFlushSubnormalsDataMovementMayNot) {
  const double sub = std::ldexp(1.0, -140);  // a float32 subnormal
  Node relu = make_node("Relu", {"x"}, {"y"});
  Tensor x = Tensor::from_f64({-1, 0.5, 2, sub}, {4}, DType::Float32);
  EXPECT_EQ(score_of(relu, {x}, {Tensor::from_f64({0, 0.5, 2, sub}, {4}, DType::Float32)}).score,
            0);
  // One ULP off a normal result: far outside (only subnormal flushing is slack).
  Score off =
      score_of(relu, {x},
               {Tensor::from_f64({0, 0.5, std::nextafter(2.0f, 3.0f), sub}, {4}, DType::Float32)});
  EXPECT_GT(off.score, 1e20);
  EXPECT_EQ(off.worst_index, 2);
  EXPECT_EQ(off.over, 1);
  // The subnormal result flushed to zero: allowed for arithmetic.
  EXPECT_LE(score_of(relu, {x}, {Tensor::from_f64({0, 0.5, 2, 0}, {4}, DType::Float32)}).score, 1);
  // Data movement must copy every bit.
  Node reshape = make_node("Reshape", {"x", "s"}, {"y"});
  Tensor shape = Tensor::from_i64({2, 2}, {2});
  Score moved =
      score_of(reshape, {x, shape}, {Tensor::from_f64({-1, 0.5, 2, 0}, {2, 2}, DType::Float32)});
  EXPECT_TRUE(std::isinf(moved.score));
}

// The update's error model: Adam evaluated tensor-op by tensor-op in float32 as torch.optim does
// (float32 state) stays within it, also where m's terms cancel; a step with the bias correction
// of the wrong step, or its second moment in float16, does not.
TEST(ErrorModel, AdamUpdateFloat32PassesWrongBiasCorrectionAndHalfStateFail) {
  OptimizerConfig c;
  c.kind = "adam";
  c.lr = 1e-3;
  c.weight_decay = 0.01;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  const std::int64_t n = 4096;
  std::vector<float> w(n), g(n), m(n), v(n);
  for (std::int64_t i = 0; i < n; ++i) {
    w[i] = nd(rng);
    g[i] = 1e-3f * nd(rng);
    m[i] = i % 4 == 0 ? -0.1f * g[i] : 1e-3f * nd(rng);  // cancelling terms every 4th element
    v[i] = 1e-6f * nd(rng) * nd(rng);
    v[i] = std::fabs(v[i]);
  }
  const long t = 5;
  // torch's sequence in float32 with `t_used` in the bias corrections and v stored in `state`.
  auto torch_like = [&](long t_used, DType state) {
    std::vector<double> nw(n), nm(n), nv(n);
    double bc1 = 1 - std::pow(c.beta1, t_used), bc2 = 1 - std::pow(c.beta2, t_used);
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i] + static_cast<float>(c.weight_decay) * w[i];
      float mi = m[i] * static_cast<float>(c.beta1) + d * static_cast<float>(1 - c.beta1);
      float vi = v[i] * static_cast<float>(c.beta2) + d * d * static_cast<float>(1 - c.beta2);
      if (state == DType::Float16) vi = static_cast<float>(half_bits_to_f64(f64_to_half_bits(vi)));
      float denom = std::sqrt(vi) / static_cast<float>(std::sqrt(bc2)) + static_cast<float>(c.eps);
      nw[i] = w[i] - static_cast<float>(c.lr / bc1) * (mi / denom);
      nm[i] = mi;
      nv[i] = vi;
    }
    Shape s{n};
    return Tensors{Tensor::from_f64(nw, s, DType::Float32), Tensor::from_f64(nm, s, DType::Float32),
                   Tensor::from_f64(nv, s, DType::Float32)};
  };
  Shape s{n};
  auto f32 = [&](const std::vector<float>& x) {
    return Tensor::from_f64(std::vector<double>(x.begin(), x.end()), s, DType::Float32);
  };
  auto score = [&](const Tensors& got) {
    UpdateReference r =
        reference_update(c, t, f32(w), f32(g), {f32(m), f32(v)}, DType::Float32, DType::Float32);
    Tensors g64, ref{r.weight, r.slots[0], r.slots[1]};
    for (const auto& x : got) g64.push_back(x.to(DType::Float64));
    return score_outputs(g64, ref, {r.weight_tol, r.slot_tols[0], r.slot_tols[1]});
  };
  Score good = score(torch_like(t, DType::Float32));
  EXPECT_LE(good.score, 1.0) << good.worst_index;
  EXPECT_GT(good.score, 1e-3);  // the bound is not vacuous
  EXPECT_GT(score(torch_like(t + 1, DType::Float32)).score, 1.0);
  EXPECT_GT(score(torch_like(t, DType::Float16)).score, 1.0);
}

// Per-kernel memory: every allocation path is counted, a freed temporary shows in the peak but
