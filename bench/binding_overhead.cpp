// The per-node overhead of the bindings to frameworks that import ONNX (ort, ort-1.30, openvino,
// tvm, opencv...): `run --bind B` (every node a one-node model in the framework's worker process,
// tensors in and out over the socket) next to the framework's own whole-model run of the same
// model, both at the binding's lowest optimization level (so that both run the same kernels,
// unfused) and 1 thread, measured side by side in one process after a warm-up run (session
// creation is reported apart: users create a session once). One binding after another, each
// pair of runs interleaved.
//
// Usage: bench_binding_overhead MODELS_DIR [ARCH] [REPEAT] [BINDING,...]
//   MODELS_DIR as written by tests/models/export_torchvision.py. Defaults: resnet50, 5 repeats,
//   every binding of the ONNX-import base that is installed here.
// A binding outside that base (torch, onednn...) has no whole-model runner here: for it only the
// node-by-node run is timed, and a script in the framework's own language times the framework's
// whole model beside it (bench/torch_overhead.py for torch).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <sstream>

#include "bench_util.h"
#include "bindings/factory.h"
#include "bindings/onnx_import/import_binding.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "tensor/heap.h"
#include "tensor/npy.h"

using namespace metaop;
using metaop::bench::median;
using metaop::bench::seconds;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) v.push_back(item);
  return v;
}

void bench_binding(const ImportBindingSpec& spec, const std::string& dir, const std::string& arch,
                   int repeat) {
  std::string base = dir + "/" + arch, path = base + "/opset17.onnx";
  Graph g = load_onnx(path);
  std::map<std::string, Tensor> inputs{{g.inputs.at(0).name, read_npy(base + "/input_0.npy")}};
  std::vector<std::string> outputs;
  outputs.reserve(g.outputs.size());
  for (const auto& o : g.outputs) outputs.push_back(o.name);
  WholeModel m{g, {}};
  const std::string& level = spec.levels.front();
  if (!spec.level_option.empty()) set_import_level(spec.level_option, level);
  auto runner = make_import_model_runner(spec);
  Plan plan;
  plan.set_default(spec.name);
  std::map<std::string, Tensor> whole;
  RunResult nodes;
  double first_whole = seconds([&] { whole = runner->run(m, inputs, outputs, level); });
  double first_nodes = seconds([&] { nodes = run_graph(g, inputs, plan); });
  std::vector<double> t_whole, t_nodes;
  for (int r = 0; r < repeat; ++r) {
    t_whole.push_back(seconds([&] { whole = runner->run(m, inputs, outputs, level); }));
    t_nodes.push_back(seconds([&] { nodes = run_graph(g, inputs, plan); }));
  }
  std::size_t on_binding = 0;
  for (const auto& rec : nodes.records) on_binding += rec.binding == spec.name;
  double w = median(t_whole), n = median(t_nodes);
  fmt::print("{} ({} nodes, {} on {}), {} {}, level {}, 1 thread, median of {}:\n", arch,
             g.nodes.size(), on_binding, spec.name, spec.framework, spec.version, level, repeat);
  fmt::print("  {:<36} {:8.1f} ms   (first run, with session: {:.1f} ms)\n",
             spec.framework + " whole model", 1e3 * w, 1e3 * first_whole);
  fmt::print("  {:<36} {:8.1f} ms   (first run, with sessions: {:.1f} ms)\n",
             "metaop run --bind " + spec.name + " (node by node)", 1e3 * n, 1e3 * first_nodes);
  fmt::print("  {:<36} {:8.2f}x  (goal: within 2x)\n", "ratio node by node / whole model", n / w);
}

// Node by node only, for the bindings whose framework's whole-model run is timed elsewhere. The
// last line is for the script that drives it.
void bench_nodes_only(const std::string& name, const std::string& dir, const std::string& arch,
                      int repeat) {
  std::string base = dir + "/" + arch;
  Graph g = load_onnx(base + "/opset17.onnx");
  std::map<std::string, Tensor> inputs{{g.inputs.at(0).name, read_npy(base + "/input_0.npy")}};
  Plan plan;
  plan.set_default(name);
  RunResult nodes;
  double first = seconds([&] { nodes = run_graph(g, inputs, plan); });
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(repeat));
  for (int r = 0; r < repeat; ++r)
    t.push_back(seconds([&] { nodes = run_graph(g, inputs, plan); }));
  std::size_t on_binding = 0;
  for (const auto& rec : nodes.records) on_binding += rec.binding == name;
  fmt::print("{} ({} nodes, {} on {}), {} {}, 1 thread, median of {}:\n", arch, g.nodes.size(),
             on_binding, name, binding_info(name).framework, binding_version(name), repeat);
  fmt::print("  {:<36} {:8.1f} ms   (first run, with sessions: {:.1f} ms)\n",
             "metaop run --bind " + name + " (node by node)", 1e3 * median(t), 1e3 * first);
  fmt::print("nodes_ms {:.3f} on_binding {} nodes {}\n", 1e3 * median(t), on_binding,
             g.nodes.size());
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();  // as metaop does
  auto args = bench::model_args(argc, argv);
  if (!args) return 2;
  const auto& [dir, arch, repeat] = *args;
  int failed = 0;
  try {
    set_threads(1);
    std::vector<std::string> names = argc > 4 ? split(argv[4]) : std::vector<std::string>{};
    if (names.empty())
      for (const auto& spec : import_binding_specs())
        if (import_binding_problem(spec).empty()) names.push_back(spec.name);
    for (const auto& name : names) {
      const ImportBindingSpec* spec = find_import_spec(name);
      try {
        if (!spec) {
          bench_nodes_only(name, dir, arch, repeat);
          continue;
        }
        if (std::string p = import_binding_problem(*spec); !p.empty()) fail("{}", p);
        bench_binding(*spec, dir, arch, repeat);
      } catch (const std::exception& e) {
        fmt::print(stderr, "bench_binding_overhead: {}: {}\n", name, e.what());
        ++failed;
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_binding_overhead: {}\n", e.what());
    return 2;
  }
  return failed ? 1 : 0;
}
