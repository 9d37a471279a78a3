#include "engine/control_flow.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "engine/executor.h"
#include "engine/strings.h"
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
  Inliner(const Graph& g, const std::map<std::string, Tensor>& inputs,
          const std::map<std::string, CompositeValue>& composite_inputs,
          const std::map<std::string, StringTensor>& string_inputs)
      : g_(g) {
    flat_.path = g.path;
    flat_.name = g.name;
    flat_.opset = g.opset;
    flat_.outputs = g.outputs;
    flat_.initializers = g.initializers;
    // Sequences and optionals leave the graph (their tensors' names stand for them), and so do
    // string tensors (evaluated here).
    for (const auto& [n, v] : g.value_info)
      if (!v.sequence && !v.optional && !is_string_value(v)) flat_.value_info[n] = v;
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
    for (const auto& v : g.inputs) {
      if (v.sequence || v.optional)
        add_composite_input(v, composite_inputs);
      else if (is_string_value(v))
        add_string_input(v, string_inputs);
      else
        flat_.inputs.push_back(v);
    }
  }

  InlinedGraph run() {
    Scope top;
    for (std::size_t i : topological_order(g_)) emit(g_, g_.nodes[i], top, "", true);
    std::vector<ValueInfo> outputs;
    for (const auto& v : g_.outputs) {
      if (auto s = strings_.find(v.name); s != strings_.end()) {
        string_outputs_[v.name] = s->second;
        continue;
      }
      if (is_string_value(v))
        fail("{}: graph output '{}' is declared a string tensor, but its value is not one", g_.path,
             printable(v.name));
      auto it = composites_.find(v.name);
      if (it == composites_.end()) {
        if (v.sequence)
          fail("{}: graph output '{}' is declared a sequence, but its value is a tensor", g_.path,
               printable(v.name));
        ValueInfo t = v;
        if (v.optional) {
          // An optional output that holds the tensor made.
          composite_outputs_[v.name] = {true, true, false, {v.name}};
          t.optional = false;
          t.is_tensor = true;
        }
        outputs.push_back(std::move(t));
        continue;
      }
      const Composite c = it->second;
      if (c.sequence != v.sequence && (v.sequence || v.onnx_elem_type != 0))
        fail("{}: graph output '{}' is declared {}, but its value is {}", g_.path,
             printable(v.name), kind_name(v.optional, v.sequence),
             kind_name(c.optional, c.sequence));
      CompositeOutput out{v.optional || c.optional, c.has, c.sequence, {}};
      for (std::size_t i = 0; i < c.items.size(); ++i) {
        Node id;
        id.op_type = "Identity";
        id.name = unique_node_name(fmt::format("{}/{}", v.name, i));
        id.inputs = {c.items[i]};
        id.outputs = {fresh(fmt::format("{}/{}", v.name, i))};
        outputs.push_back(tensor_info(id.outputs[0], value(id, c.items[i])));
        out.outputs.push_back(id.outputs[0]);
        evaluate(std::move(id));
      }
      composite_outputs_[v.name] = std::move(out);
    }
    flat_.outputs = std::move(outputs);
    return {std::move(flat_), std::move(path_), std::move(element_inputs_),
            std::move(composite_outputs_), std::move(string_outputs_)};
  }

 private:
  // A node of `body` (the top graph when `top`), its names resolved in `scope`; `prefix` names
  // where it runs ("loop/3/").
  void emit(const Graph& body, const Node& node, Scope& scope, const std::string& prefix,
            bool top) {
    if (node.op_type == "If" && is_control_flow(node)) return emit_if(node, scope, prefix, top);
    if (node.op_type == "Loop" && is_control_flow(node)) return emit_loop(node, scope, prefix, top);
    if (node.op_type == "Scan" && is_control_flow(node)) return emit_scan(node, scope, prefix, top);
    if (is_sequence_op(node)) return emit_sequence_op(body, node, scope, prefix, top);
    if (is_string_op(node) || takes_or_makes_strings(node, scope))
      return emit_string_op(node, scope, prefix, top);
    if (node.op_type == "Identity" && node.inputs.size() == 1)
      if (const Composite* c = composite(scope.resolve(node.inputs[0])))
        return set_composite(node, 0, *c, scope, prefix, top);
    Node n = node;
    n.name = node_name(node, prefix, top);
    for (auto& in : n.inputs) in = scope.resolve(in);
    for (std::size_t k = 0; k < n.outputs.size(); ++k)
      n.outputs[k] = output_name(body, node, k, scope, prefix, top);
    evaluate(std::move(n));
  }

  std::string node_name(const Node& node, const std::string& prefix, bool top) {
    return top ? node.name : unique_node_name(prefix + node.name);
  }

  // The name output k of a node of `body` takes in the inlined graph (a top graph's node keeps
  // its names).
  std::string output_name(const Graph& body, const Node& node, std::size_t k, Scope& scope,
                          const std::string& prefix, bool top) {
    const std::string& out = node.outputs[k];
    if (top || out.empty()) return out;
    std::string flat = fresh(prefix + out);
    scope.names[out] = flat;
    copy_value_info(body, out, flat);
    return flat;
  }

  // ---- Strings ----

  // Cast, CastLike, Equal and Identity of string tensors, and Cast to STRING.
  bool takes_or_makes_strings(const Node& node, const Scope& scope) const {
    const std::string& op = node.op_type;
    if (op == "Constant") {
      auto it = node.attrs.find("value");
      return it != node.attrs.end() && it->second.string_tensor;
    }
    if (op != "Cast" && op != "CastLike" && op != "Equal" && op != "Identity") return false;
    if (op == "Cast" && node.has_attr("to") && node.attrs.at("to").kind == Attribute::Kind::Int &&
        node.attrs.at("to").i == 8)
      return true;
    return std::any_of(node.inputs.begin(), node.inputs.end(),
                       [&](const std::string& in) { return strings_.count(scope.resolve(in)); });
  }

  void add_string_input(const ValueInfo& v, const std::map<std::string, StringTensor>& given) {
    auto it = given.find(v.name);
    if (it == given.end())
      throw Unsupported(fmt::format(
          "{}: graph input '{}' is a string tensor: only conform, which reads such values from "
          "ONNX test data, runs models that take one",
          g_.path, printable(v.name)));
    strings_[v.name] = it->second;
  }

  // The flat name output k of a node gets for a value kept by name (a string tensor, a sequence
  // or optional), recorded in the body's scope; empty when the node leaves that output out.
  std::string kept_output(const Node& node, std::size_t k, Scope& scope, const std::string& prefix,
                          bool top) {
    if (k >= node.outputs.size() || node.outputs[k].empty()) return "";
    const std::string& out = node.outputs[k];
    std::string flat = top ? out : fresh(prefix + out);
    if (!top) scope.names[out] = flat;
    return flat;
  }

  void set_string(const Node& node, std::size_t k, StringTensor t, Scope& scope,
                  const std::string& prefix, bool top) {
    if (std::string flat = kept_output(node, k, scope, prefix, top); !flat.empty())
      strings_[flat] = std::move(t);
  }

  // The string operators and string Cast, CastLike, Equal and Identity, evaluated here
  // (engine/strings): their string results are kept by name, their numeric ones are constants.
  void emit_string_op(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    auto name = [&](std::size_t i) {
      return i < node.inputs.size() ? scope.resolve(node.inputs[i]) : std::string();
    };
    auto str = [&](std::size_t i) -> const StringTensor& {
      auto it = strings_.find(name(i));
      if (it == strings_.end())
        fail("{}: input #{} '{}' is not a string tensor", where_(node), i, printable(name(i)));
      return it->second;
    };
    const std::string& op = node.op_type;
    if (op == "StringNormalizer")
      return set_string(node, 0, string_normalizer(node, str(0)), scope, prefix, top);
    if (op == "StringConcat")
      return set_string(node, 0, string_concat(node, str(0), str(1)), scope, prefix, top);
    if (op == "StringSplit") {
      auto [parts, counts] = string_split(node, str(0));
      set_string(node, 0, std::move(parts), scope, prefix, top);
      return tensor_output(node, 1, counts, scope, prefix, top);
    }
    if (op == "RegexFullMatch")
      return tensor_output(node, 0, regex_full_match(node, str(0)), scope, prefix, top);
    if (op == "Equal")
      return tensor_output(node, 0, equal_strings(node, str(0), str(1)), scope, prefix, top);
    if (op == "Identity") return set_string(node, 0, str(0), scope, prefix, top);
    if (op == "Constant")
      return set_string(node, 0, *node.attrs.at("value").string_tensor, scope, prefix, top);
    // Cast and CastLike.
    const bool from_string = strings_.count(name(0)) != 0;
    bool to_string = false;
    DType to = DType::Float32;
    if (op == "Cast") {
      const auto type = static_cast<int>(node.attr_i("to"));
      to_string = type == 8;
      if (!to_string) {
        auto d = dtype_from_onnx(type);
        if (!d)
          throw Unsupported(
              fmt::format("{}: Cast of strings to {}", where_(node), onnx_type_name(type)));
        to = *d;
      }
    } else {
      to_string = strings_.count(name(1)) != 0;
      if (!to_string) to = value(node, name(1)).dtype();
    }
    if (from_string && to_string) return set_string(node, 0, str(0), scope, prefix, top);
    if (from_string)
      return tensor_output(node, 0, cast_from_strings(node, str(0), to), scope, prefix, top);
    set_string(node, 0, cast_to_strings(node, value(node, name(0))), scope, prefix, top);
  }

  // ---- Sequences and optionals ----

  // A sequence or optional value: the names of its tensors in the inlined graph.
  struct Composite {
    bool optional = false, has = true, sequence = false;
    std::vector<std::string> items;  // a sequence's tensors, or an optional tensor's one
    std::optional<DType> dtype;      // the tensors' (an empty sequence has one too)
  };

  static std::string kind_name(bool optional, bool sequence) {
    if (optional) return sequence ? "an optional sequence" : "an optional tensor";
    return sequence ? "a sequence" : "a tensor";
  }

  const Composite* composite(const std::string& name) const {
    auto it = composites_.find(name);
    return it == composites_.end() ? nullptr : &it->second;
  }

  static ValueInfo tensor_info(const std::string& name, const Tensor& t) {
    ValueInfo v;
    v.name = name;
    v.dtype = t.dtype();
    v.onnx_elem_type = dtype_to_onnx(t.dtype());
    v.dims = std::vector<std::int64_t>(t.shape().begin(), t.shape().end());
    return v;
  }

  // A graph input of sequence or optional type: its tensors become inputs of the inlined graph.
  void add_composite_input(const ValueInfo& v, const std::map<std::string, CompositeValue>& given) {
    auto it = given.find(v.name);
    if (it == given.end())
      throw Unsupported(fmt::format(
          "{}: graph input '{}' is {} of tensors: only conform, which reads such values from ONNX "
          "test data, runs models that take one",
          g_.path, printable(v.name), kind_name(v.optional, v.sequence)));
    const CompositeValue& c = it->second;
    if (c.sequence != v.sequence || (c.optional && !v.optional))
      fail("{}: graph input '{}' is declared {} but given {}", g_.path, printable(v.name),
           kind_name(v.optional, v.sequence), kind_name(c.optional, c.sequence));
    Composite comp{v.optional, c.has || !c.optional, v.sequence, {}, v.dtype};
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      const Tensor& t = c.tensors[i];
      if (v.dtype && t.dtype() != *v.dtype)
        fail("{}: graph input '{}' holds {} tensors, but tensor #{} given is {}", g_.path,
             printable(v.name), dtype_name(*v.dtype), i, dtype_name(t.dtype()));
      std::string name = fresh(fmt::format("{}/{}", v.name, i));
      flat_.inputs.push_back(tensor_info(name, t));
      element_inputs_[name] = t;
      env_[name] = t;
      comp.items.push_back(name);
    }
    if (!v.sequence && comp.has && comp.items.size() != 1)
      fail("{}: graph input '{}' is an optional tensor given {} tensors", g_.path,
           printable(v.name), comp.items.size());
    composites_[v.name] = std::move(comp);
  }

  // Output k of a sequence or optional operator is `c`.
  void set_composite(const Node& node, std::size_t k, Composite c, Scope& scope,
                     const std::string& prefix, bool top) {
    if (std::string flat = kept_output(node, k, scope, prefix, top); !flat.empty())
      composites_[flat] = std::move(c);
  }

  // Output k of a node is the tensor `t`, known on the inputs.
  void tensor_output(const Node& node, std::size_t k, const Tensor& t, Scope& scope,
                     const std::string& prefix, bool top) {
    if (k >= node.outputs.size() || node.outputs[k].empty()) return;
    const std::string& out = node.outputs[k];
    if (top && !graph_outputs_.count(out)) {
      flat_.initializers[out] = t;
      env_[out] = t;
      return;
    }
    bind_output(node, k, constant(prefix + out, t), scope, prefix, top);
  }

  // The sequence input `name` of a node (a sequence, or an optional one that holds one).
  const Composite& sequence(const Node& node, const std::string& name, const std::string& what) {
    const Composite* c = composite(name);
    if (!c || !c->sequence)
      fail("{}: its {} '{}' is {}, not a sequence", where_(node), what, printable(name),
           c ? kind_name(c->optional, c->sequence) : "a tensor");
    if (!c->has) fail("{}: its {} '{}' is an empty optional", where_(node), what, printable(name));
    return *c;
  }

  // A position in a sequence of n tensors: -n to n-1, or to n where `insert`.
  std::int64_t position(const Node& node, const Scope& scope, std::size_t input, std::int64_t n,
                        bool insert) {
    std::int64_t p = integer(node, scope, node.inputs[input], "position");
    if (p < -n || p > (insert ? n : n - 1))
      fail("{}: position {} is out of range for a sequence of {} tensor{}", where_(node), p, n,
           n == 1 ? "" : "s");
    return p < 0 ? p + n : p;
  }

  std::string input_name(const Node& node, const Scope& scope, std::size_t i) const {
    return i < node.inputs.size() ? scope.resolve(node.inputs[i]) : std::string();
  }
  static bool given(const Node& node, std::size_t i) {
    return i < node.inputs.size() && !node.inputs[i].empty();
  }

  void emit_sequence_op(const Graph& body, const Node& node, Scope& scope,
                        const std::string& prefix, bool top) {
    const std::string& op = node.op_type;
    if (op == "SequenceMap") return emit_sequence_map(node, scope, prefix, top);
    if (op == "SplitToSequence") return emit_split_to_sequence(node, scope, prefix, top);
    if (op.rfind("Optional", 0) == 0) return emit_optional_op(body, node, scope, prefix, top);
    if (op == "SequenceEmpty" || op == "SequenceConstruct")
      return set_composite(node, 0, new_sequence(node, scope), scope, prefix, top);
    // The rest take a sequence first.
    const Composite seq = sequence(node, input_name(node, scope, 0), "input sequence");
    const auto n = static_cast<std::int64_t>(seq.items.size());
    if (op == "SequenceLength")
      return tensor_output(node, 0, Tensor::scalar(static_cast<double>(n), DType::Int64), scope,
                           prefix, top);
    if (op == "SequenceAt")
      return bind_output(node, 0, seq.items[position(node, scope, 1, n, false)], scope, prefix,
                         top);
    if (op == "SequenceInsert" || op == "SequenceErase")
      return set_composite(node, 0, edited(node, scope, seq), scope, prefix, top);
    if (op == "ConcatFromSequence")
      return emit_concat_from_sequence(body, node, seq, scope, prefix, top);
    fail("{}: no lowering for {}", where_(node), op);
  }

  // SequenceEmpty (of its dtype, float by default) or SequenceConstruct (of its inputs).
  Composite new_sequence(const Node& node, const Scope& scope) {
    Composite c;
    c.sequence = true;
    if (node.op_type == "SequenceEmpty") {
      c.dtype = DType::Float32;
      if (node.has_attr("dtype")) {
        const auto type = static_cast<int>(node.attr_i("dtype"));
        c.dtype = dtype_from_onnx(type);
        if (!c.dtype)
          throw Unsupported(
              fmt::format("{}: a sequence of {} tensors", where_(node), onnx_type_name(type)));
      }
      return c;
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const Tensor& t = value(node, input_name(node, scope, i));
      if (c.dtype && t.dtype() != *c.dtype)
        fail("{}: input #{} is {}, the first {}", where_(node), i, dtype_name(t.dtype()),
             dtype_name(*c.dtype));
      c.dtype = t.dtype();
      c.items.push_back(input_name(node, scope, i));
    }
    return c;
  }

  // SequenceInsert (at the end by default) or SequenceErase (of the last by default) on `seq`.
  Composite edited(const Node& node, const Scope& scope, const Composite& seq) {
    const auto n = static_cast<std::int64_t>(seq.items.size());
    Composite c = seq;
    c.optional = false;
    if (node.op_type == "SequenceInsert") {
      const std::string item = input_name(node, scope, 1);
      const Tensor& t = value(node, item);
      if (c.dtype && t.dtype() != *c.dtype)
        fail("{}: inserts a {} tensor into a sequence of {}", where_(node), dtype_name(t.dtype()),
             dtype_name(*c.dtype));
      c.dtype = t.dtype();
      std::int64_t p = given(node, 2) ? position(node, scope, 2, n, true) : n;
      c.items.insert(c.items.begin() + p, item);
      return c;
    }
    if (n == 0) fail("{}: erases from an empty sequence", where_(node));
    std::int64_t p = given(node, 1) ? position(node, scope, 1, n, false) : n - 1;
    c.items.erase(c.items.begin() + p);
    return c;
  }

  // Optional, OptionalHasElement and OptionalGetElement.
  void emit_optional_op(const Graph& body, const Node& node, Scope& scope,
                        const std::string& prefix, bool top) {
    const std::string& op = node.op_type;
    const std::string x = input_name(node, scope, 0);
    const Composite* c = given(node, 0) ? composite(x) : nullptr;
    if (op == "Optional") {
      Composite o;
      o.optional = true;
      if (!given(node, 0)) {
        // Empty: the output's declared type says whether it would hold a sequence.
        const ValueInfo* vi = body.find_value_info(node.outputs.at(0));
        o.has = false;
        o.sequence = vi && vi->sequence;
        if (vi) o.dtype = vi->dtype;
      } else if (c) {
        if (c->optional)
          fail("{}: its input '{}' is already {}", where_(node), printable(node.inputs[0]),
               kind_name(c->optional, c->sequence));
        o.sequence = true;
        o.items = c->items;
        o.dtype = c->dtype;
      } else {
        o.dtype = value(node, x).dtype();
        o.items = {x};
      }
      return set_composite(node, 0, std::move(o), scope, prefix, top);
    }
    if (op == "OptionalHasElement") {
      if (given(node, 0) && !c) value(node, x);  // a tensor: it has one
      const bool has = given(node, 0) && (!c || c->has);
      return tensor_output(node, 0, Tensor::scalar(has ? 1 : 0, DType::Bool), scope, prefix, top);
    }
    if (op != "OptionalGetElement") fail("{}: no lowering for {}", where_(node), op);
    if (!c) {
      value(node, x);  // a tensor is its own element
      return bind_output(node, 0, x, scope, prefix, top);
    }
    if (!c->has)
      fail("{}: its input '{}' is an empty optional", where_(node), printable(node.inputs[0]));
    if (c->sequence) {
      Composite s = *c;
      s.optional = false;
      return set_composite(node, 0, std::move(s), scope, prefix, top);
    }
    bind_output(node, 0, c->items.at(0), scope, prefix, top);
  }

  // An axis of rank `rank`, from -rank to rank-1.
  std::int64_t axis_of(const Node& node, std::int64_t axis, std::int64_t rank) {
    if (axis < -rank || axis >= rank)
      fail("{}: axis {} is out of range for rank {}", where_(node), axis, rank);
    return axis < 0 ? axis + rank : axis;
  }

  // SplitToSequence: a Split along the axis (chunks of `split` where it is a scalar, of its
  // lengths where a list, else of one), or, where neither split is given nor the axis kept, one
  // Gather per element.
  void emit_split_to_sequence(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    const std::string x = scope.resolve(node.inputs.at(0));
    const Tensor& t = value(node, x);
    const std::int64_t axis =
        axis_of(node, node.has_attr("axis") ? node.attr_i("axis") : 0, t.rank());
    const bool keepdims = !node.has_attr("keepdims") || node.attr_i("keepdims") != 0;
    const std::int64_t dim = t.shape()[axis];
    const bool split_given = node.inputs.size() > 1 && !node.inputs[1].empty();
    std::vector<std::int64_t> lengths;
    if (split_given) {
      const Tensor& s = value(node, scope.resolve(node.inputs[1]));
      std::vector<std::int64_t> v = s.to_i64();
      if (s.rank() == 0) {
        if (v[0] <= 0) fail("{}: split {} is not positive", where_(node), v[0]);
        for (std::int64_t at = 0; at < dim; at += v[0]) lengths.push_back(std::min(v[0], dim - at));
      } else {
        std::int64_t sum = 0;
        for (auto l : v) {
          if (l < 0) fail("{}: split {} is negative", where_(node), l);
          sum += l;
        }
        if (sum != dim)
          fail("{}: split lengths sum to {}, but axis {} has {}", where_(node), sum, axis, dim);
        lengths = v;
      }
    } else {
      lengths.assign(static_cast<std::size_t>(dim), 1);
    }
    Composite c;
    c.sequence = true;
    c.dtype = t.dtype();
    const std::string name = node_name(node, prefix, top);
    const std::string where = prefix + node.outputs.at(0) + "/";
    if (!split_given && !keepdims) {
      for (std::int64_t i = 0; i < dim; ++i) {
        Node g;
        g.op_type = "Gather";
        g.name = unique_node_name(fmt::format("{}/{}", name, i));
        g.inputs = {x, constant(fmt::format("{}index_{}", where, i),
                                Tensor::scalar(static_cast<double>(i), DType::Int64))};
        g.outputs = {fresh(fmt::format("{}{}", where, i))};
        g.attrs["axis"] = Attribute::of_int(axis);
        c.items.push_back(g.outputs[0]);
        evaluate(std::move(g));
      }
    } else if (!lengths.empty()) {
      Node sp;
      sp.op_type = "Split";
      sp.name = top ? name : unique_node_name(name);
      sp.inputs = {x};
      if (g_.opset >= 13)
        sp.inputs.push_back(
            constant(where + "split",
                     Tensor::from_i64(lengths, {static_cast<std::int64_t>(lengths.size())})));
      else
        sp.attrs["split"] = Attribute::of_ints(lengths);
      sp.attrs["axis"] = Attribute::of_int(axis);
      for (std::size_t i = 0; i < lengths.size(); ++i)
        sp.outputs.push_back(fresh(fmt::format("{}{}", where, i)));
      c.items = sp.outputs;
      evaluate(std::move(sp));
    }
    set_composite(node, 0, std::move(c), scope, prefix, top);
  }

  // ConcatFromSequence: a Concat of the tensors (each Unsqueezed at the axis with new_axis).
  void emit_concat_from_sequence(const Graph& body, const Node& node, const Composite& seq,
                                 Scope& scope, const std::string& prefix, bool top) {
    if (seq.items.empty())
      fail("{}: the sequence '{}' is empty: there is nothing to concatenate", where_(node),
           printable(node.inputs[0]));
    const bool new_axis = node.has_attr("new_axis") && node.attr_i("new_axis") != 0;
    const std::int64_t rank = value(node, seq.items[0]).rank() + (new_axis ? 1 : 0);
    const std::int64_t axis = axis_of(node, node.attr_i("axis"), rank);
    const std::string name = node_name(node, prefix, top);
    std::vector<std::string> parts = seq.items;
    if (new_axis)
      for (std::size_t i = 0; i < parts.size(); ++i) {
        Node u;
        u.op_type = "Unsqueeze";
        u.name = unique_node_name(fmt::format("{}/unsqueeze_{}", name, i));
        u.inputs = {parts[i]};
        if (g_.opset >= 13)
          u.inputs.push_back(constant(fmt::format("{}/axes", name), Tensor::from_i64({axis}, {1})));
        else
          u.attrs["axes"] = Attribute::of_ints({axis});
        u.outputs = {fresh(fmt::format("{}/{}", name, i))};
        parts[i] = u.outputs[0];
        evaluate(std::move(u));
      }
    Node cat;
    cat.op_type = "Concat";
    cat.name = top ? name : unique_node_name(name);
    cat.inputs = parts;
    cat.attrs["axis"] = Attribute::of_int(axis);
    cat.outputs = {output_name(body, node, 0, scope, prefix, top)};
    evaluate(std::move(cat));
  }

  // SequenceMap: its body once per element of the input sequence, the additional inputs'
  // elements at the same position (a tensor is passed whole to every run).
  void emit_sequence_map(const Node& node, Scope& scope, const std::string& prefix, bool top) {
    Inlining inlining(current_, label(node, prefix));
    const Graph& fn = subgraph(node, "body");
    if (fn.inputs.size() != node.inputs.size() || fn.outputs.size() < node.outputs.size())
      fail("{}: its body has {} inputs and {} outputs for the node's {} and {}", where_(node),
           fn.inputs.size(), fn.outputs.size(), node.inputs.size(), node.outputs.size());
    std::vector<std::string> ins;
    ins.reserve(node.inputs.size());
    for (const auto& i : node.inputs) ins.push_back(scope.resolve(i));
    const auto n = sequence(node, ins.at(0), "input sequence").items.size();
    for (std::size_t j = 1; j < ins.size(); ++j)
      if (const Composite* c = composite(ins[j]))
        if (sequence(node, ins[j], "additional input").items.size() != n)
          fail("{}: its additional input '{}' has {} tensors, the input sequence {}", where_(node),
               printable(node.inputs[j]), c->items.size(), n);
    std::vector<Composite> outs(fn.outputs.size());
    for (std::size_t k = 0; k < outs.size(); ++k) {
      outs[k].sequence = true;
      outs[k].dtype = fn.outputs[k].dtype;
    }
    const std::size_t before = flat_.nodes.size();
    for (std::size_t i = 0; i < n; ++i) {
      const std::string where = fmt::format("{}{}/{}/", prefix, node.name, i);
      Scope inner{&scope, {}};
      for (std::size_t j = 0; j < ins.size(); ++j) {
        const Composite* c = composite(ins[j]);
        inner.names[fn.inputs[j].name] = c ? c->items[i] : ins[j];
      }
      emit_body(fn, inner, where, false);
      for (std::size_t k = 0; k < outs.size(); ++k) {
        std::string o = inner.resolve(fn.outputs[k].name);
        const Tensor& t = value(node, o);
        if (!outs[k].dtype) outs[k].dtype = t.dtype();
        outs[k].items.push_back(o);
      }
    }
    for (std::size_t k = 0; k < node.outputs.size(); ++k)
      set_composite(node, k, std::move(outs[k]), scope, prefix, top);
    path_.push_back(fmt::format("{}: {} element{}, {}", label(node, prefix), n, n == 1 ? "" : "s",
                                nodes(flat_.nodes.size() - before)));
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
    if (const Composite* c = composite(made)) {
      // A sequence or optional graph output: run() gives it its tensors.
      composites_[out] = *c;
      return;
    }
    if (auto s = strings_.find(made); s != strings_.end()) {
      strings_[out] = s->second;
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
    if (const Composite* c = composite(name))
      fail("{}: input '{}' is {}, which only the sequence and optional operators take",
           node.label(), printable(name), kind_name(c->optional, c->sequence));
    if (strings_.count(name))
      fail(
          "{}: input '{}' is a string tensor, which only the string operators and Cast, "
          "CastLike, Equal and Identity take",
          node.label(), printable(name));
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
    if (!vi || vi->sequence || vi->optional || is_string_value(*vi)) return;
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
  // The sequences and optionals, by their names in the inlined graph.
  std::map<std::string, Composite> composites_;
  std::map<std::string, Tensor> element_inputs_;
  std::map<std::string, CompositeOutput> composite_outputs_;
  // The string tensors, by name.
  std::map<std::string, StringTensor> strings_, string_outputs_;
};

}  // namespace

InlinedGraph inline_control_flow(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                 const std::map<std::string, CompositeValue>& composite_inputs,
                                 const std::map<std::string, StringTensor>& string_inputs) {
  return Inliner(g, inputs, composite_inputs, string_inputs).run();
}

}  // namespace metaop
