// The torch plugin: LibTorch's ATen kernels for nodes, torch::optim for train's updates.
#include <torch/version.h>

#include "bindings/plugin.h"
#include "bindings/torch/torch_binding.h"
#include "bindings/torch/torch_optimizer.h"

void metaop_plugin_register(metaop::PluginRegistrar& r) {
  r.add({.name = metaop::torch_binding_name(),
         .framework = "LibTorch",
         .version = TORCH_VERSION,
         .isolate = true,
         .make = [] { return std::make_unique<metaop::TorchBinding>(); },
         .update = [](const metaop::OptimizerConfig& c) -> std::unique_ptr<metaop::UpdateKernel> {
           return std::make_unique<metaop::TorchUpdate>(c);
         },
         .whole_model = {},
         .set_threads = [](int n) { metaop::TorchBinding::set_threads(n); }});
}
