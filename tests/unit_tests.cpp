// Unit tests of the tensor, graph, ops and engine layers. One binary (each process pays the
// start-up of the libraries it links).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/accuracy.h"
#include "analysis/diagnose_monitor.h"
#include "analysis/diagnose_static.h"
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

using namespace metaop;

namespace {

std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "metaop_unit_tests";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Node make_node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
  Node n;
  n.name = op + "_test";
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

Tensors run_ref(const Node& n, const Tensors& in, std::int64_t opset = 13) {
  return OpRegistry::instance().find(n.op_type)->reference(KernelContext{n, opset}, in);
}

}  // namespace

TEST(Tensor, HalfRoundsOnceFromDouble) {
  // 1 + 2^-11 + 2^-40 lies just above the midpoint of 1 and the next half (1 + 2^-10).
  // Through float it would become the exact midpoint and round to even (1.0).
  double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(half_bits_to_f64(f64_to_half_bits(v)), 1.0 + std::ldexp(1.0, -10));
  EXPECT_EQ(half_bits_to_f64(f64_to_half_bits(65520.0)), INFINITY);  // rounds past the max
  EXPECT_EQ(half_bits_to_f64(f64_to_half_bits(65519.0)), 65504.0);
  double b = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(bf16_bits_to_f64(f64_to_bf16_bits(b)), 1.0 + std::ldexp(1.0, -7));
}

TEST(Tensor, IntConversionSaturatesAndTruncates) {
  Tensor t = Tensor::from_f64({-2.7, 2.7, 1e30, NAN}, {4}, DType::Int32);
  auto v = t.to_i64();
  EXPECT_EQ(v[0], -2);
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(v[2], 2147483647);
  EXPECT_EQ(v[3], 0);
}

TEST(Npy, RoundTripsEveryDtype) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::Int64, DType::Int32,
                   DType::Int8, DType::UInt8, DType::Bool}) {
    Tensor t = Tensor::from_f64({0, 1, -1, 5, 7, 1}, {2, 3}, dt);
    auto path = tmp_path(std::string(dtype_name(dt)) + ".npy");
    write_npy(path, t);
    Tensor r = read_npy(path);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_EQ(r.shape(), (Shape{2, 3}));
    EXPECT_EQ(r.to_f64(), t.to_f64());
  }
  Tensor s = Tensor::scalar(3.5, DType::Float32);
  write_npy(tmp_path("scalar.npy"), s);
  EXPECT_EQ(read_npy(tmp_path("scalar.npy")).shape(), Shape{});
}

TEST(TensorProto, RoundTrips) {
  Tensor t = Tensor::from_i64({1, -2, 3}, {3});
  write_tensor_pb(tmp_path("t.pb"), t, "t");
  std::string name;
  Tensor r = read_tensor_pb(tmp_path("t.pb"), &name);
  EXPECT_EQ(name, "t");
  EXPECT_EQ(r.to_i64(), (std::vector<std::int64_t>{1, -2, 3}));
}

// Conv against a direct six-fold loop, over strides, pads, dilations and groups.
TEST(Ops, ConvMatchesDirectLoop) {
  struct Case {
    std::int64_t stride, pad, dil, group;
  };
  for (Case cs : {Case{1, 0, 1, 1}, Case{2, 1, 1, 1}, Case{1, 2, 2, 2}, Case{2, 1, 1, 4}}) {
    const std::int64_t N = 2, C = 4, H = 7, W = 6, M = 8, K = 3, Cg = C / cs.group,
                       Mg = M / cs.group;
    Tensor x = Tensor::from_f64(random_values(N * C * H * W, 1), {N, C, H, W}, DType::Float64);
    Tensor w = Tensor::from_f64(random_values(M * Cg * K * K, 2), {M, Cg, K, K}, DType::Float64);
    Tensor b = Tensor::from_f64(random_values(M, 3), {M}, DType::Float64);
    Node n = make_node("Conv", {"x", "w", "b"}, {"y"});
    n.attrs["strides"] = Attribute::of_ints({cs.stride, cs.stride});
    n.attrs["pads"] = Attribute::of_ints({cs.pad, cs.pad, cs.pad, cs.pad});
    n.attrs["dilations"] = Attribute::of_ints({cs.dil, cs.dil});
    n.attrs["group"] = Attribute::of_int(cs.group);
    Tensor y = run_ref(n, {x, w, b})[0];
    std::int64_t ext = (K - 1) * cs.dil + 1;
    std::int64_t OH = (H + 2 * cs.pad - ext) / cs.stride + 1,
                 OW = (W + 2 * cs.pad - ext) / cs.stride + 1;
    ASSERT_EQ(y.shape(), (Shape{N, M, OH, OW}));
    auto xv = x.to_f64(), wv = w.to_f64(), bv = b.to_f64(), yv = y.to_f64();
    double max_err = 0;
    for (std::int64_t nn = 0; nn < N; ++nn)
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t oh = 0; oh < OH; ++oh)
          for (std::int64_t ow = 0; ow < OW; ++ow) {
            double acc = bv[m];
            std::int64_t g = m / Mg;
            for (std::int64_t c = 0; c < Cg; ++c)
              for (std::int64_t kh = 0; kh < K; ++kh)
                for (std::int64_t kw = 0; kw < K; ++kw) {
                  std::int64_t ih = oh * cs.stride - cs.pad + kh * cs.dil,
                               iw = ow * cs.stride - cs.pad + kw * cs.dil;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  acc += xv[((nn * C + g * Cg + c) * H + ih) * W + iw] *
                         wv[((m * Cg + c) * K + kh) * K + kw];
                }
            max_err = std::max(max_err, std::fabs(acc - yv[((nn * M + m) * OH + oh) * OW + ow]));
          }
    EXPECT_LT(max_err, 1e-12) << "stride " << cs.stride << " pad " << cs.pad << " group "
                              << cs.group;
  }
}

TEST(Ops, ResultIsRoundedOnceToFloat32) {
  // 1 + 2^-24 + 2^-30 is not a float; float32 Add must give the float nearest the exact sum.
  Tensor a = Tensor::from_f64({1.0}, {1}, DType::Float32);
  Tensor b = Tensor::from_f64({std::ldexp(1.0, -24) + std::ldexp(1.0, -30)}, {1}, DType::Float32);
  Tensor y = run_ref(make_node("Add", {"a", "b"}, {"y"}), {a, b})[0];
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.f64_at(0), 1.0 + std::ldexp(1.0, -23));
}

TEST(Ops, BroadcastingAndErrorsNameTheNode) {
  Tensor a = Tensor::from_f64({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32);
  Tensor b = Tensor::from_f64({10, 20, 30}, {3}, DType::Float32);
  Tensor y = run_ref(make_node("Mul", {"a", "b"}, {"y"}), {a, b})[0];
  EXPECT_EQ(y.to_f64(), (std::vector<double>{10, 40, 90, 40, 100, 180}));
  Tensor bad = Tensor::from_f64({1, 2}, {2}, DType::Float32);
  try {
    run_ref(make_node("Mul", {"a", "b"}, {"y"}), {a, bad});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'Mul_test' (Mul)"), std::string::npos) << e.what();
  }
}

TEST(Ops, SoftmaxIsStableForLargeInputs) {
  Tensor x = Tensor::from_f64({1000, 1001, 1002}, {1, 3}, DType::Float32);
  Node n = make_node("Softmax", {"x"}, {"y"});
  auto y = run_ref(n, {x})[0].to_f64();
  double e0 = 1 / (1 + std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(y[0], e0, 1e-7);
  EXPECT_NEAR(y[0] + y[1] + y[2], 1.0, 1e-6);
}

TEST(Registry, CoversTheRequiredOps) {
  const char* required[] = {"Add",
                            "Sub",
                            "Mul",
                            "Div",
                            "Pow",
                            "Neg",
                            "Abs",
                            "Exp",
                            "Log",
                            "Sqrt",
                            "Reciprocal",
                            "Erf",
                            "Sin",
                            "Cos",
                            "Tan",
                            "Asin",
                            "Acos",
                            "Atan",
                            "Sinh",
                            "Cosh",
                            "Asinh",
                            "Acosh",
                            "Atanh",
                            "Floor",
                            "Ceil",
                            "Round",
                            "Sign",
                            "Min",
                            "Max",
                            "Mean",
                            "Sum",
                            "Clip",
                            "Relu",
                            "LeakyRelu",
                            "PRelu",
                            "Elu",
                            "Selu",
                            "Celu",
                            "Sigmoid",
                            "HardSigmoid",
                            "HardSwish",
                            "Softplus",
                            "Softsign",
                            "Tanh",
                            "ThresholdedRelu",
                            "Shrink",
                            "Softmax",
                            "LogSoftmax",
                            "Hardmax",
                            "MatMul",
                            "Gemm",
                            "Conv",
                            "ConvTranspose",
                            "MaxPool",
                            "AveragePool",
                            "GlobalAveragePool",
                            "GlobalMaxPool",
                            "LpPool",
                            "BatchNormalization",
                            "InstanceNormalization",
                            "LayerNormalization",
                            "LRN",
                            "ReduceSum",
                            "ReduceMean",
                            "ReduceMax",
                            "ReduceMin",
                            "ReduceProd",
                            "ReduceL1",
                            "ReduceL2",
                            "ReduceLogSum",
                            "ReduceLogSumExp",
                            "ReduceSumSquare",
                            "ArgMax",
                            "ArgMin",
                            "TopK",
                            "CumSum",
                            "Reshape",
                            "Flatten",
                            "Transpose",
                            "Squeeze",
                            "Unsqueeze",
                            "Concat",
                            "Split",
                            "Slice",
                            "Gather",
                            "GatherElements",
                            "GatherND",
                            "ScatterND",
                            "ScatterElements",
                            "Expand",
                            "Tile",
                            "Pad",
                            "Resize",
                            "DepthToSpace",
                            "SpaceToDepth",
                            "Shape",
                            "Size",
                            "Constant",
                            "ConstantOfShape",
                            "Range",
                            "EyeLike",
                            "OneHot",
                            "Where",
                            "Equal",
                            "Less",
                            "LessOrEqual",
                            "Greater",
                            "GreaterOrEqual",
                            "Not",
                            "And",
                            "Or",
                            "Xor",
                            "IsNaN",
                            "IsInf",
                            "Cast",
                            "CastLike",
                            "Identity",
                            "Dropout",
                            "Mod",
                            "Einsum",
                            "NegativeLogLikelihoodLoss",
                            "SoftmaxCrossEntropyLoss",
                            "Trilu"};
  for (const char* op : required) EXPECT_NE(OpRegistry::instance().find(op), nullptr) << op;
}

namespace {
// x -> Relu -> r ; r, x -> Add -> y   (nodes listed out of order on purpose)
Graph small_graph() {
  Graph g;
  g.path = "small_graph";
  g.opset = 13;
  g.nodes.push_back(make_node("Add", {"r", "x"}, {"y"}));
  g.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  ValueInfo xi;
  xi.name = "x";
  xi.dtype = DType::Float32;
  xi.onnx_elem_type = 1;
  xi.dims = std::vector<std::int64_t>{-1, 3};
  g.inputs.push_back(xi);
  ValueInfo yi = xi;
  yi.name = "y";
  g.outputs.push_back(yi);
  return g;
}
}  // namespace

TEST(Engine, RunsInTopologicalOrderAndFreesValues) {
  Graph g = small_graph();
  Plan plan;
  Tensor x = Tensor::from_f64({-1, 2, -3, 4, -5, 6}, {2, 3}, DType::Float32);
  RunResult r = run_graph(g, {{"x", x}}, plan);
  EXPECT_EQ(r.outputs.at("y").to_f64(), (std::vector<double>{-1, 4, -3, 8, -5, 12}));
  EXPECT_TRUE(r.values.empty());
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(g.nodes[r.records[0].node].op_type, "Relu");
  RunOptions keep;
  keep.keep_all = true;
  RunResult all = run_graph(g, {{"x", x}}, plan, keep);
  EXPECT_TRUE(all.values.count("r"));
}

TEST(Engine, ValidatesInputs) {
  Graph g = small_graph();
  Tensor wrong = Tensor::from_f64({1, 2}, {1, 2}, DType::Float32);
  EXPECT_THROW(validate_inputs(g, {{"x", wrong}}, {{"x", "x.npy"}}), Error);
  Tensor wrong_type = Tensor::from_f64({1, 2, 3}, {1, 3}, DType::Float64);
  EXPECT_THROW(validate_inputs(g, {{"x", wrong_type}}), Error);
  EXPECT_NO_THROW(validate_inputs(g, {{"x", Tensor(DType::Float32, {5, 3})}}));
}

TEST(Graph, SubgraphExportRoundTrips) {
  Graph g = small_graph();
  Tensor x = Tensor::from_f64({-1, 2, -3}, {1, 3}, DType::Float32);
  Tensor r = Tensor::from_f64({0, 2, 0}, {1, 3}, DType::Float32);
  SubgraphSpec spec;
  spec.nodes = {0};  // the Add node alone; its input r becomes an initializer
  spec.values = {{"x", x}, {"r", r}, {"y", Tensor(DType::Float32, {1, 3})}};
  spec.constants = {"r"};
  std::string bytes = export_subgraph(g, spec);
  Graph sub = load_onnx_from_bytes(bytes, "subgraph", ".");
  ASSERT_EQ(sub.inputs.size(), 1u);
  EXPECT_EQ(sub.inputs[0].name, "x");
  EXPECT_TRUE(sub.initializers.count("r"));
  Plan plan;
  RunResult res = run_graph(sub, {{"x", x}}, plan);
  EXPECT_EQ(res.outputs.at("y").to_f64(), (std::vector<double>{-1, 4, -3}));
}

TEST(Graph, ReadsExternalDataNextToTheModel) {
  // y = x + w, with w stored in a separate file next to the model.
  onnx::ModelProto m;
  m.set_ir_version(onnx::IR_VERSION);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("external");
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->input(0) ? "x" : "y");
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
  }
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  float data[4] = {99, 1.5f, 2.5f, 3.5f};  // the tensor starts at byte offset 4
  auto* off = w->add_external_data();
  off->set_key("offset");
  off->set_value("4");
  {
    std::ofstream f(tmp_path("weights.bin"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(data), sizeof data);
  }
  write_file(tmp_path("external.onnx"), m.SerializeAsString());
  Graph graph = load_onnx(tmp_path("external.onnx"));
  EXPECT_EQ(graph.initializers.at("w").to_f64(), (std::vector<double>{1.5, 2.5, 3.5}));
  std::filesystem::remove(tmp_path("weights.bin"));
  EXPECT_THROW(load_onnx(tmp_path("external.onnx")), Error);
}

TEST(Isolation, ACrashingKernelBecomesACrashError) {
  EXPECT_THROW(run_isolated("segv",
                            []() -> Tensors {
                              std::raise(SIGSEGV);
                              return {};
                            }),
               Crash);
  EXPECT_THROW(run_isolated("unsupported", []() -> Tensors { throw Unsupported("no"); }),
               Unsupported);
  Tensors out = run_isolated("ok", [] {
    return Tensors{Tensor::from_f64({1, 2, 3}, {3}, DType::Int64), Tensor()};
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].to_i64(), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_FALSE(out[1].defined());
}

namespace {
// A framework binding whose Relu kernel crashes, for the executor's crash path.
class CrashingBinding final : public Binding {
 public:
  std::string name() const override { return "crashing"; }
  Support supports(const std::string&) const override { return {true, false, {}, ""}; }
  Tensors forward(const Node& n, std::int64_t, const Tensors&) override {
    throw Crash(n.label() + ": the kernel crashed (Segmentation fault)");
  }
};
}  // namespace

TEST(Engine, AKernelCrashIsRecordedAndTheRunGoesOn) {
  Graph g = small_graph();
  Plan plan;
  plan.add_binding(std::make_unique<CrashingBinding>());
  plan.bind_op("Relu", "crashing");
  Tensor x = Tensor::from_f64({-1, 2, -3}, {1, 3}, DType::Float32);
  RunResult r = run_graph(g, {{"x", x}}, plan);
  EXPECT_EQ(r.outputs.at("y").to_f64(), (std::vector<double>{-1, 4, -3}));
  bool crash_recorded = false;
  for (const auto& rec : r.records)
    crash_recorded |= !rec.crash.empty() && rec.binding == "reference";
  EXPECT_TRUE(crash_recorded);
}

// --- error models and scoring (src/ops/error_model.h, src/analysis/accuracy.h)

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

// The op's reference kernel with every dot product summed sequentially in `acc` precision: a
// correct float32 kernel (acc = float32), or a faulty one (float16).
Tensors accumulate_in(DType acc, const Node& n, const Tensors& in) {
  ScopedLowPrecisionAccumulation scope(acc);
  return OpRegistry::instance().find(n.op_type)->reference(KernelContext{n, 17}, in);
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
// not in what remains in use.
TEST(Heap, CountsEveryAllocationPathAndThePeak) {
  const std::int64_t mb = 1 << 20;
  std::int64_t start = heap_in_use();
  reset_heap_peak();
  { std::vector<char> temporary(static_cast<std::size_t>(10 * mb), 1); }
  EXPECT_GE(heap_peak() - start, 10 * mb);
  EXPECT_LT(std::llabs(heap_in_use() - start), mb);
  void* a = std::malloc(static_cast<std::size_t>(mb));
  void* b = std::calloc(2, static_cast<std::size_t>(mb));
  void* c = nullptr;
  ASSERT_EQ(posix_memalign(&c, 64, static_cast<std::size_t>(mb)), 0);
  a = std::realloc(a, static_cast<std::size_t>(3 * mb));
  // Used, so that the compiler keeps every allocation.
  for (void* p : {a, b, c}) static_cast<volatile char*>(p)[0] = 1;
  EXPECT_GE(heap_in_use() - start, 6 * mb);
  std::free(a);
  std::free(b);
  std::free(c);
  EXPECT_LT(std::llabs(heap_in_use() - start), mb);
}

// A kernel isolated in a child process: its allocations are the child's, its peak is carried
// over to the caller's count.
TEST(Heap, AnIsolatedKernelsPeakReachesTheCaller) {
  const std::int64_t mb = 1 << 20;
  std::int64_t start = heap_in_use();
  reset_heap_peak();
  Tensors out = run_isolated("test kernel", [&] {
    std::vector<char> temporary(static_cast<std::size_t>(8 * mb), 1);
    return Tensors{Tensor::scalar(temporary[12345], DType::Float32)};
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GE(heap_peak() - start, 8 * mb);
}

// ---- diagnose: the monitors and static checks on hand-made steps -----------------------------

namespace {

// x -> Gemm(fc) -> h -> ACT(act) -> y, with a trainable weight and bias; with `hidden`, one more
// layer y -> Gemm(fc2) -> z makes z the output.
Graph activation_graph(const std::string& act, bool hidden = true) {
  Graph g;
  g.path = "unit";
  g.opset = 17;
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::Float32;
  g.inputs = {x};
  ValueInfo y = x;
  y.name = "y";
  g.outputs = {y};
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
