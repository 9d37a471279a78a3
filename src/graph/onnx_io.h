#pragma once
// ONNX model import (checker, shape inference, external data) and subgraph export.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace metaop {

// Opsets of the default domain that MetaOp's meta operators follow.
constexpr std::int64_t kMinOpset = 1;
constexpr std::int64_t kMaxOpset = 17;

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

struct SubgraphSpec {
  std::vector<std::size_t> nodes;  // indices into g.nodes, in topological order
  // Values at hand (inputs and outputs of the nodes): they give the exported model's input
  // and output types and shapes, and the inputs named in `constants` become initializers.
  std::map<std::string, Tensor> values;
  std::set<std::string> constants;
};

// A standalone, checker-valid ONNX model (serialized) of the chosen nodes.
std::string export_subgraph(const Graph& g, const SubgraphSpec& spec);
void write_file(const std::string& path, const std::string& bytes);

// The model file at `path` with the given initializers' values replaced (written inline, also
// those that were external data); everything else kept as it was. Serialized.
std::string with_initializers(const std::string& path, const std::map<std::string, Tensor>& values);

}  // namespace metaop
