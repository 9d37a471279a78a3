#pragma once
// ONNX model import (checker, shape inference, external data) and subgraph export.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace metaop {

// Opsets of the default domain that MetaOp's meta operators follow.
constexpr std::int64_t kMinOpset = 1;
constexpr std::int64_t kMaxOpset = 23;
// The newest opset the linked ONNX library (Debian's 1.12) knows: its checker, shape inference
// and schemas serve models up to it; newer ones go to the current ONNX package (.venv).
constexpr std::int64_t kMaxLinkedOnnxOpset = 17;
// The ONNX domains besides the default one whose operators MetaOp reads: the training operators
// of ai.onnx.preview.training (Adagrad, Adam, Momentum), one version, which the linked library
// knows.
inline bool is_other_onnx_domain(std::string_view domain) {
  return domain == "ai.onnx.preview.training";
}

struct ImportOptions {
  bool run_checker = true;
  bool infer_shapes = true;
  std::string file_path;  // set by load_onnx; lets the checker find external data
  // ONNX's checker and shape inference run in a forked child: they crash on some malformed
  // models (ONNX 1.12), which must be an error about the model, not the end of MetaOp.
  bool isolate_onnx = true;
};

Graph load_onnx(const std::string& path, const ImportOptions& options = {});
Graph load_onnx_from_bytes(const std::string& bytes, const std::string& label,
                           const std::string& base_dir, const ImportOptions& options = {});

// The ONNX schema's default of attribute `name` of an `op_type` node (default domain) at `opset`;
// none where the schema gives none (a required attribute, or one without a default). Import fills
// these into every node; kernels reading a node built otherwise (synthetic cases, loss nodes,
// tests) get them from here, so defaults are written nowhere else.
std::optional<Attribute> schema_default(const std::string& op_type, std::int64_t opset,
                                        const std::string& name);
// Every attribute the node leaves out that has a schema default at `opset`, filled in: import
// does it, and so does every path that builds nodes itself for the bindings (synthetic cases),
// so that every binding reads the same values.
void fill_schema_defaults(Node& n, std::int64_t opset);

struct SubgraphSpec {
  std::vector<std::size_t> nodes;  // indices into g.nodes, in topological order
  // Values at hand (inputs and outputs of the nodes): they give the exported model's input
  // and output types and shapes, and the inputs named in `constants` become initializers.
  std::map<std::string, Tensor> values;
  std::set<std::string> constants;
};

// A standalone, checker-valid ONNX model (serialized) of the chosen nodes.
std::string export_subgraph(const Graph& g, const SubgraphSpec& spec);
// The node alone as such a model (graph `graph_name`, at `opset`; spec.nodes is {0}), as the
// bindings that import ONNX run a node; with the metadata set below.
std::string export_node(const Node& node, std::int64_t opset, const SubgraphSpec& spec,
                        const std::string& graph_name);
// The metadata of the model under test, which export_node's models carry (process-wide; set by
// load_onnx for the model it reads, empty until then).
void set_node_export_metadata(const ModelMetadata& meta);
ModelMetadata node_export_metadata();
// A short key that changes whenever that metadata does, for caches of such models.
std::string node_export_metadata_key();
void write_file(const std::string& path, const std::string& bytes);

// The model file at `path` with the given initializers' values replaced (written inline, also
// those that were external data); everything else kept as it was. Serialized.
std::string with_initializers(const std::string& path, const std::map<std::string, Tensor>& values);

}  // namespace metaop
