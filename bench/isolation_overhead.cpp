// What running framework kernels out of process costs (isolate.h): the same kernels in MetaOp's
// process and in a persistent worker (tensors through shared memory), side by side in one
// process after a warm-up run that forks the worker:
//   1. a small node (Relu on [1, 64]) called many times: the round trip per node;
//   2. a torchvision model (default resnet50) run node by node on torch: the ratio;
//   3. OpenCV's cost per node: the way it ran before (a forked child per node, each node
//      exported and imported anew) against the worker that keeps imported nets.
//
// Usage: bench_isolation_overhead MODELS_DIR [ARCH] [REPEAT]
//   MODELS_DIR as written by tests/models/export_torchvision.py. Defaults: resnet50, 5 repeats.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>

#include "bench_util.h"
#include "bindings/factory.h"
#include "bindings/isolate.h"
#include "bindings/opencv/opencv_binding.h"
#include "bindings/torch/torch_binding.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "tensor/heap.h"
#include "tensor/npy.h"

using namespace metaop;
using metaop::bench::median;
using metaop::bench::seconds;

namespace {

// OpenCV as it ran before the workers: every node in a forked child, exported and imported anew.
class ForkPerNode final : public Binding {
 public:
  std::string name() const override { return "opencv-4.6"; }
  Support supports(const std::string& op) const override { return inner_.supports(op); }
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override {
    return run_isolated(node.label(), [&] { return inner_.forward(node, opset, inputs); });
  }

 private:
  OpenCVBinding inner_;
};

Plan plan_with(std::unique_ptr<Binding> b) {
  Plan p;
  std::string name = b->name();
  p.add_binding(std::move(b));
  p.set_default(name);
  return p;
}

// 1. A small node (torch Relu on [1, 64]) many times: the round trip per node.
void small_node(int repeat) {
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  Tensors x{Tensor::from_f64(std::vector<double>(64, -0.5), {1, 64}, DType::Float32)};
  TorchBinding in_process;
  IsolatedBinding isolated_torch(std::make_unique<TorchBinding>());
  isolated_torch.forward(relu, 13, x);  // forks the worker
  const int calls = 2000;
  std::vector<double> t_in, t_iso;
  for (int r = 0; r < repeat; ++r) {
    t_in.push_back(seconds([&] {
                     for (int i = 0; i < calls; ++i) in_process.forward(relu, 13, x);
                   }) /
                   calls);
    t_iso.push_back(seconds([&] {
                      for (int i = 0; i < calls; ++i) isolated_torch.forward(relu, 13, x);
                    }) /
                    calls);
  }
  fmt::print("small node (torch Relu on [1, 64]), median of {} x {} calls:\n", repeat, calls);
  fmt::print("  in process          {:8.1f} us per node\n", 1e6 * median(t_in));
  fmt::print("  isolated (worker)   {:8.1f} us per node   (overhead {:.3f} ms; goal: <= 5 ms)\n",
             1e6 * median(t_iso), 1e3 * (median(t_iso) - median(t_in)));
}

// 2. The model node by node on torch, in process and in the worker.
void torch_node_by_node(const Graph& g, const std::map<std::string, Tensor>& inputs,
                        const std::string& arch, int repeat) {
  Plan torch_in = plan_with(std::make_unique<TorchBinding>());
  Plan torch_iso = plan_with(std::make_unique<IsolatedBinding>(std::make_unique<TorchBinding>()));
  run_graph(g, inputs, torch_in);
  double first_iso = seconds([&] { run_graph(g, inputs, torch_iso); });
  std::vector<double> m_in, m_iso;
  for (int r = 0; r < repeat; ++r) {
    m_in.push_back(seconds([&] { run_graph(g, inputs, torch_in); }));
    m_iso.push_back(seconds([&] { run_graph(g, inputs, torch_iso); }));
  }
  double a = median(m_in), b = median(m_iso);
  auto sent = worker_sent_bytes("torch");
  run_graph(g, inputs, torch_iso);
  sent = worker_sent_bytes("torch") - sent;
  fmt::print("{} ({} nodes) node by node on torch, 1 thread, median of {}:\n", arch, g.nodes.size(),
             repeat);
  fmt::print("  in process          {:8.1f} ms\n", 1e3 * a);
  fmt::print("  isolated (worker)   {:8.1f} ms   (first run, forking the worker: {:.1f} ms)\n",
             1e3 * b, 1e3 * first_iso);
  fmt::print("  ratio               {:8.2f}x  (goal: <= 1.3x)\n", b / a);
  fmt::print("  copied to the worker per run after the first: {} (the rest it keeps)\n",
             format_bytes(static_cast<std::int64_t>(sent)));
}

// 3. OpenCV per node: a child per node (export and import each time) against the worker.
void opencv_per_node(const Graph& g, const std::map<std::string, Tensor>& inputs,
                     const std::string& arch, int repeat) {
  Plan cv_fork = plan_with(std::make_unique<ForkPerNode>());
  Plan cv_iso = plan_with(std::make_unique<IsolatedBinding>(std::make_unique<OpenCVBinding>()));
  Plan cv_in = plan_with(std::make_unique<OpenCVBinding>());
  OpenCVBinding::set_cache_capacity(0);  // the children below import every node anew
  double fork_run = seconds([&] { run_graph(g, inputs, cv_fork); });
  OpenCVBinding::set_cache_capacity(256);
  double first_cv = seconds([&] { run_graph(g, inputs, cv_iso); });
  run_graph(g, inputs, cv_in);
  std::vector<double> c_iso, c_in;
  for (int r = 0; r < repeat; ++r) {
    c_iso.push_back(seconds([&] { run_graph(g, inputs, cv_iso); }));
    c_in.push_back(seconds([&] { run_graph(g, inputs, cv_in); }));
  }
  std::size_t on_cv = 0;
  for (const auto& rec : run_graph(g, inputs, cv_iso).records) on_cv += rec.binding == "opencv-4.6";
  double n = static_cast<double>(g.nodes.size());
  fmt::print("{} on opencv-4.6 ({} of {} nodes on OpenCV 4.6), per node (run time / nodes):\n",
             arch, on_cv, g.nodes.size());
  fmt::print("  a child per node, export + import each (before)  {:8.2f} ms per node\n",
             1e3 * fork_run / n);
  fmt::print("  worker, nets imported once (first run)           {:8.2f} ms per node\n",
             1e3 * first_cv / n);
  fmt::print("  worker, nets kept (median of {})                  {:8.2f} ms per node\n", repeat,
             1e3 * median(c_iso) / n);
  fmt::print("  in process, nets kept (median of {})              {:8.2f} ms per node\n", repeat,
             1e3 * median(c_in) / n);
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();  // as metaop does
  auto args = bench::model_args(argc, argv);
  if (!args) return 2;
  const auto& [dir, arch, repeat] = *args;
  try {
    TorchBinding::set_threads(1);
    small_node(repeat);
    std::string base = dir + "/" + arch;
    Graph g = load_onnx(base + "/opset17.onnx");
    std::map<std::string, Tensor> inputs{{g.inputs.at(0).name, read_npy(base + "/input_0.npy")}};
    torch_node_by_node(g, inputs, arch, repeat);
    opencv_per_node(g, inputs, arch, repeat);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_isolation_overhead: {}\n", e.what());
    return 2;
  }
}
