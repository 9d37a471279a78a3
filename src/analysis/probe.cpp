#include "analysis/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <random>

#include "analysis/conform.h"
#include "bindings/binding.h"
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

}  // namespace

ProbeResult probe(const ProbeOptions& o) {
  ProbeResult res;
  std::vector<std::unique_ptr<Binding>> bindings;
  for (const auto& b : o.bindings) bindings.push_back(make_binding(b));
  std::vector<std::string> dirs = find_conformance_tests({o.testdata});
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> index;
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
        auto key = std::make_tuple(node.op_type, b->name(), kind);
        auto it = index.find(key);
        if (it == index.end()) {
          index[key] = res.findings.size();
          res.findings.emplace_back();
          it = index.find(key);
        }
        ProbeFinding& f = res.findings[it->second];
        ++f.cases;
        bool worse = f.cases == 1 || s.score > f.score ||
                     (s.score == f.score && s.nonfinite > 0 && f.kind != "nonfinite");
        if (!worse) continue;
        int cases = f.cases;
        f = ProbeFinding{node.op_type, b->name(), kind, test, pattern, s.score,
                         detail,       cases,     g,    in,   ref,     got};
      }
    }
  }
  std::stable_sort(res.findings.begin(), res.findings.end(),
                   [](const ProbeFinding& a, const ProbeFinding& b) {
                     if (a.op_type != b.op_type) return a.op_type < b.op_type;
                     return a.binding < b.binding;
                   });
  return res;
}

}  // namespace metaop
