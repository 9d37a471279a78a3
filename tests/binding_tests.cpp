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

#include "analysis/check/binding_check.h"
#include "analysis/core/accuracy.h"
#include "analysis/core/node_cases.h"
#include "analysis/core/triage.h"
#include "bindings/factory.h"
#include "graph/onnx_io.h"
#include "ops/registry.h"
#include "report/core/tracker_report.h"
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

const std::map<std::string, std::vector<NodeCase>>& cases_by_op() {
  return node_cases_by_op(std::string(METAOP_ONNX_TESTDATA) + "/node");
}

// --- known findings

struct Known {
  std::string binding, op, test, phase, variant, kind;
  std::string cls;   // forward and vjp: the triage class; backward: "-"
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
        kinds{"accuracy", "nonfinite", "shape", "omitted", "error", "crash", "any"},
        classes{"defect", "float32-limit", "convention", "untriaged", "-"};
    KnownList k;
    const std::set<std::string> flags = cpu_flags();
    std::ifstream f(METAOP_KNOWN_FINDINGS);
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ss(line);
      Known e;
      std::string bound, cpu, extra;
      ss >> e.binding >> e.op >> e.test >> e.phase >> e.variant >> e.kind >> e.cls >> bound;
      // An optional cpu:FLAG or cpu:!FLAG: the line holds only on CPUs with (without) that
      // feature, where the framework dispatches to other kernels.
      if (ss >> cpu && !cpu.starts_with("cpu:")) extra = cpu;
      const bool negated = cpu.starts_with("cpu:!");
      const std::string flag = cpu.empty() ? "" : cpu.substr(negated ? 5 : 4);
      e.line = n;
      try {
        std::size_t used = 0;
        e.bound = bound == "inf" ? INFINITY : std::stod(bound, &used);
        if (bound != "inf" && used != bound.size()) throw std::invalid_argument(bound);
      } catch (const std::exception&) {
        e.bound = NAN;
      }
      if (!phases.count(e.phase) || !variants.count(e.variant) || !kinds.count(e.kind) ||
          !classes.count(e.cls) || (e.phase == "backward") != (e.cls == "-") ||
          std::isnan(e.bound) || !extra.empty() || (ss >> extra) ||
          (!cpu.empty() && flag.empty())) {
        k.errors.push_back(
            fmt::format("known_findings.txt:{}: '{}' is not 'BINDING OP TEST "
                        "forward|backward|vjp given|random KIND CLASS BOUND [cpu:[!]FLAG]' "
                        "(CLASS '-' for backward only)",
                        n, line));
        continue;
      }
      if (!flag.empty() && flags.count(flag) == negated) continue;  // for another kind of CPU
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
  std::string cls = "-";  // forward and vjp: the triage class
};

Outcome from_score(const Score& s, const std::string& detail) {
  if (!s.bad()) return {};
  std::string kind = !s.mismatch.empty() ? "shape" : s.nonfinite > 0 ? "nonfinite" : "accuracy";
  return {kind, s.score, detail};
}

Outcome from_verdict(const NodeVerdict& v) {
  if (v.status == NodeStatus::Ok) return {};
  return {v.kind, v.worst, v.detail, v.cls.empty() ? "-" : v.cls};
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
    names.reserve(node.inputs.size());
    for (const auto& n : node.inputs) names.push_back("grad " + n);
    Outcome o =
        from_score(lc.score, fmt::format("score {:.3g}: {}", lc.score.score,
                                         describe_worst(lc.score, lc.reference, names, b.name())));
    if (!o.kind.empty()) o.cls = to_string(triage_backward(node, opset, in, outs, g, lc, got).cls);
    return o;
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

// One (binding, op) pair's run over the op's cases: how many were checked and passed per phase,
// the listed findings that came up, and the outcomes not listed as they are.
class PairRun {
 public:
  PairRun(const std::string& name, const std::string& op)
      : name_(name),
        binding_(binding_named(name)),
        support_(binding_.supports(op)),
        known_(known_findings().entries),
        gradcheck_only_(name == "reference") {}

  // Forward (but for the reference's), backward against finite differences and backward
  // against the reference VJP on every input set of every case, given and randomized.
  void run(const std::vector<NodeCase>& cases) {
    for (const auto& c : cases)
      for (std::size_t k = 0; k < c.input_sets.size(); ++k) {
        Tensors given = node_inputs(c.graph, c.input_sets[k]);
        run_inputs(c, k, given, "given");
        run_inputs(c, k, randomized(c.graph.nodes[0], given, 17 + k), "random");
      }
  }

  void report(const std::string& op, const std::vector<NodeCase>* cases) const {
    std::printf(
        "%s %s: forward %d/%d cases within the error model; backward vs finite differences "
        "%d/%d (%d coordinates compared, %d skipped at kinks or non-finite values); backward vs "
        "the reference VJP %d/%d\n",
        name_.c_str(), op.c_str(), fwd_ok_, fwd_checked_, bwd_ok_, bwd_checked_, compared_,
        skipped_, vjp_ok_, vjp_checked_);
    // A claimed op that no case exercised (none exists, or every case was refused) fails: a
    // claim is what a test shows.
    if (!gradcheck_only_) {
      EXPECT_GT(fwd_checked_, 0) << name_ << " claims " << op << " but no case ran";
    }
    if (support_.backward) {
      EXPECT_GT(bwd_checked_, 0) << name_ << " claims " << op << "'s backward, but no case ran";
    }
    for (const auto& u : unexpected_) ADD_FAILURE() << "unexpected: " << u;
    // Listed findings of this op that did not come up.
    if (cases)
      for (const auto& c : *cases)
        for (const auto& [key, e] : known_)
          if (e.binding == name_ && e.test == c.test && !seen_.count(key))
            ADD_FAILURE() << "known finding no longer reproduces (line " << e.line << "): " << key;
  }

 private:
  void run_inputs(const NodeCase& c, std::size_t k, const Tensors& in, const std::string& var) {
    const Node& node = c.graph.nodes[0];
    if (!gradcheck_only_) {
      NodeVerdict f = check_forward(binding_, node, c.graph.opset, in);
      if (f.status == NodeStatus::Unsupported) return;
      ++fwd_checked_;
      fwd_ok_ += judge(c.test, "forward", var, from_verdict(f));
    }
    if (!support_.backward) return;
    NodeVerdict b = check_backward(binding_, node, c.graph.opset, in, 5 + k);
    if (b.status == NodeStatus::Unsupported) return;
    ++bwd_checked_;
    compared_ += b.compared;
    skipped_ += b.skipped;
    bwd_ok_ += judge(c.test, "backward", var, from_verdict(b));
    if (gradcheck_only_) return;
    Outcome v = vjp_outcome(binding_, node, c.graph.opset, in, 11 + k);
    ++vjp_checked_;
    vjp_ok_ += judge(c.test, "vjp", var, v);
  }

  // True when the case passed; a failure listed as it is only joins seen_.
  bool judge(const std::string& test, const std::string& phase, const std::string& variant,
             const Outcome& o) {
    std::string key = key_of(name_, test, phase, variant);
    auto it = known_.find(key);
    if (o.kind.empty()) return true;
    if (it == known_.end()) {
      unexpected_.push_back(
          fmt::format("{} {} {} {:.3g}: {}", key, o.kind, o.cls, o.score, o.detail));
      return false;
    }
    seen_.insert(key);
    const Known& k = it->second;
    if (k.kind != "any" && k.kind != o.kind)
      unexpected_.push_back(fmt::format("{}: listed as {} (line {}) but now {}: {}", key, k.kind,
                                        k.line, o.kind, o.detail));
    else if (k.cls != o.cls)
      unexpected_.push_back(fmt::format("{}: listed as class {} (line {}) but now {}: {}", key,
                                        k.cls, k.line, o.cls, o.detail));
    else if (!(o.score <= k.bound))
      unexpected_.push_back(
          fmt::format("{}: worse than listed: score {:.3g} > {:.3g} (line {}): {}", key, o.score,
                      k.bound, k.line, o.detail));
    return false;
  }

  const std::string& name_;
  Binding& binding_;
  Support support_;
  const std::map<std::string, Known>& known_;
  bool gradcheck_only_;
  std::set<std::string> seen_;
  std::vector<std::string> unexpected_;
  int fwd_checked_ = 0, fwd_ok_ = 0, bwd_checked_ = 0, bwd_ok_ = 0, vjp_checked_ = 0, vjp_ok_ = 0;
  int compared_ = 0, skipped_ = 0;
};

class BindingOp : public testing::TestWithParam<Pair> {};

TEST_P(BindingOp, AgreesWithTheReference) {
  const auto& [name, op] = GetParam();
  PairRun run(name, op);
  auto it = cases_by_op().find(op);
  const std::vector<NodeCase>* cases = it == cases_by_op().end() ? nullptr : &it->second;
  if (cases) run.run(*cases);
  run.report(op, cases);
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

// Every entry of known_findings.txt is well formed and names a binding, a registered op and a
// case of that op.
TEST(KnownFindings, NameExistingBindingsAndCases) {
  for (const auto& e : known_findings().errors) ADD_FAILURE() << e;
  std::set<std::string> bindings;
  std::map<std::string, std::string> op_of;  // case -> its op
  for (const auto& b : binding_names()) bindings.insert(b);
  for (const auto& [op, cs] : cases_by_op())
    for (const auto& c : cs) op_of[c.test] = op;
  for (const auto& [key, e] : known_findings().entries) {
    EXPECT_TRUE(bindings.count(e.binding)) << "line " << e.line << ": no binding " << e.binding;
    EXPECT_TRUE(OpRegistry::instance().find(e.op))
        << "line " << e.line << ": " << e.op << " is not a meta operator";
    auto it = op_of.find(e.test);
    if (it == op_of.end())
      ADD_FAILURE() << "line " << e.line << ": no case " << e.test;
    else
      EXPECT_EQ(it->second, e.op) << "line " << e.line << ": " << e.test << " is a case of "
                                  << it->second;
  }
}

}  // namespace
