// ONNX model bytes through MetaOp's import: protobuf parsing, the opset and operator checks,
// the external-data and attribute checks, the ONNX checker and ONNX shape inference, then the
// initializers, attributes and value infos as MetaOp reads them, and the graph's order.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "graph/onnx_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    metaop::Graph g = metaop::load_onnx_from_bytes(bytes, "fuzz.onnx", fuzz::scratch());
    for (const auto& n : g.nodes) (void)n.label();
    (void)metaop::topological_order(g);
  } catch (const std::exception&) {
    // Errors are answers (exit 2 in the CLI); only crashes, hangs and leaks are findings.
  }
  return 0;
}
