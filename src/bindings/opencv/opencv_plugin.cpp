// The opencv plugin: OpenCV DNN's importer and layers, node by node and whole models.
#include <opencv2/core/version.hpp>

#include "bindings/opencv/opencv_binding.h"
#include "bindings/plugin.h"

void metaop_plugin_register(metaop::PluginRegistrar& r) {
  r.add({.name = "opencv",
         .framework = "OpenCV",
         .version = CV_VERSION,
         .isolate = true,
         .make = [] { return std::make_unique<metaop::OpenCVBinding>(); },
         .update = {},
         .whole_model = [] { return metaop::make_opencv_model_runner(); },
         .set_threads = {}});
}
