#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/onnx_io.h"
#include "tensor/files.h"
#include "tensor/tensor_proto.h"
#include "tensor/text.h"

namespace metaop {

namespace {

Attribute convert_attr(const onnx::AttributeProto& a, const std::string& base_dir,
                       const std::string& what) {
  using A = onnx::AttributeProto;
  Attribute r;
  switch (a.type()) {
    case A::INT:
      r.kind = Attribute::Kind::Int;
      r.i = a.i();
      break;
    case A::FLOAT:
      r.kind = Attribute::Kind::Float;
      r.f = a.f();
      break;
    case A::STRING:
      r.kind = Attribute::Kind::String;
      r.s = a.s();
      break;
    case A::TENSOR:
      r.kind = Attribute::Kind::Tensor;
      r.t = tensor_from_proto(a.t(), base_dir, what);
      break;
    case A::INTS:
      r.kind = Attribute::Kind::Ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::FLOATS:
      r.kind = Attribute::Kind::Floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::STRINGS:
      r.kind = Attribute::Kind::Strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    default:
      r.kind = Attribute::Kind::Unsupported;
      r.unsupported_type = A::AttributeType_Name(a.type());
  }
  return r;
}

ValueInfo convert_value_info(const onnx::ValueInfoProto& v) {
  ValueInfo r;
  r.name = v.name();
  r.is_tensor = v.type().has_tensor_type();
  if (!r.is_tensor) r.type_case = static_cast<int>(v.type().value_case());
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    r.onnx_elem_type = tt.elem_type();
    r.dtype = dtype_from_onnx(tt.elem_type());
    if (tt.has_shape()) {
      std::vector<std::int64_t> dims;
      for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      r.dims = dims;
    }
  }
  return r;
}

void check_known_ops(const onnx::ModelProto& m, std::int64_t opset, const std::string& label) {
  std::map<std::string, int> unknown;
  for (const auto& n : m.graph().node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!default_domain ||
        !onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), ""))
      ++unknown[n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type()];
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& [op, count] : unknown)
    list += fmt::format("{}{} x{}", list.empty() ? "" : ", ", op, count);
  throw Unsupported(fmt::format("{}: unknown operators for opset {}: {}", label, opset, list));
}

std::string proto_label(const onnx::NodeProto& n) {
  return fmt::format("node '{}' ({})", printable(n.name()), printable(n.op_type(), 64));
}

// Attribute values that ONNX's own shape inference divides by or indexes with unchecked (a
// stride of 0 is a SIGFPE inside it), checked before it runs on an untrusted model.
void validate_attributes(const onnx::GraphProto& graph, const std::string& label) {
  static const std::set<std::string> windowed = {
      "Conv",        "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
      "AveragePool", "LpPool",        "MaxUnpool",   "MaxRoiPool",  "Col2Im"};
  auto at_least = [&](const onnx::NodeProto& n, const onnx::AttributeProto& a, std::int64_t lo) {
    std::vector<std::int64_t> v;
    if (a.type() == onnx::AttributeProto::INT) v = {a.i()};
    if (a.type() == onnx::AttributeProto::INTS) v.assign(a.ints().begin(), a.ints().end());
    for (auto x : v)
      if (x < lo)
        fail("{}: {} attribute {} = [{}]: every value must be at least {}", label, proto_label(n),
             printable(a.name()), fmt::join(v, ", "), lo);
  };
  for (const auto& n : graph.node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    for (const auto& a : n.attribute()) {
      if (a.has_g()) validate_attributes(a.g(), label);
      for (const auto& sub : a.graphs()) validate_attributes(sub, label);
      if (!default_domain) continue;
      const std::string& op = n.op_type();
      const std::string& name = a.name();
      if (windowed.count(op) &&
          (name == "strides" || name == "dilations" || name == "kernel_shape" || name == "group"))
        at_least(n, a, 1);
      if ((op == "DepthToSpace" || op == "SpaceToDepth") && name == "blocksize") at_least(n, a, 1);
      if (op == "LRN" && name == "size") at_least(n, a, 1);
      if (op == "Split" && name == "split") at_least(n, a, 0);
      if (op == "Transpose" && name == "perm") {
        std::vector<std::int64_t> perm(a.ints().begin(), a.ints().end());
        std::vector<bool> seen(perm.size(), false);
        for (auto p : perm) {
          if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) || seen[p])
            fail("{}: {} attribute perm = [{}] is not a permutation of 0..{}", label,
                 proto_label(n), fmt::join(perm, ", "), perm.size() - 1);
          seen[p] = true;
        }
      }
    }
  }
}

// Every tensor of the model stored as external data (initializers, Constant and other tensor
// attributes, subgraphs): its location must stay inside the model's folder. Checked before the
// ONNX checker, which looks the files up itself.
void validate_external_data(const onnx::GraphProto& graph, const std::string& base_dir,
                            const std::string& label) {
  auto check = [&](const onnx::TensorProto& t, const std::string& what) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& kv : t.external_data())
      if (kv.key() == "location") confined_path(base_dir, kv.value(), what + ": external data");
  };
  for (const auto& init : graph.initializer())
    check(init, fmt::format("{}: initializer '{}'", label, printable(init.name())));
  for (const auto& n : graph.node())
    for (const auto& a : n.attribute()) {
      std::string what =
          fmt::format("{}: {} attribute '{}'", label, proto_label(n), printable(a.name()));
      if (a.has_t()) check(a.t(), what);
      for (const auto& t : a.tensors()) check(t, what);
      if (a.has_g()) validate_external_data(a.g(), base_dir, label);
      for (const auto& sub : a.graphs()) validate_external_data(sub, base_dir, label);
    }
}

}  // namespace

Graph load_onnx_from_bytes(const std::string& bytes, const std::string& label,
                           const std::string& base_dir, const ImportOptions& options) {
  onnx::ModelProto m;
  if (bytes.empty()) fail("{}: empty file, not an ONNX model", label);
  if (!m.ParseFromString(bytes))
    fail("{}: not a valid ONNX model (corrupt or truncated protobuf)", label);
  if (!m.has_graph()) fail("{}: not a valid ONNX model (no graph; truncated?)", label);

  Graph g;
  g.path = label;
  g.name = m.graph().name();
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") g.opset = o.version();
  if (g.opset == 0) {
    std::string domains;
    for (const auto& o : m.opset_import()) domains += (domains.empty() ? "" : ", ") + o.domain();
    throw Unsupported(fmt::format(
        "{}: the model imports no opset of the default ONNX domain (only {})", label, domains));
  }
  if (g.opset < kMinOpset || g.opset > kMaxOpset)
    throw Unsupported(fmt::format("{}: opset {} is not supported (MetaOp follows opsets {} to {})",
                                  label, g.opset, kMinOpset, kMaxOpset));
  check_known_ops(m, g.opset, label);
  validate_external_data(m.graph(), base_dir, label);
  validate_attributes(m.graph(), label);

  if (options.run_checker) {
    bool external = false;
    for (const auto& init : m.graph().initializer())
      external |= init.data_location() == onnx::TensorProto::EXTERNAL;
    try {
      // The checker resolves external data against the model's folder only when given the path.
      if (external && !options.file_path.empty())
        onnx::checker::check_model(options.file_path);
      else
        onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fail("{}: the ONNX checker rejects the model: {}", label, msg);
    }
  }
  if (options.infer_shapes) {
    try {
      onnx::shape_inference::InferShapes(m);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fail("{}: ONNX shape inference fails: {}", label, msg);
    }
  }

  const auto& gp = m.graph();
  for (const auto& init : gp.initializer())
    g.initializers[init.name()] =
        tensor_from_proto(init, base_dir, fmt::format("{}: initializer '{}'", label, init.name()));
  for (const auto& v : gp.input())
    if (!g.initializers.count(v.name())) g.inputs.push_back(convert_value_info(v));
  for (const auto& v : gp.output()) g.outputs.push_back(convert_value_info(v));
  for (const auto& v : gp.value_info()) g.value_info[v.name()] = convert_value_info(v);
  for (const auto* list : {&g.inputs, &g.outputs})
    for (const auto& v : *list)
      if (!v.is_tensor)
        throw Unsupported(
            fmt::format("{}: graph input or output '{}' is not a tensor (sequence, map "
                        "or optional types are not supported)",
                        label, v.name));
  if (gp.sparse_initializer_size() > 0) fail("{}: sparse initializers are not supported", label);

  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    Node n;
    n.op_type = np.op_type();
    n.domain = np.domain();
    n.name = np.name().empty() ? fmt::format("{}_{}", n.op_type, i) : np.name();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute())
      n.attrs[a.name()] = convert_attr(
          a, base_dir, fmt::format("{}: {} attribute '{}'", label, n.label(), a.name()));
    // Fill in the schema's defaults so kernels read every attribute from one place.
    if (const auto* schema =
            onnx::OpSchemaRegistry::Schema(n.op_type, static_cast<int>(g.opset), "")) {
      for (const auto& [aname, adef] : schema->attributes()) {
        if (n.attrs.count(aname) || adef.required) continue;
        if (adef.default_value.type() == onnx::AttributeProto::UNDEFINED) continue;
        n.attrs[aname] = convert_attr(adef.default_value, base_dir, aname);
      }
    }
    g.nodes.push_back(std::move(n));
  }
  return g;
}

Graph load_onnx(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory, not an ONNX model", path);
  std::string bytes = InputFile(path).read_all();
  ImportOptions with_path = options;
  with_path.file_path = path;
  return load_onnx_from_bytes(bytes, path, std::filesystem::path(path).parent_path().string(),
                              with_path);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot open for writing", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("{}: write failed", path);
}

}  // namespace metaop
