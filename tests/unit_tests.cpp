// Unit tests of the tensor, graph, ops and engine layers. One binary (each process pays the
// start-up of the libraries it links).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/core/accuracy.h"
#include "analysis/core/across_versions.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_static.h"
#include "analysis/whole_graph/whole_graph.h"
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
  for (DType dt :
       {DType::Float32, DType::Float64, DType::Float16, DType::Int64, DType::Int32, DType::Int16,
        DType::Int8, DType::UInt64, DType::UInt32, DType::UInt16, DType::UInt8, DType::Bool}) {
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

TEST(Tensor, WiderIntegersKeepTheirRangeAndSaturate) {
  // Unsigned types saturate at 0 and at their largest value; int16 at its two bounds.
  Tensor u16 = Tensor::from_f64({-1, 65535, 70000, 3.9}, {4}, DType::UInt16);
  EXPECT_EQ(u16.to_i64(), (std::vector<std::int64_t>{0, 65535, 65535, 3}));
  Tensor i16 = Tensor::from_f64({-40000, 32767, 1e9}, {3}, DType::Int16);
  EXPECT_EQ(i16.to_i64(), (std::vector<std::int64_t>{-32768, 32767, 32767}));
  Tensor u32 = Tensor::from_f64({4294967295.0, 5e9}, {2}, DType::UInt32);
  EXPECT_EQ(u32.to_i64(), (std::vector<std::int64_t>{4294967295, 4294967295}));
  // uint64: exact to int64 through its own bits; a value past int64 is named, not wrapped.
  Tensor u64 = Tensor::from_f64({0, 1e30}, {2}, DType::UInt64);
  EXPECT_EQ(u64.data<std::uint64_t>()[1], std::numeric_limits<std::uint64_t>::max());
  EXPECT_THROW(u64.to_i64(), Error);
  u64.data<std::uint64_t>()[1] = (std::uint64_t{1} << 62) + 1;  // not a double
  EXPECT_EQ(u64.to_i64()[1], (std::int64_t{1} << 62) + 1);
  EXPECT_EQ(integer_largest(DType::UInt64), 18446744073709549568.0);
  EXPECT_EQ(integer_lowest(DType::Int16), -32768);
}

TEST(Ops, IntegerCastsKeepTheLowBits) {
  // The ONNX text: between integer types, an out-of-range value keeps its low bits (200 as
  // int16 is -56 as int8); from floating point the value is only undefined out of range.
  auto cast = [](const Tensor& x, DType to) {
    Node node;
    node.op_type = "Cast";
    node.name = "c";
    node.attrs["to"] = Attribute::of_int(dtype_to_onnx(to));
    KernelContext c{node, 13};
    return OpRegistry::instance().find("Cast")->reference(c, {x})[0];
  };
  Tensor i16 = Tensor::from_f64({200, -129, 5}, {3}, DType::Int16);
  EXPECT_EQ(cast(i16, DType::Int8).to_i64(), (std::vector<std::int64_t>{-56, 127, 5}));
  Tensor i64 = Tensor::from_i64({-1, 65536 + 7}, {2});
  EXPECT_EQ(cast(i64, DType::UInt8).to_i64(), (std::vector<std::int64_t>{255, 7}));
  EXPECT_EQ(cast(i64, DType::UInt16).to_i64(), (std::vector<std::int64_t>{65535, 7}));
  Tensor u64 = Tensor::empty(DType::UInt64, {1});
  u64.data<std::uint64_t>()[0] = ~std::uint64_t{0};
  EXPECT_EQ(cast(u64, DType::Int64).to_i64(), (std::vector<std::int64_t>{-1}));
  Tensor f = Tensor::from_f64({300.7}, {1}, DType::Float32);
  EXPECT_EQ(cast(f, DType::UInt8).to_i64(), (std::vector<std::int64_t>{255}));  // saturates
}

TEST(TensorProto, RoundTripsWiderIntegers) {
  // uint32 and uint64 travel in uint64_data, int16 and uint16 in int32_data.
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::UINT64);
  p.add_dims(2);
  p.add_uint64_data(std::numeric_limits<std::uint64_t>::max());
  p.add_uint64_data(7);
  Tensor t = tensor_from_proto(p, "", "p");
  EXPECT_EQ(t.dtype(), DType::UInt64);
  EXPECT_EQ(t.data<std::uint64_t>()[0], std::numeric_limits<std::uint64_t>::max());
  p.Clear();
  p.set_data_type(onnx::TensorProto::INT16);
  p.add_dims(2);
  p.add_int32_data(-32768);
  p.add_int32_data(5);
  EXPECT_EQ(tensor_from_proto(p, "", "p").to_i64(), (std::vector<std::int64_t>{-32768, 5}));
  p.set_data_type(onnx::TensorProto::UINT32);
  EXPECT_THROW(tensor_from_proto(p, "", "p"), Error);  // its values belong in uint64_data
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

TEST(Ops, AttributesDefaultToTheSchemaAtTheNodesOpset) {
  Node n = make_node("Softmax", {"x"}, {"y"});
  EXPECT_EQ(attr_i(KernelContext{n, 11}, "axis"), 1);
  EXPECT_EQ(attr_i(KernelContext{n, 13}, "axis"), -1);
  n.attrs["axis"] = Attribute::of_int(0);
  EXPECT_EQ(attr_i(KernelContext{n, 13}, "axis"), 0);
  Node resize = make_node("Resize", {"x"}, {"y"});
  EXPECT_EQ(attr_s(KernelContext{resize, 13}, "mode"), "nearest");
  EXPECT_THROW(attr_s(KernelContext{resize, 13}, "no_such_attribute"), Error);
  // _or: the node's value, else the schema's default, else `absent` (the attribute has none, or
  // the op's opset lacks it).
  Node shape = make_node("Shape", {"x"}, {"y"});
  EXPECT_EQ(attr_i_or(KernelContext{shape, 15}, "end", 7), 7);
  EXPECT_EQ(attr_i_or(KernelContext{shape, 15}, "start", 3), 0);
  EXPECT_EQ(attr_i_or(KernelContext{shape, 13}, "start", 3), 3);
  shape.attrs["end"] = Attribute::of_int(-1);
  EXPECT_EQ(attr_i_or(KernelContext{shape, 15}, "end", 7), -1);
  Node clip = make_node("Clip", {"x"}, {"y"});
  EXPECT_EQ(attr_f_or(KernelContext{clip, 6}, "max", 1.0), 3.4028234663852886e38);
  EXPECT_EQ(attr_f_or(KernelContext{clip, 1}, "max", 1.0), 1.0);
  Node scatter = make_node("ScatterElements", {"x"}, {"y"});
  EXPECT_EQ(attr_s_or(KernelContext{scatter, 13}, "reduction", "none"), "none");
  Node transpose = make_node("Transpose", {"x"}, {"y"});
  EXPECT_EQ(attr_ints_or(KernelContext{transpose, 13}, "perm", {1, 0}),
            (std::vector<std::int64_t>{1, 0}));
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

// Exported sub-models and the one-node models of the ONNX-import bindings keep what the source
// model says of itself (a framework may act on its producer or imported opsets).
TEST(Graph, ExportsKeepTheSourceModelsMetadata) {
  Graph g = small_graph();
  SubgraphSpec spec;
  spec.nodes = {0};
  spec.values = {{"x", Tensor(DType::Float32, {1, 3})},
                 {"r", Tensor(DType::Float32, {1, 3})},
                 {"y", Tensor(DType::Float32, {1, 3})}};
  onnx::ModelProto plain;
  ASSERT_TRUE(plain.ParseFromString(export_subgraph(g, spec)));
  EXPECT_EQ(plain.producer_name(), "metaop");  // a graph MetaOp built has none of its own
  g.meta.producer_name = "pytorch";
  g.meta.producer_version = "2.15.0";
  g.meta.model_version = 3;
  g.meta.domain = "org.example";
  g.meta.opset_imports = {{"", 13}, {"ai.onnx.ml", 3}};
  g.meta.metadata_props = {{"author", "someone"}};
  Graph source = load_onnx_from_bytes(export_subgraph(g, spec), "source", ".");
  EXPECT_EQ(source.meta.producer_name, "pytorch");
  for (const std::string& bytes :
       {export_subgraph(source, spec), export_node(source.nodes[0], source.opset, spec, "one")}) {
    onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(bytes));
    EXPECT_EQ(m.producer_name(), "pytorch");
    EXPECT_EQ(m.producer_version(), "2.15.0");
    EXPECT_EQ(m.model_version(), 3);
    EXPECT_EQ(m.domain(), "org.example");
    ASSERT_EQ(m.opset_import_size(), 2);
    std::map<std::string, std::int64_t> opsets;
    for (const auto& o : m.opset_import()) opsets[o.domain()] = o.version();
    EXPECT_EQ(opsets, (std::map<std::string, std::int64_t>{{"", g.opset}, {"ai.onnx.ml", 3}}));
    ASSERT_EQ(m.metadata_props_size(), 1);
    EXPECT_EQ(m.metadata_props(0).value(), "someone");
  }
  set_node_export_metadata({});
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

// not in what remains in use.
TEST(Heap, CountsEveryAllocationPathAndThePeak) {
  if (!heap_accounting()) GTEST_SKIP() << "heap accounting is off in this build";
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
  void* grown = std::realloc(a, static_cast<std::size_t>(3 * mb));
  ASSERT_NE(grown, nullptr);
  a = grown;
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
  if (!heap_accounting()) GTEST_SKIP() << "heap accounting is off in this build";
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

TEST(AcrossVersions, VersionsCompareByTheirNumbers) {
  EXPECT_LT(compare_versions("1.13", "2.15"), 0);
  EXPECT_LT(compare_versions("2.6", "3.13"), 0);  // not as strings
  EXPECT_LT(compare_versions("1.30.0 (npm onnxruntime-node)", "1.31.1 (PyPI onnxruntime)"), 0);
  EXPECT_EQ(compare_versions("2.15.0+cu132", "2.15"), 0);
  EXPECT_GT(compare_versions("2026.4.1", "2025.1"), 0);
}

TEST(AcrossVersions, OneChangeAlongTheVersionsIsFixedOrNew) {
  using S = VersionState;
  EXPECT_EQ(across_versions_word({S::Present, S::Present}), "present");
  EXPECT_EQ(across_versions_word({S::Present, S::Absent}), "fixed");
  EXPECT_EQ(across_versions_word({S::Absent, S::Present}), "new");
  EXPECT_EQ(across_versions_word({S::Present, S::Absent, S::Present}), "mixed");
  // A version that did not run the node says nothing either way.
  EXPECT_EQ(across_versions_word({S::NotRun, S::Present}), "mixed");
}

// Whole-graph verdicts count non-finite values in absolute terms beside the mismatches: of 4
// elements, the whole run has 3 non-finite (2 where the reference is finite), node by node 1,
// the reference 1.
TEST(WholeGraph, NonFiniteValuesAreCountedInAbsoluteTerms) {
  auto t = [](const std::vector<double>& v) {
    return Tensor::from_f64(v, {static_cast<std::int64_t>(v.size())}, DType::Float32);
  };
  Tensor ref = t({1, 2, INFINITY, 4}), nbn = t({1, 2, INFINITY, 4});
  Tensor whole = t({1, NAN, INFINITY, INFINITY});
  TensorVerdict v = judge_tensor("y", whole, nbn, ref, 16);
  EXPECT_EQ(v.elements, 4);
  EXPECT_EQ(v.whole_nonfinite_values, 3);
  EXPECT_EQ(v.nbn_nonfinite_values, 1);
  EXPECT_EQ(v.ref_nonfinite_values, 1);
  EXPECT_EQ(v.whole_nonfinite, 2);
  EXPECT_EQ(v.nbn_nonfinite, 0);
  EXPECT_TRUE(v.bad);
}
