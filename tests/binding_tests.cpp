// Every (op, binding) pair a binding claims is exercised on the ONNX conformance node tests
// (their inputs and attribute settings, plus the same shapes with seeded random values) and
// judged against the float64 reference: forward, and backward against finite differences of
// the reference. Mismatches must be listed in known_findings.txt (genuine framework defects,
// kept as regression tests); an unlisted mismatch or a listed one that no longer reproduces
// fails the test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "analysis/accuracy.h"
#include "analysis/binding_check.h"
#include "analysis/conform.h"
#include "graph/onnx_io.h"
#include "ops/registry.h"
#include "tensor/tensor_proto.h"

using namespace metaop;
namespace fs = std::filesystem;

#ifndef METAOP_ONNX_TESTDATA
#error "METAOP_ONNX_TESTDATA must name the conformance data folder"
#endif
#ifndef METAOP_KNOWN_FINDINGS
#error "METAOP_KNOWN_FINDINGS must name known_findings.txt"
#endif

namespace {

struct Case {
  std::string test;
  Graph graph;
  std::vector<Tensors> input_sets;
};

// Single-node conformance tests with their input sets.
std::vector<Case> load_cases() {
  std::vector<Case> cases;
  for (const auto& dir : find_conformance_tests({std::string(METAOP_ONNX_TESTDATA) + "/node"})) {
    try {
      Case c;
      c.test = fs::path(dir).filename().string();
      c.graph = load_onnx(dir + "/model.onnx");
      if (c.graph.nodes.size() != 1) continue;
      for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_directory()) continue;
        Tensors ins;
        for (std::size_t i = 0; i < c.graph.inputs.size(); ++i) {
          auto p = e.path() / ("input_" + std::to_string(i) + ".pb");
          if (!fs::exists(p)) break;
          ins.push_back(read_tensor_pb(p.string()));
        }
        if (ins.size() == c.graph.inputs.size()) c.input_sets.push_back(ins);
      }
      // Node inputs follow the node's input list (graph inputs and initializers).
      cases.push_back(std::move(c));
    } catch (const Error&) {
      // Unsupported types and ops: not cases for the bindings.
    }
  }
  return cases;
}

// Cases the node tests lack, for ops the bindings claim: shapes and attributes models use
// (per-channel PRelu, LayerNormalization with its Y output only, float Equal, rank >= 2 data for
// OpenCV). Float inputs are seeded random; integer inputs carry the given values.
struct SyntheticInput {
  Shape shape;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> values = {};  // integer inputs (axes, indices)
  double lo = -2, hi = 2;
};

// Per-op case numbers and the seed, restarted by synthetic_cases() so names stay stable.
std::map<std::string, int> synthetic_count;
std::uint64_t synthetic_seed = 100;

Case synthetic(const std::string& op, std::int64_t opset, std::vector<SyntheticInput> ins,
               std::map<std::string, Attribute> attrs = {}, std::size_t outputs = 1) {
  auto& count = synthetic_count;
  std::mt19937_64 rng(synthetic_seed++);
  Case c;
  c.test = fmt::format("synthetic_{}_{}", op, ++count[op]);
  c.graph.opset = opset;
  c.graph.path = c.test;
  Node n;
  n.name = c.test;
  n.op_type = op;
  n.attrs = std::move(attrs);
  for (std::size_t o = 0; o < outputs; ++o) n.outputs.push_back(fmt::format("y{}", o));
  Tensors set;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    std::string name = fmt::format("x{}", i);
    n.inputs.push_back(name);
    ValueInfo vi;
    vi.name = name;
    vi.dtype = ins[i].dtype;
    c.graph.inputs.push_back(vi);
    if (!ins[i].values.empty()) {
      set.push_back(Tensor::from_i64(ins[i].values, ins[i].shape, ins[i].dtype));
      continue;
    }
    std::uniform_real_distribution<double> u(ins[i].lo, ins[i].hi);
    std::vector<double> v(static_cast<std::size_t>(shape_numel(ins[i].shape)));
    for (auto& e : v) e = op == "Equal" ? std::round(u(rng)) : u(rng);  // Equal needs ties
    set.push_back(Tensor::from_f64(v, ins[i].shape, ins[i].dtype));
  }
  c.graph.nodes.push_back(n);
  c.input_sets.push_back(set);
  return c;
}

std::vector<Case> synthetic_cases() {
  synthetic_count.clear();
  synthetic_seed = 100;
  using S = SyntheticInput;
  const Shape x4{2, 3, 4, 5};
  std::vector<Case> v;
  v.push_back(synthetic("PRelu", 13, {S{x4}, S{{3, 1, 1}}}));
  v.push_back(synthetic("PRelu", 13, {S{x4}, S{{1}}}));
  v.push_back(synthetic("LayerNormalization", 17, {S{{2, 3, 8}}, S{{8}}, S{{8}}}));
  v.push_back(synthetic("Equal", 13, {S{x4}, S{x4}}));
  v.push_back(synthetic(
      "Clip", 13,
      {S{x4}, S{{}, DType::Float32, {}, -0.5, -0.5}, S{{}, DType::Float32, {}, 0.5, 0.5}}));
  v.push_back(synthetic("CumSum", 13, {S{{2, 3, 4}}, S{{}, DType::Int64, {1}}}));
  v.push_back(synthetic("Gather", 13, {S{{3, 4, 5}}, S{{2}, DType::Int64, {0, 2}}},
                        {{"axis", Attribute::of_int(1)}}));
  for (const char* op : {"Max", "Min", "Mean", "Sum"})
    v.push_back(synthetic(op, 13, {S{x4}, S{x4}}));
  v.push_back(synthetic("Pow", 13, {S{{2, 3, 4}, DType::Float32, {}, 0.5, 2}, S{{2, 3, 4}}}));
  v.push_back(
      synthetic("ReduceLogSumExp", 13, {S{{2, 3, 4}}}, {{"axes", Attribute::of_ints({1})}}));
  v.push_back(synthetic("ReduceSum", 13, {S{{2, 3, 4}}, S{{1}, DType::Int64, {1}}}));
  v.push_back(synthetic("Round", 13, {S{x4}}));
  v.push_back(synthetic("Sign", 13, {S{x4}}));
  v.push_back(synthetic("Squeeze", 13, {S{{2, 1, 4, 1}}, S{{1}, DType::Int64, {1}}}));
  // No node test has these.
  v.push_back(
      synthetic("LpPool", 13, {S{x4}},
                {{"kernel_shape", Attribute::of_ints({2, 2})}, {"p", Attribute::of_int(3)}}));
  v.push_back(synthetic("GlobalLpPool", 13, {S{x4}}, {{"p", Attribute::of_int(2)}}));
  // Mean and InvStdDev in float64 (stash_type 11), so that their gradients are checked too.
  v.push_back(synthetic("LayerNormalization", 17, {S{{2, 3, 8}}, S{{8}}, S{{8}}},
                        {{"stash_type", Attribute::of_int(11)}}, 3));
  return v;
}

Tensors node_inputs(const Graph& g, const Tensors& graph_inputs) {
  std::map<std::string, Tensor> env = {g.initializers.begin(), g.initializers.end()};
  for (std::size_t i = 0; i < g.inputs.size(); ++i) env[g.inputs[i].name] = graph_inputs[i];
  Tensors in;
  for (const auto& n : g.nodes[0].inputs) in.push_back(n.empty() ? Tensor() : env.at(n));
  return in;
}

// Same shapes, seeded random values for the floating data inputs, drawn within each input's
// own range so that they stay in the op's domain. Integer inputs (indices, axes, shapes),
// scalars, and Resize's roi and scales keep their values.
Tensors randomized(const Node& node, const Tensors& in, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors out = in;
  for (std::size_t i = 0; i < out.size(); ++i) {
    Tensor& t = out[i];
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() <= 1) continue;
    if (i > 0 && (node.op_type == "Resize" || node.op_type == "Upsample")) continue;
    auto v = t.to_f64();
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    if (!std::isfinite(lo) || !std::isfinite(hi) || lo == hi) continue;
    std::uniform_real_distribution<double> u(lo, hi);
    for (auto& x : v) x = u(rng);
    t = Tensor::from_f64(v, t.shape(), t.dtype());
  }
  return out;
}

std::set<std::string> known_findings() {
  std::set<std::string> k;
  std::ifstream f(METAOP_KNOWN_FINDINGS);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string binding, test, phase;
    ss >> binding >> test >> phase;
    k.insert(binding + " " + test + " " + phase);
  }
  return k;
}

// The binding's backward against the reference VJP with the backward error model, for random
// gradients of the first output (what every binding differentiates); empty when within it or
// when either side has no backward here.
std::string vjp_verdict(Binding& b, const Node& node, std::int64_t opset, const Tensors& in,
                        std::uint64_t seed) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) return "";
  try {
    Tensors outs = op->reference(KernelContext{node, opset}, in);
    if (outs.empty() || !outs[0].defined() || !is_floating(outs[0].dtype())) return "";
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(static_cast<std::size_t>(outs[0].numel()));
    for (auto& x : v) x = u(rng);
    Tensors g(outs.size());
    g[0] = Tensor::from_f64(v, outs[0].shape(), outs[0].dtype());
    Tensors got = b.backward(node, opset, in, outs, g);
    LocalCheck lc = check_local_backward(node, opset, in, outs, g, got);
    if (!lc.score.bad()) return "";
    if (!lc.score.mismatch.empty()) return lc.score.mismatch;
    return fmt::format("score {:.3g}: input #{}{}: {:.9g}, reference {:.9g}, tolerance {:.3g}",
                       lc.score.score, lc.score.worst_output,
                       index_str(lc.reference[lc.score.worst_output].shape(), lc.score.worst_index),
                       lc.score.worst_got, lc.score.worst_ref, lc.score.worst_tol);
  } catch (const Unsupported&) {
    return "";
  }
}

void check_binding(const std::string& name) {
  auto binding = make_binding(name);
  auto cases = load_cases();
  ASSERT_GT(cases.size(), 500u);
  for (auto& c : synthetic_cases()) cases.push_back(std::move(c));
  auto known = known_findings();
  std::set<std::string> seen;
  std::map<std::string, std::array<int, 4>> per_op;  // fwd ok, fwd checked, bwd ok, bwd checked
  std::vector<std::string> unexpected;
  for (const auto& c : cases) {
    const Node& node = c.graph.nodes[0];
    Support s = binding->supports(node.op_type);
    if (!s.forward) continue;
    auto& counts = per_op[node.op_type];
    if (std::getenv("METAOP_TEST_VERBOSE"))
      std::fprintf(stderr, "%s %s\n", name.c_str(), c.test.c_str());
    for (std::size_t k = 0; k < c.input_sets.size(); ++k) {
      Tensors given = node_inputs(c.graph, c.input_sets[k]);
      for (int variant = 0; variant < 2; ++variant) {
        Tensors in = variant == 0 ? given : randomized(node, given, 17 + k);
        std::string tag = variant == 0 ? "" : " (random values)";
        NodeVerdict f = check_forward(*binding, node, c.graph.opset, in);
        if (f.status == "unsupported") {
          if (std::getenv("METAOP_TEST_VERBOSE"))
            std::fprintf(stderr, "  forward unsupported: %s\n", f.detail.c_str());
          continue;
        }
        ++counts[1];
        std::string key = name + " " + c.test + " forward";
        if (f.status == "ok")
          ++counts[0];
        else if (known.count(key))
          seen.insert(key);
        else
          unexpected.push_back(key + tag + ": " + f.status + ": " + f.detail);
        if (!s.backward) continue;
        NodeVerdict b = check_backward(*binding, node, c.graph.opset, in, 5 + k);
        if (b.status == "unsupported") {
          if (std::getenv("METAOP_TEST_VERBOSE"))
            std::fprintf(stderr, "  backward unsupported: %s\n", b.detail.c_str());
          continue;
        }
        ++counts[3];
        key = name + " " + c.test + " backward";
        if (b.status == "ok")
          ++counts[2];
        else if (known.count(key))
          seen.insert(key);
        else
          unexpected.push_back(key + tag + ": " + b.status + ": " + b.detail);
        // And against the reference VJP on the same inputs and output gradients, with the
        // backward error model (what `train --check` applies).
        if (name == "reference") continue;
        std::string v = vjp_verdict(*binding, node, c.graph.opset, in, 11 + k);
        key = name + " " + c.test + " vjp";
        if (v.empty())
          continue;
        else if (known.count(key))
          seen.insert(key);
        else
          unexpected.push_back(key + tag + ": " + v);
      }
    }
  }
  int ops_fwd = 0, ops_bwd = 0;
  for (const auto& [op, n] : per_op) {
    ops_fwd += n[1] > 0;
    ops_bwd += n[3] > 0;
  }
  std::printf("%s: forward checked on %d ops, backward on %d ops\n", name.c_str(), ops_fwd,
              ops_bwd);
  // A claimed op that no case exercised (none exists, or every case was refused) fails: a
  // claim is what a test shows.
  std::string unexercised;
  for (const auto& op : OpRegistry::instance().types()) {
    Support s = binding->supports(op);
    auto it = per_op.find(op);
    // (The reference's forward is judged by the conformance suite, not here.)
    if (s.forward && name != "reference" && (it == per_op.end() || it->second[1] == 0))
      unexercised += " " + op + "(fwd)";
    if (s.backward && (it == per_op.end() || it->second[3] == 0)) unexercised += " " + op + "(bwd)";
  }
  std::printf("%s: claimed but not exercised by any case:%s\n", name.c_str(),
              unexercised.empty() ? " none" : unexercised.c_str());
  EXPECT_TRUE(unexercised.empty()) << name << " claims ops no case exercised:" << unexercised;
  for (const auto& u : unexpected) ADD_FAILURE() << "unexpected: " << u;
  for (const auto& k : known)
    if (k.rfind(name + " ", 0) == 0 && !seen.count(k))
      ADD_FAILURE() << "known finding no longer reproduces: " << k;
}

}  // namespace

TEST(Bindings, TorchAgreesWithTheReference) {
  check_binding("torch");
}
TEST(Bindings, OpenCVAgreesWithTheReference) {
  check_binding("opencv");
}
TEST(Bindings, OneDNNAgreesWithTheReference) {
  check_binding("onednn");
}
// The reference's own VJPs against central finite differences of its forward, in float64, on
// every node test and its random variant (a gradcheck over the tests' shapes and attributes).
TEST(Bindings, ReferenceVjpsAgreeWithFiniteDifferences) {
  check_binding("reference");
}
// ONNX Runtime 1.30 (CPU build and WebAssembly build), each node a one-node session at the
// default optimization level.
TEST(Bindings, OrtAgreesWithTheReference) {
  check_binding("ort");
}
TEST(Bindings, OrtWasmAgreesWithTheReference) {
  check_binding("ort-wasm");
}
