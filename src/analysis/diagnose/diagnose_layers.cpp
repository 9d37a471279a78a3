#include "analysis/diagnose/diagnose_layers.h"

#include <algorithm>

#include "engine/autodiff.h"
#include "ops/kernel_util.h"

namespace metaop {

namespace {

// Activations a layer's outputs may pass through, unit by unit, on their way to the next layer.
bool unit_wise(const std::string& op) {
  static const std::set<std::string> ops = {"Relu", "LeakyRelu", "Tanh",     "Sigmoid", "Elu",
                                            "Selu", "Gelu",      "Softplus", "Identity"};
  return ops.count(op) != 0;
}

}  // namespace

DenseLayers::DenseLayers(const Graph& g) : g_(g) {
  auto trainable = trainable_initializers(g);
  train_ = {trainable.begin(), trainable.end()};
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& i : g.nodes[k].inputs) consumers_[i].push_back(k);
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    if (auto d = dense(k)) by_node_[k] = *d;
}

DenseLayers::Feed DenseLayers::next(const Dense& layer) const {
  Feed f;
  std::string v = layer.output;
  f.path = {v};
  for (int hops = 0; hops < 8; ++hops) {
    for (const auto& o : g_.outputs)
      if (o.name == v) return {};
    auto it = consumers_.find(v);
    if (it == consumers_.end() || it->second.size() != 1) return {};
    std::size_t k = it->second.front();
    const Node& n = g_.nodes[k];
    if (by_node_.count(k) && n.inputs[0] == v) {
      f.layer = k;
      return f;
    }
    if (!unit_wise(n.op_type) || n.inputs.empty() || n.inputs[0] != v) return {};
    v = n.outputs.at(0);
    f.path.push_back(v);
  }
  return {};
}

std::optional<Dense> DenseLayers::dense(std::size_t k) const {
  const Node& n = g_.nodes[k];
  if ((n.op_type != "Gemm" && n.op_type != "MatMul") || n.inputs.size() < 2 ||
      !train_.count(n.inputs[1]))
    return std::nullopt;
  const Tensor& w = g_.initializers.at(n.inputs[1]);
  if (w.rank() != 2) return std::nullopt;
  Dense d;
  d.index = k;
  d.weight = n.inputs[1];
  d.out_rows = n.op_type == "Gemm" && attr_i(KernelContext{n, g_.opset}, "transB") != 0;
  if (n.op_type == "Gemm" && attr_i(KernelContext{n, g_.opset}, "transA") != 0) return std::nullopt;
  d.fan_in = d.out_rows ? w.dim(1) : w.dim(0);
  d.fan_out = d.out_rows ? w.dim(0) : w.dim(1);
  d.output = n.outputs.at(0);
  if (n.op_type == "Gemm" && n.inputs.size() > 2 && train_.count(n.inputs[2])) {
    d.bias = n.inputs[2];
  } else if (n.op_type == "MatMul") {
    auto it = consumers_.find(d.output);
    if (it != consumers_.end() && it->second.size() == 1) {
      const Node& m = g_.nodes[it->second.front()];
      if (m.op_type == "Add" && m.inputs.size() == 2 && m.inputs[0] == d.output &&
          train_.count(m.inputs[1])) {
        d.bias = m.inputs[1];
        d.bias_add = it->second.front();
        d.output = m.outputs.at(0);
      }
    }
  }
  if (!d.bias.empty() && g_.initializers.at(d.bias).numel() != d.fan_out) return std::nullopt;
  return d;
}

double dense_weight(const Dense& d, const std::vector<double>& w, std::int64_t unit,
                    std::int64_t input) {
  auto at = d.out_rows ? unit * d.fan_in + input : input * d.fan_out + unit;
  return w[static_cast<std::size_t>(at)];
}

namespace {

// Whether every unit of `d` has the same weights and bias.
bool units_identical(const Graph& g, const Dense& d) {
  auto w = g.initializers.at(d.weight).to_f64();
  for (std::int64_t u = 1; u < d.fan_out; ++u)
    for (std::int64_t i = 0; i < d.fan_in; ++i)
      if (!(dense_weight(d, w, u, i) == dense_weight(d, w, 0, i))) return false;
  if (d.bias.empty()) return true;
  auto b = g.initializers.at(d.bias).to_f64();
  return std::all_of(b.begin(), b.end(), [&](double x) { return x == b.front(); });
}

// Whether every unit of `m` weighs its inputs alike.
bool inputs_alike(const Graph& g, const Dense& m) {
  auto w = g.initializers.at(m.weight).to_f64();
  for (std::int64_t u = 0; u < m.fan_out; ++u)
    for (std::int64_t i = 1; i < m.fan_in; ++i)
      if (!(dense_weight(m, w, u, i) == dense_weight(m, w, u, 0))) return false;
  return true;
}

}  // namespace

std::vector<SymmetricLayer> symmetric_layers(const Graph& g) {
  DenseLayers layers(g);
  std::vector<SymmetricLayer> out;
  for (const auto& [k, d] : layers.all()) {
    if (d.fan_out < 2 || d.fan_in < 1) continue;
    auto feed = layers.next(d);
    if (feed.layer == SIZE_MAX) continue;
    const Dense& m = layers.all().at(feed.layer);
    if (m.fan_in != d.fan_out || !units_identical(g, d) || !inputs_alike(g, m)) continue;
    SymmetricLayer s;
    s.index = k;
    s.next = feed.layer;
    s.units = d.fan_out;
    s.value = g.initializers.at(d.weight).to_f64().front();
    out.push_back(s);
  }
  return out;
}

}  // namespace metaop
