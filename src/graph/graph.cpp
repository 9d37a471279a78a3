#include "graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "tensor/text.h"

namespace metaop {

namespace {
const char* kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Int:
      return "int";
    case Attribute::Kind::Float:
      return "float";
    case Attribute::Kind::String:
      return "string";
    case Attribute::Kind::Tensor:
      return "tensor";
    case Attribute::Kind::Ints:
      return "ints";
    case Attribute::Kind::Floats:
      return "floats";
    case Attribute::Kind::Strings:
      return "strings";
    case Attribute::Kind::Unsupported:
      return "unsupported";
  }
  return "?";
}
}  // namespace

std::string Node::label() const {
  // Names are data: escaped, so that a message stays one line and sends no terminal controls.
  return fmt::format("node '{}' ({})", printable(name), printable(op_type, 64));
}

const Attribute& Node::get(const std::string& a, Attribute::Kind k) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) fail("{}: missing required attribute '{}'", label(), a);
  if (it->second.kind != k)
    fail("{}: attribute '{}' is {}, expected {}", label(), a, kind_name(it->second.kind),
         kind_name(k));
  return it->second;
}

std::int64_t Node::attr_i(const std::string& a) const {
  return get(a, Attribute::Kind::Int).i;
}
double Node::attr_f(const std::string& a) const {
  return get(a, Attribute::Kind::Float).f;
}
std::string Node::attr_s(const std::string& a) const {
  return get(a, Attribute::Kind::String).s;
}
std::vector<std::int64_t> Node::attr_ints(const std::string& a) const {
  return get(a, Attribute::Kind::Ints).ints;
}
std::vector<double> Node::attr_floats(const std::string& a) const {
  return get(a, Attribute::Kind::Floats).floats;
}
const Tensor& Node::attr_t(const std::string& a) const {
  return get(a, Attribute::Kind::Tensor).t;
}

const ValueInfo* Graph::find_value_info(const std::string& n) const {
  for (const auto& v : inputs)
    if (v.name == n) return &v;
  for (const auto& v : outputs)
    if (v.name == n) return &v;
  auto it = value_info.find(n);
  return it == value_info.end() ? nullptr : &it->second;
}

std::vector<std::string> outer_references(const Graph& body) {
  std::set<std::string> defined, seen;
  for (const auto& v : body.inputs) defined.insert(v.name);
  for (const auto& [n, t] : body.initializers) defined.insert(n);
  for (const auto& node : body.nodes)
    for (const auto& o : node.outputs) defined.insert(o);
  std::vector<std::string> out;
  for (const auto& node : body.nodes)
    for (const auto& in : node_reads(node))
      if (!in.empty() && !defined.count(in) && seen.insert(in).second) out.push_back(in);
  // An output may be a value of the scope around (a branch that returns an outer value).
  for (const auto& o : body.outputs)
    if (!defined.count(o.name) && seen.insert(o.name).second) out.push_back(o.name);
  return out;
}

std::vector<std::string> node_reads(const Node& n) {
  std::vector<std::string> reads = n.inputs;
  for (const auto& [name, a] : n.attrs)
    if (a.graph)
      for (auto& r : outer_references(*a.graph))
        if (std::find(reads.begin(), reads.end(), r) == reads.end()) reads.push_back(std::move(r));
  return reads;
}

bool is_control_flow(const Node& n) {
  return (n.domain.empty() || n.domain == "ai.onnx") &&
         (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan");
}

bool has_control_flow(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), is_control_flow);
}

bool is_sequence_op(const Node& n) {
  static const std::set<std::string> ops = {
      "ConcatFromSequence", "SequenceAt",     "SequenceConstruct",  "SequenceEmpty",
      "SequenceErase",      "SequenceInsert", "SequenceLength",     "SequenceMap",
      "SplitToSequence",    "Optional",       "OptionalGetElement", "OptionalHasElement"};
  return (n.domain.empty() || n.domain == "ai.onnx") && ops.count(n.op_type) != 0;
}

bool is_string_op(const Node& n) {
  return (n.domain.empty() || n.domain == "ai.onnx") &&
         (n.op_type == "StringNormalizer" || n.op_type == "StringConcat" ||
          n.op_type == "StringSplit" || n.op_type == "RegexFullMatch");
}

bool is_string_value(const ValueInfo& v) {
  return v.onnx_elem_type == 8 && !v.sequence && !v.optional;  // TensorProto::STRING
}

bool needs_inlining(const Graph& g) {
  auto lowered = [](const ValueInfo& v) { return v.sequence || v.optional || is_string_value(v); };
  auto to_string = [](const Node& n) {
    auto it = n.attrs.find("to");
    if (n.op_type == "Cast" && it != n.attrs.end() && it->second.kind == Attribute::Kind::Int &&
        it->second.i == 8)
      return true;
    return std::any_of(n.attrs.begin(), n.attrs.end(),
                       [](const auto& a) { return a.second.string_tensor != nullptr; });
  };
  return std::any_of(g.nodes.begin(), g.nodes.end(),
                     [&](const Node& n) {
                       return is_control_flow(n) || is_sequence_op(n) || is_string_op(n) ||
                              to_string(n);
                     }) ||
         std::any_of(g.inputs.begin(), g.inputs.end(), lowered) ||
         std::any_of(g.outputs.begin(), g.outputs.end(), lowered);
}

namespace {

// `outer`: names no node produces come from the scopes around (a subgraph's outer references).
std::vector<std::size_t> order_nodes(const Graph& g, bool outer) {
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::set<std::string> available;
  for (const auto& v : g.inputs) available.insert(v.name);
  for (const auto& [n, t] : g.initializers) available.insert(n);

  // What each node reads (its subgraphs' outer references too).
  std::vector<std::vector<std::string>> reads(g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) reads[i] = node_reads(g.nodes[i]);
  std::vector<int> state(g.nodes.size(), 0);  // 0 new, 1 visiting, 2 done
  std::vector<std::size_t> order;
  order.reserve(g.nodes.size());
  // Iterative DFS so that deep graphs cannot overflow the stack.
  for (std::size_t root = 0; root < g.nodes.size(); ++root) {
    if (state[root]) continue;
    std::vector<std::pair<std::size_t, std::size_t>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      const Node& node = g.nodes[n];
      if (next < reads[n].size()) {
        const std::string& in = reads[n][next++];
        if (in.empty() || available.count(in)) continue;
        auto it = producer.find(in);
        if (it == producer.end() && outer) continue;
        if (it == producer.end())
          fail("{}: input '{}' is not a graph input, an initializer or any node's output",
               node.label(), in);
        if (state[it->second] == 1)
          fail("{}: the graph has a cycle through '{}'", node.label(), in);
        if (state[it->second] == 0) {
          state[it->second] = 1;
          stack.push_back({it->second, 0});
        }
        continue;
      }
      state[n] = 2;
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace

std::vector<std::size_t> topological_order(const Graph& g) {
  return order_nodes(g, false);
}

std::vector<std::size_t> body_order(const Graph& body) {
  return order_nodes(body, true);
}

}  // namespace metaop
