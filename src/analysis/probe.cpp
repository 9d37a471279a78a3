#include "analysis/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <random>

#include "analysis/conform.h"
#include "analysis/train_check.h"
#include "bindings/binding.h"
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

ProbeFinding probe_finding(const std::string& op_type, const std::string& binding,
                           const std::string& kind, const std::string& test,
                           const std::string& pattern, double score, const std::string& detail,
                           const Tensors& inputs, const Tensors& reference, const Tensors& got) {
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

using RecordFn = std::function<void(ProbeFinding, const Score&)>;

// Each framework update kernel on every combination of the pattern's values as weight,
// gradient and state (the second moment takes their magnitudes: its domain is v >= 0), at the
// first step (no state) and at step 10, against the float64 rule with the update's error model.
void probe_updates(const ProbeOptions& o, ProbeResult& res, const RecordFn& record) {
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
            std::size_t P = V.size(), k = t == 1 ? 2 : 2 + optimizer_slots(c).size(), n = 1;
            for (std::size_t i = 0; i < k; ++i) n *= P;
            std::vector<std::vector<double>> cols(k, std::vector<double>(n));
            for (std::size_t i = 0; i < n; ++i)
              for (std::size_t j = 0, q = i; j < k; ++j, q /= P)
                cols[j][i] = j == 3 ? std::fabs(V[q % P]) : V[q % P];
            Shape s{static_cast<std::int64_t>(n)};
            Tensors in;
            for (const auto& col : cols) in.push_back(Tensor::from_f64(col, s, dt));
            Tensors state(in.begin() + 2, in.end());
            if (o.progress) o.progress(fmt::format("{} {} {} step {}", name, b, pattern, t));
            ++res.cases;
            auto& counts = res.counts[name][b];
            auto kernel = make_update_kernel(b, c);
            Tensors got;
            LocalCheck lc;
            std::string kind, detail;
            try {
              if (!state.empty()) kernel->set_state("weight", t - 1, state);
              got = {kernel->step("weight", t, in[0], in[1])};
              Tensors after = kernel->state("weight");
              got.insert(got.end(), after.begin(), after.end());
              lc = check_update(c, t, in[0], in[1], state, got[0], after);
              if (lc.score.bad()) kind = lc.score.nonfinite ? "nonfinite" : "accuracy";
            } catch (const Unsupported&) {
              ++counts["unsupported"];
              continue;
            } catch (const std::exception& e) {
              kind = "crash";
              detail = fmt::format("threw: {}", e.what());
              lc.score.score = INFINITY;
            }
            if (kind.empty()) {
              ++counts["ok"];
              continue;
            }
            ++counts["finding"];
            const Score& sc = lc.score;
            if (detail.empty()) {
              std::vector<std::string> outs{"new weight"}, ins{"weight", "grad"};
              for (const auto& slot : optimizer_slots(c)) {
                outs.push_back("new " + slot);
                ins.push_back(slot);
              }
              detail = describe_worst(sc, lc.reference, outs, b);
              if (sc.mismatch.empty() && sc.worst_index >= 0) {
                detail += fmt::format("; at step {} with ", t);
                for (std::size_t j = 0; j < k; ++j)
                  detail += fmt::format("{}{} = {:.9g}", j ? ", " : "", ins[j],
                                        in[j].f64_at(sc.worst_index));  // as rounded to dt
              }
            }
            ProbeFinding f = probe_finding(name, b, kind, fmt::format("step {}", t), pattern,
                                           sc.score, detail, in, lc.reference, got);
            f.phase = "update";
            f.optimizer = c;
            f.step = t;
            record(std::move(f), sc);
          }
      }
    }
  }
}

}  // namespace

ProbeResult probe(const ProbeOptions& o) {
  ProbeResult res;
  std::vector<std::unique_ptr<Binding>> bindings;
  for (const auto& b : o.bindings) bindings.push_back(make_binding(b));
  std::vector<std::string> dirs = find_conformance_tests({o.testdata});
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> index;
  // One finding per (op, binding, kind): the worst case, and how many cases failed.
  auto record = [&](ProbeFinding candidate, const Score& s) {
    auto key = std::make_tuple(candidate.op_type, candidate.binding, candidate.kind);
    auto it = index.find(key);
    if (it == index.end()) {
      index[key] = res.findings.size();
      res.findings.emplace_back();
      it = index.find(key);
    }
    ProbeFinding& f = res.findings[it->second];
    int cases = ++f.cases;
    bool worse = cases == 1 || s.score > f.score ||
                 (s.score == f.score && s.nonfinite > 0 && f.kind != "nonfinite");
    if (!worse) return;
    f = std::move(candidate);
    f.cases = cases;
  };
  const auto& reg = OpRegistry::instance();
  std::size_t done = 0;
  for (const auto& dir : dirs) {
    ++done;
    Graph g;
    std::map<std::string, Tensor> test_inputs;
    try {
      g = load_onnx((fs::path(dir) / "model.onnx").string());
      if (!single_node_test(g)) continue;
      test_inputs = load_test_inputs(g, dir);
    } catch (const std::exception&) {
      continue;  // ops MetaOp does not read, multi-node tests: not probe material
    }
    const Node& node = g.nodes[0];
    if (!o.ops.empty() && std::find(o.ops.begin(), o.ops.end(), node.op_type) == o.ops.end())
      continue;
    const MetaOp* op = reg.find(node.op_type);
    if (!op || op->domain.data_inputs.empty()) continue;
    // Integer data (Pow of int64 by float, say): out-of-range float values would only probe
    // float-to-integer conversion, which ONNX leaves undefined.
    if (auto first = test_inputs.find(node.inputs[0]);
        first != test_inputs.end() && !is_floating(first->second.dtype()))
      continue;
    if (!o.dtypes.empty()) {
      auto it = test_inputs.find(node.inputs[op->domain.data_inputs[0]]);
      if (it == test_inputs.end() ||
          std::find(o.dtypes.begin(), o.dtypes.end(), it->second.dtype()) == o.dtypes.end())
        continue;
    }
    if (o.progress)
      o.progress(fmt::format("[{}/{}] {}", done, dirs.size(), fs::path(dir).filename().string()));
    std::vector<double> critical;
    if (op->domain.critical) critical = op->domain.critical(node);
    for (const auto& [pattern, values] : probe_patterns(critical)) {
      // The node's inputs in order, data inputs replaced by the pattern.
      Tensors in;
      bool any = false;
      for (std::size_t k = 0; k < node.inputs.size(); ++k) {
        const std::string& name = node.inputs[k];
        Tensor t;
        if (!name.empty()) {
          if (auto it = test_inputs.find(name); it != test_inputs.end())
            t = it->second;
          else if (auto init = g.initializers.find(name); init != g.initializers.end())
            t = init->second;
        }
        auto& data = op->domain.data_inputs;
        if (t.defined() && is_floating(t.dtype()) &&
            std::find(data.begin(), data.end(), static_cast<int>(k)) != data.end()) {
          std::vector<double> v(static_cast<std::size_t>(t.numel()));
          std::size_t P = values.size();
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = values[(i + k * (i / P + 1)) % P];
          t = Tensor::from_f64(v, t.shape(), t.dtype());
          any = true;
        }
        in.push_back(t);
      }
      if (!any) break;
      Tensors ref;
      std::vector<std::vector<double>> tol;
      try {
        KernelContext ctx{node, g.opset};
        ref = op->reference(ctx, in);
        tol = tolerances(*op, ctx, in, ref, o.bound);
      } catch (const std::exception&) {
        continue;  // inputs the op rejects (the reference says why); nothing to judge
      }
      ++res.cases;
      std::string test = fs::path(dir).filename().string();
      for (auto& b : bindings) {
        auto& counts = res.counts[node.op_type][b->name()];
        if (!b->supports(node.op_type).forward) {
          ++counts["unsupported"];
          continue;
        }
        Tensors got;
        std::string kind, detail;
        Score s;
        try {
          got = b->forward(node, g.opset, in);
          s = score_outputs(got, ref, tol);
          if (s.bad()) kind = s.nonfinite ? "nonfinite" : "accuracy";
        } catch (const Unsupported&) {
          ++counts["unsupported"];
          continue;
        } catch (const Hang& e) {
          kind = "hang";
          detail = e.what();
          s.score = INFINITY;
        } catch (const Crash& e) {
          kind = "crash";
          detail = e.what();
          s.score = INFINITY;
        } catch (const std::exception& e) {
          kind = "crash";
          detail = fmt::format("threw: {}", e.what());
          s.score = INFINITY;
        }
        if (kind.empty()) {
          ++counts["ok"];
          continue;
        }
        ++counts["finding"];
        if (detail.empty()) {
          if (!s.mismatch.empty()) {
            detail = s.mismatch;
          } else {
            const std::string& out_name = node.outputs[s.worst_output];
            std::string inputs_there;
            for (std::size_t k = 0; k < in.size(); ++k)
              if (in[k].defined() && in[k].numel() == ref[s.worst_output].numel())
                inputs_there +=
                    fmt::format("{}{} = {:.9g}", inputs_there.empty() ? "" : ", ", node.inputs[k],
                                in[k].to_f64()[static_cast<std::size_t>(s.worst_index)]);
            detail = fmt::format(
                "{}{}: {} {:.9g}, reference {:.9g}, tolerance {:.3g}; {} of {} elements over "
                "tolerance, {} non-finite mismatches{}",
                out_name, index_str(ref[s.worst_output].shape(), s.worst_index), b->name(),
                s.worst_got, s.worst_ref, s.worst_tol, s.over, s.elements, s.nonfinite,
                inputs_there.empty() ? "" : "; inputs there: " + inputs_there);
          }
        }
        ProbeFinding f = probe_finding(node.op_type, b->name(), kind, test, pattern, s.score,
                                       detail, in, ref, got);
        f.graph = g;
        record(std::move(f), s);
      }
    }
  }
  if (o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), "update") != o.ops.end())
    probe_updates(o, res, record);
  std::stable_sort(res.findings.begin(), res.findings.end(),
                   [](const ProbeFinding& a, const ProbeFinding& b) {
                     if (a.op_type != b.op_type) return a.op_type < b.op_type;
                     return a.binding < b.binding;
                   });
  return res;
}

}  // namespace metaop
