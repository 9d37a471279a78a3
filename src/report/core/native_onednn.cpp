#include "report/core/native_onednn.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "graph/graph.h"
#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/window.h"

namespace metaop {

extern const char* const kReproduceOnednnCpp;  // native/reproduce_onednn.cpp.in (CMakeLists.txt)

namespace {

// `s` as a C++ string literal: printable ASCII as is, the rest as octal escapes.
std::string cpp_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\')
      out += fmt::format("\\{}", static_cast<char>(ch));
    else if (ch >= 0x20 && ch < 0x7f)
      out += static_cast<char>(ch);
    else
      out += fmt::format("\\{:03o}", ch);
  }
  return out + "\"";
}

// A float32 argument as C++ source: the value rounded to float32 and printed so that it reads
// back to the same float.
std::string f32(double v) {
  auto f = static_cast<float>(v);
  if (std::isinf(f)) return f > 0 ? "INFINITY" : "-INFINITY";
  if (std::isnan(f)) return "NAN";
  std::string s = fmt::format("{:.9g}", f);
  if (s.find_first_of(".e") == std::string::npos) s += ".";
  return s + "f";
}

std::string dims_of(const Shape& s) {
  return fmt::format("{{{}}}", fmt::join(s.empty() ? Shape{1} : s, ", "));
}

// What one op's program body needs: the node, its inputs and files; the body writes C++ lines.
struct Gen {
  const KernelContext& k;
  const Tensors& in;
  const std::vector<std::string>& files;
  std::string body;
  const Shape& shape(std::size_t i) const { return in.at(i).shape(); }
  bool has(std::size_t i) const { return i < in.size() && in[i].defined() && !files[i].empty(); }
  void line(const std::string& s) { body += "  " + s + "\n"; }
  // `Array NAME = load("FILE");` for input i.
  void load(std::size_t i, const std::string& name) {
    if (!has(i) || in[i].dtype() != DType::Float32)
      throw std::invalid_argument("the program reads float32 .npy inputs only");
    line(fmt::format("Array {} = load({});", name, cpp_string(files.at(i))));
  }
};

// The oneDNN names of the binding's tables (src/bindings/onednn/onednn_forward.cpp).
struct EltwiseName {
  const char* alg;
  std::function<std::pair<double, double>(const Gen&)> alpha_beta;
};

std::pair<double, double> fixed(double a, double b) {
  return {a, b};
}

const std::map<std::string, EltwiseName>& eltwise_names() {
  static const std::map<std::string, EltwiseName> m = {
      {"Relu", {"eltwise_relu", [](const Gen&) { return fixed(0, 0); }}},
      {"Tanh", {"eltwise_tanh", [](const Gen&) { return fixed(0, 0); }}},
      {"Sigmoid", {"eltwise_logistic", [](const Gen&) { return fixed(0, 0); }}},
      {"Exp", {"eltwise_exp", [](const Gen&) { return fixed(0, 0); }}},
      {"Log", {"eltwise_log", [](const Gen&) { return fixed(0, 0); }}},
      {"Sqrt", {"eltwise_sqrt", [](const Gen&) { return fixed(0, 0); }}},
      {"Abs", {"eltwise_abs", [](const Gen&) { return fixed(0, 0); }}},
      {"HardSwish", {"eltwise_hardswish", [](const Gen&) { return fixed(1.0 / 6, 0.5); }}},
      {"Softplus", {"eltwise_soft_relu", [](const Gen&) { return fixed(1, 0); }}},
      {"Round", {"eltwise_round", [](const Gen&) { return fixed(0, 0); }}},
      {"Neg", {"eltwise_linear", [](const Gen&) { return fixed(-1, 0); }}},
      {"Reciprocal", {"eltwise_pow", [](const Gen&) { return fixed(1, -1); }}},
      {"LeakyRelu", {"eltwise_relu", [](const Gen& g) { return fixed(attr_f(g.k, "alpha"), 0); }}},
      {"Elu", {"eltwise_elu", [](const Gen& g) { return fixed(attr_f(g.k, "alpha"), 0); }}},
      {"Clip", {"eltwise_clip_v2", [](const Gen& g) {
                  auto [lo, hi] = clip_bounds(g.k, g.in);
                  return fixed(lo, hi);
                }}}};
  return m;
}

const std::map<std::string, const char*>& binary_names() {
  static const std::map<std::string, const char*> m = {
      {"Add", "binary_add"},  {"Sub", "binary_sub"},       {"Mul", "binary_mul"},
      {"Div", "binary_div"},  {"Max", "binary_max"},       {"Min", "binary_min"},
      {"Equal", "binary_eq"}, {"Greater", "binary_gt"},    {"GreaterOrEqual", "binary_ge"},
      {"Less", "binary_lt"},  {"LessOrEqual", "binary_le"}};
  return m;
}

const std::map<std::string, std::pair<const char*, float>>& reduction_names() {
  static const std::map<std::string, std::pair<const char*, float>> m = {
      {"ReduceSum", {"reduction_sum", 0.f}},
      {"ReduceMean", {"reduction_mean", 0.f}},
      {"ReduceMax", {"reduction_max", 0.f}},
      {"ReduceMin", {"reduction_min", 0.f}},
      {"ReduceProd", {"reduction_mul", 0.f}},
      {"ReduceL1", {"reduction_norm_lp_sum", 1.f}},
      {"ReduceL2", {"reduction_norm_lp_sum", 2.f}},
      {"ReduceSumSquare", {"reduction_norm_lp_power_p_sum", 2.f}},
      {"GlobalAveragePool", {"reduction_mean", 0.f}},
      {"GlobalMaxPool", {"reduction_max", 0.f}}};
  return m;
}

bool eltwise(Gen& g) {
  auto it = eltwise_names().find(g.k.node.op_type);
  if (it == eltwise_names().end()) return false;
  auto [alpha, beta] = it->second.alpha_beta(g);
  g.load(0, "x");
  g.line(fmt::format("Array y = make({});", dims_of(g.shape(0))));
  g.line(fmt::format("auto d = plain({});", dims_of(g.shape(0))));
  g.line(fmt::format("auto pd = eltwise_pd(algo::{}, d, {}, {});", it->second.alg, f32(alpha),
                     f32(beta)));
  g.line("run(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, mem(d, x)}, {DNNL_ARG_DST, mem(d, y)}});");
  g.line("return {y};");
  return true;
}

bool binary(Gen& g) {
  const std::string& op = g.k.node.op_type;
  auto it = binary_names().find(op);
  if (it == binary_names().end() || g.k.opset < 7 || g.in.size() != 2) return false;
  Shape out = broadcast_shapes(g.k, {g.shape(0), g.shape(1)});
  std::size_t first = 0;
  if (g.shape(0) != out) first = 1;  // a commutative op: oneDNN broadcasts only its second input
  std::size_t second = 1 - first;
  bool compare = op == "Equal" || op == "Greater" || op == "GreaterOrEqual" || op == "Less" ||
                 op == "LessOrEqual";
  g.load(first, "a");
  g.load(second, "b");
  g.line(fmt::format("Array y = make({}{});", dims_of(out), compare ? ", true" : ""));
  g.line(fmt::format("auto d0 = plain({}), d1 = plain({}), dd = plain({}, dt::{});", dims_of(out),
                     dims_of(with_rank(g.shape(second), out.size())), dims_of(out),
                     compare ? "u8" : "f32"));
  g.line(fmt::format("auto pd = make_pd<dnnl::binary>(algo::{}, d0, d1, dd);", it->second));
  g.line(
      "run(dnnl::binary(pd), {{DNNL_ARG_SRC_0, mem(d0, a)}, {DNNL_ARG_SRC_1, mem(d1, b)}, "
      "{DNNL_ARG_DST, mem(dd, y)}});");
  g.line("return {y};");
  return true;
}

bool softmax(Gen& g) {
  const std::string& op = g.k.node.op_type;
  if (op != "Softmax" && op != "LogSoftmax") return false;
  AxisSplit v = softmax_split(g.k, g.shape(0));
  g.load(0, "x");
  g.line(fmt::format("Array y = make({});", dims_of(g.shape(0))));
  g.line(fmt::format("// the input as [outer, n, inner], {} over n", op));
  g.line(fmt::format("auto d = plain({});", dims_of({v.outer, v.n, v.inner})));
  g.line(
      fmt::format("auto pd = make_pd<softmax_forward>(prop::forward_inference, algo::{}, d, d, 1);",
                  op == "LogSoftmax" ? "softmax_log" : "softmax_accurate"));
  g.line("run(softmax_forward(pd), {{DNNL_ARG_SRC, mem(d, x)}, {DNNL_ARG_DST, mem(d, y)}});");
  g.line("return {y};");
  return true;
}

bool pooling(Gen& g) {
  const std::string& op = g.k.node.op_type;
  if (op != "MaxPool" && op != "AveragePool") return false;
  bool is_max = op == "MaxPool", ceil_mode = attr_i_or(g.k, "ceil_mode", 0) != 0;
  Window w = window_geometry(g.k, g.shape(0), g.k.node.attr_ints("kernel_shape"), ceil_mode);
  bool include = attr_i_or(g.k, "count_include_pad", 0) != 0;
  Shape pr;  // oneDNN's end pads: what the output size needs
  for (int i = 3 - w.nsp; i < 3; ++i)
    pr.push_back((w.out[i] - 1) * w.s[i] + (w.k[i] - 1) * w.d[i] + 1 - w.in[i] - w.pb[i]);
  Shape ys = w.out_shape(g.shape(0)[0], g.shape(0)[1]);
  g.load(0, "x");
  g.line(fmt::format("Array y = make({});", dims_of(ys)));
  g.line(fmt::format("auto xd = plain({}), yd = plain({});", dims_of(g.shape(0)), dims_of(ys)));
  g.line("// strides, kernel, dilation (counted from 0), begin and end pads");
  g.line(fmt::format(
      "auto pd = make_pd<pooling_forward>(prop::forward_inference, algo::{}, xd, yd, dims{}, "
      "dims{}, dims{}, dims{}, dims{});",
      is_max    ? "pooling_max"
      : include ? "pooling_avg_include_padding"
                : "pooling_avg_exclude_padding",
      dims_of(spatial_tail(w.s, w.nsp)), dims_of(spatial_tail(w.k, w.nsp)),
      dims_of(spatial_tail(w.d, w.nsp, 1)), dims_of(spatial_tail(w.pb, w.nsp)), dims_of(pr)));
  g.line("run(pooling_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)}, {DNNL_ARG_DST, mem(yd, y)}});");
  g.line("return {y};");
  return true;
}

bool reduction(Gen& g) {
  const std::string& op = g.k.node.op_type;
  auto it = reduction_names().find(op);
  if (it == reduction_names().end()) return false;
  const Shape& xs = g.shape(0);
  std::vector<std::int64_t> axes;
  bool keepdims = true;
  if (op.starts_with("Global")) {
    axes.resize(xs.size() - 2);
    std::iota(axes.begin(), axes.end(), 2);
  } else {
    ReduceAxes r = reduce_axes(g.k, g.in, static_cast<std::int64_t>(xs.size()));
    if (r.noop) return false;  // the binding returns the input: no primitive runs
    axes = r.axes;
    keepdims = r.keepdims;
  }
  Shape kept = xs;
  for (auto ax : axes) kept[ax] = 1;
  g.load(0, "x");
  g.line(fmt::format("Array y = make({});{}", dims_of(kept),
                     keepdims ? "" : "  // the reduced dims of size 1 kept (ONNX drops them)"));
  g.line(fmt::format("auto xd = plain({}), yd = plain({});", dims_of(xs), dims_of(kept)));
  g.line(fmt::format("auto pd = make_pd<dnnl::reduction>(algo::{}, xd, yd, {}, 0.f);",
                     it->second.first, f32(it->second.second)));
  g.line("run(dnnl::reduction(pd), {{DNNL_ARG_SRC, mem(xd, x)}, {DNNL_ARG_DST, mem(yd, y)}});");
  g.line("return {y};");
  return true;
}

bool matmul(Gen& g) {
  if (g.k.node.op_type != "MatMul") return false;
  Shape sa = g.shape(0), sb = g.shape(1);
  if (sa.empty() || sb.empty()) return false;
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  std::size_t r = std::max(sa.size(), sb.size());
  sa = with_rank(sa, r);
  sb = with_rank(sb, r);
  Shape ys =
      broadcast_shapes(g.k, {Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2)});
  ys.push_back(sa[r - 2]);
  ys.push_back(sb[r - 1]);
  g.load(0, "a");
  g.load(1, "b");
  g.line(fmt::format("Array y = make({});", dims_of(ys)));
  g.line(fmt::format("auto ad = plain({}), bd = plain({}), yd = plain({});", dims_of(sa),
                     dims_of(sb), dims_of(ys)));
  g.line("auto pd = make_pd<dnnl::matmul>(ad, bd, yd);");
  g.line(
      "run(dnnl::matmul(pd), {{DNNL_ARG_SRC, mem(ad, a)}, {DNNL_ARG_WEIGHTS, mem(bd, b)}, "
      "{DNNL_ARG_DST, mem(yd, y)}});");
  g.line("return {y};");
  return true;
}

bool gemm(Gen& g) {
  if (g.k.node.op_type != "Gemm" || g.shape(0).size() != 2 || g.shape(1).size() != 2) return false;
  bool ta = attr_i(g.k, "transA"), tb = attr_i(g.k, "transB");
  double alpha = attr_f(g.k, "alpha");
  std::int64_t M = g.shape(0)[ta ? 1 : 0], K = g.shape(0)[ta ? 0 : 1], N = g.shape(1)[tb ? 0 : 1];
  g.load(0, "a");
  g.load(1, "b");
  g.line(fmt::format("Array y = make({{{}, {}}});", M, N));
  g.line(fmt::format("// A {}, B {}: transposes as strides of the same buffers",
                     ta ? "transposed" : "as is", tb ? "transposed" : "as is"));
  g.line(fmt::format("dnnl::memory::desc ad({{{}, {}}}, dt::f32, dims{{{}}});", M, K,
                     ta ? fmt::format("1, {}", M) : fmt::format("{}, 1", K)));
  g.line(fmt::format("dnnl::memory::desc bd({{{}, {}}}, dt::f32, dims{{{}}});", K, N,
                     tb ? fmt::format("1, {}", K) : fmt::format("{}, 1", N)));
  g.line(fmt::format("auto yd = plain({{{}, {}}});", M, N));
  g.line(
      "std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(ad, a)}, "
      "{DNNL_ARG_WEIGHTS, mem(bd, b)}, {DNNL_ARG_DST, mem(yd, y)}};");
  g.line("dnnl::memory::desc cd;");
  bool has_c = g.has(2);
  if (has_c) {
    g.load(2, "c");
    g.line(fmt::format("cd = plain({});  // C as oneDNN's bias (beta is 1)",
                       dims_of(with_rank(g.shape(2), 2))));
    g.line("args[DNNL_ARG_BIAS] = mem(cd, c);");
  }
  g.line("dnnl::primitive_attr attr;");
  if (alpha != 1.0) {
    g.line(fmt::format("float alpha = {};", f32(alpha)));
    g.body += "#if DNNL_VERSION_MAJOR >= 3\n";
    g.line("attr.set_scales_mask(DNNL_ARG_SRC, 0);  // alpha as A's scale, given at execution");
    g.line(
        "args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC] = "
        "dnnl::memory(dnnl::memory::desc({1}, dt::f32, dims{1}), eng(), &alpha);");
    g.body += "#else\n";
    g.line("attr.set_output_scales(0, {alpha});");
    g.body += "#endif\n";
  }
  g.body += "#if DNNL_VERSION_MAJOR >= 3\n";
  g.line("dnnl::matmul::primitive_desc pd(eng(), ad, bd, cd, yd, attr);");
  g.body += "#else\n";
  g.line("dnnl::matmul::primitive_desc pd({ad, bd, cd, yd}, attr, eng());");
  g.body += "#endif\n";
  g.line("run(dnnl::matmul(pd), args);");
  g.line("return {y};");
  return true;
}

bool conv(Gen& g) {
  if (g.k.node.op_type != "Conv") return false;
  const Shape& xs = g.shape(0);
  const Shape& w0 = g.shape(1);
  Shape ks(w0.begin() + 2, w0.end());
  Window w = window_geometry(g.k, xs, attr_ints_or(g.k, "kernel_shape", ks), false);
  std::int64_t G = attr_i(g.k, "group"), M = w0[0];
  Shape ws = w0;
  if (G > 1) {
    ws[0] = M / G;
    ws.insert(ws.begin(), G);
  }
  Shape ys = w.out_shape(xs[0], M);
  g.load(0, "x");
  g.load(1, "w");
  g.line(fmt::format("Array y = make({});", dims_of(ys)));
  g.line(fmt::format("auto xd = plain({}), wd = plain({}), yd = plain({});", dims_of(xs),
                     dims_of(ws), dims_of(ys)));
  g.line(
      "std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(xd, x)}, "
      "{DNNL_ARG_DST, mem(yd, y)}};");
  g.line("dnnl::memory::desc bd;");
  if (g.has(2)) {
    g.load(2, "bias");
    g.line(fmt::format("bd = plain({{{}}});", M));
    g.line("args[DNNL_ARG_BIAS] = mem(bd, bias);");
  }
  g.line(
      "// the weights in the layout the primitive prefers (format_tag::any), as oneDNN's users "
      "give them");
  g.line(fmt::format("dnnl::memory::desc any_w(dims{}, dt::f32, dnnl::memory::format_tag::any);",
                     dims_of(ws)));
  g.line("// strides, dilation (counted from 0), begin and end pads");
  g.line(
      fmt::format("auto pd = make_pd<dnnl::convolution_forward>(prop::forward_inference, "
                  "algo::convolution_direct, xd, any_w, bd, yd, dims{}, dims{}, dims{}, dims{});",
                  dims_of(spatial_tail(w.s, w.nsp)), dims_of(spatial_tail(w.d, w.nsp, 1)),
                  dims_of(spatial_tail(w.pb, w.nsp)), dims_of(spatial_tail(w.pe, w.nsp))));
  g.line("args[DNNL_ARG_WEIGHTS] = reordered(pd.weights_desc(), mem(wd, w));");
  g.line("run(dnnl::convolution_forward(pd), args);");
  g.line("return {y};");
  return true;
}

using WriteBody = bool (*)(Gen&);
constexpr WriteBody kFamilies[] = {eltwise,   binary, softmax, pooling,
                                   reduction, matmul, gemm,    conv};

}  // namespace

std::string onednn_program(const Node& node, std::int64_t opset, const std::vector<Tensor>& in,
                           const std::vector<std::string>& input_files,
                           const std::vector<NativeOutput>& outputs,
                           const std::map<std::string, std::string>& environment) {
  KernelContext k{node, opset};
  std::vector<std::string> files = input_files;
  files.resize(in.size());
  Gen g{k, in, files, ""};
  bool written = false;
  try {
    for (WriteBody f : kFamilies) {
      written = f(g);
      if (written) break;
    }
  } catch (const std::exception&) {
    return "";  // an input it needs is missing or not float32: no program
  }
  if (!written) return "";
  std::vector<std::string> inputs;
  for (const auto& f : files)
    if (!f.empty()) inputs.push_back(f);
  std::vector<std::string> env, outs;
  for (const auto& [name, value] : environment)
    env.push_back(fmt::format("{{{}, {}}}", cpp_string(name), cpp_string(value)));
  for (const auto& o : outputs)
    outs.push_back(fmt::format("{{{}, {}, {}}}", cpp_string(o.name), cpp_string(o.exact),
                               cpp_string(o.recorded)));
  std::string part = fmt::format(
      "const char* const kWhat = {};\n"
      "// The variables that chose oneDNN's CPU kernels when the finding was made, set before "
      "oneDNN starts.\n"
      "const std::vector<std::pair<const char*, const char*>> kEnvironment = {{{}}};\n"
      "const std::vector<Output> kOutputs = {{{}}};\n",
      cpp_string(fmt::format("{} node '{}' of model.onnx on {}", node.op_type, node.name,
                             fmt::join(inputs, ", "))),
      fmt::join(env, ", "), fmt::join(outs, ", "));
  part += fmt::format(
      "\n// {} as MetaOp's oneDNN binding runs it: one primitive, plain "
      "row-major float32 memory.\nstd::vector<Array> run_node() {{\n{}}}",
      node.op_type, g.body);
  std::string program = kReproduceOnednnCpp;
  program.replace(program.find("%NODE%"), 6, part);
  return program;
}

}  // namespace metaop
