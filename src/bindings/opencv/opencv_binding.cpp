#include "bindings/opencv/opencv_binding.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <list>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/dnn.hpp>
#include <set>
#include <unordered_map>

#include "graph/onnx_io.h"
#include "ops/registry.h"

namespace metaop {

namespace {

// Operators OpenCV 4.6's ONNX importer maps to its own layers (modules/dnn/src/onnx/
// onnx_importer.cpp) and that the binding tests saw it run. Clip, Gather, Mean, Pow, ReduceSum
// and Squeeze have importer entries but OpenCV refused every case tried (opset 13 forms), so
// they are not claimed. A node it refuses anyway is reported as unsupported with its message.
const std::set<std::string>& opencv_ops() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s;
    // Element-wise math, one input.
    s.insert({"Abs", "Cast", "Ceil", "Erf", "Exp", "Floor", "Identity", "Log", "Neg", "Reciprocal",
              "Round", "Sign", "Sqrt"});
    // Trigonometric and hyperbolic.
    s.insert({"Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh",
              "Tan", "Tanh"});
    // Activations.
    s.insert({"Celu", "Dropout", "Elu", "HardSigmoid", "HardSwish", "LeakyRelu", "PRelu", "Relu",
              "Selu", "Sigmoid", "Softplus", "Softsign", "ThresholdedRelu"});
    // Element-wise, two or more inputs.
    s.insert({"Add", "Div", "Equal", "Greater", "Less", "Max", "Min", "Mul", "Sub", "Sum"});
    // Layers: convolution, pooling, normalization, products, softmax.
    s.insert({"AveragePool", "BatchNormalization", "Conv", "ConvTranspose", "Gemm",
              "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization", "LRN", "LogSoftmax",
              "MatMul", "MaxPool", "Softmax"});
    // Reductions and scans.
    s.insert({"ArgMax", "ArgMin", "CumSum", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
              "ReduceSumSquare"});
    // Shape and data movement.
    s.insert({"Concat", "DepthToSpace", "Expand", "Flatten", "Pad", "Reshape", "Resize", "Slice",
              "SpaceToDepth", "Split", "Transpose", "Unsqueeze", "Upsample"});
    return s;
  }();
  static const bool checked = [] {
    for (const auto& op : ops) require_registered(op, "the OpenCV op list");
    return true;
  }();
  (void)checked;
  return ops;
}

cv::Mat to_mat(const Tensor& t) {
  std::vector<int> dims;
  dims.reserve(t.shape().size() + 1);
  for (auto d : t.shape()) dims.push_back(static_cast<int>(d));
  if (dims.empty()) dims.push_back(1);
  cv::Mat m(static_cast<int>(dims.size()), dims.data(), CV_32F);
  Tensor f = t.to(DType::Float32);
  std::memcpy(m.data, f.raw(), f.nbytes());
  return m;
}

}  // namespace

// Every op runs the same way (run_opencv below): the location of the claim and of the runner.
const std::source_location kOpenCVClaims = std::source_location::current();

Support OpenCVBinding::supports(const std::string& op_type) const {
  Support s;
  if (opencv_ops().count(op_type)) {
    s.forward = true;
    s.dtypes = {DType::Float32};
  } else {
    s.reason = "OpenCV 4.6's ONNX importer has no layer for " + op_type;
  }
  return s;
}

namespace {

const std::source_location kOpenCVRunner = std::source_location::current();

// Imported nets by node signature: the exported one-node model holds the node, its attributes,
// the inputs' types and shapes and the constant inputs' values, so equal bytes are the same
// net. A persistent worker (isolate.h) keeps them across nodes and samples; the export and
// OpenCV's import are most of the per-node cost.
struct CachedNet {
  cv::dnn::Net net;
  Graph exported;  // for the outputs' types and shapes
  std::list<std::string>::iterator lru;
};

std::size_t cache_capacity = 256;
std::unordered_map<std::string, CachedNet> net_cache;  // by 128-bit hash of the model bytes
std::list<std::string> net_lru;                        // most recent first

std::string signature(const std::string& bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return std::string(reinterpret_cast<const char*>(&h), sizeof h);
}

void forget(const std::string& key) {
  auto it = net_cache.find(key);
  if (it == net_cache.end()) return;
  net_lru.erase(it->second.lru);
  net_cache.erase(it);
}

CachedNet& net_for(const std::string& key, const std::string& bytes, const Node& node) {
  if (auto it = net_cache.find(key); it != net_cache.end() && cache_capacity > 0) {
    net_lru.splice(net_lru.begin(), net_lru, it->second.lru);
    return it->second;
  }
  forget(key);
  while (!net_lru.empty() && net_cache.size() >= std::max<std::size_t>(cache_capacity, 1))
    forget(net_lru.back());
  CachedNet c;
  // The exported outputs carry their types and shapes already: no checker or inference again.
  c.exported = load_onnx_from_bytes(bytes, node.label(), ".", {false, false, ""});
  c.net = cv::dnn::readNetFromONNX(bytes.data(), bytes.size());
  c.net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
  c.net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
  net_lru.push_front(key);
  c.lru = net_lru.begin();
  return net_cache[key] = std::move(c);
}

// Refuses what OpenCV 4.6 cannot run faithfully before the node is exported.
void check_opencv_inputs(const Node& node, const Tensors& inputs) {
  if (inputs.empty() || !inputs[0].defined() || inputs[0].dtype() != DType::Float32)
    throw Unsupported(node.label() + ": the OpenCV binding runs float32 data inputs only");
  // cv::Mat has at least 2 dims: a 1-D or scalar blob cannot be told apart from [n, 1].
  if (inputs[0].rank() < 2)
    throw Unsupported(node.label() + ": OpenCV 4.6 blobs have at least 2 dims (input is " +
                      shape_str(inputs[0].shape()) + ")");
  // OpenCV 4.6 never writes Dropout's optional mask: it crashes in cv::Mat::copyTo or returns
  // whatever was in memory (docs/findings.md). Run Dropout without it only.
  if (node.op_type == "Dropout" && node.outputs.size() > 1 && !node.outputs[1].empty())
    throw Unsupported(node.label() +
                      ": OpenCV 4.6 leaves Dropout's mask output unwritten (docs/findings.md)");
}

// Data inputs (as the op declares them, ops/manifest.h) are network inputs; the others become
// initializers (weights, shapes, axes...), which is how OpenCV's importer expects them.
SubgraphSpec opencv_spec(const Node& node, const Tensors& inputs) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  SubgraphSpec spec;
  spec.nodes = {0};
  for (std::size_t i = 0; i < inputs.size() && i < node.inputs.size(); ++i) {
    if (node.inputs[i].empty()) continue;
    spec.values[node.inputs[i]] = inputs[i];
    bool data = op ? op->inputs.is_data(i, inputs[i].dtype()) : i == 0;
    if (!data) spec.constants.insert(node.inputs[i]);
  }
  return spec;
}

// One output blob as a tensor of the node's output `o`.
Tensor from_opencv_output(const Node& node, const std::string& o, const cv::Mat& m,
                          const Graph& exported) {
  if (m.depth() != CV_32F)
    throw Unsupported(
        fmt::format("{}: OpenCV returned a non-float32 output '{}'", node.label(), o));
  Shape s;
  s.reserve(static_cast<std::size_t>(m.dims));
  for (int d = 0; d < m.dims; ++d) s.push_back(m.size[d]);
  // OpenCV keeps at least 2 dims (and may drop or add unit dims); where ONNX shape
  // inference knows the shape and the element count agrees, report that shape.
  const ValueInfo* vi = exported.find_value_info(o);
  if (vi && vi->dims) {
    const Shape& want = *vi->dims;
    bool known = std::all_of(want.begin(), want.end(), [](auto d) { return d >= 0; });
    if (known && shape_numel(want) == static_cast<std::int64_t>(m.total())) s = want;
  }
  Tensor t(DType::Float32, s);
  if (static_cast<std::int64_t>(m.total()) != t.numel())
    fail("{}: OpenCV output '{}' has {} elements for shape {}", node.label(), o, m.total(),
         shape_str(s));
  cv::Mat c = m.isContinuous() ? m : m.clone();
  std::memcpy(t.raw(), c.data, t.nbytes());
  // OpenCV keeps every blob in float32 (ArgMax indices too); the ONNX output type is the
  // model's, so integral results are converted to it.
  if (vi && vi->dtype && *vi->dtype != DType::Float32) t = t.to(*vi->dtype);
  return t;
}

// Feeds the data inputs, runs the net and reads back every named output.
Tensors forward_net(CachedNet& cached, const Node& node, const Tensors& inputs,
                    const SubgraphSpec& spec) {
  cv::dnn::Net& net = cached.net;
  std::set<std::string> fed;
  for (std::size_t i = 0; i < inputs.size() && i < node.inputs.size(); ++i) {
    const std::string& n = node.inputs[i];
    if (n.empty() || spec.constants.count(n) || !fed.insert(n).second) continue;
    net.setInput(to_mat(inputs[i]), n);
  }
  std::vector<std::string> names;
  for (const auto& o : node.outputs)
    if (!o.empty()) names.push_back(o);
  std::vector<cv::Mat> outs;
  net.forward(outs, names);
  Tensors result;
  result.reserve(node.outputs.size());
  std::size_t k = 0;
  for (const auto& o : node.outputs) {
    if (o.empty()) {
      result.emplace_back();
      continue;
    }
    result.push_back(from_opencv_output(node, o, outs.at(k++), cached.exported));
  }
  return result;
}

Tensors run_opencv(const Node& node, std::int64_t opset, const Tensors& inputs) {
  static const bool quiet = [] {
    cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
    return true;
  }();
  (void)quiet;
  check_opencv_inputs(node, inputs);
  SubgraphSpec spec = opencv_spec(node, inputs);
  std::string bytes = export_node(node, opset, spec, "metaop_opencv");
  std::string key = signature(bytes);
  try {
    return forward_net(net_for(key, bytes, node), node, inputs, spec);
  } catch (const cv::Exception& e) {
    forget(key);
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    throw Unsupported(fmt::format("{}: OpenCV refuses it: {}", node.label(), msg));
  }
}

}  // namespace

Tensors OpenCVBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  // OpenCV's importer and layers can crash on inputs they do not expect: make_binding runs this
  // binding in a worker process (isolate.h), so that a crash is reported for that node.
  return run_opencv(node, opset, inputs);
}

void OpenCVBinding::set_cache_capacity(std::size_t nets) {
  cache_capacity = nets;
  net_cache.clear();
  net_lru.clear();
}

std::vector<std::string> OpenCVBinding::where(const std::string& op_type) const {
  if (!opencv_ops().count(op_type)) return {};
  return {
      fmt::format("forward: {} (the node as a one-node model, imported by OpenCV's "
                  "readNetFromONNX; claimed at {})",
                  location(kOpenCVRunner), location(kOpenCVClaims))};
}

}  // namespace metaop
