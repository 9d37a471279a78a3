#include "engine/autodiff.h"

#include <fmt/format.h>

#include <chrono>

#include "tensor/heap.h"

namespace metaop {

std::vector<std::string> trainable_initializers(const Graph& g) {
  static const std::set<std::pair<std::string, std::size_t>> not_trainable = {
      {"BatchNormalization", 3},
      {"BatchNormalization", 4},
      {"Resize", 1},
      {"Resize", 2},
      {"Upsample", 1},
      {"Clip", 1},
      {"Clip", 2},
      {"Pad", 2},
      {"Dropout", 1}};
  std::vector<std::string> out;
  for (const auto& [name, t] : g.initializers) {
    if (!is_floating(t.dtype())) continue;
    bool trainable = false;
    for (const auto& n : g.nodes)
      for (std::size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] == name && !not_trainable.count({n.op_type, i})) trainable = true;
    if (trainable) out.push_back(name);
  }
  return out;
}

namespace {

// Gradients stay tensors (as the bindings returned them); a value read by several nodes sums
// its contributions in float64 and rounds once.
void accumulate(std::map<std::string, Tensor>& acc, const std::string& name, const Tensor& g) {
  auto it = acc.find(name);
  if (it == acc.end()) {
    acc[name] = g;
    return;
  }
  auto a = it->second.to_f64(), v = g.to_f64();
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += v[i];
  it->second = Tensor::from_f64(a, it->second.shape(), it->second.dtype());
}

const Tensor& kept_value(const Graph& g, const RunResult& forward, const std::string& name) {
  auto it = forward.values.find(name);
  if (it == forward.values.end())
    fail("{}: value '{}' was not kept by the forward run (keep_all)", g.path, name);
  return it->second;
}

// Values whose gradient matters: those in `wrt` and everything computed from them.
std::set<std::string> needing_gradient(const Graph& g, const std::vector<std::size_t>& order,
                                       const std::set<std::string>& wrt) {
  std::set<std::string> needs(wrt.begin(), wrt.end());
  for (auto k : order)
    for (const auto& in : g.nodes[k].inputs)
      if (!in.empty() && needs.count(in))
        for (const auto& o : g.nodes[k].outputs)
          if (!o.empty()) needs.insert(o);
  return needs;
}

// The node's VJP from the binding the plan names, or from the reference when that binding has
// none or throws (the record says which ran, why, how long and how much heap it took).
Tensors node_backward(const Graph& g, const Node& node, Plan& plan, const Tensors& ins,
                      const Tensors& outs, const Tensors& grads, NodeRecord& rec) {
  Binding* b = plan.for_node_backward(node);
  rec.planned = b->name();
  std::int64_t heap0 = heap_in_use();
  reset_heap_peak();
  auto t0 = std::chrono::steady_clock::now();
  Tensors gin;
  try {
    if (!b->supports(node.op_type).backward)
      throw Unsupported(
          fmt::format("{}: {} has no backward for {}", node.label(), b->name(), node.op_type));
    gin = b->backward(node, g.opset, ins, outs, grads);
  } catch (const Unsupported& e) {
    if (b == plan.reference()) throw;
    rec.fallback_reason = e.what();
    b = plan.reference();
    t0 = std::chrono::steady_clock::now();
    gin = b->backward(node, g.opset, ins, outs, grads);
  } catch (const BindingUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    if (b == plan.reference()) throw;
    rec.crash = fmt::format("{}: {} backward threw: {}", node.label(), b->name(), e.what());
    rec.fallback_reason = rec.crash;
    b = plan.reference();
    t0 = std::chrono::steady_clock::now();
    gin = b->backward(node, g.opset, ins, outs, grads);
  }
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rec.heap_delta = heap_in_use() - heap0;
  rec.heap_peak = heap_peak() - heap0;
  rec.binding = b->name();
  return gin;
}

}  // namespace

BackwardResult run_backward(const Graph& g, const RunResult& forward,
                            const std::map<std::string, Tensor>& seeds, Plan& plan,
                            const std::set<std::string>& wrt, const BackwardObserver& observe) {
  auto order = topological_order(g);
  auto value = [&](const std::string& name) -> const Tensor& {
    return kept_value(g, forward, name);
  };
  std::set<std::string> needs = needing_gradient(g, order, wrt);

  std::map<std::string, Tensor> acc;
  for (const auto& [name, t] : seeds) accumulate(acc, name, t);
  BackwardResult res;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& node = g.nodes[*it];
    bool has_grad = false, wants = false;
    for (const auto& o : node.outputs) has_grad |= !o.empty() && acc.count(o);
    for (const auto& in : node.inputs) wants |= !in.empty() && needs.count(in);
    if (!has_grad || !wants) continue;
    Tensors ins, outs, grads;
    for (const auto& in : node.inputs) ins.push_back(in.empty() ? Tensor() : value(in));
    for (const auto& o : node.outputs) {
      outs.push_back(o.empty() ? Tensor() : value(o));
      auto a = o.empty() ? acc.end() : acc.find(o);
      grads.push_back(a == acc.end() || !is_floating(outs.back().dtype()) ? Tensor() : a->second);
    }
    NodeRecord rec;
    rec.node = *it;
    Tensors gin = node_backward(g, node, plan, ins, outs, grads, rec);
    if (observe) observe(node, ins, outs, grads, gin, rec);
    for (std::size_t i = 0; i < node.inputs.size() && i < gin.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty() || !gin[i].defined() || !needs.count(in)) continue;
      if (gin[i].shape() != ins[i].shape())
        fail("{}: {} backward gave input '{}' a gradient of shape {} (value: {})", node.label(),
             rec.binding, in, shape_str(gin[i].shape()), shape_str(ins[i].shape()));
      accumulate(acc, in, gin[i]);
    }
    res.records.push_back(std::move(rec));
  }
  for (const auto& name : wrt) {
    auto a = acc.find(name);
    if (a == acc.end()) continue;
    const Tensor& v = value(name);
    res.grads[name] = a->second.dtype() == v.dtype() ? a->second : a->second.to(v.dtype());
  }
  return res;
}

}  // namespace metaop
