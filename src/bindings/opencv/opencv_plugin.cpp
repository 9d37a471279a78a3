// The opencv-4.6 plugin: Debian's OpenCV 4.6 DNN importer and layers, node by node and whole
// models (the `opencv` binding is OpenCV 5, src/bindings/opencv5).
#include <opencv2/core/version.hpp>

#include "bindings/opencv/opencv_binding.h"
#include "bindings/plugin.h"

void metaop_plugin_register(metaop::PluginRegistrar& r) {
  r.add({.name = "opencv-4.6",
         .framework = "OpenCV",
         .version = CV_VERSION,
         .isolate = true,
         .make = [] { return std::make_unique<metaop::OpenCVBinding>(); },
         .update = {},
         .whole_model = [] { return metaop::make_opencv_model_runner(); },
         .set_threads = {}});
}
