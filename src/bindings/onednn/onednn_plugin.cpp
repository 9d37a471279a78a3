// The onednn and onednn-2.6 plugins: oneDNN's primitives, forward and backward.
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl_version.h>

#include "bindings/onednn/onednn_binding.h"
#include "bindings/plugin.h"

void metaop_plugin_register(metaop::PluginRegistrar& r) {
  r.add({.name = metaop::onednn_binding_name(),
         .framework = "oneDNN",
         .version =
             fmt::format("{}.{}.{}", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH),
         .isolate = true,
         .make = [] { return std::make_unique<metaop::OneDNNBinding>(); },
         .update = {},
         .whole_model = {},
         .set_threads = {}});
}
