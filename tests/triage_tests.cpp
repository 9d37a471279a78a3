// Triage (analysis/core/triage.h): every op says how its definition is evaluated in float32, the
// float32 evaluations agree with the reference where float32 has room (the ONNX node tests'
// own inputs), and a planted kernel that computes the definition as written is a float32 limit
// where one that is worse is a defect; conventions explain only the cases they name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "analysis/core/accuracy.h"
#include "analysis/core/node_cases.h"
#include "analysis/core/onnx_tests.h"
#include "analysis/core/train_check.h"
#include "analysis/core/triage.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "tensor/error.h"
#include "unit_util.h"

using namespace metaop;
using metaop::unit::make_node;

#ifndef METAOP_ONNX_NODE_TESTS
#define METAOP_ONNX_NODE_TESTS "/usr/share/libonnx-testdata/data/node"
#endif

namespace {

Tensor f32(const std::vector<double>& v, Shape s = {}) {
  if (s.empty()) s = {static_cast<std::int64_t>(v.size())};
  return Tensor::from_f64(v, std::move(s), DType::Float32);
}

// The triage of `got` as node's outputs on `in`.
Triage judge(const Node& node, const Tensors& in, const Tensors& got, std::int64_t opset = 13) {
  LocalCheck lc = check_local(node, opset, in, got);
  EXPECT_TRUE(lc.score.bad()) << node.op_type << ": the planted kernel must be a finding";
  return triage_local(node, opset, in, lc, got);
}

Tensors twin(const Node& node, const Tensors& in, std::int64_t opset = 13) {
  return OpRegistry::instance()
      .find(node.op_type)
      ->float32.evaluate(KernelContext{node, opset}, in, SumOrder::written);
}

// An ONNX node test of one node whose inputs (given, or initializers) hold no float64 data.
struct NodeTest {
  std::string dir;
  Graph g;
  Tensors in;
};

std::vector<NodeTest> float32_node_tests() {
  std::vector<NodeTest> tests;
  for (const auto& dir : find_conformance_tests({METAOP_ONNX_NODE_TESTS})) {
    NodeTest t{dir, {}, {}};
    std::map<std::string, Tensor> values;
    try {
      t.g = load_onnx((std::filesystem::path(dir) / "model.onnx").string());
      if (t.g.nodes.size() != 1) continue;
      values = load_test_inputs(t.g, dir);
    } catch (const std::exception&) {
      continue;
    }
    bool narrow = true;
    for (const auto& name : t.g.nodes[0].inputs) {
      Tensor v;
      if (auto it = values.find(name); it != values.end())
        v = it->second;
      else if (auto init = t.g.initializers.find(name); init != t.g.initializers.end())
        v = init->second;
      narrow = narrow && !(v.defined() && v.dtype() == DType::Float64);
      t.in.push_back(v);
    }
    if (narrow) tests.push_back(std::move(t));
  }
  return tests;
}

}  // namespace

// Every op declares its float32 evaluation (a twin, or "rounded once"): none of its findings on
// float32 data stays untriaged.
TEST(Triage, EveryOpDeclaresItsFloat32Evaluation) {
  const auto& reg = OpRegistry::instance();
  for (const auto& type : reg.types()) {
    EXPECT_NE(reg.find(type)->float32.how, Float32Definition::How::undeclared) << type;
    if (reg.find(type)->float32.how == Float32Definition::How::twin) {
      EXPECT_FALSE(reg.find(type)->float32.formula.empty()) << type;
      EXPECT_FALSE(reg.find(type)->float32.better.empty()) << type;
    }
  }
}

// On the ONNX node tests' own float32 inputs (ordinary values) each twin is within the op's
// error model: a twin that computed something else would class real defects as float32 limits.
// The definitions of Elu, Selu and Celu (alpha (exp(x) - 1) ...) cancel for small |x| on
// ordinary inputs too, which is their float32 limit: their twins are held to 16 times the model
// (a twin that computed another function would be off by far more).
TEST(Triage, TwinsAreWithinTheErrorModelOnTheNodeTests) {
  if (!std::filesystem::is_directory(METAOP_ONNX_NODE_TESTS)) GTEST_SKIP() << "no node tests";
  const auto& reg = OpRegistry::instance();
  std::set<std::string> judged;
  for (const auto& [dir, g, in] : float32_node_tests()) {
    const Node& node = g.nodes[0];
    const MetaOp* op = reg.find(node.op_type);
    if (!op || op->float32.how != Float32Definition::How::twin) continue;
    KernelContext ctx{node, g.opset};
    Tensors ref;
    try {
      ref = op->reference(ctx, in);
    } catch (const std::exception&) {
      continue;  // inputs the reference refuses
    }
    Tensors y;
    try {
      y = op->float32.evaluate(ctx, in, SumOrder::written);
    } catch (const Error& e) {
      // Only the scatters' reductions are declared without an evaluation.
      EXPECT_NE(std::string(e.what()).find("reduction"), std::string::npos) << dir << e.what();
      continue;
    }
    auto tol = tolerances(*op, ctx, in, ref, {});
    if (node.op_type == "Elu" || node.op_type == "Selu" || node.op_type == "Celu")
      for (auto& t : tol)
        for (auto& e : t) e *= 16;
    Score s = score_outputs(y, ref, tol);
    EXPECT_FALSE(s.bad()) << std::filesystem::path(dir).filename().string() << ": "
                          << describe_worst(node, s, in, ref, "float32 twin");
    judged.insert(node.op_type);
  }
  // The twins the node tests reach (all but the training-mode statistics of BatchNormalization
  // and the ops whose tests are float64 or multi-node).
  EXPECT_GE(judged.size(), 30u);
}

// Softplus as written, log(exp(x) + 1), overflows above 88.72 although the exact result is x:
// a kernel computing it so is a float32 limit; one that gives inf at x = 50 is a defect.
TEST(Triage, NaiveSoftplusIsAFloat32LimitAndAWorseKernelADefect) {
  Node n = make_node("Softplus", {"x"}, {"y"});
  Tensors in{f32({1, 50, 100})};
  Tensors naive = twin(n, in);
  EXPECT_TRUE(std::isinf(naive[0].to_f64()[2]));
  Triage t = judge(n, in, naive);
  EXPECT_EQ(t.cls, FindingClass::Float32Limit) << t.basis;
  EXPECT_NE(t.basis.find("log(exp(x) + 1)"), std::string::npos) << t.basis;
  EXPECT_NE(t.basis.find("log1p"), std::string::npos) << t.basis;

  Tensors worse{f32({std::log1p(std::exp(1.0)), INFINITY, INFINITY})};
  t = judge(n, in, worse);
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
  EXPECT_NE(t.basis.find("y[1]"), std::string::npos) << t.basis;
}

// ReduceL2 of values near 1e20: the float32 sum of squares overflows, the exact norm does not.
// The naive kernel is a float32 limit; a kernel 10x off on ordinary values is a defect.
TEST(Triage, ReduceL2OverflowIsAFloat32Limit) {
  Node n = make_node("ReduceL2", {"x"}, {"y"});
  n.attrs["keepdims"] = Attribute::of_int(0);
  Tensors in{f32({3e20, -4e20, 1e19, 2e19}, {1, 4})};
  Tensors naive = twin(n, in);
  EXPECT_TRUE(std::isinf(naive[0].to_f64()[0]));
  EXPECT_EQ(judge(n, in, naive).cls, FindingClass::Float32Limit);

  Tensors small{f32({3, -4, 0, 0}, {1, 4})};
  EXPECT_EQ(judge(n, small, {f32({50}, {1})}).cls, FindingClass::Defect);
}

// Elu's alpha (exp(x) - 1) cancels for tiny x (0 where the exact result is -8.4e-17): the
// definition's own float32 limit, which expm1 avoids.
TEST(Triage, EluCancellationIsAFloat32Limit) {
  Node n = make_node("Elu", {"x"}, {"y"});
  Tensors in{f32({-8.4e-17, -1, 2})};
  Tensors naive = twin(n, in);
  EXPECT_EQ(naive[0].to_f64()[0], 0.0);
  Triage t = judge(n, in, naive);
  EXPECT_EQ(t.cls, FindingClass::Float32Limit) << t.basis;
  EXPECT_NE(t.basis.find("expm1"), std::string::npos) << t.basis;
}

// A one-operation op has no float32 limit: any finding of it is a defect.
TEST(Triage, RoundedOpsAreDefects) {
  Node n = make_node("Add", {"a", "b"}, {"y"});
  Tensors in{f32({1, 2}), f32({3, 4})};
  Triage t = judge(n, in, {f32({4, 6.5})});
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
}

// NaN through Max: a kernel that drops NaN follows a convention; the same kernel wrong on a
// finite element is a defect.
TEST(Triage, NanThroughMaxIsAConventionOnlyWhereNanIs) {
  Node n = make_node("Max", {"a", "b"}, {"y"});
  Tensors in{f32({NAN, 1, 2}), f32({0, 5, 1})};
  EXPECT_EQ(judge(n, in, {f32({0, 5, 2})}).cls, FindingClass::Convention);
  EXPECT_EQ(judge(n, in, {f32({0, 4, 2})}).cls, FindingClass::Defect);
}

// ArgMax where NaN takes part: which index is a convention; in a row without NaN, a defect.
TEST(Triage, ArgMaxWithNanIsAConventionInItsRowOnly) {
  Node n = make_node("ArgMax", {"x"}, {"y"});
  n.attrs["axis"] = Attribute::of_int(1);
  n.attrs["keepdims"] = Attribute::of_int(0);
  Tensors in{f32({1, NAN, 0, 3, 2, 1}, {2, 3})};
  auto idx = [](const std::vector<double>& v) { return Tensor::from_f64(v, {2}, DType::Int64); };
  Tensors ref = unit::run_ref(n, in);
  ASSERT_EQ(ref[0].to_f64(), (std::vector<double>{1, 0}));
  EXPECT_EQ(judge(n, in, {idx({0, 0})}).cls, FindingClass::Convention);
  EXPECT_EQ(judge(n, in, {idx({1, 1})}).cls, FindingClass::Defect);
}

// Conv with an infinite weight and pads: a kernel that skips the padded taps (+inf where the
// zero padding gives 0 x inf = NaN) follows a convention at the border only; the same kernel
// wrong at an output whose window has no padded tap is a defect.
TEST(Triage, SkippedPaddedTapsAreAConventionAtTheBorderOnly) {
  Node n = make_node("Conv", {"x", "w"}, {"y"});
  n.attrs["kernel_shape"] = Attribute::of_ints({3});
  n.attrs["pads"] = Attribute::of_ints({1, 1});
  Tensors in{f32({-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {1, 1, 4}),
             f32({-INFINITY, -INFINITY, -INFINITY}, {1, 1, 3})};
  Tensors ref = unit::run_ref(n, in);
  auto y = ref[0].to_f64();
  ASSERT_TRUE(std::isnan(y[0]) && std::isinf(y[1]) && std::isinf(y[2]) && std::isnan(y[3]));
  EXPECT_EQ(judge(n, in, {f32({INFINITY, INFINITY, INFINITY, INFINITY}, {1, 1, 4})}).cls,
            FindingClass::Convention);
  EXPECT_EQ(judge(n, in, {f32({INFINITY, 0, INFINITY, INFINITY}, {1, 1, 4})}).cls,
            FindingClass::Defect);
  // Finite weights: no padded tap is 0 x inf, the convention does not apply.
  Tensors finite{in[0], f32({1, 1, 1}, {1, 1, 3})};
  EXPECT_NE(judge(n, finite, {f32({1, 1, 1, 1}, {1, 1, 4})}).cls, FindingClass::Convention);
}

// RoiAlign's max mode: the text names it only. A kernel taking the max of the interpolated samples
// (on a constant image, the constant) follows the roi-max-pooling convention; one that starts the
// max at 0 (OpenVINO 2026.4: 0 for a bin of negative samples) follows neither reading: a defect.
// Regions the text leaves undefined are refused.
TEST(Triage, RoiAlignMaxOfSamplesIsAConventionAndAZeroFloorADefect) {
  Node n = make_node("RoiAlign", {"x", "rois", "b"}, {"y"});
  n.attrs["mode"] = Attribute::of_string("max");
  n.attrs["output_height"] = Attribute::of_int(2);
  n.attrs["output_width"] = Attribute::of_int(2);
  n.attrs["sampling_ratio"] = Attribute::of_int(2);
  n.attrs["spatial_scale"] = Attribute::of_float(1.0);
  n.attrs["coordinate_transformation_mode"] = Attribute::of_string("half_pixel");
  Tensors in{f32(std::vector<double>(16, -1.0), {1, 1, 4, 4}), f32({0.3, 0.2, 3.4, 3.7}, {1, 4}),
             Tensor::from_i64({0}, {1})};
  const auto ref = unit::run_ref(n, in, 16)[0].to_f64();
  for (double v : ref) ASSERT_TRUE(v < 0 && v > -0.05) << v;  // the largest weighted corner
  EXPECT_EQ(judge(n, in, {f32({-1, -1, -1, -1}, {1, 1, 2, 2})}, 16).cls, FindingClass::Convention);
  EXPECT_EQ(judge(n, in, {f32({0, 0, 0, 0}, {1, 1, 2, 2})}, 16).cls, FindingClass::Defect);
  // A batch index past X's batch, a non-finite corner, and (adaptive grid) an empty region.
  EXPECT_THROW(refuse_undefined_inputs(n, {in[0], in[1], Tensor::from_i64({1}, {1})}), Error);
  EXPECT_THROW(refuse_undefined_inputs(n, {in[0], f32({0, 0, INFINITY, 2}, {1, 4}), in[2]}), Error);
  EXPECT_NO_THROW(refuse_undefined_inputs(n, {in[0], f32({2, 0, 2, 3}, {1, 4}), in[2]}));
  n.attrs["sampling_ratio"] = Attribute::of_int(0);
  EXPECT_THROW(refuse_undefined_inputs(n, {in[0], f32({2, 0, 2, 3}, {1, 4}), in[2]}), Error);
  EXPECT_NO_THROW(refuse_undefined_inputs(n, in));
}

// A kernel that reads subnormal inputs as zero (denormals-are-zero) follows a convention.
TEST(Triage, SubnormalInputsReadAsZeroAreAConvention) {
  Node n = make_node("Hardmax", {"x"}, {"y"});
  Tensors in{f32({1.4e-45, 0, -1})};
  Tensors ref = unit::run_ref(n, in);
  ASSERT_EQ(ref[0].to_f64(), (std::vector<double>{1, 0, 0}));
  // Read as zero, the first two tie and both are the first maximum: the same answer. Pick a
  // tie the other way round.
  Tensors in2{f32({0, 1.4e-45, -1})};
  Tensors ref2 = unit::run_ref(n, in2);
  ASSERT_EQ(ref2[0].to_f64(), (std::vector<double>{0, 1, 0}));
  Triage t = judge(n, in2, {f32({1, 0, 0})});
  EXPECT_EQ(t.cls, FindingClass::Convention) << t.basis;
  EXPECT_NE(t.basis.find("subnormal"), std::string::npos) << t.basis;
}

// Clip without min or max: ONNX names the dtype's extremes, so -inf clips to float32's lowest.
TEST(Triage, ClipWithoutBoundsClampsToTheDtypesExtremes) {
  Node n = make_node("Clip", {"x"}, {"y"});
  Tensors out = unit::run_ref(n, {f32({-INFINITY, 1, INFINITY})});
  EXPECT_EQ(out[0].to_f64(),
            (std::vector<double>{-3.4028234663852886e38, 1, 3.4028234663852886e38}));
}

// An op without a float32 evaluation leaves its findings untriaged, and they fail the run.
// A finding a float32 evaluation cannot class (float64 data) is untriaged, and fails the run as a
// defect does.
TEST(Triage, FindingsWithoutAFloat32EvaluationAreUntriagedAndFailTheRun) {
  Node n = make_node("Einsum", {"a", "b"}, {"y"});
  Attribute eq;
  eq.kind = Attribute::Kind::String;
  eq.s = "i,i->";
  n.attrs["equation"] = eq;
  auto f64 = [](const std::vector<double>& v) {
    return Tensor::from_f64(v, {static_cast<std::int64_t>(v.size())}, DType::Float64);
  };
  Tensors in{f64({1, 2}), f64({3, 4})};
  Triage t = judge(n, in, {Tensor::scalar(12, DType::Float64)});
  EXPECT_EQ(t.cls, FindingClass::Untriaged) << t.basis;
  // The same on float32 data: Einsum's twin gives 11 exactly, the kernel's 12 is a defect.
  EXPECT_EQ(judge(n, {f32({1, 2}), f32({3, 4})}, {Tensor::scalar(12, DType::Float32)}).cls,
            FindingClass::Defect);
  FindingCore f;
  f.kind = FindingKind::Accuracy;
  f.cls = t.cls;
  EXPECT_TRUE(fails_run(f, false));
  f.cls = FindingClass::Float32Limit;
  EXPECT_FALSE(fails_run(f, false));
  EXPECT_TRUE(fails_run(f, true));
  f.cls = FindingClass::Convention;
  EXPECT_FALSE(fails_run(f, true));
}

// An optimizer's step against its documented algorithm in the weight's dtype: Adam's second
// moment beta2 v + (1 - beta2) g^2 overflows float32 for |g| = 1e20 at step 10 (g^2 does; the
// weight then stays where it is, m / inf = 0): a float32 limit. A kernel whose step is 10x the
// rule's on ordinary values is a defect.
TEST(Triage, OptimizerUpdatesAgainstTheirDocumentedAlgorithm) {
  OptimizerConfig adam;
  adam.kind = "adam";
  adam.lr = 0.01;
  Tensor w = f32({0.5, -0.25}), g = f32({1e20, 0.125}), m = f32({1e19, 0.01}),
         v = f32({3e38, 0.001});
  Tensors in{w, g, m, v};
  Tensors faithful = faithful_update(adam, 10, w, g, {m, v});
  EXPECT_EQ(faithful[0].to_f64()[0], 0.5);  // the overflowed v stops the weight
  EXPECT_TRUE(std::isinf(faithful[2].to_f64()[0]));
  LocalCheck lc = check_update(adam, 10, w, g, {m, v}, faithful[0], {faithful[1], faithful[2]});
  ASSERT_TRUE(lc.score.bad());
  Triage t = triage_update(adam, 10, "fc.weight", in, lc, faithful);
  EXPECT_EQ(t.cls, FindingClass::Float32Limit) << t.basis;
  EXPECT_NE(t.basis.find("in float32"), std::string::npos) << t.basis;

  OptimizerConfig sgd;
  sgd.lr = 0.1;
  Tensor w2 = f32({1, 2}), g2 = f32({0.5, -1});
  Tensors right = faithful_update(sgd, 1, w2, g2, {});
  EXPECT_FALSE(check_update(sgd, 1, w2, g2, {}, right[0], {}).score.bad());
  Tensor wrong = f32({1 - 10 * 0.05, 2 + 10 * 0.1});
  LocalCheck bad = check_update(sgd, 1, w2, g2, {}, wrong, {});
  ASSERT_TRUE(bad.score.bad());
  t = triage_update(sgd, 1, "fc.weight", {w2, g2}, bad, {wrong});
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
  EXPECT_NE(t.basis.find("fc.weight[0]"), std::string::npos) << t.basis;
}

namespace {

// The triage of `got` as node's input gradients, for output gradients `grads`.
Triage judge_backward(const Node& node, const Tensors& in, const Tensors& grads, const Tensors& got,
                      std::int64_t opset = 13) {
  Tensors out = metaop::unit::run_ref(node, in, opset);
  LocalCheck lc = check_local_backward(node, opset, in, out, grads, got);
  EXPECT_TRUE(lc.score.bad()) << node.op_type << ": the planted backward must be a finding";
  return triage_backward(node, opset, in, out, grads, lc, got);
}

Tensors reference_vjp(const Node& node, const Tensors& in, const Tensors& grads,
                      std::int64_t opset = 13) {
  Tensors out = metaop::unit::run_ref(node, in, opset);
  return OpRegistry::instance().find(node.op_type)->vjp(KernelContext{node, opset}, in, out, grads);
}

Tensors scaled(const Tensors& ts, double k) {
  Tensors r;
  for (const auto& t : ts) {
    auto v = t.to_f64();
    for (auto& e : v) e *= k;
    r.push_back(Tensor::from_f64(v, t.shape(), t.dtype()));
  }
  return r;
}

}  // namespace

// On the ONNX node tests' own float32 inputs, with seeded output gradients of ordinary size,
// each VJP twin is within the op's backward error model: a twin that computed another gradient
// would class real defects as float32 limits.
TEST(Triage, VjpTwinsAreWithinTheBackwardErrorModelOnTheNodeTests) {
  if (!std::filesystem::is_directory(METAOP_ONNX_NODE_TESTS)) GTEST_SKIP() << "no node tests";
  const auto& reg = OpRegistry::instance();
  std::set<std::string> judged;
  std::uint64_t seed = 1;
  // The node tests and the cases the ops declare for what the node tests lack.
  for (const auto& [type, cases] : node_cases_by_op(METAOP_ONNX_NODE_TESTS)) {
    const MetaOp* op = reg.find(type);
    if (!op || op->vjp_float32.how != Float32Definition::How::twin) continue;
    for (const auto& nc : cases)
      for (const auto& set : nc.input_sets) {
        const Graph& g = nc.graph;
        const Node& node = g.nodes[0];
        Tensors in = node_inputs(g, set);
        bool narrow = std::none_of(in.begin(), in.end(), [](const Tensor& t) {
          return t.defined() && t.dtype() == DType::Float64;
        });
        if (!narrow) continue;
        KernelContext ctx{node, g.opset};
        Tensors out, grads, ref;
        try {
          out = op->reference(ctx, in);
          for (const auto& o : out) {
            if (!o.defined() || !is_floating(o.dtype())) {
              grads.emplace_back();
              continue;
            }
            auto v = metaop::unit::random_values(static_cast<std::size_t>(o.numel()), seed++);
            grads.push_back(Tensor::from_f64(v, o.shape(), o.dtype()));
          }
          ref = op->vjp(ctx, in, out, grads);
        } catch (const std::exception&) {
          continue;  // inputs the reference refuses, or no VJP for them
        }
        Tensors y = op->vjp_float32.evaluate(ctx, in, out, grads, SumOrder::written);
        LocalCheck lc = check_local_backward(node, g.opset, in, out, grads, y);
        EXPECT_FALSE(lc.score.bad())
            << nc.test << ": "
            << describe_worst(node, lc.score, in, lc.reference, "float32 VJP twin");
        judged.insert(type);
      }
  }
  // Among them the products, the broadcasting arithmetic, Softmax, the pools, the normalizations
  // and the unary rows' twins.
  for (const char* op : {"MatMul",
                         "Gemm",
                         "Conv",
                         "ConvTranspose",
                         "Add",
                         "Mul",
                         "Softmax",
                         "LogSoftmax",
                         "Tanh",
                         "Sigmoid",
                         "Exp",
                         "Sqrt",
                         "Reciprocal",
                         "Gather",
                         "MaxPool",
                         "AveragePool",
                         "BatchNormalization",
                         "InstanceNormalization",
                         "LayerNormalization",
                         "GroupNormalization",
                         "Max",
                         "Min",
                         "Sum",
                         "Mean",
                         "Where"})
    EXPECT_TRUE(judged.count(op)) << op << " was not judged";
}

// A Gemm's backward with the gradient's sign flipped is a defect. Gradients of 3e38 against a
// row of ones: the float32 sum of g B^T overflows (3e38 + 3e38) although the exact 3e38 is
// representable; a kernel that gives inf there is no worse than the VJP in float32.
TEST(Triage, GemmBackwardAgainstItsFloat32Vjp) {
  Node n = make_node("Gemm", {"a", "b"}, {"y"});
  Tensors in{f32({1, 2, 3}, {1, 3}), f32({1, 1, 1, 0.5, 0.25, 0.125, 1, 1, 1}, {3, 3})};
  Tensors g{f32({0.5, -1, 2}, {1, 3})};
  Triage t = judge_backward(n, in, g, scaled(reference_vjp(n, in, g), -1));
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
  EXPECT_NE(t.basis.find("grad b[2, 0]"), std::string::npos) << t.basis;

  Tensors huge{f32({3e38, 3e38, -3e38}, {1, 3})};
  Tensors exact = reference_vjp(n, in, huge);
  EXPECT_FLOAT_EQ(exact[0].to_f64()[0], 3e38f);
  Tensors got = exact;
  auto ga = got[0].to_f64();
  ga[0] = INFINITY;
  got[0] = Tensor::from_f64(ga, got[0].shape(), DType::Float32);
  t = judge_backward(n, in, huge, got);
  EXPECT_EQ(t.cls, FindingClass::Float32Limit) << t.basis;
  EXPECT_NE(t.basis.find("wider accumulator"), std::string::npos) << t.basis;
}

// Relu's and ReduceMean's gradients are one operation per element (g or 0, g / n): a doubled
// gradient is a defect. Tanh's 1 - y y from the output: 1.5 times it is worse than that formula
// in float32 (a defect); Erf's VJP declares no float32 evaluation (untriaged).
TEST(Triage, BackwardOfRoundedAndTwinnedVjps) {
  Node relu = make_node("Relu", {"x"}, {"y"});
  Tensors x{f32({-1, 0.5, 2})}, g{f32({1, -2, 3})};
  Triage t = judge_backward(relu, x, g, scaled(reference_vjp(relu, x, g), 2));
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
  EXPECT_NE(t.basis.find("rounded once"), std::string::npos) << t.basis;

  Node mean = make_node("ReduceMean", {"x"}, {"y"});
  Tensors m{f32({1, 2, 3, 4}, {2, 2})}, gm{f32({1}, {1, 1})};
  EXPECT_EQ(judge_backward(mean, m, gm, scaled(reference_vjp(mean, m, gm), 2)).cls,
            FindingClass::Defect);

  Node tanh = make_node("Tanh", {"x"}, {"y"});
  Tensors tx{f32({0.5, 1, -2})}, tg{f32({1, 1, 1})};
  t = judge_backward(tanh, tx, tg, scaled(reference_vjp(tanh, tx, tg), 1.5));
  EXPECT_EQ(t.cls, FindingClass::Defect) << t.basis;
  EXPECT_NE(t.basis.find("1 - y y"), std::string::npos) << t.basis;

  Node erf = make_node("Erf", {"x"}, {"y"});
  t = judge_backward(erf, tx, tg, scaled(reference_vjp(erf, tx, tg), 2));
  EXPECT_EQ(t.cls, FindingClass::Untriaged) << t.basis;
}

// A Mul's gradient read as zero where the output gradient is subnormal (1e-40 times 1e30 is
// 1e-10) follows the subnormal-inputs convention; the same kernel zeroing an ordinary gradient
// is a defect.
TEST(Triage, SubnormalGradientsReadAsZeroAreAConvention) {
  Node n = make_node("Mul", {"a", "b"}, {"y"});
  Tensors in{f32({1, 2}), f32({1e30, 4})};
  Tensors got{f32({0, 4}), f32({0, 2})};
  Triage t = judge_backward(n, in, {f32({1e-40, 1})}, got);
  EXPECT_EQ(t.cls, FindingClass::Convention) << t.basis;
  EXPECT_EQ(judge_backward(n, in, {f32({1e-3, 1})}, got).cls, FindingClass::Defect);
}
