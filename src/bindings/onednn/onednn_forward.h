#pragma once
// The oneDNN binding's forward kernels, by family (onednn_forward.cpp), and what the backward
// kernels and the kernel table (onednn_binding.cpp) share with them: the engine, plain-layout
// memory, the element-wise and binary op tables, convolution and pooling geometry, and the few
// differences between oneDNN 2 and 3. Only the oneDNN binding's own files include this (it pulls
// in oneDNN).
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <source_location>
#include <string>
#include <unordered_map>

#include "ops/kernel_util.h"
#include "ops/window.h"

namespace metaop::onednn {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
using algo = dnnl::algorithm;
using prop = dnnl::prop_kind;

dnnl::engine& eng();

// What differs between oneDNN 2 (an operation descriptor, then its primitive descriptor) and 3
// (the primitive descriptor straight from the engine and the same arguments), for the primitives
// whose arguments did not change; the others say so where they are made (DNNL_VERSION_MAJOR).
#if DNNL_VERSION_MAJOR >= 3
using pooling_forward = dnnl::pooling_forward;
using pooling_backward = dnnl::pooling_backward;
using softmax_forward = dnnl::softmax_forward;
using softmax_backward = dnnl::softmax_backward;
#else
using pooling_forward = dnnl::pooling_v2_forward;
using pooling_backward = dnnl::pooling_v2_backward;
using softmax_forward = dnnl::softmax_v2_forward;
using softmax_backward = dnnl::softmax_v2_backward;
#endif

// P's primitive descriptor from the arguments oneDNN 3 takes after the engine.
template <class P, class... A>
typename P::primitive_desc make_pd(const A&... args) {
#if DNNL_VERSION_MAJOR >= 3
  return typename P::primitive_desc(eng(), args...);
#else
  return typename P::primitive_desc(typename P::desc(args...), eng());
#endif
}

// A backward primitive descriptor: the same, with the forward's as the hint.
template <class P, class H, class... A>
typename P::primitive_desc make_bwd_pd(const H& hint, const A&... args) {
#if DNNL_VERSION_MAJOR >= 3
  return typename P::primitive_desc(eng(), args..., hint);
#else
  return typename P::primitive_desc(typename P::desc(args...), eng(), hint);
#endif
}

// Plain row-major layout for any rank (oneDNN wants at least 1 dim).
dnnl::memory::desc md(const Shape& s, dt t = dt::f32);
dnnl::memory mem(const dnnl::memory::desc& d, const Tensor& t);
void run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);
// Convolution weights in whatever layout the primitive prefers (format_tag::any), as oneDNN's
// users give them: for plain weights oneDNN 3 has no convolution but its reference kernel
// (hundreds of times slower; oneDNN 2.6 takes plain weights in its gemm kernel).
dnnl::memory::desc any_layout(const Shape& s);
// `t`, laid out as `given`, in the layout `want` a primitive chose (a reorder where they differ;
// reorders move values exactly).
dnnl::memory in_layout(const dnnl::memory::desc& want, const dnnl::memory::desc& given,
                       const Tensor& t);
// Where a primitive writes a result in the layout `want` it chose; `into` moves it to `t`,
// laid out as `given`, after the primitive ran.
struct OutLayout {
  dnnl::memory out, user;
  OutLayout(const dnnl::memory::desc& want, const dnnl::memory::desc& given, Tensor& t);
  void into() const;
};

struct Ctx {
  const KernelContext& k;
  const Tensors& in;
  const Node& node() const { return k.node; }
  const Tensor& x(std::size_t i) const { return input(k, in, i); }
  bool has(std::size_t i) const { return has_input(in, i); }
  [[noreturn]] void unsupported(const std::string& why) const {
    throw Unsupported(fmt::format("{}: oneDNN binding: {}", k.node.label(), why));
  }
};

// ---- element-wise (one input): algorithm with alpha, beta.
struct Eltwise {
  algo a;
  float alpha, beta;
};

// Each op's eltwise algorithm and its parameters, and where it is declared.
struct EltwiseOp {
  std::function<Eltwise(const Ctx&)> params;
  std::source_location where;
};

const std::map<std::string, EltwiseOp>& eltwise_ops();
dnnl::eltwise_forward::primitive_desc eltwise_pd(prop p, const Eltwise& e,
                                                 const dnnl::memory::desc& d);
Tensors eltwise_fwd(const Ctx& c);

// ---- binary
const std::map<std::string, algo>& binary_ops();
Tensors binary_fwd(const Ctx& c);

// ---- convolution and deconvolution

// Convolution geometry and oneDNN's view of the weights: [G, M/G, C/G, k...] when grouped.
struct ConvSetup {
  Window g;
  std::int64_t M;
  Shape ws, ys;
  dims strides, dilates, pad_l, pad_r;
};

ConvSetup conv_setup(const Ctx& c);
Tensors conv_fwd(const Ctx& c);
Tensors deconv_fwd(const Ctx& c);

// ---- matmul
Tensors matmul_fwd(const Ctx& c);
Tensors gemm_fwd(const Ctx& c);

// ---- pooling
struct PoolSetup {
  Window g;
  algo a;
  dims pr;
};

PoolSetup pool_setup(const Ctx& c);
Tensors pool_fwd(const Ctx& c);

// ---- reductions
Tensors reduce_fwd(const Ctx& c);
Tensors global_pool_fwd(const Ctx& c);

// ---- normalization
// Inference-mode batch normalization: given statistics, scale and shift.
extern const dnnl::normalization_flags kBatchNormFlags;
dnnl::batch_normalization_forward::primitive_desc batchnorm_pd(prop p, const dnnl::memory::desc& xd,
                                                               float eps,
                                                               dnnl::normalization_flags flags);
Tensors batchnorm_fwd(const Ctx& c);
Tensors layernorm_fwd(const Ctx& c);

// ---- softmax family
Tensors softmax_fwd(const Ctx& c);

// ---- data movement
Tensors concat_fwd(const Ctx& c);
Tensors transpose_fwd(const Ctx& c);
Tensors prelu_fwd(const Ctx& c);
Tensors resize_fwd(const Ctx& c);

}  // namespace metaop::onednn
