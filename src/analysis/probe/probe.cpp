#include "analysis/probe/probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "analysis/core/onnx_tests.h"
#include "analysis/core/train_check.h"
#include "analysis/core/triage.h"
#include "bindings/binding.h"
#include "bindings/factory.h"
#include "bindings/update_kernel.h"
#include "graph/onnx_io.h"

namespace metaop {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, std::vector<double>>> probe_patterns(
    const std::vector<double>& critical) {
  const double sub = std::ldexp(1.0, -149), sub2 = std::ldexp(1.0, -140);
  std::vector<std::pair<std::string, std::vector<double>>> p;
  p.push_back(
      {"edges", {0.0,    -0.0,  sub,     -sub,     sub2, -sub2,    FLT_MIN,  -FLT_MIN, 1e-30,
                 -1e-30, 1e-7,  -1e-7,   1.0,      -1.0, 0.5,      -2.0,     1e7,      -1e7,
                 1e30,   -1e30, FLT_MAX, -FLT_MAX, NAN,  INFINITY, -INFINITY}});
  if (!critical.empty()) {
    std::vector<double> c;
    for (double x : critical) {
      float f = static_cast<float>(x);
      for (float v :
           {f, std::nextafter(f, INFINITY), std::nextafter(f, -INFINITY),
            f + 1e-3f * std::max(1.0f, std::fabs(f)), f - 1e-3f * std::max(1.0f, std::fabs(f))})
        c.push_back(v);
    }
    p.push_back({"critical", c});
  }
  // Windows, rows and groups that are all -inf (a reduction's max-subtraction then gives
  // -inf - -inf = NaN where the exact result is -inf or NaN by the definition), with a finite
  // value now and then so that larger tensors also mix them.
  std::vector<double> neginf(24, -INFINITY);
  neginf.push_back(0.5);
  neginf.push_back(-2.0);
  p.push_back({"neginf", neginf});
  std::mt19937_64 rng(12345);
  auto magnitudes = [&](double lo, double hi) {
    std::uniform_real_distribution<double> e(lo, hi);
    std::bernoulli_distribution sign(0.5);
    std::vector<double> v(64);
    for (auto& x : v) x = (sign(rng) ? -1 : 1) * std::pow(10.0, e(rng));
    return v;
  };
  p.push_back({"huge", magnitudes(20, 38.5)});
  p.push_back({"tiny", magnitudes(-45, -30)});
  p.push_back({"wide", magnitudes(-20, 20)});
  return p;
}

namespace {

bool single_node_test(const Graph& g) {
  return g.nodes.size() == 1;
}

ProbeFinding probe_finding(const std::string& op_type, const std::string& binding, FindingKind kind,
                           const std::string& test, const std::string& pattern, double score,
                           const std::string& detail, const Tensors& inputs,
                           const Tensors& reference, const Tensors& got) {
  ProbeFinding f;
  f.op_type = op_type;
  f.binding = binding;
  f.kind = kind;
  f.test = test;
  f.pattern = pattern;
  f.score = score;
  f.detail = detail;
  f.inputs = inputs;
  f.reference_outputs = reference;
  f.binding_outputs = got;
  return f;
}

// The optimizer settings the update probe runs.
std::vector<std::pair<std::string, OptimizerConfig>> update_configs() {
  OptimizerConfig sgd, nesterov, adam, adam_wd, adamw;
  sgd.lr = 0.1;
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  nesterov.weight_decay = 1e-4;
  adam.kind = adam_wd.kind = "adam";
  adam.lr = adam_wd.lr = adamw.lr = 1e-3;
  adam_wd.weight_decay = 0.01;
  adamw.kind = "adamw";
  adamw.weight_decay = 0.01;
  return {{"update:sgd", sgd},
          {"update:sgd_nesterov", nesterov},
          {"update:adam", adam},
          {"update:adam_wd", adam_wd},
          {"update:adamw", adamw}};
}

// Edge values of the update's inputs: weights, gradients and state of every magnitude float32
// has, and non-finite ones.
std::vector<std::pair<std::string, std::vector<double>>> update_patterns() {
  std::vector<double> normal{1e-3, -0.5, 1, -1, 2, -1e3};
  std::vector<double> tiny{0, -0.0, 1.4e-45, -1e-40, 1e-30, -1e-20, 1e-10, 1};
  std::vector<double> huge{1, -1e10, 1e20, -1e25, 1e30, -3e38, 3.4e38};
  std::vector<double> nonfinite{1, -1, INFINITY, -INFINITY, NAN};
  std::vector<double> all;
  for (const auto* v : {&normal, &tiny, &huge, &nonfinite})
    all.insert(all.end(), v->begin(), v->end());
  return {
      {"normal", normal}, {"tiny", tiny}, {"huge", huge}, {"nonfinite", nonfinite}, {"all", all}};
}

// Counts, findings and the journal. Every case (a node test under one input pattern, or an
// update setting under one pattern and step) is begun, gets each binding's outcome, and is
// ended: then its line goes into the journal. On resume the journal's lines are replayed
// through the same counting, and cases it holds are skipped.
class Tally {
 public:
  Tally(const ProbeOptions& o, ProbeResult& res) : o_(o), res_(res) {
    if (o.journal.empty()) return;
    nlohmann::json options = {
        {"ops", o.ops},
        {"bindings", o.bindings},
        {"testdata", o.testdata},
        {"bound", o.bound.kind == AccumulationBound::Rigorous ? "rigorous" : "probabilistic"}};
    std::vector<std::string> dtypes;
    dtypes.reserve(o.dtypes.size());
    for (DType t : o.dtypes) dtypes.emplace_back(dtype_name(t));
    options["dtypes"] = dtypes;
    bool resumed = o.resume && fs::exists(o.journal) && replay(options);
    fd_ = ::open(o.journal.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (resumed ? O_APPEND : O_TRUNC),
                 0644);
    if (fd_ < 0) fail("--journal {}: cannot write: {}", o.journal, std::strerror(errno));
    if (!resumed)
      append({{"type", "start"}, {"schema", "metaop-probe-journal/1"}, {"options", options}});
  }
  ~Tally() {
    if (fd_ >= 0) ::close(fd_);
  }
  Tally(const Tally&) = delete;
  Tally& operator=(const Tally&) = delete;

  bool done(const std::string& key) const { return done_.count(key) > 0; }
  std::size_t resumed() const { return done_.size(); }

  void begin(const std::string& key, const std::string& op, const std::string& test,
             const std::string& pattern) {
    line_ = {{"type", "case"}, {"key", key}, {"op", op}, {"test", test}, {"pattern", pattern}};
    line_["results"] = nlohmann::json::array();
    outputs_.clear();
    worst_.clear();
  }
  // A binding's outputs on the case (for what the others gave at a finding's worst element).
  void outputs(const std::string& binding, const Tensors& got) { outputs_[binding] = got; }
  void ok(const std::string& binding) { outcome(binding, "ok"); }
  void unsupported(const std::string& binding) { outcome(binding, "unsupported"); }
  void finding(ProbeFinding candidate, const Score& s) {
    std::string binding = candidate.binding;
    nlohmann::json r = finding_json(candidate);
    r.erase("op_type");  // the case's line names the op
    r["result"] = "finding";
    ProbeFinding& f = slot(candidate.op_type, binding, candidate.kind, candidate.cls);
    int cases = ++f.cases;
    bool worse = cases == 1 || s.score > f.score ||
                 (s.score == f.score && s.nonfinite > 0 && f.kind != FindingKind::Nonfinite);
    ++res_.counts[line_["op"].get<std::string>()][binding]["finding"];
    if (worse) {
      std::string old = f.repro;
      f = std::move(candidate);
      f.cases = cases;
      f.repro = old;  // replaced at the case's end, when its reproducer is written
      r["worst"] = true;
      worst_.emplace_back(static_cast<std::size_t>(&f - res_.findings.data()),
                          line_["results"].size());
    }
    line_["results"].push_back(r);
  }
  void end() {
    // The findings this case made the worst of their kind: what the other bindings gave, then
    // their reproducers.
    for (auto [fi, ri] : worst_) {
      ProbeFinding& f = res_.findings[fi];
      f.agreement = agreement(f);
      nlohmann::json& r = line_["results"][ri];
      if (!f.agreement.empty()) r["agreement"] = f.agreement;
      if (o_.reproducer) {
        std::string old = f.repro;
        f.repro = o_.reproducer(f);
        if (!old.empty() && old != f.repro) remove_reproducer(old);
      }
      r["repro"] = f.repro;
    }
    worst_.clear();
    ++res_.cases;
    if (fd_ >= 0) {
      done_.insert(line_["key"].get<std::string>());
      append(line_);
    }
  }

 private:
  void outcome(const std::string& binding, const char* result) {
    ++res_.counts[line_["op"].get<std::string>()][binding][result];
    line_["results"].push_back({{"binding", binding}, {"result", result}});
  }
  // One finding per (op, binding, kind, class): a defect is not hidden behind a worse case of
  // float32 limits.
  ProbeFinding& slot(const std::string& op, const std::string& binding, FindingKind kind,
                     FindingClass cls) {
    auto key = std::make_tuple(op, binding, kind, cls);
    auto it = index_.find(key);
    if (it == index_.end()) {
      it = index_.emplace(key, res_.findings.size()).first;
      res_.findings.emplace_back();
    }
    return res_.findings[it->second];
  }
  // A reproducer replaced by a worse case's: removed, when it is one (a folder with a
  // repro.json) inside the probe's output folder.
  void remove_reproducer(const std::string& dir) {
    std::error_code ec;
    if (!fs::exists(fs::path(dir) / "repro.json", ec)) return;
    auto base = fs::weakly_canonical(fs::path(dir).parent_path(), ec);
    auto self = fs::weakly_canonical(dir, ec);
    if (ec || self.parent_path() != base) return;
    fs::remove_all(self, ec);
  }
  void append(const nlohmann::json& j) {
    std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    const char* p = text.data();
    std::size_t n = text.size();
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("--journal {}: write failed: {}", o_.journal, std::strerror(errno));
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  // Reads the journal back: false when it is empty or has no start line (a fresh start).
  bool replay(const nlohmann::json& options) {
    std::string text;
    {
      std::ifstream in(o_.journal, std::ios::binary);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    // A line cut short by the kill is dropped (and cut from the file).
    std::size_t complete = text.rfind('\n');
    complete = complete == std::string::npos ? 0 : complete + 1;
    if (complete < text.size()) {
      if (::truncate(o_.journal.c_str(), static_cast<off_t>(complete)) != 0)
        fail("--journal {}: cannot cut its last, incomplete line: {}", o_.journal,
             std::strerror(errno));
      text.resize(complete);
    }
    std::size_t pos = 0, line_no = 0;
    bool started = false;
    while (pos < text.size()) {
      std::size_t nl = text.find('\n', pos);
      std::string line = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        fail("--resume: {} line {} is not a journal entry", o_.journal, line_no);
      std::string type = j.value("type", "");
      if (!started) {
        if (type != "start" || j.value("schema", "") != "metaop-probe-journal/1")
          fail("--resume: {} is not a metaop probe journal", o_.journal);
        if (j["options"] != options)
          fail(
              "--resume: {} was written by a probe with other options ({}); run without "
              "--resume to start over",
              o_.journal, j["options"].dump());
        started = true;
        continue;
      }
      if (type != "case") continue;
      try {
        replay_case(j, fmt::format("--resume: {} line {}", o_.journal, line_no));
      } catch (const nlohmann::json::exception&) {
        fail("--resume: {} line {} is malformed", o_.journal, line_no);
      }
    }
    return started;
  }
  void replay_case(const nlohmann::json& j, const std::string& where) {
    std::string op = j.at("op").get<std::string>();
    for (const auto& r : j.at("results")) {
      std::string binding = r.at("binding").get<std::string>();
      std::string result = r.at("result").get<std::string>();
      ++res_.counts[op][binding][result];
      if (result != "finding") continue;
      FindingKind kind = parse_finding_kind(r.at("kind").get<std::string>(), where);
      FindingClass cls = r.contains("class")
                             ? parse_finding_class(r.at("class").get<std::string>(), where)
                             : FindingClass::None;
      ProbeFinding& f = slot(op, binding, kind, cls);
      int cases = ++f.cases;
      if (!r.value("worst", false)) continue;
      f = ProbeFinding();
      f.op_type = op;
      f.binding = binding;
      f.kind = kind;
      f.cls = cls;
      f.class_basis = r.value("class_basis", "");
      f.test = j.at("test").get<std::string>();
      f.pattern = j.at("pattern").get<std::string>();
      f.score = number_from_json(r.at("score"));
      f.detail = r.value("detail", "");
      f.phase = parse_phase(r.value("phase", "forward"), where);
      f.repro = r.value("repro", "");
      f.agreement = r.value("agreement", "");
      f.cases = cases;
    }
    ++res_.cases;
    done_.insert(j.at("key").get<std::string>());
  }

  // "at y[1, 0, 3]: ort-1.30 0 (the same), openvino 2.1e-09 (exact)": each other binding's value
  // at f's worst element on this case's inputs, against f's and the reference's.
  std::string agreement(const ProbeFinding& f) const {
    const std::size_t k = f.worst_output;
    const std::int64_t i = f.worst_index;
    if (i < 0 || k >= f.binding_outputs.size() || k >= f.reference_outputs.size() ||
        !f.binding_outputs[k].defined() || !f.reference_outputs[k].defined() ||
        i >= f.binding_outputs[k].numel() || f.graph.nodes.empty())
      return "";
    const double mine = f.binding_outputs[k].f64_at(i), exact = f.reference_outputs[k].f64_at(i);
    auto same = [](double a, double b) {
      return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
    };
    std::string out;
    for (const auto& [binding, got] : outputs_) {
      if (binding == f.binding || k >= got.size() || !got[k].defined() ||
          got[k].shape() != f.reference_outputs[k].shape())
        continue;
      double v = got[k].f64_at(i);
      out += fmt::format("{}{} {:.9g}{}", out.empty() ? "" : ", ", binding, v,
                         same(v, mine)    ? " (the same)"
                         : same(v, exact) ? " (exact)"
                                          : "");
    }
    if (out.empty()) return "";
    const Node& node = f.graph.nodes[0];
    return fmt::format("at {}{}: {}", k < node.outputs.size() ? node.outputs[k] : "output",
                       index_str(f.reference_outputs[k].shape(), i), out);
  }

  const ProbeOptions& o_;
  ProbeResult& res_;
  int fd_ = -1;
  nlohmann::json line_;
  std::map<std::string, Tensors> outputs_;                  // this case's, per binding
  std::vector<std::pair<std::size_t, std::size_t>> worst_;  // (finding, its result in line_)
  std::set<std::string> done_;
  std::map<std::tuple<std::string, std::string, FindingKind, FindingClass>, std::size_t> index_;
};

// Every combination of the pattern's values as the k inputs of an update (see probe_updates).
Tensors update_inputs(const std::vector<double>& V, std::size_t k, DType dt) {
  std::size_t P = V.size(), n = 1;
  for (std::size_t i = 0; i < k; ++i) n *= P;
  std::vector<std::vector<double>> cols(k, std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0, q = i; j < k; ++j, q /= P)
      cols[j][i] = j == 3 ? std::fabs(V[q % P]) : V[q % P];
  Shape s{static_cast<std::int64_t>(n)};
  Tensors in;
  in.reserve(cols.size());
  for (const auto& col : cols) in.push_back(Tensor::from_f64(col, s, dt));
  return in;
}

// The worst element of a bad update, with its inputs as rounded to their dtype.
std::string update_detail(const OptimizerConfig& c, long t, const std::string& b,
                          const LocalCheck& lc, const Tensors& in) {
  const Score& sc = lc.score;
  std::vector<std::string> outs{"new weight"}, ins{"weight", "grad"};
  for (const auto& slot : optimizer_slots(c)) {
    outs.push_back("new " + slot);
    ins.push_back(slot);
  }
  std::string detail = describe_worst(sc, lc.reference, outs, b);
  if (sc.mismatch.empty() && sc.worst_index >= 0) {
    detail += fmt::format("; at step {} with ", t);
    for (std::size_t j = 0; j < in.size(); ++j)
      detail += fmt::format("{}{} = {:.9g}", j ? ", " : "", ins[j],
                            in[j].f64_at(sc.worst_index));  // as rounded to dt
  }
  return detail;
}

// One update case: binding b's kernel for optimizer setting `name` (c) on the pattern's
// combinations `in` at step t.
void probe_update_case(const ProbeOptions& o, Tally& tally, const std::string& b,
                       const std::string& name, const OptimizerConfig& c,
                       const std::string& pattern, long t, const Tensors& in) {
  Tensors state(in.begin() + 2, in.end());
  std::string key = fmt::format("update|{}|{}|{}|{}", b, name, pattern, t);
  if (tally.done(key)) return;
  if (o.progress) o.progress(fmt::format("{} {} {} step {}", name, b, pattern, t));
  tally.begin(key, name, fmt::format("step {}", t), pattern);
  auto kernel = make_update_kernel(b, c);
  Tensors got;
  LocalCheck lc;
  std::optional<FindingKind> kind;
  std::string detail;
  try {
    if (!state.empty()) kernel->set_state("weight", t - 1, state);
    got = {kernel->step("weight", t, in[0], in[1])};
    Tensors after = kernel->state("weight");
    got.insert(got.end(), after.begin(), after.end());
    lc = check_update(c, t, in[0], in[1], state, got[0], after);
    if (lc.score.bad()) kind = score_kind(lc.score);
  } catch (const Unsupported&) {
    tally.unsupported(b);
    tally.end();
    return;
  } catch (const BindingUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    kind = FindingKind::Crash;
    detail = fmt::format("threw: {}", e.what());
    lc.score.score = INFINITY;
  }
  if (!kind) {
    tally.ok(b);
    tally.end();
    return;
  }
  if (detail.empty()) detail = update_detail(c, t, b, lc, in);
  ProbeFinding f = probe_finding(name, b, *kind, fmt::format("step {}", t), pattern, lc.score.score,
                                 detail, in, lc.reference, got);
  f.phase = Phase::Update;
  f.optimizer = c;
  f.step = t;
  if (f.numerical()) {
    triage_update(c, t, "weight", in, lc, got).apply_to(f);
  } else {
    triage_non_numerical(f);
  }
  tally.finding(std::move(f), lc.score);
  tally.end();
}

// Each framework update kernel on every combination of the pattern's values as weight,
// gradient and state (the second moment takes their magnitudes: its domain is v >= 0), at the
// first step (no state) and at step 10, against the float64 rule with the update's error model.
void probe_updates(const ProbeOptions& o, Tally& tally) {
  for (const auto& b : o.bindings) {
    if (!has_update_kernel(b)) continue;
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
      if (!o.dtypes.empty() && std::find(o.dtypes.begin(), o.dtypes.end(), dt) == o.dtypes.end())
        continue;
      for (const auto& [setting, c] : update_configs()) {
        // float32 weights: update:<setting>; others: update:<setting>/<dtype>.
        std::string name =
            dt == DType::Float32 ? setting : setting + "/" + std::string(dtype_name(dt));
        for (const auto& [pattern, V] : update_patterns())
          for (long t : {1L, 10L}) {
            std::size_t k = t == 1 ? 2 : 2 + optimizer_slots(c).size();
            probe_update_case(o, tally, b, name, c, pattern, t, update_inputs(V, k, dt));
          }
      }
    }
  }
}

// A single-node conformance test worth probing: its graph, inputs and op.
struct ProbeTest {
  Graph g;
  std::map<std::string, Tensor> inputs;
  const MetaOp* op = nullptr;
};

// Select: the test's node is read, its op has data inputs to probe, and it matches --op and
// --dtype; nullopt otherwise.
std::optional<ProbeTest> select_test(const std::string& dir, const ProbeOptions& o) {
  ProbeTest t;
  try {
    t.g = load_onnx((fs::path(dir) / "model.onnx").string());
    if (!single_node_test(t.g)) return std::nullopt;
    t.inputs = load_test_inputs(t.g, dir);
  } catch (const std::exception&) {
    return std::nullopt;  // ops MetaOp does not read, multi-node tests: not probe material
  }
  const Node& node = t.g.nodes[0];
  if (!o.ops.empty() && std::find(o.ops.begin(), o.ops.end(), node.op_type) == o.ops.end())
    return std::nullopt;
  t.op = OpRegistry::instance().find(node.op_type);
  if (!t.op || t.op->domain.data_inputs.empty()) return std::nullopt;
  // Integer data (Pow of int64 by float, say): out-of-range float values would only probe
  // float-to-integer conversion, which ONNX leaves undefined.
  if (auto first = t.inputs.find(node.inputs[0]);
      first != t.inputs.end() && !is_floating(first->second.dtype()))
    return std::nullopt;
  if (!o.dtypes.empty()) {
    auto it = t.inputs.find(node.inputs[t.op->domain.data_inputs[0]]);
    if (it == t.inputs.end() ||
        std::find(o.dtypes.begin(), o.dtypes.end(), it->second.dtype()) == o.dtypes.end())
      return std::nullopt;
  }
  return t;
}

// Input k of the test's node: its data file's tensor, else the model's initializer, else none.
Tensor test_input(const ProbeTest& t, std::size_t k) {
  const std::string& name = t.g.nodes[0].inputs[k];
  if (name.empty()) return {};
  if (auto it = t.inputs.find(name); it != t.inputs.end()) return it->second;
  if (auto init = t.g.initializers.find(name); init != t.g.initializers.end()) return init->second;
  return {};
}

// Fill: the node's inputs in order, its floating data inputs replaced by the pattern's values
// (each input shifted differently); empty when no input took the pattern.
Tensors fill_inputs(const ProbeTest& t, const std::vector<double>& values) {
  const Node& node = t.g.nodes[0];
  Tensors in;
  bool any = false;
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    Tensor x = test_input(t, k);
    auto& data = t.op->domain.data_inputs;
    if (x.defined() && is_floating(x.dtype()) &&
        std::find(data.begin(), data.end(), static_cast<int>(k)) != data.end()) {
      std::vector<double> v(static_cast<std::size_t>(x.numel()));
      std::size_t P = values.size();
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = values[(i + k * (i / P + 1)) % P];
      x = Tensor::from_f64(v, x.shape(), x.dtype());
      any = true;
    }
    in.push_back(x);
  }
  return any ? in : Tensors{};
}

// Lengths across the vector widths of CPU kernels (4, 8, 16 floats and multiples): a vector
// body with a scalar tail, and a tail alone, so that both code paths are judged.
constexpr std::int64_t kSimdLengths[] = {1, 7, 9, 15, 17, 31, 33, 63, 65};

// The probe's values for the SIMD lengths: the edges and wide magnitudes, taken with a stride
// coprime to their count so that every prefix (a short tensor, its tail) mixes them.
std::vector<double> simd_values() {
  auto patterns = probe_patterns({});
  std::vector<double> all;
  for (const auto& [name, v] : patterns)
    if (name == "edges" || name == "wide") all.insert(all.end(), v.begin(), v.end());
  std::vector<double> out(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) out[i] = all[(i * 13) % all.size()];
  return out;
}

// An element-wise test's inputs at length n: every input of input 0's shape (floating data
// inputs only) becomes 1-D of n values, the others (scalars, size-1 bounds) stay; empty when
// the test is not such a one (broadcasting, other shapes, non-floating inputs of that shape).
Tensors simd_inputs(const ProbeTest& t, std::int64_t n, const std::vector<double>& values) {
  const Node& node = t.g.nodes[0];
  if (t.op->family != Family::elementwise) return {};
  Tensors in;
  Shape shape0;
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    Tensor x = test_input(t, k);
    if (k == 0) {
      if (!x.defined() || !is_floating(x.dtype()) || x.numel() < 2) return {};
      shape0 = x.shape();
    }
    if (x.defined() && x.shape() == shape0) {
      auto& data = t.op->domain.data_inputs;
      if (!is_floating(x.dtype()) ||
          std::find(data.begin(), data.end(), static_cast<int>(k)) == data.end())
        return {};
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = values[(i + 31 * k) % values.size()];
      x = Tensor::from_f64(v, {n}, x.dtype());
    } else if (x.defined() && x.numel() != 1) {
      return {};
    }
    in.push_back(x);
  }
  return in;
}

// Judge: one binding on one case, into the tally (ok, unsupported, or a finding).
void judge(Binding& b, const ProbeTest& t, const std::string& test, const std::string& pattern,
           const Tensors& in, const Tensors& ref, const std::vector<std::vector<double>>& tol,
           Tally& tally) {
  const Node& node = t.g.nodes[0];
  if (!b.supports(node.op_type).forward) {
    tally.unsupported(b.name());
    return;
  }
  Tensors got;
  std::optional<FindingKind> kind;
  std::string detail;
  Score s;
  try {
    got = b.forward(node, t.g.opset, in);
    s = score_outputs(got, ref, tol);
    if (s.bad()) kind = score_kind(s);
  } catch (const Unsupported&) {
    tally.unsupported(b.name());
    return;
  } catch (const Hang& e) {
    kind = FindingKind::Hang;
    detail = e.what();
    s.score = INFINITY;
  } catch (const Crash& e) {
    kind = FindingKind::Crash;
    detail = e.what();
    s.score = INFINITY;
  } catch (const BindingUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    kind = FindingKind::Crash;
    detail = fmt::format("threw: {}", e.what());
    s.score = INFINITY;
  }
  if (!got.empty()) tally.outputs(b.name(), got);
  if (!kind) {
    tally.ok(b.name());
    return;
  }
  if (detail.empty()) detail = describe_worst(node, s, in, ref, b.name());
  ProbeFinding f =
      probe_finding(node.op_type, b.name(), *kind, test, pattern, s.score, detail, in, ref, got);
  f.graph = t.g;
  if (s.worst_index >= 0) f.worst_output = s.worst_output, f.worst_index = s.worst_index;
  if (f.numerical()) {
    triage(*t.op, KernelContext{node, t.g.opset}, in, ref, tol, got).apply_to(f);
  } else {
    triage_non_numerical(f);
  }
  tally.finding(std::move(f), s);
}

}  // namespace

ProbeResult probe(const ProbeOptions& o) {
  ProbeResult res;
  std::vector<std::unique_ptr<Binding>> bindings;
  bindings.reserve(o.bindings.size());
  for (const auto& b : o.bindings) bindings.push_back(make_binding(b));
  std::vector<std::string> dirs = find_conformance_tests({o.testdata});
  // One finding per (op, binding, kind): the worst case, and how many cases failed.
  Tally tally(o, res);
  if (tally.resumed() && o.progress)
    o.progress(fmt::format("resuming: {} cases done already", tally.resumed()));
  std::size_t done = 0;
  std::set<std::string> simd_done;  // ops probed at the SIMD lengths already
  const std::vector<double> simd = simd_values();
  for (const auto& dir : dirs) {
    ++done;
    std::optional<ProbeTest> t = select_test(dir, o);
    if (!t) continue;
    const Node& node = t->g.nodes[0];
    if (o.progress)
      o.progress(fmt::format("[{}/{}] {}", done, dirs.size(), fs::path(dir).filename().string()));
    std::vector<double> critical;
    if (t->op->domain.critical) critical = t->op->domain.critical(KernelContext{node, t->g.opset});
    std::string test = fs::path(dir).filename().string();
    // One case: the node on `in` under every binding (false: no input took the pattern).
    // The inputs are made only for a case the journal does not hold yet.
    auto run_case = [&](const std::string& pattern, const std::function<Tensors()>& make) {
      std::string key = fmt::format("{}|{}", test, pattern);
      if (tally.done(key)) return true;
      Tensors in = make();
      if (in.empty()) return false;
      // Inputs where ONNX leaves the op undefined (the op declares them) are judged nowhere.
      if (t->op->undefined.refuse && !t->op->undefined.refuse(node, in).empty()) return true;
      Tensors ref;
      std::vector<std::vector<double>> tol;
      try {
        KernelContext ctx{node, t->g.opset};
        ref = t->op->reference(ctx, in);
        tol = tolerances(*t->op, ctx, in, ref, o.bound);
      } catch (const std::exception&) {
        return true;  // inputs the op rejects (the reference says why); nothing to judge
      }
      tally.begin(key, node.op_type, test, pattern);
      for (auto& b : bindings) judge(*b, *t, test, pattern, in, ref, tol, tally);
      tally.end();
      return true;
    };
    for (const auto& [pattern, values] : probe_patterns(critical))
      if (!run_case(pattern, [&, &values = values] { return fill_inputs(*t, values); })) break;
    // The SIMD lengths, on the first test of an element-wise op that takes them.
    if (!simd_done.count(node.op_type) && !simd_inputs(*t, 2, simd).empty()) {
      simd_done.insert(node.op_type);
      for (std::int64_t n : kSimdLengths)
        run_case(fmt::format("len{}", n), [&, n] { return simd_inputs(*t, n, simd); });
    }
  }
  if (o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), "update") != o.ops.end())
    probe_updates(o, tally);
  std::stable_sort(res.findings.begin(), res.findings.end(),
                   [](const ProbeFinding& a, const ProbeFinding& b) {
                     if (a.op_type != b.op_type) return a.op_type < b.op_type;
                     return a.binding < b.binding;
                   });
  return res;
}

}  // namespace metaop
