#include "bindings/onednn/onednn_binding.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <source_location>

#include "bindings/onednn/onednn_forward.h"
#include "ops/params.h"

#ifndef METAOP_ONEDNN_BINDING
#define METAOP_ONEDNN_BINDING "onednn"
#endif

namespace metaop {

const char* onednn_binding_name() {
  return METAOP_ONEDNN_BINDING;
}

namespace {

using namespace onednn;

using Fwd = std::function<Tensors(const Ctx&)>;

// ---- backward
using Bwd = std::function<Tensors(const Ctx&, const Tensors& outputs, const Tensors& grads)>;

Tensors eltwise_bwd(const Ctx& c, const Tensors&, const Tensors& grads) {
  const Tensor& x = c.x(0);
  Eltwise e = eltwise_ops().at(c.node().op_type).params(c);
  auto d = md(x.shape());
  auto hint = eltwise_pd(prop::forward_training, e, d);
#if DNNL_VERSION_MAJOR >= 3
  dnnl::eltwise_backward::primitive_desc pd(eng(), e.a, d, d, d, e.alpha, e.beta, hint);
#else
  dnnl::eltwise_backward::primitive_desc pd({e.a, d, d, e.alpha, e.beta}, eng(), hint);
#endif
  Tensor gx(DType::Float32, x.shape());
  run(dnnl::eltwise_backward(pd), {{DNNL_ARG_SRC, mem(d, x)},
                                   {DNNL_ARG_DIFF_DST, mem(d, grads.at(0))},
                                   {DNNL_ARG_DIFF_SRC, mem(d, gx)}});
  Tensors g(c.in.size());
  g[0] = gx;  // Clip's bounds are parameters of the primitive: not differentiated
  return g;
}

Tensors softmax_bwd(const Ctx& c, const Tensors& outputs, const Tensors& grads) {
  const Tensor& x = c.x(0);
  AxisSplit v = softmax_split(c.k, x.shape());
  auto d = md({v.outer, v.n, v.inner});
  algo a = c.node().op_type == "LogSoftmax" ? algo::softmax_log : algo::softmax_accurate;
  auto hint = make_pd<softmax_forward>(prop::forward_training, a, d, d, 1);
  auto pd = make_bwd_pd<softmax_backward>(hint, a, d, d, d, 1);
  Tensor gx(DType::Float32, x.shape());
  run(softmax_backward(pd), {{DNNL_ARG_DST, mem(d, outputs.at(0))},
                             {DNNL_ARG_DIFF_DST, mem(d, grads.at(0))},
                             {DNNL_ARG_DIFF_SRC, mem(d, gx)}});
  return {gx};
}

Tensors conv_bwd(const Ctx& c, const Tensors&, const Tensors& grads) {
  const Tensor& x = c.x(0);
  const Tensor& w = c.x(1);
  ConvSetup cs = conv_setup(c);
  std::int64_t M = cs.M;
  const Shape& ws = cs.ws;
  const Shape& ys = cs.ys;
  auto xd = md(x.shape()), wd = md(ws), yd = md(ys), bd = md({M});
  const dims &st = cs.strides, &dl = cs.dilates, &pl = cs.pad_l, &pr = cs.pad_r;
  // The weights and their gradient in the layouts the primitives choose (any_layout).
  auto wa = any_layout(ws);
  auto hint = make_pd<dnnl::convolution_forward>(prop::forward_training, algo::convolution_direct,
                                                 xd, wa, bd, yd, st, dl, pl, pr);
  Tensor gx(DType::Float32, x.shape()), gw(DType::Float32, w.shape()), gb(DType::Float32, {M});
  auto pdd = make_bwd_pd<dnnl::convolution_backward_data>(hint, algo::convolution_direct, xd, wa,
                                                          yd, st, dl, pl, pr);
  run(dnnl::convolution_backward_data(pdd),
      {{DNNL_ARG_DIFF_DST, mem(yd, grads.at(0))},
       {DNNL_ARG_WEIGHTS, in_layout(pdd.weights_desc(), wd, w)},
       {DNNL_ARG_DIFF_SRC, mem(xd, gx)}});
  auto pdw = make_bwd_pd<dnnl::convolution_backward_weights>(hint, algo::convolution_direct, xd, wa,
                                                             bd, yd, st, dl, pl, pr);
  OutLayout dw(pdw.diff_weights_desc(), wd, gw);
  run(dnnl::convolution_backward_weights(pdw), {{DNNL_ARG_SRC, mem(xd, x)},
                                                {DNNL_ARG_DIFF_DST, mem(yd, grads.at(0))},
                                                {DNNL_ARG_DIFF_WEIGHTS, dw.out},
                                                {DNNL_ARG_DIFF_BIAS, mem(bd, gb)}});
  dw.into();
  Tensors out{gx, gw};
  if (c.has(2)) out.push_back(gb);
  return out;
}

Tensors pool_bwd(const Ctx& c, const Tensors&, const Tensors& grads) {
  const Tensor& x = c.x(0);
  PoolSetup p = pool_setup(c);
  Shape ys = p.g.out_shape(x.dim(0), x.dim(1));
  auto xd = md(x.shape()), yd = md(ys);
  auto st = spatial_tail(p.g.s, p.g.nsp), k = spatial_tail(p.g.k, p.g.nsp),
       dl = spatial_tail(p.g.d, p.g.nsp, 1), pl = spatial_tail(p.g.pb, p.g.nsp);
  auto hint = make_pd<pooling_forward>(prop::forward_training, p.a, xd, yd, st, k, dl, pl, p.pr);
  // Max pooling's backward needs the forward's workspace (where each maximum came from).
  Tensor y(DType::Float32, ys);
  dnnl::memory ws;
  std::unordered_map<int, dnnl::memory> fargs{{DNNL_ARG_SRC, mem(xd, x)},
                                              {DNNL_ARG_DST, mem(yd, y)}};
  if (p.a == algo::pooling_max) {
    ws = dnnl::memory(hint.workspace_desc(), eng());
    fargs[DNNL_ARG_WORKSPACE] = ws;
    run(pooling_forward(hint), fargs);
  }
  auto pd = make_bwd_pd<pooling_backward>(hint, p.a, xd, yd, st, k, dl, pl, p.pr);
  Tensor gx(DType::Float32, x.shape());
  std::unordered_map<int, dnnl::memory> bargs{{DNNL_ARG_DIFF_DST, mem(yd, grads.at(0))},
                                              {DNNL_ARG_DIFF_SRC, mem(xd, gx)}};
  if (p.a == algo::pooling_max) bargs[DNNL_ARG_WORKSPACE] = ws;
  run(pooling_backward(pd), bargs);
  return {gx};
}

Tensors batchnorm_bwd(const Ctx& c, const Tensors&, const Tensors& grads) {
  const Tensor& x = c.x(0);
  auto xd = md(x.shape()), cd = md({x.dim(1)});
  float eps = static_cast<float>(attr_f(c.k, "epsilon"));
  // Training mode normalizes with the batch's statistics, and its gradient goes through them:
  // oneDNN computes them (forward_training) and differentiates without use_global_stats.
  // Otherwise the given mean and var are constants (use_global_stats).
  bool training = batch_norm_training(c.k);
  auto flags = training
                   ? dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift
                   : kBatchNormFlags;
  auto hint = batchnorm_pd(prop::forward_training, xd, eps, flags);
  Tensor mean = c.x(3), var = c.x(4);
  if (training) {
    Tensor y(DType::Float32, x.shape());
    mean = Tensor(DType::Float32, {x.dim(1)});
    var = Tensor(DType::Float32, {x.dim(1)});
    run(dnnl::batch_normalization_forward(hint), {{DNNL_ARG_SRC, mem(xd, x)},
                                                  {DNNL_ARG_SCALE, mem(cd, c.x(1))},
                                                  {DNNL_ARG_SHIFT, mem(cd, c.x(2))},
                                                  {DNNL_ARG_DST, mem(xd, y)},
                                                  {DNNL_ARG_MEAN, mem(cd, mean)},
                                                  {DNNL_ARG_VARIANCE, mem(cd, var)}});
  }
#if DNNL_VERSION_MAJOR >= 3
  dnnl::batch_normalization_backward::primitive_desc pd(eng(), prop::backward, xd, xd, xd, eps,
                                                        flags, hint);
#else
  dnnl::batch_normalization_backward::primitive_desc pd({prop::backward, xd, xd, eps, flags}, eng(),
                                                        hint);
#endif
  Tensor gx(DType::Float32, x.shape()), gs(DType::Float32, {x.dim(1)}),
      gb(DType::Float32, {x.dim(1)});
  run(dnnl::batch_normalization_backward(pd), {{DNNL_ARG_SRC, mem(xd, x)},
                                               {DNNL_ARG_DIFF_DST, mem(xd, grads.at(0))},
                                               {DNNL_ARG_MEAN, mem(cd, mean)},
                                               {DNNL_ARG_VARIANCE, mem(cd, var)},
                                               {DNNL_ARG_SCALE, mem(cd, c.x(1))},
                                               {DNNL_ARG_SHIFT, mem(cd, c.x(2))},
                                               {DNNL_ARG_DIFF_SRC, mem(xd, gx)},
                                               {DNNL_ARG_DIFF_SCALE, mem(cd, gs)},
                                               {DNNL_ARG_DIFF_SHIFT, mem(cd, gb)}});
  return {gx, gs, gb};  // mean and var are statistics here: not differentiated
}

// Every op the binding runs: its forward and (where oneDNN has one) backward primitive, and
// where the pair is declared (metaop ops --where).
struct Kernel {
  Fwd forward;
  Bwd backward;
  std::source_location where;
};

const std::map<std::string, Kernel>& kernels() {
  static const std::map<std::string, Kernel> m = [] {
    std::map<std::string, Kernel> t;
    auto add = [&t](const std::string& op, Fwd f, Bwd b = {},
                    std::source_location loc = std::source_location::current()) {
      t[op] = {std::move(f), std::move(b), loc};
    };
    // Round's gradient is zero almost everywhere: oneDNN has no backward for it.
    for (const auto& [op, e] : eltwise_ops())
      add(op, eltwise_fwd, op == "Round" ? Bwd{} : Bwd{eltwise_bwd}, e.where);
    for (const auto& [op, a] : binary_ops()) add(op, binary_fwd);
    add("Conv", conv_fwd, conv_bwd);
    add("ConvTranspose", deconv_fwd);
    add("MatMul", matmul_fwd);
    add("Gemm", gemm_fwd);
    add("MaxPool", pool_fwd, pool_bwd);
    add("AveragePool", pool_fwd, pool_bwd);
    add("GlobalAveragePool", global_pool_fwd);
    add("GlobalMaxPool", global_pool_fwd);
    for (const char* r : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceSumSquare"})
      add(r, reduce_fwd);
    add("BatchNormalization", batchnorm_fwd, batchnorm_bwd);
    add("LayerNormalization", layernorm_fwd);
    add("Softmax", softmax_fwd, softmax_bwd);
    add("LogSoftmax", softmax_fwd, softmax_bwd);
    add("Concat", concat_fwd);
    add("Transpose", transpose_fwd);
    add("PRelu", prelu_fwd);
    add("Resize", resize_fwd);
    for (const auto& [op, k] : t) require_registered(op, "the oneDNN kernel table");
    return t;
  }();
  return m;
}

void require_f32(const Node& node, const Tensors& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != DType::Float32)
      throw Unsupported(fmt::format("{}: the oneDNN binding runs float32 only (got {})",
                                    node.label(), dtype_name(t.dtype())));
  if (inputs.empty() || !inputs[0].defined() || inputs[0].dtype() != DType::Float32)
    throw Unsupported(node.label() + ": the oneDNN binding needs float32 data");
}

template <typename F>
Tensors guarded(const Node& node, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    // oneDNN declines (no implementation for these shapes or attributes).
    throw Unsupported(fmt::format("{}: oneDNN: {}", node.label(), e.what()));
  }
}

}  // namespace

Support OneDNNBinding::supports(const std::string& op_type) const {
  Support s;
  auto it = kernels().find(op_type);
  s.forward = it != kernels().end();
  s.backward = s.forward && it->second.backward;
  if (s.forward)
    s.dtypes = {DType::Float32};
  else
    s.reason = "no oneDNN primitive for " + op_type;
  return s;
}

std::vector<std::string> OneDNNBinding::where(const std::string& op_type) const {
  auto it = kernels().find(op_type);
  if (it == kernels().end()) return {};
  return {fmt::format("{}: {}", it->second.backward ? "forward and backward" : "forward",
                      location(it->second.where))};
}

void OneDNNBinding::prepare() {
  eng();
}

Tensors OneDNNBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  auto it = kernels().find(node.op_type);
  if (it == kernels().end()) throw Unsupported(node.label() + ": no oneDNN primitive");
  require_f32(node, inputs);
  KernelContext k{node, opset};
  return guarded(node, [&] { return it->second.forward(Ctx{k, inputs}); });
}

Tensors OneDNNBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                const Tensors& outputs, const Tensors& output_grads) {
  auto it = kernels().find(node.op_type);
  if (it == kernels().end() || !it->second.backward)
    throw Unsupported(node.label() + ": no oneDNN backward primitive");
  require_f32(node, inputs);
  for (std::size_t o = 1; o < output_grads.size(); ++o)
    if (output_grads[o].defined())
      throw Unsupported(node.label() + ": oneDNN differentiates the first output only");
  if (output_grads.empty() || !output_grads[0].defined() ||
      output_grads[0].dtype() != DType::Float32)
    throw Unsupported(node.label() + ": needs a float32 output gradient");
  KernelContext k{node, opset};
  return guarded(node, [&] { return it->second.backward(Ctx{k, inputs}, outputs, output_grads); });
}

}  // namespace metaop
