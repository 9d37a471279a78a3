// Every (binding, op) pair a binding claims is one test: the op's ONNX conformance node tests
// (their inputs and attribute settings, plus the same shapes with seeded random values) and the
// synthetic cases below, judged against the float64 reference -- forward with the op's error
// model, backward against finite differences of the reference and against the reference VJP
// with the backward error model. `--gtest_filter='*torch_Softplus*'` runs one pair.
//
// Mismatches must be listed in known_findings.txt, keyed by the case (binding, test, phase,
// input variant) with the kind of failure and a bound on its score (genuine framework defects,
// kept as regression tests): an unlisted mismatch, a listed one that got worse or changed kind,
// and a listed one that no longer reproduces all fail.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
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
std::vector<Case> load_node_tests() {
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
  bool whole = false;  // whole numbers: exact zeros and ties, where gradients are not unique
};

class SyntheticCases {
 public:
  Case make(const std::string& op, std::int64_t opset, std::vector<SyntheticInput> ins,
            std::map<std::string, Attribute> attrs = {}, std::size_t outputs = 1) {
    std::mt19937_64 rng(seed_++);
    Case c;
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

std::vector<Case> synthetic_cases() {
  SyntheticCases s;
  using S = SyntheticInput;
  const Shape x4{2, 3, 4, 5};
  std::vector<Case> v;
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

// Every case, by op type (loaded once per process).
const std::map<std::string, std::vector<Case>>& cases_by_op() {
  static const auto cases = [] {
    std::map<std::string, std::vector<Case>> by_op;
    for (auto& c : load_node_tests()) by_op[c.graph.nodes[0].op_type].push_back(std::move(c));
    for (auto& c : synthetic_cases()) by_op[c.graph.nodes[0].op_type].push_back(std::move(c));
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

// --- known findings

struct Known {
  std::string binding, test, phase, variant, kind;
  double bound = 0;  // the largest score accepted (infinite for non-finite, shape, crash ...)
  int line = 0;
};

std::string key_of(const std::string& binding, const std::string& test, const std::string& phase,
                   const std::string& variant) {
  return binding + " " + test + " " + phase + " " + variant;
}

// Parsed once; a malformed line is a failure of the KnownFindings test (and its entry ignored).
struct KnownList {
  std::map<std::string, Known> entries;
  std::vector<std::string> errors;
};

const KnownList& known_findings() {
  static const KnownList list = [] {
    static const std::set<std::string> phases{"forward", "backward", "vjp"},
        variants{"given", "random"},
        kinds{"accuracy", "nonfinite", "shape", "omitted", "error", "crash", "any"};
    KnownList k;
    std::ifstream f(METAOP_KNOWN_FINDINGS);
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ss(line);
      Known e;
      std::string bound, extra;
      ss >> e.binding >> e.test >> e.phase >> e.variant >> e.kind >> bound;
      e.line = n;
      try {
        std::size_t used = 0;
        e.bound = bound == "inf" ? INFINITY : std::stod(bound, &used);
        if (bound != "inf" && used != bound.size()) throw std::invalid_argument(bound);
      } catch (const std::exception&) {
        e.bound = NAN;
      }
      if (!phases.count(e.phase) || !variants.count(e.variant) || !kinds.count(e.kind) ||
          std::isnan(e.bound) || (ss >> extra)) {
        k.errors.push_back(
            fmt::format("known_findings.txt:{}: '{}' is not 'BINDING TEST "
                        "forward|backward|vjp given|random KIND BOUND'",
                        n, line));
        continue;
      }
      if (!k.entries.emplace(key_of(e.binding, e.test, e.phase, e.variant), e).second)
        k.errors.push_back(fmt::format("known_findings.txt:{}: listed twice", n));
    }
    return k;
  }();
  return list;
}

// One judged case: the verdict's kind of failure ("" when it passed) and its score.
struct Outcome {
  std::string kind;
  double score = 0;
  std::string detail;
};

Outcome from_score(const Score& s, const std::string& detail) {
  if (!s.bad()) return {};
  std::string kind = !s.mismatch.empty() ? "shape" : s.nonfinite > 0 ? "nonfinite" : "accuracy";
  return {kind, s.score, detail};
}

Outcome from_verdict(const NodeVerdict& v) {
  if (v.status == "ok") return {};
  return {v.kind, v.worst, v.detail};
}

// The binding's backward against the reference VJP with the backward error model, for random
// gradients of the first output (what every binding differentiates); no outcome when either
// side has no backward here.
Outcome vjp_outcome(Binding& b, const Node& node, std::int64_t opset, const Tensors& in,
                    std::uint64_t seed) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) return {};
  try {
    Tensors outs = op->reference(KernelContext{node, opset}, in);
    if (outs.empty() || !outs[0].defined() || !is_floating(outs[0].dtype())) return {};
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(static_cast<std::size_t>(outs[0].numel()));
    for (auto& x : v) x = u(rng);
    Tensors g(outs.size());
    g[0] = Tensor::from_f64(v, outs[0].shape(), outs[0].dtype());
    Tensors got = b.backward(node, opset, in, outs, g);
    LocalCheck lc = check_local_backward(node, opset, in, outs, g, got);
    std::vector<std::string> names;
    for (const auto& n : node.inputs) names.push_back("grad " + n);
    return from_score(lc.score,
                      fmt::format("score {:.3g}: {}", lc.score.score,
                                  describe_worst(lc.score, lc.reference, names, b.name())));
  } catch (const Unsupported&) {
    return {};
  }
}

// --- the parameterized test

struct Pair {
  std::string binding, op;
};

std::vector<Pair> claimed_pairs() {
  std::vector<Pair> pairs;
  for (const auto& name : binding_names()) {
    auto b = make_binding(name);
    for (const auto& op : OpRegistry::instance().types()) {
      Support s = b->supports(op);
      // The reference's forward is judged by the conformance suite; here its VJPs are
      // gradchecked.
      if (name == "reference" ? s.backward : s.forward) pairs.push_back({name, op});
    }
  }
  return pairs;
}

Binding& binding_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Binding>> made;
  auto& b = made[name];
  if (!b) b = make_binding(name);
  return *b;
}

class BindingOp : public testing::TestWithParam<Pair> {};

TEST_P(BindingOp, AgreesWithTheReference) {
  const auto& [name, op] = GetParam();
  Binding& binding = binding_named(name);
  Support s = binding.supports(op);
  const auto& known = known_findings().entries;
  std::set<std::string> seen;
  std::vector<std::string> unexpected;
  int fwd_checked = 0, fwd_ok = 0, bwd_checked = 0, bwd_ok = 0, vjp_checked = 0, vjp_ok = 0;
  int compared = 0, skipped = 0;
  bool gradcheck_only = name == "reference";
  auto judge = [&](const std::string& test, const std::string& phase, const std::string& variant,
                   const Outcome& o) {
    std::string key = key_of(name, test, phase, variant);
    auto it = known.find(key);
    if (o.kind.empty()) return true;
    if (it == known.end()) {
      unexpected.push_back(fmt::format("{} {} {:.3g}: {}", key, o.kind, o.score, o.detail));
      return false;
    }
    seen.insert(key);
    const Known& k = it->second;
    if (k.kind != "any" && k.kind != o.kind)
      unexpected.push_back(fmt::format("{}: listed as {} (line {}) but now {}: {}", key, k.kind,
                                       k.line, o.kind, o.detail));
    else if (!(o.score <= k.bound))
      unexpected.push_back(fmt::format("{}: worse than listed: score {:.3g} > {:.3g} (line {}): {}",
                                       key, o.score, k.bound, k.line, o.detail));
    return false;
  };
  auto it = cases_by_op().find(op);
  if (it != cases_by_op().end()) {
    for (const auto& c : it->second) {
      const Node& node = c.graph.nodes[0];
      for (std::size_t k = 0; k < c.input_sets.size(); ++k) {
        Tensors given = node_inputs(c.graph, c.input_sets[k]);
        for (int variant = 0; variant < 2; ++variant) {
          Tensors in = variant == 0 ? given : randomized(node, given, 17 + k);
          std::string var = variant == 0 ? "given" : "random";
          if (!gradcheck_only) {
            NodeVerdict f = check_forward(binding, node, c.graph.opset, in);
            if (f.status == "unsupported") continue;
            ++fwd_checked;
            fwd_ok += judge(c.test, "forward", var, from_verdict(f));
          }
          if (!s.backward) continue;
          NodeVerdict b = check_backward(binding, node, c.graph.opset, in, 5 + k);
          if (b.status == "unsupported") continue;
          ++bwd_checked;
          compared += b.compared;
          skipped += b.skipped;
          bwd_ok += judge(c.test, "backward", var, from_verdict(b));
          if (gradcheck_only) continue;
          Outcome v = vjp_outcome(binding, node, c.graph.opset, in, 11 + k);
          ++vjp_checked;
          vjp_ok += judge(c.test, "vjp", var, v);
        }
      }
    }
  }
  std::printf(
      "%s %s: forward %d/%d cases within the error model; backward vs finite differences %d/%d "
      "(%d coordinates compared, %d skipped at kinks or non-finite values); backward vs the "
      "reference VJP %d/%d\n",
      name.c_str(), op.c_str(), fwd_ok, fwd_checked, bwd_ok, bwd_checked, compared, skipped, vjp_ok,
      vjp_checked);
  // A claimed op that no case exercised (none exists, or every case was refused) fails: a
  // claim is what a test shows.
  if (!gradcheck_only) {
    EXPECT_GT(fwd_checked, 0) << name << " claims " << op << " but no case ran";
  }
  if (s.backward) {
    EXPECT_GT(bwd_checked, 0) << name << " claims " << op << "'s backward, but no case ran";
  }
  for (const auto& u : unexpected) ADD_FAILURE() << "unexpected: " << u;
  // Listed findings of this op that did not come up.
  if (it != cases_by_op().end())
    for (const auto& c : it->second)
      for (const auto& [key, e] : known)
        if (e.binding == name && e.test == c.test && !seen.count(key))
          ADD_FAILURE() << "known finding no longer reproduces (line " << e.line << "): " << key;
}

void PrintTo(const Pair& p, std::ostream* os) {
  *os << p.binding << " " << p.op;
}

// torch_Softplus, ort_wasm_Conv: gtest names take letters, digits and underscores.
std::string pair_name(const testing::TestParamInfo<Pair>& info) {
  std::string name = info.param.binding + "_" + info.param.op;
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Bindings, BindingOp, testing::ValuesIn(claimed_pairs()), pair_name);

// Every entry of known_findings.txt is well formed and names a binding and a case that exist.
TEST(KnownFindings, NameExistingBindingsAndCases) {
  for (const auto& e : known_findings().errors) ADD_FAILURE() << e;
  std::set<std::string> bindings, tests;
  for (const auto& b : binding_names()) bindings.insert(b);
  for (const auto& [op, cs] : cases_by_op())
    for (const auto& c : cs) tests.insert(c.test);
  for (const auto& [key, e] : known_findings().entries) {
    EXPECT_TRUE(bindings.count(e.binding)) << "line " << e.line << ": no binding " << e.binding;
    EXPECT_TRUE(tests.count(e.test)) << "line " << e.line << ": no case " << e.test;
  }
}

}  // namespace
