#include "analysis/core/propagate.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "ops/registry.h"

namespace metaop {

namespace {

double normwise(const Tensor& got, const Tensor& exact) {
  auto a = got.to_f64(), b = exact.to_f64();
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace

PropagatedError propagate_tolerances(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                     int samples, std::uint64_t seed,
                                     const AccumulationBound& bound) {
  Plan plan;
  RunResult exact = run_graph(g, inputs, plan);
  PropagatedError res;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int s = 0; s < samples; ++s) {
    RunOptions opts;
    opts.after_node = [&](const Node& node, std::int64_t opset, const Tensors& in, Tensors& out) {
      const MetaOp* op = OpRegistry::instance().find(node.op_type);
      if (!op) return;
      auto tol = tolerances(*op, KernelContext{node, opset}, in, out, bound);
      for (std::size_t o = 0; o < out.size() && o < tol.size(); ++o) {
        if (tol[o].empty() || !out[o].defined()) continue;
        auto v = out[o].to_f64();
        for (std::size_t i = 0; i < v.size(); ++i)
          if (std::isfinite(v[i]) && std::isfinite(tol[o][i])) v[i] += unit(rng) * tol[o][i];
        out[o] = Tensor::from_f64(v, out[o].shape(), out[o].dtype());
      }
    };
    RunResult moved = run_graph(g, inputs, plan, opts);
    for (const auto& [name, t] : exact.outputs)
      if (is_floating(t.dtype())) res.normwise[name].push_back(normwise(moved.outputs.at(name), t));
  }
  return res;
}

}  // namespace metaop
