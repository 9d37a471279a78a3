#pragma once
// The graph IR: what MetaOp keeps of an ONNX model. Attributes carry the ONNX schema's defaults
// (filled in at import), so kernels read one place whatever the exporter wrote.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/composite.h"
#include "tensor/tensor.h"

namespace metaop {

struct Graph;

struct Attribute {
  enum class Kind { Int, Float, String, Tensor, Ints, Floats, Strings, Unsupported };
  Kind kind = Kind::Unsupported;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  metaop::Tensor t;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::string unsupported_type;  // e.g. GRAPH, for ops MetaOp does not run
  // A GRAPH attribute's subgraph (the bodies of If, Loop and Scan; kind Unsupported, type GRAPH):
  // engine/control_flow inlines it, so kernels never see one.
  std::shared_ptr<const Graph> graph;
  // A TENSOR attribute of strings (kind Unsupported, type "TENSOR of STRING"; a Constant's value):
  // engine/control_flow evaluates the string values, so kernels never see one.
  std::shared_ptr<const StringTensor> string_tensor;

  static Attribute of_int(std::int64_t v) {
    Attribute a;
    a.kind = Kind::Int;
    a.i = v;
    return a;
  }
  static Attribute of_float(double v) {
    Attribute a;
    a.kind = Kind::Float;
    a.f = v;
    return a;
  }
  static Attribute of_ints(std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = Kind::Ints;
    a.ints = std::move(v);
    return a;
  }
  static Attribute of_string(std::string v) {
    Attribute a;
    a.kind = Kind::String;
    a.s = std::move(v);
    return a;
  }
};

struct Node {
  std::string name;  // never empty: unnamed nodes get "<op_type>_<index>"
  std::string op_type;
  std::string domain;
  std::vector<std::string> inputs;  // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& a) const { return attrs.count(a) != 0; }
  // The attribute, failing naming the node where it is missing or of another kind. Defaults are
  // the schema's (filled in at import; kernels read through attr_f(c, name) and the like,
  // ops/kernel_util.h), so there is no overload with one.
  std::int64_t attr_i(const std::string& a) const;
  double attr_f(const std::string& a) const;
  std::string attr_s(const std::string& a) const;
  std::vector<std::int64_t> attr_ints(const std::string& a) const;
  std::vector<double> attr_floats(const std::string& a) const;
  const Tensor& attr_t(const std::string& a) const;
  // "node 'conv1' (Conv)": the prefix of every message about this node.
  std::string label() const;

 private:
  const Attribute& get(const std::string& a, Attribute::Kind k) const;
};

struct ValueInfo {
  std::string name;
  std::optional<DType> dtype;  // nullopt: unknown or a type MetaOp does not handle
  int onnx_elem_type = 0;
  bool is_tensor = true;  // false for sequence, map, optional values
  int type_case = 0;
  // A sequence of tensors, an optional tensor, or an optional sequence of tensors (both set):
  // dtype and dims are the tensors'. engine/control_flow lowers such values to their tensors.
  bool sequence = false, optional = false;
  std::optional<std::vector<std::int64_t>> dims;  // -1 for a symbolic or unknown dimension
};

// What a model says of itself besides its graph, kept from the source model by every model MetaOp
// exports from it (one-node and sub-models, reproducers): a framework that acts on it (its
// producer, imported opsets) is then judged as its users run it. Empty for graphs MetaOp builds
// itself. (The exports' IR version is the ONNX library's: their structure is MetaOp's.)
struct ModelMetadata {
  std::string producer_name, producer_version, domain, doc_string;
  std::int64_t model_version = 0;
  std::map<std::string, std::int64_t> opset_imports;  // every domain's, the default one's as ""
  std::vector<std::pair<std::string, std::string>> metadata_props;
};

struct Graph {
  std::string path;  // file it came from, for messages
  std::string name;
  std::int64_t opset = 0;   // of the default ("" / ai.onnx) domain
  std::vector<Node> nodes;  // topological order
  std::map<std::string, Tensor> initializers;
  std::vector<ValueInfo> inputs;  // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::map<std::string, ValueInfo> value_info;  // from ONNX shape inference
  ModelMetadata meta;

  const ValueInfo* find_value_info(const std::string& name) const;
};

// The names a subgraph reads from the scopes around it (its nodes' inputs, its nested
// subgraphs' too, that none of its inputs, initializers or nodes define), in order of first use.
std::vector<std::string> outer_references(const Graph& body);
// What a node reads: its inputs, then the outer references of its subgraphs (If, Loop, Scan).
std::vector<std::string> node_reads(const Node& n);
// If, Loop and Scan: nodes whose bodies engine/control_flow inlines.
bool is_control_flow(const Node& n);
bool has_control_flow(const Graph& g);
// The sequence and optional operators (SequenceConstruct ... SequenceMap, Optional,
// OptionalHasElement, OptionalGetElement): engine/control_flow lowers them, a sequence becoming
// the tensors it holds, so no binding sees one.
bool is_sequence_op(const Node& n);
// The string operators (StringNormalizer, StringConcat, StringSplit, RegexFullMatch), which
// engine/control_flow evaluates as it lowers a model (engine/strings), as it does Equal, Cast and
// Identity of strings and Cast to STRING: no binding sees a string tensor.
bool is_string_op(const Node& n);
// A value of ONNX's STRING element type (not a sequence or optional of them).
bool is_string_value(const ValueInfo& v);
// What engine/control_flow must inline or lower before a run: control flow, sequence, optional
// and string operators, Cast to STRING, Constant of strings (a string-tensor attribute), and
// graph inputs or outputs of sequence, optional or string type.
bool needs_inlining(const Graph& g);

// Node indices in topological order (a node after the producers of everything it reads, its
// subgraphs' outer references included); fails naming the first value no node produces.
std::vector<std::size_t> topological_order(const Graph& g);
// The same for a subgraph, whose nodes may read values of the scopes around it.
std::vector<std::size_t> body_order(const Graph& body);

}  // namespace metaop
