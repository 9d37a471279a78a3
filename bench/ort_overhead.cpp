// The per-node overhead of the ort binding: `run --bind ort` (every node a one-node ONNX Runtime
// session in the worker process, tensors in and out over the socket) next to ONNX Runtime's own
// whole-model run of the same model, both at graph optimization level `disabled` (so that both
// run the same kernels, unfused) and 1 thread, measured side by side in one process after a
// warm-up run (session creation is reported apart: users create a session once).
//
// Usage: bench_ort_overhead MODELS_DIR [ARCH] [REPEAT]
//   MODELS_DIR as written by tests/models/export_torchvision.py. Defaults: resnet50, 5 repeats.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>

#include "bench_util.h"
#include "bindings/factory.h"
#include "bindings/ort/ort_binding.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "tensor/heap.h"
#include "tensor/npy.h"

using namespace metaop;
using metaop::bench::median;
using metaop::bench::seconds;

int main(int argc, char** argv) {
  keep_freed_memory();  // as metaop does
  auto args = bench::model_args(argc, argv);
  if (!args) return 2;
  const auto& [dir, arch, repeat] = *args;
  try {
    std::string base = dir + "/" + arch, path = base + "/opset17.onnx";
    if (std::string p = ort_binding_problem("ort"); !p.empty()) fail("{}", p);
    Graph g = load_onnx(path);
    std::map<std::string, Tensor> inputs{{g.inputs.at(0).name, read_npy(base + "/input_0.npy")}};
    std::vector<std::string> outputs;
    outputs.reserve(g.outputs.size());
    for (const auto& o : g.outputs) outputs.push_back(o.name);
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    OrtBinding::set_level("disabled");
    OrtBinding::set_threads(1);
    Plan plan;
    plan.set_default("ort");
    std::map<std::string, Tensor> whole;
    RunResult nodes;
    double first_whole =
        seconds([&] { whole = ort_run_model("cpu", bytes, inputs, outputs, "disabled", path); });
    double first_nodes = seconds([&] { nodes = run_graph(g, inputs, plan); });
    std::vector<double> t_whole, t_nodes;
    for (int r = 0; r < repeat; ++r) {
      t_whole.push_back(
          seconds([&] { whole = ort_run_model("cpu", bytes, inputs, outputs, "disabled", path); }));
      t_nodes.push_back(seconds([&] { nodes = run_graph(g, inputs, plan); }));
    }
    std::size_t on_ort = 0;
    for (const auto& rec : nodes.records) on_ort += rec.binding == "ort";
    double w = median(t_whole), n = median(t_nodes);
    fmt::print(
        "{} ({} nodes, {} on ort), ONNX Runtime 1.30 CPU, --ort-opt disabled, 1 thread, "
        "median of {}:\n",
        arch, g.nodes.size(), on_ort, repeat);
    fmt::print(
        "  ONNX Runtime whole model            {:8.1f} ms   (first run, with session: {:.1f} ms)\n",
        1e3 * w, 1e3 * first_whole);
    fmt::print(
        "  metaop run --bind ort (node by node) {:8.1f} ms   (first run, with sessions: {:.1f} "
        "ms)\n",
        1e3 * n, 1e3 * first_nodes);
    fmt::print("  ratio node by node / whole model     {:8.2f}x  (goal: within 2x)\n", n / w);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_ort_overhead: {}\n", e.what());
    return 2;
  }
}
