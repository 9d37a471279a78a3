#include "analysis/core/node_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "analysis/core/onnx_tests.h"
#include "graph/onnx_io.h"
#include "tensor/tensor_proto.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

// Cases the node tests lack, for ops the bindings claim: shapes and attributes models use
// (per-channel PRelu, LayerNormalization with its Y output only, float Equal, rank >= 2 data for
// OpenCV). Float inputs are seeded random; integer inputs carry the given values.
struct SyntheticInput {
  Shape shape;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> values = {};  // integer inputs (axes, indices)
  double lo = -2, hi = 2;
  bool whole = false;  // whole numbers: exact zeros and ties, where gradients are not unique
};

class SyntheticCases {
 public:
  NodeCase make(const std::string& op, std::int64_t opset, std::vector<SyntheticInput> ins,
                std::map<std::string, Attribute> attrs = {}, std::size_t outputs = 1) {
    std::mt19937_64 rng(seed_++);
    NodeCase c;
    c.test = fmt::format("synthetic_{}_{}", op, ++count_[op]);
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
      for (auto& e : v) e = ins[i].whole ? std::round(u(rng)) : u(rng);
      set.push_back(Tensor::from_f64(v, ins[i].shape, ins[i].dtype));
    }
    c.graph.nodes.push_back(n);
    c.input_sets.push_back(set);
    return c;
  }

 private:
  std::map<std::string, int> count_;  // per-op case numbers, so that names stay stable
  std::uint64_t seed_ = 100;
};

}  // namespace

// Single-node conformance tests with their input sets.
std::vector<NodeCase> load_node_cases(const std::string& node_tests_dir) {
  std::vector<NodeCase> cases;
  for (const auto& dir : find_conformance_tests({node_tests_dir})) {
    try {
      NodeCase c;
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
      cases.push_back(std::move(c));
    } catch (const Error&) {
      // Unsupported types and ops: not cases for the bindings.
    }
  }
  return cases;
}

std::vector<NodeCase> synthetic_node_cases() {
  SyntheticCases s;
  using S = SyntheticInput;
  const Shape x4{2, 3, 4, 5};
  std::vector<NodeCase> v;
  v.push_back(s.make("PRelu", 13, {S{x4}, S{{3, 1, 1}}}));
  v.push_back(s.make("PRelu", 13, {S{x4}, S{{1}}}));
  v.push_back(s.make("LayerNormalization", 17, {S{{2, 3, 8}}, S{{8}}, S{{8}}}));
  v.push_back(
      s.make("Equal", 13,
             {S{x4, DType::Float32, {}, -2, 2, true}, S{x4, DType::Float32, {}, -2, 2, true}}));
  v.push_back(
      s.make("Clip", 13,
             {S{x4}, S{{}, DType::Float32, {}, -0.5, -0.5}, S{{}, DType::Float32, {}, 0.5, 0.5}}));
  v.push_back(s.make("CumSum", 13, {S{{2, 3, 4}}, S{{}, DType::Int64, {1}}}));
  v.push_back(s.make("Gather", 13, {S{{3, 4, 5}}, S{{2}, DType::Int64, {0, 2}}},
                     {{"axis", Attribute::of_int(1)}}));
  for (const char* op : {"Max", "Min", "Mean", "Sum"}) v.push_back(s.make(op, 13, {S{x4}, S{x4}}));
  v.push_back(s.make("Pow", 13, {S{{2, 3, 4}, DType::Float32, {}, 0.5, 2}, S{{2, 3, 4}}}));
  v.push_back(s.make("ReduceLogSumExp", 13, {S{{2, 3, 4}}}, {{"axes", Attribute::of_ints({1})}}));
  v.push_back(s.make("ReduceSum", 13, {S{{2, 3, 4}}, S{{1}, DType::Int64, {1}}}));
  v.push_back(s.make("Round", 13, {S{x4}}));
  v.push_back(s.make("Sign", 13, {S{x4}}));
  v.push_back(s.make("Squeeze", 13, {S{{2, 1, 4, 1}}, S{{1}, DType::Int64, {1}}}));
  // No node test has these.
  v.push_back(s.make("LpPool", 13, {S{x4}},
                     {{"kernel_shape", Attribute::of_ints({2, 2})}, {"p", Attribute::of_int(3)}}));
  v.push_back(s.make("GlobalLpPool", 13, {S{x4}}, {{"p", Attribute::of_int(2)}}));
  // Exact zeros, bounds and ties: kinks and selections, where every subgradient is right and
  // nothing else is; and smooth functions at 0, judged like anywhere else.
  S w{x4, DType::Float32, {}, -2, 2, true};
  for (const char* op :
       {"Relu", "LeakyRelu", "Abs", "Elu", "Tanh", "Sigmoid", "Exp", "Sin", "Softplus"})
    v.push_back(s.make(op, 13, {w}));
  v.push_back(s.make("HardSwish", 14, {w}));
  v.push_back(s.make(
      "MaxPool", 13, {w},
      {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({1, 1})}}));
  v.push_back(s.make("GlobalMaxPool", 13, {w}));
  v.push_back(s.make("ReduceMax", 13, {w}, {{"axes", Attribute::of_ints({3})}}));
  v.push_back(s.make("ReduceMin", 13, {w}, {{"axes", Attribute::of_ints({1})}}));
  v.push_back(s.make("Max", 13, {w, w}));
  v.push_back(s.make("Min", 13, {w, w}));
  v.push_back(
      s.make("Clip", 13, {w, S{{}, DType::Float32, {}, -1, -1}, S{{}, DType::Float32, {}, 1, 1}}));
  v.push_back(s.make("TopK", 13, {w, S{{1}, DType::Int64, {3}}}, {}, 2));
  // Mean and InvStdDev in float64 (stash_type 11), so that their gradients are checked too.
  v.push_back(s.make("LayerNormalization", 17, {S{{2, 3, 8}}, S{{8}}, S{{8}}},
                     {{"stash_type", Attribute::of_int(11)}}, 3));
  return v;
}

const std::map<std::string, std::vector<NodeCase>>& node_cases_by_op(
    const std::string& node_tests_dir) {
  static const auto cases = [&] {
    std::map<std::string, std::vector<NodeCase>> by_op;
    for (auto& c : load_node_cases(node_tests_dir))
      by_op[c.graph.nodes[0].op_type].push_back(std::move(c));
    for (auto& c : synthetic_node_cases()) by_op[c.graph.nodes[0].op_type].push_back(std::move(c));
    return by_op;
  }();
  return cases;
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

}  // namespace metaop
