#include "engine/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "bindings/factory.h"
#include "ops/kernel_util.h"
#include "ops/registry.h"
#include "tensor/heap.h"
#include "tensor/text.h"

namespace metaop {

std::string crashing_inputs(const Node& node, const Tensors& in) {
  // Inputs on which the op is defined but C++ kernels crash: the op declares them.
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->undefined.crashes) return "";
  return op->undefined.crashes(node, in);
}

void refuse_undefined_inputs(const Node& node, const Tensors& in) {
  // Inputs where ONNX leaves the op undefined (the op declares them): refused for every binding.
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->undefined.refuse) return;
  if (std::string why = op->undefined.refuse(node, in); !why.empty()) fail("{}", why);
}

Plan::Plan() {
  binding("reference");
}

Binding* Plan::binding(const std::string& name) {
  auto it = bindings_.find(name);
  if (it != bindings_.end()) return it->second.get();
  auto b = make_binding(name);
  Binding* raw = b.get();
  bindings_[name] = std::move(b);
  return raw;
}

void Plan::add_binding(std::unique_ptr<Binding> b) {
  std::string n = b->name();
  bindings_[n] = std::move(b);
}

void Plan::set_default(const std::string& b) {
  binding(b);
  default_ = b;
}

void Plan::bind_op(const std::string& key, const std::string& b) {
  binding(b);
  overrides_[key] = b;
}

Binding* Plan::for_node(const Node& n) {
  if (auto it = overrides_.find(n.name); it != overrides_.end()) return binding(it->second);
  if (auto it = overrides_.find(n.op_type); it != overrides_.end()) return binding(it->second);
  return binding(default_);
}

void Plan::bind_backward(const std::string& node_name, const std::string& b) {
  binding(b);
  backward_overrides_[node_name] = b;
}

Binding* Plan::for_node_backward(const Node& n) {
  if (auto it = backward_overrides_.find(n.name); it != backward_overrides_.end())
    return binding(it->second);
  return for_node(n);
}

void validate_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, std::string>& source) {
  for (const auto& vi : g.inputs) {
    auto it = inputs.find(vi.name);
    if (it == inputs.end()) fail("{}: graph input '{}' is not given", g.path, vi.name);
    const Tensor& t = it->second;
    auto src = source.count(vi.name) ? source.at(vi.name) : std::string("input '" + vi.name + "'");
    if (vi.dtype && t.dtype() != *vi.dtype)
      fail("{}: dtype {} does not match graph input '{}' of {} (expects {})", src,
           dtype_name(t.dtype()), vi.name, g.path, dtype_name(*vi.dtype));
    if (!vi.dtype && vi.onnx_elem_type)
      throw Unsupported(fmt::format("{}: graph input '{}' has unsupported type {}", g.path, vi.name,
                                    onnx_type_name(vi.onnx_elem_type)));
    if (vi.dims) {
      bool ok = vi.dims->size() == t.shape().size();
      for (std::size_t d = 0; ok && d < vi.dims->size(); ++d)
        ok = (*vi.dims)[d] < 0 || (*vi.dims)[d] == t.shape()[d];
      if (!ok)
        fail("{}: shape {} does not match graph input '{}' of {} (expects {}, -1 = any)", src,
             shape_str(t.shape()), vi.name, g.path, shape_str(*vi.dims));
    }
  }
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (const auto& vi : g.inputs) known |= vi.name == name;
    if (!known) fail("{}: the model has no input named '{}'", g.path, name);
  }
}

Tensors reference_forward(const Node& node, std::int64_t opset, Plan& plan, const Tensors& ins) {
  try {
    return plan.reference()->forward(node, opset, ins);
  } catch (const std::bad_alloc&) {
    fail("{}: an allocation of {} was refused: past the memory budget of {} (--max-memory)",
         node.label(), format_bytes(refused_allocation()), format_bytes(memory_budget()));
  } catch (const std::length_error& e) {
    // A size past what a container holds (a vector of 2^62 elements): the node's values, not
    // MetaOp, asked for it.
    fail("{}: an output or buffer too large to hold ({})", node.label(), e.what());
  } catch (const Unsupported&) {
    throw;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.find(node.label()) != std::string::npos) throw;
    fail("{}: {}", node.label(), msg);
  }
}

namespace {

// The op types no binding of the plan runs, in g and in its subgraphs (If, Loop and Scan run
// inlined, the sequence and optional operators lowered: their bodies' nodes and the tensor
// operators they become are what the bindings run).
void count_missing(const Graph& g, Plan& plan, std::map<std::string, int>& missing) {
  for (const auto& n : g.nodes) {
    if (is_control_flow(n) || is_sequence_op(n) || is_string_op(n)) {
      for (const auto& [name, a] : n.attrs)
        if (a.graph) count_missing(*a.graph, plan, missing);
      continue;
    }
    Binding* b = plan.for_node(n);
    if (b->supports(n.op_type).forward) continue;
    if (plan.reference()->supports(n.op_type).forward) continue;
    ++missing[n.op_type];
  }
}

}  // namespace

void check_supported(const Graph& g, Plan& plan) {
  std::map<std::string, int> missing;
  count_missing(g, plan, missing);
  if (missing.empty()) return;
  std::string list;
  for (const auto& [op, count] : missing)
    list += fmt::format("{}{} x{}", list.empty() ? "" : ", ", op, count);
  throw Unsupported(fmt::format("{}: unsupported operators: {}", g.path, list));
}

namespace {

Tensors node_inputs(const Node& node, const std::unordered_map<std::string, Tensor>& env) {
  Tensors ins;
  ins.reserve(node.inputs.size());
  for (const auto& in : node.inputs) {
    if (in.empty()) {
      ins.emplace_back();
      continue;
    }
    auto it = env.find(in);
    if (it == env.end()) fail("{}: input '{}' has no value", node.label(), in);
    ins.push_back(it->second);
  }
  return ins;
}

// What is wrong with a binding's outputs: a missing value, or a shape that ONNX shape inference
// contradicts (where it knows the static shape).
std::string output_problem(const Graph& g, const Node& node, const std::string& binding,
                           const Tensors& outs) {
  for (std::size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i].empty()) continue;
    if (i >= outs.size() || !outs[i].defined())
      return fmt::format("{}: binding '{}' produced no value for output #{} '{}'", node.label(),
                         binding, i, node.outputs[i]);
    if (const ValueInfo* vi = g.find_value_info(node.outputs[i]); vi && vi->dims) {
      const auto& dims = *vi->dims;
      bool ok = dims.size() == outs[i].shape().size();
      for (std::size_t d = 0; ok && d < dims.size(); ++d)
        ok = dims[d] < 0 || dims[d] == outs[i].shape()[d];
      if (!ok)
        return fmt::format("{}: output '{}' has shape {} but ONNX shape inference says {}",
                           node.label(), node.outputs[i], shape_str(outs[i].shape()),
                           shape_str(dims));
    }
  }
  return {};
}

// Outputs whose size ONNX shape inference knows are checked against the memory budget before
// any kernel allocates them.
void check_output_budget(const Graph& g, const Node& node) {
  for (const auto& o : node.outputs)
    if (const ValueInfo* vi = o.empty() ? nullptr : g.find_value_info(o);
        vi && vi->dims && vi->dtype &&
        std::all_of(vi->dims->begin(), vi->dims->end(), [](auto d) { return d >= 0; })) {
      std::int64_t bytes = 0;
      try {
        bytes = shape_nbytes(*vi->dims, *vi->dtype);
      } catch (const Error& e) {
        fail("{}: output '{}': {}", node.label(), printable(o), e.what());
      }
      check_budget(bytes, fmt::format("{}: output '{}' ({} {})", node.label(), printable(o),
                                      dtype_name(*vi->dtype), shape_str(*vi->dims)));
    }
}

// The node's forward on the binding the plan names, or on the reference when that binding does
// not support it or its kernel crashes, throws or gives a wrong output (the record says which
// ran, why, how long and how much heap it took).
Tensors run_node(const Graph& g, const Node& node, Plan& plan, const Tensors& ins,
                 NodeRecord& rec) {
  Binding* b = plan.for_node(node);
  rec.planned = b->name();
  std::int64_t heap0 = heap_in_use();
  reset_heap_peak();
  auto t0 = std::chrono::steady_clock::now();
  check_output_budget(g, node);
  refuse_undefined_inputs(node, ins);
  Tensors outs;
  try {
    if (Support s = b->supports(node.op_type); !s.forward) throw Unsupported(s.reason);
    if (b != plan.reference())
      if (std::string why = crashing_inputs(node, ins); !why.empty()) throw Unsupported(why);
    outs = b == plan.reference() ? reference_forward(node, g.opset, plan, ins)
                                 : b->forward(node, g.opset, ins);
    // A framework kernel with a wrong output counts as a crash of that kernel: recorded, and
    // the node runs on the reference so that the run goes on.
    if (std::string bad = output_problem(g, node, b->name(), outs);
        !bad.empty() && b != plan.reference())
      throw Crash(bad);
  } catch (const Unsupported& e) {
    if (b == plan.reference()) throw;
    rec.fallback_reason = e.what();
    b = plan.reference();
    t0 = std::chrono::steady_clock::now();
    outs = reference_forward(node, g.opset, plan, ins);
  } catch (const BindingUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    // The framework's kernel crashed or threw on this node: recorded, and the run goes on on
    // the reference (whose own errors are the model's, and propagate).
    if (b == plan.reference()) throw;
    bool crash = dynamic_cast<const Crash*>(&e) != nullptr;
    rec.hang = dynamic_cast<const Hang*>(&e) != nullptr;
    rec.crash =
        crash ? e.what() : fmt::format("{}: {} threw: {}", node.label(), b->name(), e.what());
    rec.fallback_reason = rec.crash;
    b = plan.reference();
    t0 = std::chrono::steady_clock::now();
    outs = reference_forward(node, g.opset, plan, ins);
  }
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rec.heap_delta = heap_in_use() - heap0;
  rec.heap_peak = heap_peak() - heap0;
  rec.binding = b->name();
  return outs;
}

// The values the run is done with after the node at `pos`: inputs read for the last time (not
// graph outputs or initializers), and outputs nobody reads.
void free_dead_values(const Graph& g, const Node& node, std::size_t pos,
                      const std::unordered_map<std::string, std::size_t>& last_use,
                      const std::set<std::string>& keep,
                      std::unordered_map<std::string, Tensor>& env) {
  for (const auto& in : node.inputs) {
    auto lu = last_use.find(in);
    if (lu != last_use.end() && lu->second == pos && !keep.count(in) && !g.initializers.count(in))
      env.erase(in);
  }
  for (const auto& o : node.outputs)
    if (!o.empty() && !last_use.count(o) && !keep.count(o)) env.erase(o);
}

}  // namespace

RunResult run_graph(const Graph& g, const std::map<std::string, Tensor>& inputs, Plan& plan,
                    const RunOptions& options) {
  auto order = topological_order(g);
  std::unordered_map<std::string, Tensor> env;
  for (const auto& [n, t] : g.initializers) env[n] = t;
  for (const auto& [n, t] : inputs) env[n] = t;

  // Last use of each value (position in `order`), so values can be freed as the run goes.
  std::unordered_map<std::string, std::size_t> last_use;
  for (std::size_t pos = 0; pos < order.size(); ++pos)
    for (const auto& in : g.nodes[order[pos]].inputs) last_use[in] = pos;
  std::set<std::string> keep;
  for (const auto& o : g.outputs) keep.insert(o.name);

  RunResult result;
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const Node& node = g.nodes[order[pos]];
    if (is_control_flow(node) || is_sequence_op(node) || is_string_op(node))
      throw Unsupported(fmt::format(
          "{}: control flow, sequences and strings run inlined on given inputs (run, check, "
          "conform); this command takes models without If, Loop, Scan and sequence, optional or "
          "string operators",
          node.label()));
    Tensors ins = node_inputs(node, env);
    NodeRecord rec;
    rec.node = order[pos];
    Tensors outs = run_node(g, node, plan, ins, rec);
    if (std::string bad = output_problem(g, node, rec.binding, outs); !bad.empty()) fail("{}", bad);
    if (options.after_node) options.after_node(node, g.opset, ins, outs);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      rec.output_bytes += outs[i].nbytes();
      env[node.outputs[i]] = outs[i];
    }
    result.records.push_back(std::move(rec));
    if (!options.keep_all) free_dead_values(g, node, pos, last_use, keep, env);
    if (options.progress) options.progress(pos + 1, order.size());
  }
  for (const auto& o : g.outputs) {
    auto it = env.find(o.name);
    if (it == env.end()) fail("{}: graph output '{}' was not produced", g.path, o.name);
    result.outputs[o.name] = it->second;
  }
  if (options.keep_all) result.values.insert(env.begin(), env.end());
  return result;
}

}  // namespace metaop
