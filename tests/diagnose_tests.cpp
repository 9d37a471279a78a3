// Unit tests of the training diagnosis: monitors over windows and the static checks.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/core/accuracy.h"
#include "analysis/diagnose/diagnose_dropout.h"
#include "analysis/diagnose/diagnose_layers.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_static.h"
#include "analysis/diagnose/diagnose_width.h"
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

namespace {

// An empty float32 graph (opset 17) with input x and output `output`.
Graph io_graph(const std::string& output) {
  Graph g;
  g.path = "unit";
  g.opset = 17;
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::Float32;
  g.inputs = {x};
  ValueInfo y = x;
  y.name = output;
  g.outputs = {y};
  return g;
}

// x -> Gemm(fc) -> h -> ACT(act) -> y, with a trainable weight and bias; with `hidden`, one more
// layer y -> Gemm(fc2) -> z makes z the output.
Graph activation_graph(const std::string& act, bool hidden = true) {
  Graph g = io_graph("y");
  g.initializers["W"] = Tensor::from_f64(std::vector<double>(16, 0.1), {4, 4}, DType::Float32);
  g.initializers["b"] = Tensor::from_f64(std::vector<double>(4, 0.0), {4}, DType::Float32);
  g.nodes.push_back({"fc", "Gemm", "", {"x", "W", "b"}, {"h"}, {}});
  g.nodes.push_back({"act", act, "", {"h"}, {"y"}, {}});
  if (!hidden) return g;
  g.outputs[0].name = "z";
  g.initializers["W2"] = g.initializers["W"];
  g.nodes.push_back({"fc2", "Gemm", "", {"y", "W2"}, {"z"}, {}});
  return g;
}

// One step whose forward holds h and y ([2, 4]); weights unchanged, zero gradients.
struct FakeStep {
  RunResult forward;
  std::map<std::string, Tensor> grads, weights;
  FakeStep(const Graph& g, const std::vector<double>& h, const std::vector<double>& y) {
    forward.values["h"] = Tensor::from_f64(h, {2, 4}, DType::Float32);
    forward.values["y"] = Tensor::from_f64(y, {2, 4}, DType::Float32);
    weights = g.initializers;
    for (const auto& [k, t] : weights) grads[k] = Tensor(t.dtype(), t.shape());
  }
  StepView view(const Graph& g, std::size_t step, double loss) const {
    return {step, 0, loss, &g, &forward, &grads, &weights, &weights};
  }
};

}  // namespace

TEST(Diagnose, DeadReluIsJudgedOverTheWholeWindow) {
  Graph g = activation_graph("Relu");
  TrainConfig c;
  c.batch_size = 2;
  c.epochs = 1;  // 4 samples: 2 steps, one window
  for (double unit2 : {0.0, 1.0}) {
    TrainMonitor m(g, c, 4, {});
    // Units 0-2 output 0 on the first batch; on the second, unit 2 may come alive.
    FakeStep s1(g, std::vector<double>(8, -1), {0, 0, 0, 1, 0, 0, 0, 2});
    FakeStep s2(g, std::vector<double>(8, -1), {0, 0, unit2, 1, 0, 0, 0, 1});
    m.observe(s1.view(g, 1, 1.0));
    m.observe(s2.view(g, 2, 1.0));
    m.finish();
    const Symptom* d = m.record().first("dead_relu");
    if (unit2 == 0) {  // 3 of 4 units dead over the window: 0.75 >= 0.7
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d->node, "act");
      EXPECT_DOUBLE_EQ(d->value, 0.75);
      EXPECT_EQ(d->step, 2u);
    } else {  // 2 of 4
      EXPECT_EQ(d, nullptr);
    }
    EXPECT_DOUBLE_EQ(m.record().activations.at(0).per_step.at(0), 0.75);
  }
}

TEST(Diagnose, SaturationCountsPreactivationsBeyondFiveAndOutputsNearAnAsymptote) {
  // A saturated output Sigmoid is a confident prediction: not watched.
  {
    Graph out = activation_graph("Sigmoid", false);
    TrainConfig c;
    TrainMonitor m(out, c, 2, {});
    EXPECT_TRUE(m.record().activations.empty());
  }
  Graph g = activation_graph("Sigmoid");
  TrainConfig c;
  c.batch_size = 2;
  c.epochs = 1;
  TrainMonitor m(g, c, 2, {});
  // 5 of 8 pre-activations beyond +-5 (outputs follow), one more output within 1e-3 of 1.
  std::vector<double> h{6, -7, 5.5, 9, -6, 0, 1, 2}, y(8);
  for (std::size_t i = 0; i < 8; ++i) y[i] = 1 / (1 + std::exp(-h[i]));
  y[7] = 0.9995;
  FakeStep s(g, h, y);
  m.observe(s.view(g, 1, 1.0));
  m.finish();
  const Symptom* sat = m.record().first("saturation");
  ASSERT_NE(sat, nullptr);
  EXPECT_DOUBLE_EQ(sat->value, 0.75);  // 6 of 8 > 0.5
}

TEST(Diagnose, LossWindowsStagnantSlowAndHealthy) {
  Graph g = activation_graph("Relu");
  TrainConfig c;
  c.batch_size = 2;
  c.epochs = 6;  // 2 samples: one step per epoch
  auto run = [&](const std::vector<double>& losses) {
    TrainMonitor m(g, c, 2, {});
    FakeStep s(g, std::vector<double>(8, 1), std::vector<double>(8, 1));
    for (std::size_t i = 0; i < losses.size(); ++i) m.observe(s.view(g, i + 1, losses[i]));
    m.finish();
    return m.record();
  };
  auto flat = run({1.1, 1.1, 1.1, 1.1, 1.1, 1.1});
  EXPECT_TRUE(flat.has("stagnant_loss"));
  EXPECT_TRUE(flat.has("slow_convergence"));
  // 0.5% of the first epoch's loss per epoch: slow, but it moves (not stagnant).
  auto slow = run({1.0, 0.995, 0.99, 0.985, 0.98, 0.975});
  EXPECT_TRUE(slow.has("slow_convergence"));
  EXPECT_FALSE(slow.has("stagnant_loss"));
  auto learning = run({1.1, 0.8, 0.6, 0.5, 0.45, 0.42});
  EXPECT_TRUE(learning.symptoms.empty());
  // Converged (below 10% of the first epoch's loss): not judged, however flat.
  EXPECT_TRUE(run({1.0, 0.05, 0.05, 0.05, 0.05, 0.05}).symptoms.empty());
  auto up = run({1.0, 5.0, 12.0, 20.0, 40.0, 80.0});
  ASSERT_TRUE(up.has("exploding_loss"));
  EXPECT_EQ(up.first("exploding_loss")->step, 3u);  // 12 > 10 x 1.0
  // Rising again by 0.3 and 0.3 (0.6 of the first epoch's 1.0) by epoch 5: oscillating; a fall
  // with one bump of 0.1 is not.
  auto swinging = run({1.0, 0.6, 0.9, 0.5, 0.8, 0.7});
  ASSERT_TRUE(swinging.has("oscillating_loss"));
  EXPECT_EQ(swinging.first("oscillating_loss")->step, 5u);
  EXPECT_NEAR(swinging.first("oscillating_loss")->value, 0.6, 1e-12);
  EXPECT_FALSE(run({1.0, 0.7, 0.8, 0.6, 0.5, 0.45}).has("oscillating_loss"));
}

TEST(Diagnose, StaticChecksFeatureScaleLabelsAndTheOutputAgainstTheLoss) {
  Graph g = activation_graph("Softmax", false);
  g.outputs[0].dims = std::vector<std::int64_t>{-1, 4};
  // Feature 2 is a thousand times the others.
  std::vector<double> x(40);
  for (std::size_t i = 0; i < 40; ++i) x[i] = (i % 4 == 2 ? 1000.0 : 1.0) * std::sin(i + 1.0);
  Tensor X = Tensor::from_f64(x, {10, 4}, DType::Float32);
  Tensor Y = Tensor::from_i64({1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, {10});
  StaticChecks c = static_checks(g, X, Y, LossKind::CrossEntropy);
  EXPECT_EQ(c.off_scale, (std::vector<std::int64_t>{2}));
  EXPECT_FALSE(c.trainable);  // label 4 of 4 classes
  bool labels = false, softmax = false;
  for (const auto& d : c.definite) {
    labels |= d.input == "labels" && d.fix.kind == "shift_labels" && d.fix.shift == -1;
    softmax |= d.category == "loss" && d.node == "act" && d.fix.kind == "remove_node";
  }
  EXPECT_TRUE(labels);
  EXPECT_TRUE(softmax);
  ASSERT_EQ(c.layers.size(), 1u);
  EXPECT_NEAR(c.layers[0].gain, 0.1 * 2, 1e-6);  // rms 0.1, fan_in 4
}

TEST(Diagnose, TrivialPredictorOfEachLossAndTheTargetsScale) {
  Graph g = activation_graph("Relu");
  Tensor X = Tensor::from_f64(std::vector<double>(8, 1.0), {4, 2}, DType::Float32);
  // Classes 0, 0, 1, 2: the entropy of their frequencies (1/2, 1/4, 1/4).
  StaticChecks ce =
      static_checks(g, X, Tensor::from_i64({0, 0, 1, 2}, {4}), LossKind::CrossEntropy);
  EXPECT_NEAR(ce.trivial_loss, 1.5 * std::log(2.0), 1e-12);
  // Binary labels with mean 1/4: the binary entropy of 1/4.
  StaticChecks bce = static_checks(g, X, Tensor::from_f64({0, 0, 1, 0}, {4, 1}, DType::Float32),
                                   LossKind::BCEWithLogits);
  EXPECT_NEAR(bce.trivial_loss, -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
  // Targets 1e5 +- 2e4: their variance, and a scale of 1e5.
  StaticChecks mse = static_checks(
      g, X, Tensor::from_f64({8e4, 1.2e5, 8e4, 1.2e5}, {4, 1}, DType::Float32), LossKind::MSE);
  EXPECT_NEAR(mse.trivial_loss, 4e8, 1.0);
  EXPECT_NEAR(mse.target_scale, 1e5, 1e-6);
  EXPECT_TRUE(std::isnan(static_checks(g, X, X, LossKind::Output).trivial_loss));
}

TEST(Diagnose, IdenticalInputsSetAFloorOnTheLoss) {
  Graph g = activation_graph("Relu");
  // Samples 0 and 1 share an input, and so do 2 and 3; feature 1 is constant.
  Tensor X = Tensor::from_f64({1, 5, 1, 5, 2, 5, 2, 5}, {4, 2}, DType::Float32);
  // Labels 0, 1 | 2, 2: the first pair's entropy is ln 2, the second's 0; the floor is their
  // mean over the samples, (2 ln 2 + 0) / 4.
  StaticChecks ce =
      static_checks(g, X, Tensor::from_i64({0, 1, 2, 2}, {4}), LossKind::CrossEntropy);
  EXPECT_EQ(ce.samples, 4);
  EXPECT_EQ(ce.distinct_inputs, 2);
  EXPECT_NEAR(ce.floor_loss, 0.5 * std::log(2.0), 1e-12);
  EXPECT_NEAR(ce.trivial_loss, 1.5 * std::log(2.0), 1e-12);
  EXPECT_EQ(ce.constant_features, (std::vector<std::int64_t>{1}));
  // The floor is a third of the trivial predictor's loss: a note, not a fault.
  for (const auto& d : ce.definite) EXPECT_NE(d.category, "data") << d.evidence;
  bool floor_note = false, constant_note = false;
  for (const auto& n : ce.notes) {
    floor_note |= n.find("2 distinct inputs") != std::string::npos;
    constant_note |= n.find("1 of 2 features") != std::string::npos;
  }
  EXPECT_TRUE(floor_note);
  EXPECT_TRUE(constant_note);
  // Regression: the targets' variance within each pair, 1 and 4, averaged: 2.5.
  StaticChecks mse =
      static_checks(g, X, Tensor::from_f64({1, 3, 0, 4}, {4, 1}, DType::Float32), LossKind::MSE);
  EXPECT_NEAR(mse.floor_loss, 2.5, 1e-12);
  // Binary labels: the binary entropy of each pair's mean, 1/2 and 0.
  StaticChecks bce = static_checks(g, X, Tensor::from_f64({0, 1, 1, 1}, {4, 1}, DType::Float32),
                                   LossKind::BCEWithLogits);
  EXPECT_NEAR(bce.floor_loss, 0.5 * std::log(2.0), 1e-12);
  // Every input alike: the floor is the trivial predictor's loss, a definite data fault.
  Tensor same = Tensor::from_f64(std::vector<double>(8, 3.0), {4, 2}, DType::Float32);
  StaticChecks none =
      static_checks(g, same, Tensor::from_i64({0, 1, 2, 2}, {4}), LossKind::CrossEntropy);
  // (activation_graph's constant weights make fc's units identical too: a second definite fault.)
  std::vector<Diagnosis> data;
  for (const auto& d : none.definite)
    if (d.category == "data") data.push_back(d);
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0].input, "x");
  EXPECT_NE(data[0].evidence.find("all 4 samples"), std::string::npos);
  ASSERT_EQ(none.definite.size(), 2u);
  EXPECT_EQ(none.definite[0].category, "initialization");
  // Distinct inputs: no floor.
  Tensor distinct = Tensor::from_f64({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::Float32);
  EXPECT_TRUE(std::isnan(
      static_checks(g, distinct, Tensor::from_i64({0, 1, 2, 2}, {4}), LossKind::CrossEntropy)
          .floor_loss));
}

TEST(Diagnose, ArchitectureLinearLayersAndBoundedLogits) {
  Tensor X = Tensor::from_f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, DType::Float32);
  Tensor Y = Tensor::from_i64({0, 1}, {2});
  // Gemm -> Relu -> Gemm: not linear; Gemm -> Add -> Gemm (the Relu forgotten): linear.
  EXPECT_TRUE(
      static_checks(activation_graph("Relu"), X, Y, LossKind::CrossEntropy).linear_layers.empty());
  Graph lin = activation_graph("Identity");
  EXPECT_EQ(static_checks(lin, X, Y, LossKind::CrossEntropy).linear_layers,
            (std::vector<std::string>{"fc", "fc2"}));
  // A product of two computed values is not affine.
  lin.nodes[1] = {"act", "Mul", "", {"h", "h"}, {"y"}, {}};
  EXPECT_TRUE(static_checks(lin, X, Y, LossKind::CrossEntropy).linear_layers.empty());
  // Logits out of a Sigmoid under cross_entropy (4 classes): ln(1 + 3/e) is the least loss.
  Graph sig = activation_graph("Sigmoid", false);
  sig.outputs[0].dims = std::vector<std::int64_t>{-1, 4};
  StaticChecks c = static_checks(sig, X, Y, LossKind::CrossEntropy);
  ASSERT_EQ(c.definite.size(), 1u);
  EXPECT_EQ(c.definite[0].category, "architecture");
  EXPECT_EQ(c.definite[0].fix.kind, "remove_node");
  EXPECT_NE(c.definite[0].evidence.find(fmt::format("{:.4g}", std::log1p(3 / std::exp(1.0)))),
            std::string::npos)
      << c.definite[0].evidence;
  // A Relu before bce_with_logits; a Sigmoid before mse is judged by the targets' range.
  Tensor Yb = Tensor::from_f64({0, 1}, {2, 1}, DType::Float32);
  auto relu = static_checks(activation_graph("Relu", false), X, Yb, LossKind::BCEWithLogits);
  ASSERT_EQ(relu.definite.size(), 1u);
  EXPECT_EQ(relu.definite[0].category, "architecture");
  EXPECT_TRUE(
      static_checks(activation_graph("Sigmoid", false), X, Yb, LossKind::MSE).definite.empty());
}

TEST(Diagnose, NarrowLayersAreFoundAndWidened) {
  // x [2, 8] -> MatMul(W1 [8, 1]) + b1 -> Relu -> Gemm(W2 [6, 1], transB) -> z [2, 6]: one unit
  // between 8 features and 6 outputs.
  Graph g = io_graph("z");
  g.initializers["W1"] = Tensor::from_f64(std::vector<double>(8, 0.3), {8, 1}, DType::Float32);
  g.initializers["b1"] = Tensor::from_f64({0.1}, {1}, DType::Float32);
  g.initializers["W2"] = Tensor::from_f64(std::vector<double>(6, 0.5), {6, 1}, DType::Float32);
  g.initializers["b2"] = Tensor::from_f64(std::vector<double>(6, 0.0), {6}, DType::Float32);
  g.nodes.push_back({"fc1", "MatMul", "", {"x", "W1"}, {"h0"}, {}});
  g.nodes.push_back({"bias1", "Add", "", {"h0", "b1"}, {"h1"}, {}});
  g.nodes.push_back({"act", "Relu", "", {"h1"}, {"h"}, {}});
  g.nodes.push_back(
      {"fc2", "Gemm", "", {"h", "W2", "b2"}, {"z"}, {{"transB", Attribute::of_int(1)}}});
  Tensor X = Tensor::from_f64(std::vector<double>(16, 1.0), {2, 8}, DType::Float32);
  Tensor Y = Tensor::from_i64({0, 5}, {2});
  auto narrow = narrow_layers(g, X, Y);
  ASSERT_EQ(narrow.size(), 1u);
  EXPECT_EQ(narrow[0].node, "fc1");
  EXPECT_EQ(narrow[0].next, "fc2");
  EXPECT_EQ(narrow[0].width, 1);
  EXPECT_EQ(narrow[0].output, 6);
  EXPECT_EQ(narrow[0].widened, 12);
  // Widened: W1 [8, 12], b1 [12], W2 [6, 12] drawn within PyTorch's bounds; b2 kept; the model
  // still runs and gives 6 outputs per sample.
  Graph w = widen_layer(g, "fc1", 12, 7);
  EXPECT_EQ(w.initializers.at("W1").shape(), (Shape{8, 12}));
  EXPECT_EQ(w.initializers.at("b1").shape(), (Shape{12}));
  EXPECT_EQ(w.initializers.at("W2").shape(), (Shape{6, 12}));
  for (double v : w.initializers.at("W1").to_f64()) EXPECT_LE(std::fabs(v), 1 / std::sqrt(8.0));
  for (double v : w.initializers.at("W2").to_f64()) EXPECT_LE(std::fabs(v), 1 / std::sqrt(12.0));
  EXPECT_EQ(w.initializers.at("b2").to_f64(), g.initializers.at("b2").to_f64());
  Plan plan;
  RunResult r = run_graph(w, {{"x", X}}, plan);
  EXPECT_EQ(r.outputs.at("z").shape(), (Shape{2, 6}));
  // The same seed draws the same weights (the repair repeats the check's widening).
  EXPECT_EQ(widen_layer(g, "fc1", 12, 7).initializers.at("W2").to_f64(),
            w.initializers.at("W2").to_f64());
  // The output layer is not narrow; a layer as wide as the output is not; an autoencoder's
  // bottleneck is its design.
  EXPECT_THROW(widen_layer(g, "fc2", 12, 7), Error);
  Graph wide = widen_layer(g, "fc1", 6, 7);
  EXPECT_TRUE(narrow_layers(wide, X, Y).empty());
  Tensor Xa = Tensor::from_f64(std::vector<double>(12, 1.0), {2, 6}, DType::Float32);
  g.initializers["W1"] = Tensor::from_f64(std::vector<double>(6, 0.3), {6, 1}, DType::Float32);
  EXPECT_TRUE(narrow_layers(g, Xa, Xa).empty());
  EXPECT_EQ(narrow_layers(g, Xa, Y).size(), 1u);
}

TEST(Diagnose, SymmetricLayersAreFound) {
  // x [2, 3] -> Gemm(W1 [4, 3], transB; every weight 0.2, bias 0) -> Tanh -> MatMul(W2 [4, 2])
  // -> z [2, 2], each of W2's outputs weighing the 4 units alike: the units stay identical.
  Graph g = io_graph("z");
  g.initializers["W1"] = Tensor::from_f64(std::vector<double>(12, 0.2), {4, 3}, DType::Float32);
  g.initializers["b1"] = Tensor::from_f64(std::vector<double>(4, 0.0), {4}, DType::Float32);
  g.initializers["W2"] =
      Tensor::from_f64({0.5, -1, 0.5, -1, 0.5, -1, 0.5, -1}, {4, 2}, DType::Float32);
  g.nodes.push_back(
      {"fc1", "Gemm", "", {"x", "W1", "b1"}, {"h0"}, {{"transB", Attribute::of_int(1)}}});
  g.nodes.push_back({"act", "Tanh", "", {"h0"}, {"h"}, {}});
  g.nodes.push_back({"fc2", "MatMul", "", {"h", "W2"}, {"z"}, {}});
  auto found = symmetric_layers(g);
  ASSERT_EQ(found.size(), 1u);  // fc2 is the output layer: its outputs get different gradients
  EXPECT_EQ(g.nodes[found[0].index].name, "fc1");
  EXPECT_EQ(g.nodes[found[0].next].name, "fc2");
  EXPECT_EQ(found[0].units, 4);
  EXPECT_FLOAT_EQ(found[0].value, 0.2);
  // The static check makes it a definite initialization fault whose fix re-initializes fc1.
  Tensor X = Tensor::from_f64({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32);
  Tensor Y = Tensor::from_f64({0, 1, 1, 0}, {2, 2}, DType::Float32);
  StaticChecks c = static_checks(g, X, Y, LossKind::MSE);
  auto d = std::find_if(c.definite.begin(), c.definite.end(),
                        [](const Diagnosis& x) { return x.category == "initialization"; });
  ASSERT_NE(d, c.definite.end());
  EXPECT_EQ(d->node, "fc1");
  EXPECT_EQ(d->fix.kind, "reinitialize");
  EXPECT_EQ(d->fix.init, "xavier");  // before a Tanh
  // One unit's bias apart, one weight of the next layer apart, or a Dropout between them (its
  // random masks tell the units apart): not symmetric.
  Graph b = g;
  b.initializers["b1"] = Tensor::from_f64({0, 0, 0.1, 0}, {4}, DType::Float32);
  EXPECT_TRUE(symmetric_layers(b).empty());
  Graph n = g;
  n.initializers["W2"] =
      Tensor::from_f64({0.5, -1, 0.5, -1, 0.5, -1, 0.5, -0.9}, {4, 2}, DType::Float32);
  EXPECT_TRUE(symmetric_layers(n).empty());
  Graph drop = g;
  drop.nodes[1].outputs = {"t"};
  drop.nodes.insert(drop.nodes.begin() + 2, Node{"drop", "Dropout", "", {"t"}, {"h"}, {}});
  EXPECT_TRUE(symmetric_layers(drop).empty());
}

TEST(Diagnose, HighDropoutsAreFoundAndLowered) {
  // x -> Dropout(ratio from a Constant, training_mode an initializer) -> z, opset 17.
  Graph g = io_graph("z");
  Node ratio{"r", "Constant", "", {}, {"ratio"}, {}};
  Attribute v;
  v.kind = Attribute::Kind::Tensor;
  v.t = Tensor::scalar(0.9, DType::Float32);
  ratio.attrs["value"] = v;
  g.nodes.push_back(ratio);
  g.initializers["train"] = Tensor::from_f64({1}, {}, DType::Bool);
  g.nodes.push_back({"drop", "Dropout", "", {"x", "ratio", "train"}, {"z"}, {}});
  auto found = high_dropouts(g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].node, "drop");
  EXPECT_FLOAT_EQ(found[0].ratio, 0.9);
  Graph low = set_dropout_ratio(g, "drop", 0.5);
  EXPECT_TRUE(high_dropouts(low).empty());
  EXPECT_EQ(low.initializers.at(low.nodes[1].inputs[1]).f64_at(0), 0.5);
  EXPECT_EQ(low.nodes[0].attrs.at("value").t.f64_at(0), 0.9f);  // the Constant is left alone
  EXPECT_THROW(set_dropout_ratio(g, "r", 0.5), Error);
  // Inference mode, a ratio of 0.5 (or the default, which is 0.5), or an opset before 12 (the
  // mode an attribute-less inference): none.
  Graph inference = g;
  inference.initializers["train"] = Tensor::from_f64({0}, {}, DType::Bool);
  EXPECT_TRUE(high_dropouts(inference).empty());
  EXPECT_TRUE(high_dropouts(set_dropout_ratio(g, "drop", 0.5)).empty());
  Graph by_default = g;
  by_default.nodes[1].inputs[1] = "";
  EXPECT_TRUE(high_dropouts(by_default).empty());
  Graph old = g;
  old.opset = 11;
  EXPECT_TRUE(high_dropouts(old).empty());
}

TEST(Diagnose, ChanceLevelAgainstTheTrivialPredictor) {
  Graph g = activation_graph("Relu");
  TrainConfig c;
  c.batch_size = 2;
  c.epochs = 4;  // 2 samples: one step per epoch
  auto run = [&](const std::vector<double>& losses, double trivial) {
    TrainMonitor m(g, c, 2, {});
    m.set_trivial_loss(trivial, "the test's");
    FakeStep s(g, std::vector<double>(8, 1), std::vector<double>(8, 1));
    for (std::size_t i = 0; i < losses.size(); ++i) m.observe(s.view(g, i + 1, losses[i]));
    m.finish();
    return m.record();
  };
  // Falls by 20% (not slow), but ends at 0.9 of the trivial predictor's loss: at chance.
  auto chance = run({1.3, 1.2, 1.1, 0.99}, 1.1);
  ASSERT_TRUE(chance.has("chance_level"));
  EXPECT_NEAR(chance.first("chance_level")->value, 0.9, 1e-12);
  EXPECT_FALSE(run({1.3, 1.0, 0.8, 0.85}, 1.1).has("chance_level"));  // 0.77x: learns
  EXPECT_TRUE(run({1.0, 2.0, 3.0, 4.0}, 1.1).has("chance_level"));    // above it
  // No trivial predictor, or fewer than 3 epochs: not judged.
  EXPECT_FALSE(run({1.1, 1.1, 1.1, 1.1}, std::nan("")).has("chance_level"));
  EXPECT_FALSE(run({1.1, 1.1}, 1.1).has("chance_level"));
}

TEST(Diagnose, MomentumOfOneOrMoreRunsWithAWarning) {
  OptimizerConfig o;
  o.momentum = 1.1;
  EXPECT_NO_THROW(validate(o));
  ASSERT_EQ(optimizer_warnings(o).size(), 1u);
  EXPECT_NE(optimizer_warnings(o)[0].find("--momentum 1.1"), std::string::npos);
  o.momentum = -0.1;
  EXPECT_THROW(validate(o), Error);
  o.momentum = 0.9;
  EXPECT_TRUE(optimizer_warnings(o).empty());
}

// Batch sizes as causes: batches of one or two samples behind a loss that swings, and batches of
// most of the data behind a run of few updates that stops near chance level; ordinary batches
// are never blamed.
TEST(Diagnose, BatchSizeTinyOrWholeDataSet) {
  Graph g = activation_graph("Relu");
  StaticChecks checks;
  OptimizerConfig o;
  o.kind = "sgd";
  o.lr = 0.2;
  auto causes = [&](std::int64_t batch, std::int64_t samples, int epochs, const char* symptom) {
    MonitorRecord r;
    r.batch_size = batch;
    r.samples = samples;
    r.epochs = epochs;
    r.steps_per_epoch = static_cast<std::size_t>((samples + batch - 1) / batch);
    r.total = r.steps_per_epoch * static_cast<std::size_t>(epochs);
    Symptom s;
    s.kind = symptom;
    s.step = r.total;
    r.symptoms = {s};
    return diagnose_causes(g, checks, r, o, {});
  };
  auto find = [](const std::vector<Diagnosis>& ds) -> const Diagnosis* {
    for (const auto& d : ds)
      if (d.hyperparameter == "batch_size") return &d;
    return nullptr;
  };
  auto tiny = causes(1, 192, 10, "oscillating_loss");
  ASSERT_FALSE(tiny.empty());
  EXPECT_EQ(tiny[0].hyperparameter, "batch_size");
  EXPECT_EQ(tiny[0].fix.kind, "batch_size");
  EXPECT_EQ(tiny[0].fix.factor, 32);
  EXPECT_NE(tiny[0].evidence.find("batches of 1 of the 192 samples"), std::string::npos);
  bool lr = false;  // the learning rate stays a cause beside it
  for (const auto& d : tiny) lr |= d.hyperparameter == "learning_rate";
  EXPECT_TRUE(lr);
  auto whole = causes(192, 192, 10, "chance_level");
  ASSERT_FALSE(whole.empty());
  EXPECT_EQ(whole[0].hyperparameter, "batch_size");
  EXPECT_NE(whole[0].evidence.find("1 update per epoch, 10 in the whole run"), std::string::npos);
  EXPECT_EQ(whole[0].fix.factor, 8);  // 240 updates over the 10 epochs (at least 8 a batch)
  EXPECT_EQ(find(causes(32, 192, 10, "oscillating_loss")), nullptr);  // an ordinary batch
  EXPECT_EQ(find(causes(4, 192, 10, "oscillating_loss")), nullptr);   // small, not tiny
  EXPECT_EQ(find(causes(1, 100, 10, "oscillating_loss")), nullptr);   // too few samples to say
  EXPECT_EQ(find(causes(32, 192, 10, "chance_level")), nullptr);      // 60 updates, 6 an epoch
  EXPECT_EQ(find(causes(192, 192, 80, "chance_level")), nullptr);     // 80 updates in all
  EXPECT_EQ(find(causes(192, 192, 10, "oscillating_loss")), nullptr);
}

// few_updates: one or two updates an epoch, fewer than 64 in all, and the loss still falling in
// the last epoch; not with more updates an epoch, nor when the last epoch stood still.
TEST(Diagnose, FewUpdatesWhileTheLossStillFalls) {
  Graph g = activation_graph("Relu");
  auto run = [&](std::int64_t batch, std::int64_t samples, const std::vector<double>& losses) {
    TrainConfig c;
    c.batch_size = batch;
    c.epochs = static_cast<int>(losses.size());
    TrainMonitor m(g, c, samples, {});
    FakeStep s(g, std::vector<double>(8, 1), std::vector<double>(8, 1));
    for (std::size_t i = 0; i < losses.size(); ++i) m.observe(s.view(g, i + 1, losses[i]));
    m.finish();
    return m.record();
  };
  std::vector<double> falling = {1.0, 0.95, 0.9, 0.86, 0.82, 0.78, 0.75, 0.72, 0.69, 0.66};
  auto few = run(192, 192, falling);  // one update an epoch: ten in all
  ASSERT_TRUE(few.has("few_updates"));
  EXPECT_EQ(few.first("few_updates")->value, 10);
  EXPECT_NE(few.first("few_updates")->detail.find("10 updates in all (1 per epoch"),
            std::string::npos);
  std::vector<double> flat = falling;
  flat.back() = flat[flat.size() - 2];  // the last epoch gained nothing
  EXPECT_FALSE(run(192, 192, flat).has("few_updates"));
  EXPECT_FALSE(run(192, 100, falling).has("few_updates"));  // too few samples to say
  EXPECT_FALSE(run(32, 32, falling).has("few_updates"));    // a batch of 32 is usual
}
