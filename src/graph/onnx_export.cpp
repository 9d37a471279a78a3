#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <fstream>
#include <iterator>
#include <set>

#include "graph/onnx_current.h"
#include "graph/onnx_io.h"
#include "tensor/tensor_proto.h"

namespace metaop {

namespace {

void export_attr(const std::string& name, const Attribute& a, const Node& n,
                 onnx::AttributeProto* p) {
  using A = onnx::AttributeProto;
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Int:
      p->set_type(A::INT);
      p->set_i(a.i);
      break;
    case Attribute::Kind::Float:
      p->set_type(A::FLOAT);
      p->set_f(static_cast<float>(a.f));
      break;
    case Attribute::Kind::String:
      p->set_type(A::STRING);
      p->set_s(a.s);
      break;
    case Attribute::Kind::Tensor:
      p->set_type(A::TENSOR);
      tensor_to_proto(a.t, "", p->mutable_t());
      break;
    case Attribute::Kind::Ints:
      p->set_type(A::INTS);
      for (auto v : a.ints) p->add_ints(v);
      break;
    case Attribute::Kind::Floats:
      p->set_type(A::FLOATS);
      for (auto v : a.floats) p->add_floats(static_cast<float>(v));
      break;
    case Attribute::Kind::Strings:
      p->set_type(A::STRINGS);
      for (const auto& v : a.strings) p->add_strings(v);
      break;
    case Attribute::Kind::Unsupported:
      fail("{}: attribute '{}' of type {} cannot be exported", n.label(), name, a.unsupported_type);
  }
}

void set_value_info(const std::string& name, const Graph& g, const SubgraphSpec& spec,
                    onnx::ValueInfoProto* v) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  auto it = spec.values.find(name);
  if (it != spec.values.end() && it->second.defined()) {
    tt->set_elem_type(dtype_to_onnx(it->second.dtype()));
    auto* shape = tt->mutable_shape();
    for (auto d : it->second.shape()) shape->add_dim()->set_dim_value(d);
    return;
  }
  const ValueInfo* vi = g.find_value_info(name);
  if (!vi || vi->onnx_elem_type == 0) {
    v->clear_type();  // left to ONNX shape inference (outputs only)
    return;
  }
  tt->set_elem_type(vi->onnx_elem_type);
  if (vi->dims) {
    auto* shape = tt->mutable_shape();
    for (auto d : *vi->dims) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d);
    }
  }
}

// The chosen nodes, copied into gp; returns the values they consume before any of them
// produces it (the subgraph's inputs), in order of first use.
std::vector<std::string> add_nodes(const Graph& g, const SubgraphSpec& spec, onnx::GraphProto* gp) {
  std::set<std::string> produced, consumed_outside_inputs;
  std::vector<std::string> external_inputs;
  for (auto idx : spec.nodes) {
    const Node& n = g.nodes.at(idx);
    for (const auto& in : n.inputs)
      if (!in.empty() && !produced.count(in) && !consumed_outside_inputs.count(in)) {
        consumed_outside_inputs.insert(in);
        external_inputs.push_back(in);
      }
    for (const auto& o : n.outputs)
      if (!o.empty()) produced.insert(o);
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    np->set_domain(n.domain);
    for (const auto& in : n.inputs) np->add_input(in);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& [name, a] : n.attrs) export_attr(name, a, n, np->add_attribute());
  }
  return external_inputs;
}

// The subgraph's inputs: constants (the spec's, or the graph's initializers) become
// initializers, the others inputs.
void add_inputs(const Graph& g, const SubgraphSpec& spec,
                const std::vector<std::string>& external_inputs, onnx::GraphProto* gp) {
  for (const auto& name : external_inputs) {
    bool constant = spec.constants.count(name) || g.initializers.count(name);
    if (!constant) {
      set_value_info(name, g, spec, gp->add_input());
      continue;
    }
    auto it = spec.values.find(name);
    const Tensor* t = it != spec.values.end() ? &it->second : nullptr;
    if (!t) {
      auto init = g.initializers.find(name);
      if (init != g.initializers.end()) t = &init->second;
    }
    if (!t) fail("{}: constant input '{}' of the subgraph has no value", g.path, name);
    tensor_to_proto(*t, name, gp->add_initializer());
  }
}

// Outputs: values produced here that the graph outputs or that nodes outside consume.
void add_outputs(const Graph& g, const SubgraphSpec& spec, onnx::GraphProto* gp) {
  std::set<std::size_t> chosen(spec.nodes.begin(), spec.nodes.end());
  std::set<std::string> needed;
  for (const auto& o : g.outputs) needed.insert(o.name);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (!chosen.count(i))
      for (const auto& in : g.nodes[i].inputs) needed.insert(in);
  for (auto idx : spec.nodes)
    for (const auto& o : g.nodes[idx].outputs)
      if (!o.empty() && (needed.count(o) || spec.nodes.size() == 1 || spec.values.count(o)))
        set_value_info(o, g, spec, gp->add_output());
}

// Outputs of unknown type take what ONNX shape inference says of them; inputs must be typed.
void type_outputs(const Graph& g, onnx::ModelProto& m) {
  auto* gp = m.mutable_graph();
  bool untyped = false;
  for (const auto& o : gp->output()) untyped |= !o.has_type();
  for (const auto& i : gp->input())
    if (!i.has_type())
      fail("{}: subgraph export needs the type of input '{}' (pass its tensor)", g.path, i.name());
  if (!untyped) return;
  // The linked ONNX library infers the shapes of the opsets it knows, the current ONNX package
  // those of newer ones and of the ops whose shape inference in the linked 1.12 is wrong: STFT's
  // frame count (one too many for some lengths: 80 samples, frames of 16 every 4, give 18 where
  // there are 17), which newer ONNX Runtimes then refuse as a contradiction.
  // Compress's output it gives no shape (the checker requires one): the current package does.
  bool linked_wrong = false;
  for (const auto& n : gp->node())
    linked_wrong |= n.op_type() == "STFT" || n.op_type() == "Compress";
  if (g.opset <= kMaxLinkedOnnxOpset && !(linked_wrong && current_onnx_available()))
    onnx::shape_inference::InferShapes(m);
  else
    infer_outputs_with_current_onnx(m, g.path);
  for (auto& o : *gp->mutable_output()) {
    if (o.has_type()) continue;
    for (const auto& vi : gp->value_info())
      if (vi.name() == o.name()) *o.mutable_type() = vi.type();
    if (!o.has_type())
      fail("{}: cannot infer the type of output '{}' for the subgraph", g.path, o.name());
  }
}

// A shape ONNX leaves out where it depends on an input's values (MaxUnpool's output_shape), which
// the checker requires of a graph output: the rank is X's, every dimension unknown.
void add_unknown_shapes(onnx::GraphProto* gp) {
  for (auto& o : *gp->mutable_output()) {
    auto* tt = o.mutable_type()->mutable_tensor_type();
    if (tt->has_shape()) continue;
    for (const auto& n : gp->node())
      if (n.op_type() == "MaxUnpool" && n.output_size() > 0 && n.output(0) == o.name())
        for (const auto& i : gp->input())
          if (i.name() == n.input(0) && i.type().tensor_type().has_shape())
            for (int d = 0; d < i.type().tensor_type().shape().dim_size(); ++d)
              tt->mutable_shape()->add_dim();
  }
}

}  // namespace

namespace {

// The source model's metadata (ModelMetadata), or MetaOp's name for a graph it built; the default
// domain at the graph's opset. The IR version is this ONNX library's: the exported model's
// structure is MetaOp's (older IR versions require what it does not write, such as shapes).
void set_metadata(const Graph& g, onnx::ModelProto& m) {
  const ModelMetadata& meta = g.meta;
  // Opsets 21 and 23 need IR versions 10 and 11 (ONNX's versioning table), past the linked
  // library's 8.
  m.set_ir_version(std::max<std::int64_t>(onnx::IR_VERSION, g.opset >= 23   ? 11
                                                            : g.opset >= 21 ? 10
                                                            : g.opset >= 19 ? 9
                                                                            : 8));
  m.set_producer_name(meta.opset_imports.empty() ? "metaop" : meta.producer_name);
  m.set_producer_version(meta.producer_version);
  m.set_domain(meta.domain);
  m.set_doc_string(meta.doc_string);
  m.set_model_version(meta.model_version);
  std::map<std::string, std::int64_t> opsets = meta.opset_imports;
  opsets[""] = g.opset;
  for (const auto& [domain, version] : opsets) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  for (const auto& [key, value] : meta.metadata_props) {
    auto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
}

}  // namespace

std::string export_subgraph(const Graph& g, const SubgraphSpec& spec) {
  onnx::ModelProto m;
  set_metadata(g, m);
  auto* gp = m.mutable_graph();
  gp->set_name(g.name.empty() ? "metaop_subgraph" : g.name + "_subgraph");
  add_inputs(g, spec, add_nodes(g, spec, gp), gp);
  add_outputs(g, spec, gp);
  type_outputs(g, m);
  add_unknown_shapes(gp);
  // The linked ONNX library checks the opsets it knows (newer ones were checked at import by the
  // current ONNX package, and the framework that reads the model checks it again).
  if (g.opset <= kMaxLinkedOnnxOpset) {
    try {
      onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      fail("{}: exported subgraph is not a valid model: {}", g.path, e.what());
    }
  }
  return m.SerializeAsString();
}

std::string export_node(const Node& node, std::int64_t opset, const SubgraphSpec& spec,
                        const std::string& graph_name) {
  Graph g;
  g.path = node.label();
  g.name = graph_name;
  g.opset = opset;
  g.meta = node_export_metadata();
  g.nodes = {node};
  return export_subgraph(g, spec);
}

std::string with_initializers(const std::string& path,
                              const std::map<std::string, Tensor>& values) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) fail("{}: not a valid ONNX model (protobuf parse failed)", path);
  std::size_t replaced = 0;
  for (auto& init : *m.mutable_graph()->mutable_initializer()) {
    auto it = values.find(init.name());
    if (it == values.end()) continue;
    std::string name = init.name();
    init.Clear();
    tensor_to_proto(it->second, name, &init);
    ++replaced;
  }
  if (replaced != values.size())
    fail("{}: {} of {} values to write are not initializers of the model", path,
         values.size() - replaced, values.size());
  std::string out;
  if (!m.SerializeToString(&out)) fail("{}: cannot serialize the updated model", path);
  return out;
}

}  // namespace metaop
