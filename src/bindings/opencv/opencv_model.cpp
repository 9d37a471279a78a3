// OpenCV 4.6 running a whole model through its own ONNX importer (whole-graph mode), in a child
// process so that a crash of it is reported, not fatal.
#include <fmt/format.h>

#include <opencv2/core/utils/logger.hpp>
#include <opencv2/dnn.hpp>

#include "bindings/isolate.h"
#include "bindings/opencv/opencv_binding.h"
#include "bindings/whole_model.h"
#include "graph/onnx_io.h"

namespace metaop {

namespace {

cv::Mat as_mat(const Tensor& t) {
  std::vector<int> dims;
  dims.reserve(t.shape().size() + 1);
  for (auto d : t.shape()) dims.push_back(static_cast<int>(d));
  if (dims.empty()) dims.push_back(1);
  cv::Mat m(static_cast<int>(dims.size()), dims.data(), CV_32F);
  Tensor f = t.to(DType::Float32);
  std::memcpy(m.data, f.raw(), f.nbytes());
  return m;
}

// OpenCV's importer reads Identity nodes as layers and fails when their input is an
// initializer (a pattern exporters write for shared weights): such nodes become initializers
// under their output's name. Returns whether anything changed.
bool fold_identity_of_initializers(Graph& g) {
  bool changed = false;
  for (std::size_t i = 0; i < g.nodes.size();) {
    const Node& n = g.nodes[i];
    auto it = n.inputs.empty() ? g.initializers.end() : g.initializers.find(n.inputs[0]);
    if (n.op_type == "Identity" && it != g.initializers.end() && n.outputs.size() == 1) {
      bool graph_output = false;
      for (const auto& o : g.outputs) graph_output |= o.name == n.outputs[0];
      if (!graph_output) {
        g.initializers[n.outputs[0]] = it->second;
        g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
        continue;
      }
    }
    ++i;
  }
  return changed;
}

class OpenCVModelRunner final : public WholeModelRunner {
 public:
  std::string name() const override { return "opencv-4.6"; }
  std::vector<std::string> levels() const override { return {"nofusion", "fusion"}; }
  std::size_t first_fusing_level() const override { return 1; }
  std::map<std::string, Tensor> run(const WholeModel& m,
                                    const std::map<std::string, Tensor>& inputs,
                                    const std::vector<std::string>& outputs,
                                    const std::string& level) override {
    WholeModel prepared = m;
    if (fold_identity_of_initializers(prepared.graph)) prepared.original_bytes.clear();
    std::string bytes = serialize_model(prepared);
    bool fusion = level != "nofusion";
    std::string what = fmt::format("{}: OpenCV whole model", m.graph.path);
    Tensors outs = run_isolated(what, [&] {
      cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
      try {
        cv::dnn::Net net = cv::dnn::readNetFromONNX(bytes.data(), bytes.size());
        net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
        net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
        net.enableFusion(fusion);
        for (const auto& [name, t] : inputs) net.setInput(as_mat(t), name);
        std::vector<cv::Mat> mats;
        std::vector<cv::String> names(outputs.begin(), outputs.end());
        net.forward(mats, names);
        Tensors result;
        for (const auto& mat : mats) {
          if (mat.depth() != CV_32F)
            throw Unsupported(what + ": OpenCV returned a non-float32 output");
          Shape s;
          s.reserve(static_cast<std::size_t>(mat.dims));
          for (int d = 0; d < mat.dims; ++d) s.push_back(mat.size[d]);
          Tensor t(DType::Float32, s);
          cv::Mat c = mat.isContinuous() ? mat : mat.clone();
          std::memcpy(t.raw(), c.data, t.nbytes());
          result.push_back(t);
        }
        return result;
      } catch (const cv::Exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        throw Unsupported(fmt::format("{}: OpenCV refuses it: {}", what, msg));
      }
    });
    std::map<std::string, Tensor> out;
    for (std::size_t i = 0; i < outputs.size() && i < outs.size(); ++i) out[outputs[i]] = outs[i];
    return out;
  }
};

}  // namespace

std::unique_ptr<WholeModelRunner> make_opencv_model_runner() {
  return std::make_unique<OpenCVModelRunner>();
}

}  // namespace metaop
