// The oracle's judgement where it is easiest to fool: gradients at smooth critical points and at
// true kinks, the softmax family's backward bound, ties in selections. Each test plants a wrong
// gradient the oracle must reject next to the right ones it must accept.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "analysis/check/binding_check.h"
#include "analysis/core/accuracy.h"
#include "ops/registry.h"

using namespace metaop;

namespace {

Node unary_node(const std::string& op) {
  Node n;
  n.name = op + "_oracle";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  return n;
}

Tensor f32(const std::vector<double>& v, Shape s = {}) {
  if (s.empty()) s = {static_cast<std::int64_t>(v.size())};
  return Tensor::from_f64(v, std::move(s), DType::Float32);
}

// Seeded uniform values in [lo, hi] as a float32 tensor of shape s.
Tensor random_f32(std::mt19937_64& rng, const Shape& s, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& e : v) e = u(rng);
  return f32(v, s);
}

// The backward check of `node` at inputs `in` with output gradient `g`, where the kernel under
// test returned `got` for input 0's gradient.
Score judge_backward(const Node& node, const Tensors& in, const Tensor& g, const Tensor& got,
                     std::int64_t opset = 13) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  Tensors out = op->reference(KernelContext{node, opset}, in);
  Tensors grads(out.size());
  grads[0] = g;
  Tensors result(in.size());
  result[0] = got;
  return check_local_backward(node, opset, in, out, grads, result).score;
}

// The reference VJP of input 0, scaled element-wise by `factor` at the listed positions.
Tensor scaled_reference_grad(const Node& node, const Tensors& in, const Tensor& g,
                             const std::vector<std::size_t>& at, double factor,
                             std::int64_t opset = 13) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  Tensors out = op->reference(KernelContext{node, opset}, in);
  Tensors grads(out.size());
  grads[0] = g;
  auto r = op->vjp(KernelContext{node, opset}, in, out, grads)[0].to_f64();
  for (auto i : at) r[i] *= factor;
  return Tensor::from_f64(r, in[0].shape(), in[0].dtype());
}

}  // namespace

// A smooth critical point (the probe's edge value 0 of Tanh, Sigmoid, Exp, Sin; 1 of LeakyRelu)
// is judged like any other point: a gradient 9 times the exact one is a defect there.
TEST(Oracle, SmoothCriticalPointsAreJudged) {
  for (const char* op : {"Tanh", "Sigmoid", "Exp", "Sin", "Erf", "Atan", "LeakyRelu", "Elu"}) {
    Node n = unary_node(op);
    double at = std::string(op) == "LeakyRelu" ? 1.0 : 0.0;
    Tensors in{f32({at, 0.25, -0.5})};
    Tensor g = f32({1, 1, 1});
    Score right = judge_backward(n, in, g, scaled_reference_grad(n, in, g, {}, 1));
    EXPECT_FALSE(right.bad()) << op << ": the exact gradient scores " << right.score;
    Score wrong = judge_backward(n, in, g, scaled_reference_grad(n, in, g, {0}, 9));
    EXPECT_TRUE(wrong.bad()) << op << " at x = " << at << ": a gradient 9x the exact one scores "
                             << wrong.score;
  }
}

// At a true kink every value between the one-sided derivatives is a correct gradient (the
// subgradient set); a value outside it is not.
TEST(Oracle, KinksAcceptTheSubgradientIntervalOnly) {
  struct Case {
    const char* op;
    double at, inside, outside;  // gradient values for g = 1
  };
  for (auto c : {Case{"Relu", 0, 0.5, 1.5}, Case{"Relu", 0, 1, -0.5}, Case{"Abs", 0, -1, 1.25},
                 Case{"Abs", 0, 0.3, -2}, Case{"LeakyRelu", 0, 0.5, -0.1}, Case{"Elu", 0, 1, 2}}) {
    Node n = unary_node(c.op);
    Tensors in{f32({c.at, 2.0})};
    Tensor g = f32({1, 1});
    auto with = [&](double v) {
      auto r = scaled_reference_grad(n, in, g, {}, 1).to_f64();
      r[0] = v;
      return f32(r);
    };
    Score inside = judge_backward(n, in, g, with(c.inside));
    EXPECT_FALSE(inside.bad()) << c.op << " at its kink " << c.at << ": " << c.inside
                               << " is a subgradient, scored " << inside.score;
    Score outside = judge_backward(n, in, g, with(c.outside));
    EXPECT_TRUE(outside.bad()) << c.op << " at its kink " << c.at << ": " << c.outside
                               << " is not a subgradient, scored " << outside.score;
  }
}

// Softmax and LogSoftmax backward on [8, 1000] logits in [-5, 5]: the reference passes, every
// gradient scaled by 1.05 (Softmax) or 1.01 (LogSoftmax) fails.
TEST(Oracle, SoftmaxBackwardBoundIsNotSquared) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-5, 5), ug(-1, 1);
  std::vector<double> x(8000), gv(8000);
  for (auto& v : x) v = u(rng);
  for (auto& v : gv) v = ug(rng);
  for (auto [op, factor] : {std::pair{"Softmax", 1.05}, std::pair{"LogSoftmax", 1.01}}) {
    Node n = unary_node(op);
    n.attrs["axis"] = Attribute::of_int(-1);
    Tensors in{f32(x, {8, 1000})};
    Tensor g = f32(gv, {8, 1000});
    Score right = judge_backward(n, in, g, scaled_reference_grad(n, in, g, {}, 1));
    EXPECT_FALSE(right.bad()) << op << ": the exact gradient scores " << right.score;
    std::vector<std::size_t> all(8000);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    Score wrong = judge_backward(n, in, g, scaled_reference_grad(n, in, g, all, factor));
    EXPECT_TRUE(wrong.bad()) << op << ": every gradient scaled by " << factor << " scores "
                             << wrong.score;
  }
}

// A tie in one window of a max pool leaves that window's gradient free to go to either tied
// element; a wrong gradient elsewhere in the tensor is still a defect.
TEST(Oracle, TiesExemptOnlyTheirOwnWindow) {
  Node n = unary_node("MaxPool");
  n.attrs["kernel_shape"] = Attribute::of_ints({2, 2});
  n.attrs["strides"] = Attribute::of_ints({2, 2});
  // Two 2x2 windows; the first has a tie for its maximum (5 at [0,0] and [1,1]). The values of
  // the second (5, 2, 4, 1) also occur in the first, so a tensor-wide exemption would miss it.
  Tensors in{f32({5, 4, 5, 2,  //
                  0, 5, 4, 1},
                 {1, 1, 2, 4})};
  Tensor g = f32({1, 1}, {1, 1, 1, 2});
  auto grad = [&](const std::vector<double>& v) { return f32(v, {1, 1, 2, 4}); };
  // The tie split either way (or evenly) is right; the second window's max takes its 1.
  for (const auto& v :
       {std::vector<double>{1, 0, 1, 0, 0, 0, 0, 0}, std::vector<double>{0, 0, 1, 0, 0, 1, 0, 0},
        std::vector<double>{0.5, 0, 1, 0, 0, 0.5, 0, 0}}) {
    Score s = judge_backward(n, in, g, grad(v));
    EXPECT_FALSE(s.bad()) << "a subgradient at the tie scored " << s.score;
  }
  // Wrong in the window without a tie (its gradient sent to 4 instead of 5).
  Score s = judge_backward(n, in, g, grad({1, 0, 0, 0, 0, 0, 1, 0}));
  EXPECT_TRUE(s.bad()) << "a wrong gradient outside the tied window scored " << s.score;
  // Wrong inside the tied window: a non-maximal element gets gradient.
  s = judge_backward(n, in, g, grad({0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(s.bad()) << "gradient sent to a non-maximal element scored " << s.score;
  // More than the window's gradient in total at the tie.
  s = judge_backward(n, in, g, grad({1, 0, 1, 0, 0, 1, 0, 0}));
  EXPECT_TRUE(s.bad()) << "the tie's gradient given twice scored " << s.score;
}

// ReduceMax with a tie in one row: the other row is judged exactly, although its values also
// occur in the tied row.
TEST(Oracle, ReduceMaxTieExemptsOnlyItsGroup) {
  Node n = unary_node("ReduceMax");
  n.attrs["axes"] = Attribute::of_ints({1});
  n.attrs["keepdims"] = Attribute::of_int(1);
  Tensors in{f32({9, 9, 4, 4, 9, 1}, {2, 3})};
  Tensor g = f32({1, 1}, {2, 1});
  auto grad = [&](const std::vector<double>& v) { return f32(v, {2, 3}); };
  EXPECT_FALSE(judge_backward(n, in, g, grad({1, 0, 0, 0, 1, 0})).bad());
  EXPECT_FALSE(judge_backward(n, in, g, grad({0.5, 0.5, 0, 0, 1, 0})).bad());
  EXPECT_TRUE(judge_backward(n, in, g, grad({1, 0, 0, 1, 0, 0})).bad());
  EXPECT_TRUE(judge_backward(n, in, g, grad({1, 1, 0, 0, 1, 0})).bad());
}

namespace {

// A binding that runs the reference but leaves out every output after the first.
class OmittingBinding : public Binding {
 public:
  std::string name() const override { return "omitting"; }
  Support supports(const std::string&) const override { return {true, false, {}, ""}; }
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override {
    Tensors out = OpRegistry::instance().find(node.op_type)->reference({node, opset}, inputs);
    out.resize(1);
    return out;
  }
};

// A binding whose gradient is the reference's, at points where finite differences cannot judge.
class ReferenceBackward : public Binding {
 public:
  std::string name() const override { return "reference-backward"; }
  Support supports(const std::string&) const override { return {true, true, {}, ""}; }
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override {
    return OpRegistry::instance().find(node.op_type)->reference({node, opset}, inputs);
  }
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& grads) override {
    return OpRegistry::instance().find(node.op_type)->vjp({node, opset}, inputs, outputs, grads);
  }
};

}  // namespace

// The forward binding check judges with the op's error model (a 20-ulp error in Exp fails, as
// 1e-4 relative would not), an output the binding leaves out is a mismatch, and a backward
// check that could compare no coordinate with finite differences fails.
TEST(Oracle, BindingChecksUseTheErrorModelAndSkipNothingSilently) {
  Node exp = unary_node("Exp");
  Tensors in{f32({0.5, 1.5, -2})};
  struct Off : ReferenceBackward {
    Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override {
      auto v = ReferenceBackward::forward(node, opset, inputs)[0].to_f64();
      for (auto& x : v) x *= 1 + 20 * std::ldexp(1.0, -24);
      return {Tensor::from_f64(v, {3}, DType::Float32)};
    }
  } off;
  NodeVerdict v = check_forward(off, exp, 13, in);
  EXPECT_EQ(v.status, NodeStatus::Mismatch) << v.detail;
  EXPECT_EQ(v.kind, "accuracy");

  Node drop = unary_node("Dropout");
  drop.outputs = {"y", "mask"};
  OmittingBinding omitting;
  v = check_forward(omitting, drop, 13, {f32({1, 2, 3})});
  EXPECT_EQ(v.status, NodeStatus::Mismatch) << v.detail;
  EXPECT_EQ(v.kind, "omitted");

  // Relu at exact zeros only: every coordinate is a kink.
  ReferenceBackward ref;
  Node relu = unary_node("Relu");
  v = check_backward(ref, relu, 13, {f32({0, 0, 0})});
  EXPECT_EQ(v.status, NodeStatus::Error) << v.detail;
  EXPECT_EQ(v.compared, 0);
  EXPECT_EQ(v.skipped, 3);
  v = check_backward(ref, relu, 13, {f32({0, 1, 2})});
  EXPECT_EQ(v.status, NodeStatus::Ok) << v.detail;
  EXPECT_EQ(v.compared, 2);
}

// ReduceLogSumExp's backward, g exp(x - y), computed as a float32 kernel does (torch's): x - y
// rounded to float32 before exp, from the kernel's own rounded y. At logit spreads of 3 to 30 the
// rounding of x - y alone is up to 30 u relative: the backward bound must carry it (it scored
// up to 8 without), yet a gradient 1e-4 off stays a finding.
TEST(Oracle, ReduceLogSumExpBackwardAllowsTheRoundingOfXMinusY) {
  Node n = unary_node("ReduceLogSumExp");
  n.attrs["axes"] = Attribute::of_ints({1});
  n.attrs["keepdims"] = Attribute::of_int(1);
  for (double spread : {3.0, 10.0, 30.0}) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(spread));
    std::uniform_real_distribution<double> u(-spread / 2, spread / 2);
    std::vector<double> xs(4 * 64), gs(4);
    for (auto& v : xs) v = static_cast<float>(u(rng) + 40);  // |y| near 40-55
    for (auto& v : gs) v = static_cast<float>(u(rng) / spread + 1);
    Tensors in{f32(xs, {4, 64})};
    const MetaOp* op = OpRegistry::instance().find("ReduceLogSumExp");
    Tensors out = op->reference(KernelContext{n, 13}, in);
    auto y = out[0].to_f64();
    std::vector<double> honest(xs.size()), off(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      auto x32 = static_cast<float>(xs[i]), y32 = static_cast<float>(y[i / 64]);
      float d = std::exp(x32 - y32);
      honest[i] = static_cast<float>(gs[i / 64]) * d;
      off[i] = honest[i] * (1 + 1e-4);
    }
    Tensor g = f32(gs, {4, 1});
    EXPECT_LE(judge_backward(n, in, g, f32(honest, {4, 64})).score, 1) << "spread " << spread;
    EXPECT_GT(judge_backward(n, in, g, f32(off, {4, 64})).score, 1) << "spread " << spread;
  }
}

// The recurrent cells' VJPs (backpropagation through time) against finite differences, on what
// the op's own cases leave out: every optional input (sequence lengths, initial states,
// peepholes), both layouts, input_forget, clip, linear_before_reset, the other activations. Each
// configuration compares every coordinate of every input; a sign or a missing term in any
// gate's derivative fails it.
TEST(Oracle, RecurrentVjpsMatchFiniteDifferences) {
  struct Config {
    const char* op;
    int gates;
    std::int64_t dirs;
    bool layout1;
    std::vector<std::int32_t> lens;
    std::map<std::string, Attribute> attrs;
  };
  const auto text = [](std::vector<std::string> v) {
    Attribute a;
    a.kind = Attribute::Kind::Strings;
    a.strings = std::move(v);
    return a;
  };
  const auto reals = [](std::vector<double> v) {
    Attribute a;
    a.kind = Attribute::Kind::Floats;
    a.floats = std::move(v);
    return a;
  };
  const std::vector<Config> configs = {
      {"LSTM",
       4,
       1,
       false,
       {4, 2},
       {{"input_forget", Attribute::of_int(1)}, {"clip", Attribute::of_float(1.2)}}},
      {"LSTM", 4, 2, true, {3, 4}, {{"direction", Attribute::of_string("bidirectional")}}},
      {"GRU", 3, 1, false, {3, 0}, {{"direction", Attribute::of_string("reverse")}}},
      {"GRU",
       3,
       2,
       true,
       {4, 1},
       {{"direction", Attribute::of_string("bidirectional")},
        {"linear_before_reset", Attribute::of_int(1)},
        {"activations", text({"Sigmoid", "Softsign", "HardSigmoid", "Tanh"})}}},
      {"RNN",
       1,
       2,
       false,
       {2, 4},
       {{"direction", Attribute::of_string("bidirectional")},
        {"activations", text({"ScaledTanh", "Softplus"})},
        {"activation_alpha", reals({0.8})},
        {"activation_beta", reals({1.3})},
        {"clip", Attribute::of_float(1.5)}}},
  };
  const std::int64_t seq = 4, batch = 2, in = 3, h = 3;
  std::mt19937_64 rng(7);
  auto random = [&](const Shape& s) { return random_f32(rng, s, -0.8, 0.8); };
  ReferenceBackward ref;
  for (const Config& c : configs) {
    Node n;
    n.name = std::string(c.op) + "_vjp";
    n.op_type = c.op;
    n.attrs = c.attrs;
    n.attrs["hidden_size"] = Attribute::of_int(h);
    if (c.layout1) n.attrs["layout"] = Attribute::of_int(1);
    const bool lstm = c.gates == 4;
    const Shape state = c.layout1 ? Shape{batch, c.dirs, h} : Shape{c.dirs, batch, h};
    Tensors x{random(c.layout1 ? Shape{batch, seq, in} : Shape{seq, batch, in}),
              random({c.dirs, c.gates * h, in}),
              random({c.dirs, c.gates * h, h}),
              random({c.dirs, 2 * c.gates * h}),
              Tensor::from_i64({c.lens.begin(), c.lens.end()}, {batch}, DType::Int32),
              random(state)};
    if (lstm) {
      x.push_back(random(state));
      x.push_back(random({c.dirs, 3 * h}));
    }
    for (std::size_t i = 0; i < x.size(); ++i) n.inputs.push_back(fmt::format("x{}", i));
    n.outputs =
        lstm ? std::vector<std::string>{"y", "yh", "yc"} : std::vector<std::string>{"y", "yh"};
    NodeVerdict v = check_backward(ref, n, 14, x, 3, 1000);
    EXPECT_EQ(v.status, NodeStatus::Ok) << n.name << " " << v.detail;
    std::int64_t coordinates = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (i != 4) coordinates += x[i].numel();
    // Every coordinate compared but the few that sit on a clip boundary or an activation's kink.
    EXPECT_GE(v.compared + v.skipped, coordinates) << n.name;
    EXPECT_LE(v.skipped, coordinates / 20) << n.name;
  }
}

// Attention's backward bound (attention_vjp_bound): a gradient a few ulps off everywhere passes
// (ATen's scaled_dot_product_attention passes it on the op's cases, bindings_torch), one element
// of dQ 1e-4 off relative does not: the bound follows the softmax's cancellation without
// accepting what a correct float32 kernel cannot produce.
TEST(Oracle, AttentionBackwardBoundIsTight) {
  Node n;
  n.name = "attention_oracle";
  n.op_type = "Attention";
  n.inputs = {"q", "k", "v"};
  n.outputs = {"y"};
  std::mt19937_64 rng(5);
  auto random = [&](const Shape& s) { return random_f32(rng, s, -2, 2); };
  Tensors in{random({1, 2, 5, 8}), random({1, 2, 6, 8}), random({1, 2, 6, 4})};
  Tensor g = random({1, 2, 5, 4});
  const double ulps4 = 1 + 4 * 0x1p-24;
  std::vector<std::size_t> all(static_cast<std::size_t>(in[0].numel()));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_LE(judge_backward(n, in, g, scaled_reference_grad(n, in, g, all, ulps4, 23), 23).score, 1);
  Score off = judge_backward(n, in, g, scaled_reference_grad(n, in, g, {3}, 1 + 1e-4, 23), 23);
  EXPECT_GT(off.score, 1);
}

// Det's backward bound (det_vjp_magnitude): g det A^-T perturbed as LUs perturb A. A gradient a
// few ulps off everywhere passes (ATen's linalg_det backward passes it on the op's cases,
// bindings_torch), one element 1e-4 off does not; a singular matrix's cofactors are bounded too.
TEST(Oracle, DetBackwardBoundIsTight) {
  Node n = unary_node("Det");
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> x(2 * 16);
  for (auto& e : x) e = u(rng);
  for (int j = 0; j < 4; ++j) x[16 + 4 * 3 + j] = x[16 + 4 * 1 + j];  // the second is singular
  Tensors in{f32(x, {2, 4, 4})};
  Tensor g = f32({0.7, -1.3}, {2});
  std::vector<std::size_t> all(x.size());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_LE(
      judge_backward(n, in, g, scaled_reference_grad(n, in, g, all, 1 + 4 * 0x1p-24, 11), 11).score,
      1);
  EXPECT_GT(judge_backward(n, in, g, scaled_reference_grad(n, in, g, {5}, 1 + 1e-4, 11), 11).score,
            1);
  EXPECT_GT(judge_backward(n, in, g, scaled_reference_grad(n, in, g, {21}, 1 + 1e-4, 11), 11).score,
            1);
}

// GridSample's backward bound (grid_sample_vjp_magnitude), cubic with reflection: gradients a
// few ulps off everywhere pass (ATen's pass on the op's cases, bindings_torch), one element of X's
// or of the grid's gradient 1e-4 off does not. The bound carries the cubic weights' own Horner
// rounding and the reflection's, which a float32 kernel has and the generic bound missed.
TEST(Oracle, GridSampleBackwardBoundIsTight) {
  Node n;
  n.name = "grid_sample_oracle";
  n.op_type = "GridSample";
  n.inputs = {"x", "grid"};
  n.outputs = {"y"};
  n.attrs["mode"] = Attribute::of_string("cubic");
  n.attrs["padding_mode"] = Attribute::of_string("reflection");
  n.attrs["align_corners"] = Attribute::of_int(1);
  std::mt19937_64 rng(3);
  auto random = [&](const Shape& s, double lo, double hi) { return random_f32(rng, s, lo, hi); };
  Tensors in{random({1, 2, 5, 4}, -2, 2), random({1, 3, 3, 2}, -1.3, 1.3)};
  const MetaOp* op = OpRegistry::instance().find("GridSample");
  const KernelContext ctx{n, 20};
  Tensors out = op->reference(ctx, in);
  Tensors grads{random(out[0].shape(), -1, 1)};
  const Tensors exact = op->vjp(ctx, in, out, grads);
  auto score = [&](std::size_t which, std::size_t at, double factor) {
    Tensors got(2);
    for (std::size_t i = 0; i < 2; ++i) {
      auto v = exact[i].to_f64();
      for (std::size_t k = 0; k < v.size(); ++k)
        v[k] *= i == which && (at == SIZE_MAX || k == at) ? factor : 1 + 4 * 0x1p-24;
      got[i] = f32(v, in[i].shape());
    }
    return check_local_backward(n, 20, in, out, grads, got).score.score;
  };
  EXPECT_LE(score(0, SIZE_MAX, 1 + 4 * 0x1p-24), 1);
  EXPECT_GT(score(0, 7, 1 + 1e-4), 1);
  EXPECT_GT(score(1, 4, 1 + 1e-4), 1);
}
