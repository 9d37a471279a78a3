#include "engine/control_flow.h"

#include <fmt/format.h>

#include <set>

#include "engine/executor.h"
#include "tensor/text.h"

namespace metaop {

namespace {

// Where a body's names lead in the inlined graph: a body's values are renamed, its inputs and the
// outputs of control-flow nodes are aliases of values made elsewhere, and a name no scope knows is
// the top graph's own.
struct Scope {
  const Scope* parent = nullptr;
  std::map<std::string, std::string> names;

  std::string resolve(const std::string& name) const {
    if (name.empty()) return name;
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->names.find(name); it != s->names.end()) return it->second;
    return name;
  }
};

// The control-flow nodes being inlined, outermost first (for messages).
class Inlining {
 public:
  Inlining(std::vector<std::string>& stack, std::string label) : stack_(stack) {
    stack_.push_back(std::move(label));
  }
  ~Inlining() { stack_.pop_back(); }
  Inlining(const Inlining&) = delete;
  Inlining& operator=(const Inlining&) = delete;

 private:
  std::vector<std::string>& stack_;
};

class Inliner {
 public:
  Inliner(const Graph& g, const std::map<std::string, Tensor>& inputs) : g_(g) {
    flat_.path = g.path;
    flat_.name = g.name;
    flat_.opset = g.opset;
    flat_.inputs = g.inputs;
    flat_.outputs = g.outputs;
    flat_.initializers = g.initializers;
    flat_.value_info = g.value_info;
    flat_.meta = g.meta;
    for (const auto& v : g.outputs) graph_outputs_.insert(v.name);
    // Every name of the top graph is taken: the names the inliner makes never collide with one.
    for (const auto& v : g.inputs) taken_.insert(v.name);
    for (const auto& [n, t] : g.initializers) taken_.insert(n);
    for (const auto& [n, v] : g.value_info) taken_.insert(n);
    for (const auto& node : g.nodes) {
      node_names_.insert(node.name);
      for (const auto& o : node.outputs) taken_.insert(o);
    }
    for (const auto& [n, t] : g.initializers) env_[n] = t;
    for (const auto& [n, t] : inputs) env_[n] = t;
  }

  InlinedGraph run() {
    Scope top;
    for (std::size_t i : topological_order(g_)) emit(g_, g_.nodes[i], top, "", true);
    return {std::move(flat_), std::move(path_)};
  }

 private:
  // A node of `body` (the top graph when `top`), its names resolved in `scope`; `prefix` names
  // where it runs ("loop/3/").
  void emit(const Graph& body, const Node& node, Scope& scope, const std::string& prefix,
            bool top) {
    if (node.op_type == "If" && is_control_flow(node)) return emit_if(node, scope, prefix, top);
    if (node.op_type == "Loop" && is_control_flow(node)) return emit_loop(node, scope, prefix, top);
    if (node.op_type == "Scan" && is_control_flow(node)) return emit_scan(node, scope, prefix, top);
    Node n = node;
    if (!top) n.name = unique_node_name(prefix + node.name);
    for (auto& in : n.inputs) in = scope.resolve(in);
    if (!top)
      for (std::size_t k = 0; k < n.outputs.size(); ++k) {
        if (n.outputs[k].empty()) continue;
        std::string flat = fresh(prefix + node.outputs[k]);
        scope.names[node.outputs[k]] = flat;
        copy_value_info(body, node.outputs[k], flat);
        n.outputs[k] = flat;
      }
    evaluate(std::move(n));
  }

  // `shapes`: whether the body's declared shapes hold where it runs (an If's branch runs once; a
  // loop body's shapes may change from one iteration to the next).
  void emit_body(const Graph& body, Scope& scope, const std::string& prefix, bool shapes) {
    bool outer_shapes = keep_shapes_;
    keep_shapes_ = keep_shapes_ && shapes;
    for (const auto& [name, t] : body.initializers) {
      // A body's initializer is one value however often the body runs.
      auto key = std::make_pair(&body, name);
      auto it = body_initializers_.find(key);
      if (it == body_initializers_.end())
        it = body_initializers_.emplace(key, constant(prefix + name, t)).first;
      scope.names[name] = it->second;
    }
    for (std::size_t i : body_order(body)) emit(body, body.nodes[i], scope, prefix, false);
    keep_shapes_ = outer_shapes;
  }

  void emit_if(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    Inlining inlining(current_, label(node, prefix));
    bool then = flag(node, scope, node.inputs.at(0), "condition");
    const Graph& branch = subgraph(node, then ? "then_branch" : "else_branch");
    if (branch.outputs.size() != node.outputs.size())
      fail("{}: its {} branch has {} outputs for the node's {}", where_(node),
           then ? "then" : "else", branch.outputs.size(), node.outputs.size());
    std::size_t before = flat_.nodes.size();
    Scope inner{&scope, {}};
    std::string where = prefix + node.name + (then ? "/then/" : "/else/");
    emit_body(branch, inner, where, true);
    for (std::size_t k = 0; k < node.outputs.size(); ++k)
      bind_output(node, k, inner.resolve(branch.outputs[k].name), scope, prefix, top);
    path_.push_back(fmt::format("{}: the {} branch, {}", label(node, prefix),
                                then ? "then" : "else", nodes(flat_.nodes.size() - before)));
  }

  void emit_loop(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    Inlining inlining(current_, label(node, prefix));
    const Graph& body = subgraph(node, "body");
    std::string trip = node.inputs.size() > 0 ? node.inputs[0] : "";
    std::string cond = node.inputs.size() > 1 ? node.inputs[1] : "";
    const std::size_t carried = node.inputs.size() < 2 ? 0 : node.inputs.size() - 2;
    if (body.inputs.size() != carried + 2 || body.outputs.size() < carried + 1)
      fail("{}: its body has {} inputs and {} outputs for {} loop-carried values", where_(node),
           body.inputs.size(), body.outputs.size(), carried);
    const std::size_t scans = body.outputs.size() - 1 - carried;
    if (node.outputs.size() > carried + scans)
      fail("{}: {} outputs, but its body makes {} loop-carried and {} scan outputs", where_(node),
           node.outputs.size(), carried, scans);
    if (trip.empty() && cond.empty())
      fail("{}: neither a trip count nor a condition is given: the loop never ends", where_(node));
    std::int64_t max_trip = trip.empty() ? -1 : integer(node, scope, trip, "trip count");
    std::vector<std::string> values;
    for (std::size_t j = 0; j < carried; ++j) values.push_back(scope.resolve(node.inputs[2 + j]));
    std::string cond_now = scope.resolve(cond);
    std::vector<std::vector<std::string>> scanned(scans);
    std::size_t before = flat_.nodes.size();
    std::int64_t i = 0;
    for (; (trip.empty() || i < max_trip) && (cond.empty() || flag(node, scope, cond_now, "cond"));
         ++i) {
      std::string where = fmt::format("{}{}/{}/", prefix, node.name, i);
      Scope inner{&scope, {}};
      inner.names[body.inputs[0].name] =
          constant(where + "iteration", Tensor::scalar(i, DType::Int64));
      inner.names[body.inputs[1].name] =
          cond.empty() ? constant(where + "cond", Tensor::scalar(1, DType::Bool)) : cond_now;
      for (std::size_t j = 0; j < carried; ++j) inner.names[body.inputs[2 + j].name] = values[j];
      emit_body(body, inner, where, false);
      if (!cond.empty()) cond_now = inner.resolve(body.outputs[0].name);
      for (std::size_t j = 0; j < carried; ++j) values[j] = inner.resolve(body.outputs[1 + j].name);
      for (std::size_t k = 0; k < scans; ++k)
        scanned[k].push_back(inner.resolve(body.outputs[1 + carried + k].name));
    }
    for (std::size_t j = 0; j < carried && j < node.outputs.size(); ++j)
      bind_output(node, j, values[j], scope, prefix, top);
    for (std::size_t k = 0; k < scans && carried + k < node.outputs.size(); ++k)
      bind_output(node, carried + k,
                  stack(node, k, scanned[k], 0, body.outputs[1 + carried + k], prefix), scope,
                  prefix, top);
    path_.push_back(fmt::format("{}: {} iteration{}, {}", label(node, prefix), i, i == 1 ? "" : "s",
                                nodes(flat_.nodes.size() - before)));
  }

  // The steps of a scan: the body run once per step on the states and on each scan input's
  // element at that step (along its axis, from the end where its direction is 1); the final
  // states and, per scan output, every step's value in step order. `tag` names the nodes made.
  struct ScanSteps {
    std::vector<std::string> states;
    std::vector<std::vector<std::string>> scanned;
  };
  ScanSteps scan_steps(const Graph& body, Scope& scope, const std::string& tag,
                       std::vector<std::string> states, const std::vector<std::string>& inputs,
                       const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& dirs,
                       std::int64_t length) {
    const std::size_t n_states = states.size(), m = inputs.size();
    ScanSteps r;
    r.scanned.resize(body.outputs.size() - n_states);
    for (std::int64_t t = 0; t < length; ++t) {
      std::string where = fmt::format("{}{}/", tag, t);
      Scope inner{&scope, {}};
      for (std::size_t s = 0; s < n_states; ++s) inner.names[body.inputs[s].name] = states[s];
      for (std::size_t j = 0; j < m; ++j) {
        std::int64_t step = dirs[j] ? length - 1 - t : t;
        Node slice;
        slice.op_type = "Gather";
        slice.name = unique_node_name(fmt::format("{}scan_input_{}", where, j));
        slice.inputs = {inputs[j],
                        constant(fmt::format("{}step_{}", where, j),
                                 Tensor::scalar(static_cast<double>(step), DType::Int64))};
        slice.outputs = {fresh(where + body.inputs[n_states + j].name)};
        slice.attrs["axis"] = Attribute::of_int(axes[j]);
        inner.names[body.inputs[n_states + j].name] = slice.outputs[0];
        evaluate(std::move(slice));
      }
      emit_body(body, inner, where, false);
      for (std::size_t s = 0; s < n_states; ++s) states[s] = inner.resolve(body.outputs[s].name);
      for (std::size_t k = 0; k < r.scanned.size(); ++k)
        r.scanned[k].push_back(inner.resolve(body.outputs[n_states + k].name));
    }
    r.states = std::move(states);
    return r;
  }

  // Element b of `name` along axis 0 (Scan-8's batch), as a new value.
  std::string batch_element(const std::string& name, std::int64_t b, const std::string& where) {
    Node g;
    g.op_type = "Gather";
    g.name = unique_node_name(where + "batch");
    g.inputs = {name,
                constant(where + "index", Tensor::scalar(static_cast<double>(b), DType::Int64))};
    g.outputs = {fresh(where + "element")};
    g.attrs["axis"] = Attribute::of_int(0);
    std::string made = g.outputs[0];
    evaluate(std::move(g));
    return made;
  }

  // Scan of opset 8: inputs [sequence_lens, states..., scan inputs...], every one with a batch
  // axis 0, the scan inputs' sequence axis 1 (reversed where `directions` says 1). Each batch
  // element is scanned as opset 9 scans, and the final states and scan outputs are stacked
  // along a new axis 0. Sequence lengths other than the whole sequence are refused (the scan
  // outputs past a shorter length are not defined by the text).
  void emit_scan8(const Node& node, const Graph& body, Scope& scope, const std::string& prefix,
                  bool top) {
    const auto m = static_cast<std::size_t>(node.attr_i("num_scan_inputs"));
    if (node.inputs.empty() || m < 1 || m + 1 > node.inputs.size())
      fail("{}: num_scan_inputs = {} for {} inputs", where_(node), m, node.inputs.size());
    const std::size_t states = node.inputs.size() - 1 - m;
    if (body.inputs.size() != states + m || body.outputs.size() < states)
      fail("{}: its body has {} inputs and {} outputs for {} states and {} scan inputs",
           where_(node), body.inputs.size(), body.outputs.size(), states, m);
    std::vector<std::int64_t> dirs(m, 0);
    if (node.has_attr("directions")) dirs = node.attr_ints("directions");
    if (dirs.size() != m)
      fail("{}: attribute directions has {} values for {}", where_(node), dirs.size(), m);
    std::vector<std::string> all;
    for (std::size_t i = 1; i < node.inputs.size(); ++i)
      all.push_back(scope.resolve(node.inputs[i]));
    const Tensor& first = value(node, all[states]);
    if (first.rank() < 2)
      fail("{}: scan input of shape {} has no batch and sequence axes", where_(node),
           shape_str(first.shape()));
    const std::int64_t batch = first.shape()[0], length = first.shape()[1];
    for (const auto& name : all) {
      const Tensor& t = value(node, name);
      if (t.rank() < 1 || t.shape()[0] != batch)
        fail("{}: input of shape {} does not have the batch of {}", where_(node),
             shape_str(t.shape()), batch);
    }
    for (std::size_t j = states; j < all.size(); ++j)
      if (value(node, all[j]).rank() < 2 || value(node, all[j]).shape()[1] != length)
        fail("{}: scan input of shape {} does not have {} steps along axis 1", where_(node),
             shape_str(value(node, all[j]).shape()), length);
    if (!node.inputs[0].empty())
      for (std::int64_t len : value(node, scope.resolve(node.inputs[0])).to_i64())
        if (len != length)
          throw Unsupported(fmt::format(
              "{}: Scan of opset 8 with a sequence length of {} where the sequence has {} steps "
              "(the outputs past a shorter length are not defined)",
              where_(node), len, length));
    const std::size_t scans = body.outputs.size() - states;
    std::vector<std::vector<std::string>> final_states(states), outputs(scans);
    const std::size_t before = flat_.nodes.size();
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::string where = fmt::format("{}{}/batch_{}/", prefix, node.name, b);
      std::vector<std::string> st, in;
      for (std::size_t i = 0; i < all.size(); ++i)
        (i < states ? st : in)
            .push_back(batch_element(all[i], b, fmt::format("{}input_{}_", where, i)));
      ScanSteps r =
          scan_steps(body, scope, where, st, in, std::vector<std::int64_t>(m, 0), dirs, length);
      for (std::size_t s = 0; s < states; ++s) final_states[s].push_back(r.states[s]);
      for (std::size_t k = 0; k < scans; ++k)
        outputs[k].push_back(stack(node, k, r.scanned[k], 0, body.outputs[states + k],
                                   fmt::format("{}batch_{}/", prefix, b)));
    }
    for (std::size_t s = 0; s < states && s < node.outputs.size(); ++s)
      bind_output(node, s, stack(node, s, final_states[s], 0, body.outputs[s], prefix + "states/"),
                  scope, prefix, top);
    for (std::size_t k = 0; k < scans && states + k < node.outputs.size(); ++k)
      bind_output(node, states + k,
                  stack(node, k, outputs[k], 0, body.outputs[states + k], prefix + "outputs/"),
                  scope, prefix, top);
    path_.push_back(fmt::format("{}: {} batch element{} of {} step{}, {}", label(node, prefix),
                                batch, batch == 1 ? "" : "s", length, length == 1 ? "" : "s",
                                nodes(flat_.nodes.size() - before)));
  }

  void emit_scan(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    Inlining inlining(current_, label(node, prefix));
    const Graph& body = subgraph(node, "body");
    if (g_.opset < 9) {
      emit_scan8(node, body, scope, prefix, top);
      return;
    }
    const auto m = static_cast<std::size_t>(node.attr_i("num_scan_inputs"));
    if (m < 1 || m > node.inputs.size())
      fail("{}: num_scan_inputs = {} for {} inputs", where_(node), m, node.inputs.size());
    const std::size_t states = node.inputs.size() - m;
    if (body.inputs.size() != node.inputs.size() || body.outputs.size() < states)
      fail("{}: its body has {} inputs and {} outputs for {} inputs and {} states", where_(node),
           body.inputs.size(), body.outputs.size(), node.inputs.size(), states);
    const std::size_t scans = body.outputs.size() - states;
    auto ints = [&](const char* name, std::size_t count) {
      std::vector<std::int64_t> v(count, 0);
      if (node.has_attr(name)) v = node.attr_ints(name);
      if (v.size() != count)
        fail("{}: attribute {} has {} values for {}", where_(node), name, v.size(), count);
      return v;
    };
    auto in_axes = ints("scan_input_axes", m), in_dirs = ints("scan_input_directions", m);
    auto out_axes = ints("scan_output_axes", scans),
         out_dirs = ints("scan_output_directions", scans);
    std::vector<std::string> inputs;
    std::int64_t length = -1;
    for (std::size_t j = 0; j < m; ++j) {
      inputs.push_back(scope.resolve(node.inputs[states + j]));
      const Tensor& t = value(node, inputs[j]);
      std::int64_t axis = in_axes[j] < 0 ? in_axes[j] + t.rank() : in_axes[j];
      if (axis < 0 || axis >= t.rank())
        fail("{}: scan input '{}' of shape {} has no axis {}", where_(node),
             printable(node.inputs[states + j]), shape_str(t.shape()), in_axes[j]);
      in_axes[j] = axis;
      if (length >= 0 && t.shape()[axis] != length)
        fail("{}: scan input '{}' has {} steps along axis {}, the first {}", where_(node),
             printable(node.inputs[states + j]), t.shape()[axis], axis, length);
      length = t.shape()[axis];
    }
    std::vector<std::string> values;
    for (std::size_t s = 0; s < states; ++s) values.push_back(scope.resolve(node.inputs[s]));
    std::size_t before = flat_.nodes.size();
    ScanSteps r = scan_steps(body, scope, fmt::format("{}{}/", prefix, node.name), values, inputs,
                             in_axes, in_dirs, length);
    for (std::size_t s = 0; s < states && s < node.outputs.size(); ++s)
      bind_output(node, s, r.states[s], scope, prefix, top);
    for (std::size_t k = 0; k < scans && states + k < node.outputs.size(); ++k) {
      if (out_dirs[k]) std::reverse(r.scanned[k].begin(), r.scanned[k].end());
      bind_output(node, states + k,
                  stack(node, k, r.scanned[k], out_axes[k], body.outputs[states + k], prefix),
                  scope, prefix, top);
    }
    path_.push_back(fmt::format("{}: {} step{}, {}", label(node, prefix), length,
                                length == 1 ? "" : "s", nodes(flat_.nodes.size() - before)));
  }

  // Output k of a control-flow node is the value `made`: consumers read it under that name; a
  // graph output keeps its own name (an Identity from the value made).
  void bind_output(const Node& node, std::size_t k, const std::string& made, Scope& scope,
                   const std::string& prefix, bool top) {
    const std::string& out = node.outputs[k];
    if (out.empty()) return;
    if (!(top && graph_outputs_.count(out))) {
      scope.names[out] = made;
      return;
    }
    Node id;
    id.op_type = "Identity";
    id.name = unique_node_name(fmt::format("{}{}/{}", prefix, node.name, out));
    id.inputs = {made};
    id.outputs = {out};
    evaluate(std::move(id));
  }

  // The iterations' values of one scan output stacked along `axis` (of the stacked rank): each
  // Unsqueezed there, then concatenated. No iteration: an empty value of the body output's type.
  std::string stack(const Node& node, std::size_t k, const std::vector<std::string>& parts,
                    std::int64_t axis, const ValueInfo& info, const std::string& prefix) {
    std::string where = fmt::format("{}{}/scan_output_{}/", prefix, node.name, k);
    if (parts.empty()) {
      if (!info.dtype)
        fail("{}: scan output #{} ran no iteration and its body does not declare its type",
             where_(node), k);
      Shape shape{0};
      if (info.dims)
        for (auto d : *info.dims) shape.push_back(d < 0 ? 0 : d);
      return constant(where + "empty", Tensor(*info.dtype, shape));
    }
    const std::int64_t rank = value(node, parts[0]).rank() + 1;
    if (axis < -rank || axis >= rank)
      fail("{}: scan output #{} of rank {} has no axis {}", where_(node), k, rank, axis);
    if (axis < 0) axis += rank;
    std::vector<std::string> unsqueezed;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Node u;
      u.op_type = "Unsqueeze";
      u.name = unique_node_name(fmt::format("{}unsqueeze_{}", where, i));
      u.inputs = {parts[i]};
      if (g_.opset >= 13)
        u.inputs.push_back(constant(where + "axes", Tensor::from_i64({axis}, {1})));
      else
        u.attrs["axes"] = Attribute::of_ints({axis});
      u.outputs = {fresh(fmt::format("{}{}", where, i))};
      unsqueezed.push_back(u.outputs[0]);
      evaluate(std::move(u));
    }
    if (unsqueezed.size() == 1) return unsqueezed[0];
    Node c;
    c.op_type = "Concat";
    c.name = unique_node_name(where + "concat");
    c.inputs = unsqueezed;
    c.outputs = {fresh(where + "stacked")};
    c.attrs["axis"] = Attribute::of_int(axis);
    evaluate(std::move(c));
    return flat_.nodes.back().outputs[0];
  }

  // Runs the node on the reference and appends it to the inlined graph.
  void evaluate(Node n) {
    if (flat_.nodes.size() >= kMaxInlinedNodes)
      fail("{}: {}: inlining the model's control flow passes {} nodes, the limit (at {})", g_.path,
           current_.empty() ? n.label() : current_.front(), kMaxInlinedNodes, n.label());
    Tensors ins;
    for (const auto& in : n.inputs) ins.push_back(in.empty() ? Tensor() : value(n, in));
    refuse_undefined_inputs(n, ins);
    Tensors outs = reference_forward(n, g_.opset, plan_, ins);
    for (std::size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k)
      if (!n.outputs[k].empty()) env_[n.outputs[k]] = outs[k];
    flat_.nodes.push_back(std::move(n));
  }

  const Tensor& value(const Node& node, const std::string& name) const {
    auto it = env_.find(name);
    if (it == env_.end()) fail("{}: input '{}' has no value", node.label(), printable(name));
    return it->second;
  }

  bool flag(const Node& node, const Scope& scope, const std::string& name, const char* what) {
    const Tensor& t = value(node, scope.resolve(name));
    if (t.numel() != 1)
      fail("{}: the {} '{}' has {} elements (shape {}), not one", where_(node), what,
           printable(name), t.numel(), shape_str(t.shape()));
    return t.f64_at(0) != 0;
  }

  std::int64_t integer(const Node& node, const Scope& scope, const std::string& name,
                       const char* what) {
    const Tensor& t = value(node, scope.resolve(name));
    if (t.numel() != 1 || is_floating(t.dtype()))
      fail("{}: the {} '{}' is {} {}, not one integer", where_(node), what, printable(name),
           dtype_name(t.dtype()), shape_str(t.shape()));
    return t.to_i64()[0];
  }

  const Graph& subgraph(const Node& node, const std::string& name) {
    auto it = node.attrs.find(name);
    if (it == node.attrs.end() || !it->second.graph)
      fail("{}: missing its graph attribute '{}'", where_(node), name);
    return *it->second.graph;
  }

  // The control-flow node being inlined, as messages name it (with its place: "loop/3/pick").
  std::string where_(const Node& node) const {
    return current_.empty() ? node.label() : current_.back();
  }

  static std::string nodes(std::size_t n) { return fmt::format("{} node{}", n, n == 1 ? "" : "s"); }

  static std::string label(const Node& node, const std::string& prefix) {
    return fmt::format("node '{}{}' ({})", printable(prefix), printable(node.name), node.op_type);
  }

  std::string constant(const std::string& wanted, const Tensor& t) {
    std::string name = fresh(wanted);
    flat_.initializers[name] = t;
    env_[name] = t;
    return name;
  }

  // `wanted`, or `wanted#2`, `#3` ... where it is taken.
  std::string fresh(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 2; !taken_.insert(name).second; ++k) name = fmt::format("{}#{}", wanted, k);
    return name;
  }

  std::string unique_node_name(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 2; !node_names_.insert(name).second; ++k) name = fmt::format("{}#{}", wanted, k);
    return name;
  }

  // A body value's type (and shape, where it holds) under its name in the inlined graph.
  void copy_value_info(const Graph& body, const std::string& name, const std::string& flat) {
    const ValueInfo* vi = body.find_value_info(name);
    if (!vi) return;
    ValueInfo info = *vi;
    info.name = flat;
    if (!keep_shapes_) info.dims.reset();
    flat_.value_info[flat] = std::move(info);
  }

  const Graph& g_;
  Graph flat_;
  std::vector<std::string> path_, current_;
  Plan plan_;
  std::map<std::string, Tensor> env_;
  std::set<std::string> taken_, node_names_, graph_outputs_;
  std::map<std::pair<const Graph*, std::string>, std::string> body_initializers_;
  bool keep_shapes_ = true;
};

}  // namespace

InlinedGraph inline_control_flow(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  return Inliner(g, inputs).run();
}

}  // namespace metaop
