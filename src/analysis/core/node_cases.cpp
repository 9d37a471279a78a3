#include "analysis/core/node_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "analysis/core/onnx_tests.h"
#include "graph/onnx_io.h"
#include "ops/registry.h"
#include "tensor/tensor_proto.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

// One of an op's declared cases (ops/manifest.h) as a one-node graph: float inputs seeded
// random from (op, n) alone, integer inputs with their given values.
NodeCase make_case(const std::string& op, std::size_t n, const CaseSpec& spec) {
  std::mt19937_64 rng(case_seed(op, n));
  NodeCase c;
  c.test = fmt::format("synthetic_{}_{}", op, n);
  c.graph.opset = spec.opset;
  c.graph.path = c.test;
  Node node;
  node.name = c.test;
  node.op_type = op;
  if (const MetaOp* m = OpRegistry::instance().find(op)) node.domain = m->onnx_domain;
  node.attrs = spec.attrs;
  fill_schema_defaults(node, spec.opset);  // as import does
  for (std::size_t o = 0; o < spec.outputs; ++o) node.outputs.push_back(fmt::format("y{}", o));
  Tensors set;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const CaseInput& in = spec.inputs[i];
    std::string name = fmt::format("x{}", i);
    node.inputs.push_back(name);
    ValueInfo vi;
    vi.name = name;
    vi.dtype = in.dtype;
    c.graph.inputs.push_back(vi);
    if (!in.values.empty()) {
      set.push_back(Tensor::from_i64(in.values, in.shape, in.dtype));
      continue;
    }
    std::uniform_real_distribution<double> u(in.lo, in.hi);
    std::vector<double> v(static_cast<std::size_t>(shape_numel(in.shape)));
    for (auto& e : v) e = in.whole ? std::round(u(rng)) : u(rng);
    set.push_back(Tensor::from_f64(v, in.shape, in.dtype));
  }
  c.graph.nodes.push_back(node);
  c.input_sets.push_back(set);
  return c;
}

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
          ins.push_back(read_test_tensor(p.string(), c.graph.inputs[i]));
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
  const auto& reg = OpRegistry::instance();
  std::vector<NodeCase> v;
  for (const auto& type : reg.types()) {
    const auto& cases = reg.find(type)->cases;
    for (std::size_t k = 0; k < cases.size(); ++k) v.push_back(make_case(type, k + 1, cases[k]));
  }
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
// scalars, and the inputs the op's manifest keeps (InputRoles::kept) keep their values.
Tensors randomized(const Node& node, const Tensors& in, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  Tensors out = in;
  for (std::size_t i = 0; i < out.size(); ++i) {
    Tensor& t = out[i];
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() <= 1) continue;
    if (op && op->inputs.is_kept(i)) continue;
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
