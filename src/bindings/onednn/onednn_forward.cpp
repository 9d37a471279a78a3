#include "bindings/onednn/onednn_forward.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <source_location>

#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/window.h"

namespace metaop::onednn {

namespace {

dnnl::stream& strm() {
  static dnnl::stream s(eng());
  return s;
}

dims to_dims(const Shape& s) {
  return dims(s.begin(), s.end());
}

// oneDNN built for SYCL (the onednn wheel's) runs its CPU primitives on SYCL's CPU device, which
// is Intel's OpenCL CPU runtime: unless the user chose OpenCL drivers, the OpenCL loader gets the
// one installed beside libdnnl (the wheel's dependencies put it there), which no system folder
// of OpenCL drivers lists.
void find_opencl_cpu_runtime() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
  if (std::getenv("OCL_ICD_FILENAMES")) return;
  Dl_info lib{};
  if (::dladdr(reinterpret_cast<void*>(&dnnl_engine_create), &lib) == 0 || !lib.dli_fname) return;
  auto runtime = std::filesystem::path(lib.dli_fname).parent_path() / "libintelocl.so";
  if (std::filesystem::exists(runtime)) ::setenv("OCL_ICD_FILENAMES", runtime.c_str(), 0);
#endif
}

dnnl::engine make_engine() {
  find_opencl_cpu_runtime();
  try {
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& e) {
    // No engine, no kernel: the binding cannot run here (not an op oneDNN declines, nor a
    // finding about a node).
    throw BindingUnavailable(fmt::format(
        "oneDNN {}.{}: no CPU engine ({}){}", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, e.what(),
        DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
            ? ": this oneDNN runs on SYCL's CPU device, Intel's OpenCL CPU runtime (the "
              "intel-opencl-rt wheel's libintelocl.so beside libdnnl, or OCL_ICD_FILENAMES)"
            : ""));
  }
}

}  // namespace

dnnl::engine& eng() {
  static dnnl::engine e = make_engine();
  return e;
}

// Plain row-major layout for any rank (oneDNN wants at least 1 dim).
dnnl::memory::desc md(const Shape& s, dt t) {
  Shape sh = s.empty() ? Shape{1} : s;
  auto st = strides_of(sh);
  return dnnl::memory::desc(to_dims(sh), t, dims(st.begin(), st.end()));
}

dnnl::memory mem(const dnnl::memory::desc& d, const Tensor& t) {
  return dnnl::memory(d, eng(), const_cast<std::byte*>(t.raw()));
}

void run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  p.execute(strm(), args);
  strm().wait();
}

namespace {

void reorder(dnnl::memory from, dnnl::memory to) {
  dnnl::reorder(from, to).execute(strm(), from, to);
  strm().wait();
}

}  // namespace

dnnl::memory::desc any_layout(const Shape& s) {
  return dnnl::memory::desc(to_dims(s), dt::f32, dnnl::memory::format_tag::any);
}

dnnl::memory in_layout(const dnnl::memory::desc& want, const dnnl::memory::desc& given,
                       const Tensor& t) {
  dnnl::memory user = mem(given, t);
  if (want == given) return user;
  dnnl::memory m(want, eng());
  reorder(user, m);
  return m;
}

OutLayout::OutLayout(const dnnl::memory::desc& want, const dnnl::memory::desc& given, Tensor& t)
    : user(mem(given, t)) {
  out = want == given ? user : dnnl::memory(want, eng());
}

void OutLayout::into() const {
  if (out != user) reorder(out, user);
}

// ---- element-wise (one input)
namespace {

std::map<std::string, EltwiseOp> eltwise_table() {
  std::map<std::string, EltwiseOp> m;
  auto add = [&m](const char* op, std::function<Eltwise(const Ctx&)> f,
                  std::source_location loc = std::source_location::current()) {
    m[op] = {std::move(f), loc};
  };
  auto fixed = [](algo a, float al = 0, float be = 0) {
    return [a, al, be](const Ctx&) { return Eltwise{a, al, be}; };
  };
  add("Relu", fixed(algo::eltwise_relu));
  add("Tanh", fixed(algo::eltwise_tanh));
  add("Sigmoid", fixed(algo::eltwise_logistic));
  add("Exp", fixed(algo::eltwise_exp));
  add("Log", fixed(algo::eltwise_log));
  add("Sqrt", fixed(algo::eltwise_sqrt));
  add("Abs", fixed(algo::eltwise_abs));
  // oneDNN 3 takes hardswish's alpha and beta (x max(0, min(1, alpha x + beta))) and soft_relu's
  // alpha (log(1 + exp(alpha x)) / alpha); oneDNN 2.6 has them fixed at these values and ignores
  // the arguments.
  add("HardSwish", fixed(algo::eltwise_hardswish, 1.f / 6, 0.5f));
  add("Softplus", fixed(algo::eltwise_soft_relu, 1.f));
  add("Round", fixed(algo::eltwise_round));
  add("Neg", fixed(algo::eltwise_linear, -1.f, 0.f));
  add("Reciprocal", fixed(algo::eltwise_pow, 1.f, -1.f));
  add("LeakyRelu", [](const Ctx& c) {
    return Eltwise{algo::eltwise_relu, static_cast<float>(attr_f(c.k, "alpha")), 0.f};
  });
  add("Elu", [](const Ctx& c) {
    return Eltwise{algo::eltwise_elu, static_cast<float>(attr_f(c.k, "alpha")), 0.f};
  });
  add("Clip", [](const Ctx& c) {
    auto [lo, hi] = clip_bounds(c.k, c.in);
    return Eltwise{algo::eltwise_clip_v2, static_cast<float>(lo), static_cast<float>(hi)};
  });
  return m;
}

}  // namespace

const std::map<std::string, EltwiseOp>& eltwise_ops() {
  static const auto t = eltwise_table();
  return t;
}

dnnl::eltwise_forward::primitive_desc eltwise_pd(prop p, const Eltwise& e,
                                                 const dnnl::memory::desc& d) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng(), p, e.a, d, d, e.alpha, e.beta};
#else
  return {{p, e.a, d, e.alpha, e.beta}, eng()};
#endif
}

Tensors eltwise_fwd(const Ctx& c) {
  const Tensor& x = c.x(0);
  Eltwise e = eltwise_ops().at(c.node().op_type).params(c);
  auto d = md(x.shape());
  auto pd = eltwise_pd(prop::forward_inference, e, d);
  Tensor y(DType::Float32, x.shape());
  run(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, mem(d, x)}, {DNNL_ARG_DST, mem(d, y)}});
  return {y};
}

// ---- binary: numpy broadcasting where src1 broadcasts to src0's shape.
const std::map<std::string, algo>& binary_ops() {
  static const std::map<std::string, algo> m = {
      {"Add", algo::binary_add},           {"Sub", algo::binary_sub},
      {"Mul", algo::binary_mul},           {"Div", algo::binary_div},
      {"Max", algo::binary_max},           {"Min", algo::binary_min},
      {"Equal", algo::binary_eq},          {"Greater", algo::binary_gt},
      {"GreaterOrEqual", algo::binary_ge}, {"Less", algo::binary_lt},
      {"LessOrEqual", algo::binary_le}};
  return m;
}

Tensors binary_fwd(const Ctx& c) {
  const std::string& op = c.node().op_type;
  if (c.k.opset < 7) c.unsupported("legacy broadcast semantics (opset < 7)");
  if (c.in.size() != 2) c.unsupported("variadic form with other than two inputs");
  const Tensor* a = &c.x(0);
  const Tensor* b = &c.x(1);
  Shape out = broadcast_shapes(c.k, {a->shape(), b->shape()});
  bool commutative = op == "Add" || op == "Mul" || op == "Max" || op == "Min" || op == "Equal";
  if (a->shape() != out) {
    if (!commutative || b->shape() != out) c.unsupported("broadcasting of the first input");
    std::swap(a, b);
  }
  bool compare = op == "Equal" || op == "Greater" || op == "GreaterOrEqual" || op == "Less" ||
                 op == "LessOrEqual";
  auto d0 = md(out), d1 = md(with_rank(b->shape(), out.size())),
       dd = md(out, compare ? dt::u8 : dt::f32);
  auto pd = make_pd<dnnl::binary>(binary_ops().at(op), d0, d1, dd);
  Tensor y(compare ? DType::Bool : DType::Float32, out);
  run(dnnl::binary(pd),
      {{DNNL_ARG_SRC_0, mem(d0, *a)}, {DNNL_ARG_SRC_1, mem(d1, *b)}, {DNNL_ARG_DST, mem(dd, y)}});
  return {y};
}

// ---- convolution and deconvolution
ConvSetup conv_setup(const Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& w = c.x(1);
  Shape ks(w.shape().begin() + 2, w.shape().end());
  ConvSetup s;
  s.g = window_geometry(c.k, x.shape(), attr_ints_or(c.k, "kernel_shape", ks), false);
  std::int64_t G = attr_i(c.k, "group");
  s.M = w.dim(0);
  s.ws = w.shape();
  if (G > 1) {
    s.ws[0] = s.M / G;
    s.ws.insert(s.ws.begin(), G);
  }
  s.ys = s.g.out_shape(x.dim(0), s.M);
  s.strides = spatial_tail(s.g.s, s.g.nsp);
  s.dilates = spatial_tail(s.g.d, s.g.nsp, 1);  // oneDNN counts dilation from 0
  s.pad_l = spatial_tail(s.g.pb, s.g.nsp);
  s.pad_r = spatial_tail(s.g.pe, s.g.nsp);
  return s;
}

Tensors conv_fwd(const Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& w = c.x(1);
  ConvSetup cs = conv_setup(c);
  std::int64_t M = cs.M;
  const Shape& ws = cs.ws;
  const Shape& ys = cs.ys;
  auto xd = md(x.shape()), wd = md(ws), yd = md(ys);
  Tensor y(DType::Float32, ys);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(xd, x)},
                                             {DNNL_ARG_DST, mem(yd, y)}};
  dnnl::memory::desc bd;
  if (c.has(2)) {
    bd = md({M});
    args[DNNL_ARG_BIAS] = mem(bd, c.x(2));
  }
  auto pd = make_pd<dnnl::convolution_forward>(prop::forward_inference, algo::convolution_direct,
                                               xd, any_layout(ws), bd, yd, cs.strides, cs.dilates,
                                               cs.pad_l, cs.pad_r);
  args[DNNL_ARG_WEIGHTS] = in_layout(pd.weights_desc(), wd, w);
  run(dnnl::convolution_forward(pd), args);
  return {y};
}

Tensors deconv_fwd(const Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& w = c.x(1);
  Window g = conv_transpose_geometry(c.k, x.shape(), w.shape());
  std::int64_t G = attr_i(c.k, "group"), C = x.dim(1), Mg = w.dim(1), Cg = C / G;
  std::int64_t K = 1;
  for (std::size_t d = 2; d < w.shape().size(); ++d) K *= w.shape()[d];
  // ONNX weights are [C, M/G, k...]; oneDNN's logical order is [G,] O, I, k...
  dims wdims{G, Mg, Cg}, wstr{Cg * Mg * K, K, Mg * K};
  for (std::size_t d = 2; d < w.shape().size(); ++d) wdims.push_back(w.shape()[d]);
  auto kst = strides_of(Shape(w.shape().begin() + 2, w.shape().end()));
  wstr.insert(wstr.end(), kst.begin(), kst.end());
  if (G == 1) {
    wdims.erase(wdims.begin());
    wstr.erase(wstr.begin());
  }
  dnnl::memory::desc wd(wdims, dt::f32, wstr);
  Shape ys = g.out_shape(x.dim(0), Mg * G);
  // oneDNN derives the output size from the pads; fold output_padding into the end pad.
  dims pr;
  for (int i = 3 - g.nsp; i < 3; ++i) {
    std::int64_t ext = (g.k[i] - 1) * g.d[i] + 1;
    std::int64_t r = (g.in[i] - 1) * g.s[i] + ext - g.pb[i] - g.out[i];
    if (r < 0) c.unsupported("output_padding beyond the end pad");
    pr.push_back(r);
  }
  auto xd = md(x.shape()), yd = md(ys);
  Tensor y(DType::Float32, ys);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(xd, x)},
                                             {DNNL_ARG_DST, mem(yd, y)}};
  dnnl::memory::desc bd;
  if (c.has(2)) {
    bd = md({Mg * G});
    args[DNNL_ARG_BIAS] = mem(bd, c.x(2));
  }
  auto pd = make_pd<dnnl::deconvolution_forward>(
      prop::forward_inference, algo::deconvolution_direct, xd, any_layout(wdims), bd, yd,
      spatial_tail(g.s, g.nsp), spatial_tail(g.d, g.nsp, 1), spatial_tail(g.pb, g.nsp), pr);
  args[DNNL_ARG_WEIGHTS] = in_layout(pd.weights_desc(), wd, w);
  run(dnnl::deconvolution_forward(pd), args);
  return {y};
}

// ---- matmul
Tensors matmul_fwd(const Ctx& c) {
  Shape sa = c.x(0).shape(), sb = c.x(1).shape();
  if (sa.empty() || sb.empty()) c.unsupported("scalar operands");
  bool av = sa.size() == 1, bv = sb.size() == 1;
  if (av) sa.insert(sa.begin(), 1);
  if (bv) sb.push_back(1);
  std::size_t r = std::max(sa.size(), sb.size());
  sa = with_rank(sa, r);
  sb = with_rank(sb, r);
  Shape batch =
      broadcast_shapes(c.k, {Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2)});
  Shape ys = batch;
  ys.push_back(sa[r - 2]);
  ys.push_back(sb[r - 1]);
  auto ad = md(sa), bd = md(sb), yd = md(ys);
  Tensor y(DType::Float32, ys);
  auto pd = make_pd<dnnl::matmul>(ad, bd, yd);
  run(dnnl::matmul(pd), {{DNNL_ARG_SRC, mem(ad, c.x(0))},
                         {DNNL_ARG_WEIGHTS, mem(bd, c.x(1))},
                         {DNNL_ARG_DST, mem(yd, y)}});
  Shape os = batch;
  if (!av) os.push_back(ys[r - 2]);
  if (!bv) os.push_back(ys[r - 1]);
  return {y.reshaped(os)};
}

Tensors gemm_fwd(const Ctx& c) {
  const Tensor& a = c.x(0);
  const Tensor& b = c.x(1);
  if (a.rank() != 2 || b.rank() != 2) c.unsupported("Gemm needs 2-D A and B");
  bool ta = attr_i(c.k, "transA"), tb = attr_i(c.k, "transB");
  double alpha = attr_f(c.k, "alpha"), beta = attr_f(c.k, "beta");
  std::int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1),
               N = tb ? b.dim(0) : b.dim(1);
  // Transposes as strides of the same buffers.
  dnnl::memory::desc ad({M, K}, dt::f32, ta ? dims{1, M} : dims{K, 1});
  dnnl::memory::desc bd({K, N}, dt::f32, tb ? dims{1, K} : dims{N, 1});
  auto yd = md({M, N});
  Tensor y(DType::Float32, {M, N});
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, mem(ad, a)}, {DNNL_ARG_WEIGHTS, mem(bd, b)}, {DNNL_ARG_DST, mem(yd, y)}};
  dnnl::memory::desc cd;
  if (c.has(2)) {
    if (beta != 1.0) c.unsupported("beta != 1 with C");
    Shape cs = with_rank(c.x(2).shape(), 2);
    if ((cs[0] != 1 && cs[0] != M) || (cs[1] != 1 && cs[1] != N)) c.unsupported("C shape");
    cd = md(cs);
    args[DNNL_ARG_BIAS] = mem(cd, c.x(2));
  }
  dnnl::primitive_attr attr;
  float scale = static_cast<float>(alpha);
  if (alpha != 1.0) {
#if DNNL_VERSION_MAJOR >= 3
    // alpha as the scale of A, given at execution; oneDNN 3 adds the bias after scaling.
    attr.set_scales_mask(DNNL_ARG_SRC, 0);
    args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC] =
        dnnl::memory(dnnl::memory::desc({1}, dt::f32, dims{1}), eng(), &scale);
#else
    if (c.has(2)) c.unsupported("alpha != 1 with C (oneDNN 2 scales the bias too)");
    attr.set_output_scales(0, {scale});
#endif
  }
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(eng(), ad, bd, cd, yd, attr);
#else
  dnnl::matmul::primitive_desc pd({ad, bd, cd, yd}, attr, eng());
#endif
  run(dnnl::matmul(pd), args);
  return {y};
}

// ---- pooling
PoolSetup pool_setup(const Ctx& c) {
  const Node& n = c.node();
  // ceil_mode from opset 10, storage_order (MaxPool) from 8, count_include_pad (AveragePool) from 7
  bool is_max = n.op_type == "MaxPool", ceil_mode = attr_i_or(c.k, "ceil_mode", 0) != 0;
  if (is_max && attr_i_or(c.k, "storage_order", 0)) c.unsupported("storage_order=1");
  PoolSetup p;
  p.g = window_geometry(c.k, c.x(0).shape(), n.attr_ints("kernel_shape"), ceil_mode);
  bool include = attr_i_or(c.k, "count_include_pad", 0) != 0;
  p.a = is_max    ? algo::pooling_max
        : include ? algo::pooling_avg_include_padding
                  : algo::pooling_avg_exclude_padding;
  for (int i = 3 - p.g.nsp; i < 3; ++i) {
    std::int64_t ext = (p.g.k[i] - 1) * p.g.d[i] + 1;
    std::int64_t r = (p.g.out[i] - 1) * p.g.s[i] + ext - p.g.in[i] - p.g.pb[i];
    // With ceil_mode the last window may reach past the end pad; oneDNN would count the extra
    // positions as padding when averaging with count_include_pad, ONNX does not.
    if (r != p.g.pe[i] && !is_max && include) c.unsupported("ceil_mode with count_include_pad");
    p.pr.push_back(r);
  }
  return p;
}

Tensors pool_fwd(const Ctx& c) {
  if (c.node().outputs.size() > 1 && !c.node().outputs[1].empty())
    c.unsupported("the Indices output");
  const Tensor& x = c.x(0);
  PoolSetup p = pool_setup(c);
  Shape ys = p.g.out_shape(x.dim(0), x.dim(1));
  auto xd = md(x.shape()), yd = md(ys);
  Tensor y(DType::Float32, ys);
  auto pd =
      make_pd<pooling_forward>(prop::forward_inference, p.a, xd, yd, spatial_tail(p.g.s, p.g.nsp),
                               spatial_tail(p.g.k, p.g.nsp), spatial_tail(p.g.d, p.g.nsp, 1),
                               spatial_tail(p.g.pb, p.g.nsp), p.pr);
  run(pooling_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)}, {DNNL_ARG_DST, mem(yd, y)}});
  return {y};
}

// ---- reductions (and global pools as reductions over the spatial dims)
namespace {

Tensors reduce_with(const Ctx& c, algo a, float p, const std::vector<std::int64_t>& axes,
                    bool keepdims) {
  const Tensor& x = c.x(0);
  Shape kept = x.shape();
  for (auto ax : axes) kept[ax] = 1;
  auto xd = md(x.shape()), yd = md(kept);
  Tensor y(DType::Float32, kept);
  auto pd = make_pd<dnnl::reduction>(a, xd, yd, p, 0.f);
  run(dnnl::reduction(pd), {{DNNL_ARG_SRC, mem(xd, x)}, {DNNL_ARG_DST, mem(yd, y)}});
  if (keepdims) return {y};
  Shape os;
  for (std::int64_t d = 0; d < x.rank(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) os.push_back(kept[d]);
  return {y.reshaped(os)};
}

}  // namespace

Tensors reduce_fwd(const Ctx& c) {
  static const std::map<std::string, std::pair<algo, float>> m = {
      {"ReduceSum", {algo::reduction_sum, 0.f}},
      {"ReduceMean", {algo::reduction_mean, 0.f}},
      {"ReduceMax", {algo::reduction_max, 0.f}},
      {"ReduceMin", {algo::reduction_min, 0.f}},
      {"ReduceProd", {algo::reduction_mul, 0.f}},
      {"ReduceL1", {algo::reduction_norm_lp_sum, 1.f}},
      {"ReduceL2", {algo::reduction_norm_lp_sum, 2.f}},
      {"ReduceSumSquare", {algo::reduction_norm_lp_power_p_sum, 2.f}}};
  auto r = reduce_axes(c.k, c.in, c.x(0).rank());
  if (r.noop) return {c.x(0)};
  auto [a, p] = m.at(c.node().op_type);
  return reduce_with(c, a, p, r.axes, r.keepdims);
}

Tensors global_pool_fwd(const Ctx& c) {
  std::vector<std::int64_t> axes(static_cast<std::size_t>(c.x(0).rank() - 2));
  std::iota(axes.begin(), axes.end(), 2);
  return reduce_with(
      c, c.node().op_type == "GlobalMaxPool" ? algo::reduction_max : algo::reduction_mean, 0.f,
      axes, true);
}

// ---- normalization
// Inference-mode batch normalization: given statistics, scale and shift.
const dnnl::normalization_flags kBatchNormFlags = dnnl::normalization_flags::use_global_stats |
                                                  dnnl::normalization_flags::use_scale |
                                                  dnnl::normalization_flags::use_shift;

dnnl::batch_normalization_forward::primitive_desc batchnorm_pd(prop p, const dnnl::memory::desc& xd,
                                                               float eps,
                                                               dnnl::normalization_flags flags) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng(), p, xd, xd, eps, flags};
#else
  return {{p, xd, eps, flags}, eng()};
#endif
}

Tensors batchnorm_fwd(const Ctx& c) {
  if (batch_norm_training(c.k)) c.unsupported("training mode");
  const Tensor& x = c.x(0);
  auto xd = md(x.shape()), cd = md({x.dim(1)});
  Tensor y(DType::Float32, x.shape());
  auto pd = batchnorm_pd(prop::forward_inference, xd, static_cast<float>(attr_f(c.k, "epsilon")),
                         kBatchNormFlags);
  run(dnnl::batch_normalization_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)},
                                              {DNNL_ARG_SCALE, mem(cd, c.x(1))},
                                              {DNNL_ARG_SHIFT, mem(cd, c.x(2))},
                                              {DNNL_ARG_MEAN, mem(cd, c.x(3))},
                                              {DNNL_ARG_VARIANCE, mem(cd, c.x(4))},
                                              {DNNL_ARG_DST, mem(xd, y)}});
  return {y};
}

Tensors layernorm_fwd(const Ctx& c) {
  const Node& n = c.node();
  for (std::size_t o = 1; o < n.outputs.size(); ++o)
    if (!n.outputs[o].empty()) c.unsupported("the Mean and InvStdDev outputs");
  const Tensor& x = c.x(0);
  std::int64_t axis = norm_axis(c.k, attr_i(c.k, "axis"), x.rank()), outer = 1, inner = 1;
  for (std::int64_t d = 0; d < x.rank(); ++d) (d < axis ? outer : inner) *= x.shape()[d];
  Shape norm(x.shape().begin() + axis, x.shape().end());
  // Scale and bias broadcast to the normalized shape, flattened to oneDNN's 1-D [inner].
  Tensor scale = take(c.x(1), norm, broadcast_map(c.x(1).shape(), norm)).reshaped({inner});
  Tensor bias = c.has(2) ? take(c.x(2), norm, broadcast_map(c.x(2).shape(), norm)).reshaped({inner})
                         : Tensor(DType::Float32, {inner});
  auto xd = md({outer, inner}), cd = md({inner});
  Tensor y(DType::Float32, x.shape());
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  float eps = static_cast<float>(attr_f(c.k, "epsilon"));
#if DNNL_VERSION_MAJOR >= 3
  dnnl::layer_normalization_forward::primitive_desc pd(eng(), prop::forward_inference, xd, xd, eps,
                                                       flags);
#else
  dnnl::layer_normalization_forward::primitive_desc pd({prop::forward_inference, xd, eps, flags},
                                                       eng());
#endif
  run(dnnl::layer_normalization_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)},
                                              {DNNL_ARG_SCALE, mem(cd, scale)},
                                              {DNNL_ARG_SHIFT, mem(cd, bias)},
                                              {DNNL_ARG_DST, mem(xd, y)}});
  return {y};
}

// ---- softmax family: the input viewed as [outer, n, inner], softmax over n.
Tensors softmax_fwd(const Ctx& c) {
  const Tensor& x = c.x(0);
  AxisSplit v = softmax_split(c.k, x.shape());
  auto d = md({v.outer, v.n, v.inner});
  Tensor y(DType::Float32, x.shape());
  algo a = c.node().op_type == "LogSoftmax" ? algo::softmax_log : algo::softmax_accurate;
  auto pd = make_pd<softmax_forward>(prop::forward_inference, a, d, d, 1);
  run(softmax_forward(pd), {{DNNL_ARG_SRC, mem(d, x)}, {DNNL_ARG_DST, mem(d, y)}});
  return {y};
}

// ---- data movement
Tensors concat_fwd(const Ctx& c) {
  std::int64_t axis = norm_axis(c.k, c.node().attr_i("axis"), c.x(0).rank());
  std::vector<dnnl::memory::desc> mds;
  std::unordered_map<int, dnnl::memory> args;
  Shape os = c.x(0).shape();
  os[axis] = 0;
  for (std::size_t i = 0; i < c.in.size(); ++i) {
    mds.push_back(md(c.x(i).shape()));
    args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = mem(mds.back(), c.x(i));
    os[axis] += c.x(i).shape()[axis];
  }
  auto yd = md(os);
  Tensor y(DType::Float32, os);
  args[DNNL_ARG_DST] = mem(yd, y);
#if DNNL_VERSION_MAJOR >= 3
  dnnl::concat::primitive_desc pd(eng(), yd, static_cast<int>(axis), mds);
#else
  dnnl::concat::primitive_desc pd(yd, static_cast<int>(axis), mds, eng());
#endif
  run(dnnl::concat(pd), args);
  return {y};
}

Tensors transpose_fwd(const Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(x.rank()));
  std::iota(perm.rbegin(), perm.rend(), 0);
  perm = norm_axes(c.k, attr_ints_or(c.k, "perm", perm), x.rank());
  Shape os(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d) os[d] = x.shape()[perm[d]];
  // The output buffer described in the input's dimension order: a reorder permutes.
  auto ost = strides_of(os);
  dims st(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d) st[perm[d]] = ost[d];
  auto xd = md(x.shape());
  dnnl::memory::desc yd(to_dims(x.shape()), dt::f32, st);
  Tensor y(DType::Float32, os);
  reorder(mem(xd, x), mem(yd, y));
  return {y};
}

Tensors prelu_fwd(const Ctx& c) {
  if (c.k.opset < 7) c.unsupported("legacy broadcast semantics (opset < 7)");
  const Tensor& x = c.x(0);
  Shape out = broadcast_shapes(c.k, {x.shape(), c.x(1).shape()});
  if (out != x.shape()) c.unsupported("slope larger than the input");
  auto xd = md(x.shape()), wd = md(with_rank(c.x(1).shape(), x.shape().size()));
  Tensor y(DType::Float32, x.shape());
#if DNNL_VERSION_MAJOR >= 3
  dnnl::prelu_forward::primitive_desc pd(eng(), prop::forward_inference, xd, wd, xd);
#else
  dnnl::prelu_forward::primitive_desc pd({prop::forward_inference, xd, wd}, eng());
#endif
  run(dnnl::prelu_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)},
                                {DNNL_ARG_WEIGHTS, mem(wd, c.x(1))},
                                {DNNL_ARG_DST, mem(xd, y)}});
  return {y};
}

Tensors resize_fwd(const Ctx& c) {
  if (c.k.opset < 11) c.unsupported("Resize-10");
  if (std::string f = resize_newer_features(c.k); !f.empty()) c.unsupported(f);
  const Tensor& x = c.x(0);
  std::string mode = attr_s(c.k, "mode"), coord = attr_s(c.k, "coordinate_transformation_mode");
  Shape os = x.shape();
  if (c.has(3) && c.in[3].numel()) {
    os = c.in[3].to_i64();
  } else {
    auto sc = c.x(2).to_f64();
    for (std::size_t d = 0; d < os.size(); ++d) {
      os[d] = static_cast<std::int64_t>(std::floor(static_cast<double>(x.shape()[d]) * sc[d]));
      // oneDNN maps coordinates with out/in; ONNX with the given scale: equal only if exact.
      if (static_cast<double>(x.shape()[d]) * sc[d] != static_cast<double>(os[d]))
        c.unsupported("a scale that does not give a whole size");
    }
  }
  if (os.size() < 3 || os[0] != x.dim(0) || os[1] != x.dim(1))
    c.unsupported("resizing the batch or channel dims");
  algo a;
  if (mode == "linear" && (coord == "half_pixel" || coord == "pytorch_half_pixel")) {
    a = algo::resampling_linear;
    for (std::size_t d = 2; d < os.size(); ++d)
      if (os[d] == 1) c.unsupported("an output size of 1");
  } else if (mode == "nearest" && coord == "half_pixel" &&
             attr_s(c.k, "nearest_mode") == "round_prefer_ceil") {
    a = algo::resampling_nearest;
  } else {
    c.unsupported("mode " + mode + " with " + coord + " (oneDNN samples at half-pixel centres)");
  }
  auto xd = md(x.shape()), yd = md(os);
  Tensor y(DType::Float32, os);
  auto pd = make_pd<dnnl::resampling_forward>(prop::forward_inference, a, xd, yd);
  run(dnnl::resampling_forward(pd), {{DNNL_ARG_SRC, mem(xd, x)}, {DNNL_ARG_DST, mem(yd, y)}});
  return {y};
}

}  // namespace metaop::onednn
