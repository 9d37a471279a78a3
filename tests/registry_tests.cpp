// Unit tests of the op registry: the required ops, and every table or list keyed by op type
// naming registered ops only.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "analysis/core/accuracy.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_static.h"
#include "bindings/binding.h"
#include "bindings/factory.h"
#include "bindings/fault_injection.h"
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

// The ops MetaOp must have a meta operator for.
const char* const kRequiredOps[] = {"Add",
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

}  // namespace

TEST(Registry, CoversTheRequiredOps) {
  for (const char* op : kRequiredOps) EXPECT_NE(OpRegistry::instance().find(op), nullptr) << op;
}

// A table keyed by a misspelled op type is an error, not an op silently "unsupported".
// An op of another ONNX domain runs only on nodes of that domain: Adam of
// ai.onnx.preview.training, not a default-domain node that happens to be named Adam; and the
// framework bindings that import ONNX claim none of that domain's ops (none of their frameworks
// runs them).
TEST(Registry, AnOpRunsOnlyInItsOwnOnnxDomain) {
  ASSERT_EQ(OpRegistry::instance().find("Adam")->onnx_domain, "ai.onnx.preview.training");
  Node n = unit::make_node("Adam", {"r", "t", "x", "g", "v", "h"}, {"x2", "v2", "h2"});
  auto f = [](double v) { return Tensor::from_f64({v}, {1}, DType::Float32); };
  Tensors in{Tensor::from_f64({0.1}, {}, DType::Float32),
             Tensor::from_i64({1}, {}),
             f(1),
             f(-1),
             f(2),
             f(0.5)};
  auto ref = make_binding("reference");
  EXPECT_THROW(ref->forward(n, 1, in), Unsupported);
  n.domain = "ai.onnx.preview.training";
  Tensors out = ref->forward(n, 1, in);
  ASSERT_EQ(out.size(), 3U);
  // V = 0.9 * 2 + 0.1 * (-1) = 1.7; H = 0.999 * 0.5 + 0.001 * 1 = 0.5005 (the defaults).
  EXPECT_NEAR(out[1].to_f64()[0], 1.7, 1e-7);
  EXPECT_NEAR(out[2].to_f64()[0], 0.5005, 1e-7);
  for (const auto& name : binding_names())
    if (name != "reference") {
      EXPECT_FALSE(make_binding(name)->supports("Adam").forward) << name;
    }
}

// Einsum's ellipsis: numpy's rule, the "..." dimensions right-aligned and broadcast, first in an
// implicit output; a diagonal under an ellipsis (ONNX's test_einsum_batch_diagonal).
TEST(Registry, EinsumEllipsisBroadcastsAsNumpy) {
  auto einsum = [](const std::string& eq, const Tensors& in) {
    Node n = unit::make_node("Einsum", {"a", "b"}, {"y"});
    n.inputs.resize(in.size());
    n.attrs["equation"] = Attribute::of_string(eq);
    return unit::run_ref(n, in, 12)[0];
  };
  auto seq = [](const Shape& s) {
    std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 7) - 3;
    return Tensor::from_f64(v, s, DType::Float64);
  };
  // A [2, 1, 2, 3] batch of matrices times a [3, 3, 4] one: batch [2, 3].
  const Tensor a = seq({2, 1, 2, 3}), b = seq({3, 3, 4});
  const auto av = a.to_f64(), bv = b.to_f64();
  for (const std::string eq : {"...ij,...jk->...ik", "...ij,...jk"}) {
    const Tensor y = einsum(eq, {a, b});
    ASSERT_EQ(y.shape(), (Shape{2, 3, 2, 4})) << eq;
    const auto yv = y.to_f64();
    for (std::int64_t p = 0; p < 2; ++p)
      for (std::int64_t q = 0; q < 3; ++q)
        for (std::int64_t i = 0; i < 2; ++i)
          for (std::int64_t k = 0; k < 4; ++k) {
            double want = 0;
            for (std::int64_t j = 0; j < 3; ++j)
              want += av[static_cast<std::size_t>((p * 2 + i) * 3 + j)] *
                      bv[static_cast<std::size_t>((q * 3 + j) * 4 + k)];
            EXPECT_EQ(yv[static_cast<std::size_t>(((p * 3 + q) * 2 + i) * 4 + k)], want) << eq;
          }
  }
  // The diagonal of each matrix of a batch.
  const Tensor d = einsum("...ii->...i", {seq({2, 3, 3})});
  ASSERT_EQ(d.shape(), (Shape{2, 3}));
  const auto dv = d.to_f64(), sv = seq({2, 3, 3}).to_f64();
  for (std::size_t m = 0; m < 2; ++m)
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(dv[m * 3 + i], sv[m * 9 + i * 4]);
  // Sizes that neither match nor broadcast fail, naming the index.
  EXPECT_THROW(einsum("...ij,...jk->...ik", {seq({2, 2, 3}), seq({3, 3, 4})}), Error);
}

TEST(Registry, AMisspelledKeyIsAnError) {
  EXPECT_NO_THROW(require_registered("Softplus", "a test table"));
  try {
    require_registered("Softpluss", "a test table");
    ADD_FAILURE() << "a misspelled op type was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Softpluss'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a test table"), std::string::npos) << e.what();
  }
}

// Every binding's tables check their keys when they are built (the first supports()); building
// them here makes a misspelled key fail this test.
TEST(Registry, EveryBindingsKernelsNameRegisteredOps) {
  for (const auto& name : binding_names()) {
    auto b = make_binding(name);
    int supported = 0;
    for (const auto& op : OpRegistry::instance().types()) {
      EXPECT_NO_THROW(supported += b->supports(op).forward ? 1 : 0) << name << " " << op;
      EXPECT_NO_THROW((void)b->where(op)) << name << " " << op;
    }
    EXPECT_GT(supported, 0) << name;
  }
}

TEST(Registry, TheFaultCatalogNamesRegisteredOps) {
  for (const auto& f : fault_catalog())
    for (const auto& op : f.op_types)
      EXPECT_NE(OpRegistry::instance().find(op), nullptr) << "fault " << f.name << ": " << op;
}

// The known-findings lists name an op in their second column (probe's optimizer findings:
// update:RULE[/DTYPE]).
TEST(Registry, TheKnownFindingsNameRegisteredOps) {
  for (const char* file : {"tests/known_findings.txt", "tests/known_probe_findings.txt"}) {
    std::ifstream in(std::string(METAOP_SOURCE_DIR) + "/" + file);
    ASSERT_TRUE(in) << file;
    std::string line;
    int n = 0, entries = 0;
    while (std::getline(in, line)) {
      ++n;
      std::istringstream words(line);
      std::string binding, op;
      if (!(words >> binding >> op) || binding[0] == '#') continue;
      ++entries;
      // torch and onednn are built from the Python environment's LibTorch 2 and oneDNN 3 (the
      // sanitize build leaves oneDNN 3 out); every other binding is always built.
      if (binding == "torch" || binding == "onednn")
        if (!find_binding_info(binding)) continue;
      EXPECT_NO_THROW((void)make_binding(binding)) << file << ":" << n;
      if (op.rfind("update:", 0) == 0) continue;
      EXPECT_NE(OpRegistry::instance().find(op), nullptr) << file << ":" << n << ": " << op;
    }
    EXPECT_GT(entries, 10) << file;
  }
}
