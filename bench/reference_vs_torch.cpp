// The float64 reference's time on a torchvision model, and the model run node by node on the
// torch binding, next to LibTorch's own float32 inference of the same architecture and weights
// (TorchScript), measured side by side in one process; and `metaop check --bind torch` (every
// node scored against the oracle on its own inputs, plus the end-to-end reference run).
//
// Usage: bench_reference_vs_torch MODELS_DIR [ARCH] [THREADS] [REPEAT]
//   MODELS_DIR as written by tests/models/export_torchvision.py (ARCH/opset17.onnx,
//   ARCH/torchscript.pt, ARCH/input_0.npy). Defaults: resnet50, 1 thread, 5 repeats.
#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "analysis/check/check.h"
#include "bench_util.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "ops/linear_util.h"
#include "tensor/heap.h"
#include "tensor/npy.h"

using namespace metaop;
using metaop::bench::median;
using metaop::bench::seconds;

int main(int argc, char** argv) {
  keep_freed_memory();  // as metaop does
  if (argc < 2) {
    fmt::print(stderr, "usage: {} MODELS_DIR [ARCH] [THREADS] [REPEAT]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1], arch = argc > 2 ? argv[2] : "resnet50";
  int threads = argc > 3 ? std::stoi(argv[3]) : 1, repeat = argc > 4 ? std::stoi(argv[4]) : 5;
  try {
    std::string base = dir + "/" + arch;
    at::set_num_threads(threads);
    set_reference_threads(threads);
    Graph g = load_onnx(base + "/opset17.onnx");
    Tensor x = read_npy(base + "/input_0.npy");
    Plan plan, torch_plan;
    torch_plan.set_default("torch");
    torch::jit::script::Module module = torch::jit::load(base + "/torchscript.pt");
    module.eval();
    std::vector<std::int64_t> dims(x.shape().begin(), x.shape().end());
    at::Tensor tx = at::from_blob(x.raw(), dims, at::kFloat).clone();
    torch::NoGradGuard no_grad;

    RunResult ref, nodes;
    at::Tensor ty;
    // Warm-up, then alternate the two so both see the same machine load.
    ref = run_graph(g, {{"image", x}}, plan);
    ty = module.forward({tx}).toTensor();
    nodes = run_graph(g, {{"image", x}}, torch_plan);
    CheckOptions check_opts;
    check_opts.bindings = {"torch"};
    CheckResult checked;
    std::vector<double> t_ref, t_torch, t_nodes, t_check;
    for (int i = 0; i < repeat; ++i) {
      t_ref.push_back(seconds([&] { ref = run_graph(g, {{"image", x}}, plan); }));
      t_torch.push_back(seconds([&] { ty = module.forward({tx}).toTensor(); }));
      t_nodes.push_back(seconds([&] { nodes = run_graph(g, {{"image", x}}, torch_plan); }));
      t_check.push_back(seconds([&] { checked = check_model(g, {{{"image", x}}}, check_opts); }));
    }
    std::size_t defects = 0;
    for (const auto& f : checked.findings) defects += f.defect();
    int fallbacks = 0;
    for (const auto& rec : nodes.records) fallbacks += rec.binding != "torch";
    // Sanity: both computed the same function.
    auto y = ref.outputs.at("logits").to_f64();
    const float* py = ty.data_ptr<float>();
    double num = 0, den = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      num = std::max(num, std::fabs(y[i] - py[i]));
      den = std::max(den, std::fabs(static_cast<double>(py[i])));
    }
    double r = median(t_ref), t = median(t_torch), nb = median(t_nodes);
    fmt::print("{} batch 1, {} thread(s), median of {}:\n", arch, threads, repeat);
    fmt::print("  metaop reference (float64, node by node): {:8.3f} s\n", r);
    fmt::print("  LibTorch float32 (TorchScript)          : {:8.3f} s\n", t);
    fmt::print("  ratio reference / LibTorch              : {:8.2f}x  (goal: within 10x)\n", r / t);
    fmt::print(
        "  metaop --bind torch (ATen, node by node)  : {:8.3f} s  ({} of {} nodes on the "
        "reference)\n",
        nb, fallbacks, nodes.records.size());
    fmt::print("  ratio node-by-node torch / LibTorch     : {:8.2f}x  (goal: under 1.5x)\n",
               nb / t);
    double c = median(t_check);
    fmt::print("  metaop check --bind torch               : {:8.3f} s  ({} defect findings)\n", c,
               defects);
    fmt::print("  ratio check / LibTorch                  : {:8.2f}x  (goal: under 5x)\n", c / t);
    fmt::print("  outputs agree: normwise relative difference {:.2e}\n", num / den);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench: error: {}\n", e.what());
    return 2;
  }
}
