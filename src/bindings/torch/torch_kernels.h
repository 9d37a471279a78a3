#pragma once
// The torch binding's kernels: one ATen implementation per meta operator, registered by family
// (torch_kernels_*.cpp) into one table that records where each is declared (metaop ops --where).
// Only the torch binding's own files include this (it pulls in ATen).
#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <functional>
#include <map>
#include <source_location>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "ops/window.h"

namespace metaop::torch_kernels {

using ATs = std::vector<at::Tensor>;

// What an op's ATen implementation sees of a node.
struct Ctx {
  const KernelContext& k;
  const Tensors& raw;  // metaop inputs (for reading axes, shapes, scalars)
  const ATs& x;        // the same inputs as ATen tensors
  const Node& node() const { return k.node; }
  const at::Tensor& in(std::size_t i) const {
    if (i >= x.size() || !x[i].defined()) fail("{}: missing required input #{}", k.node.label(), i);
    return x[i];
  }
  bool has(std::size_t i) const { return i < x.size() && x[i].defined(); }
  [[noreturn]] void unsupported(const std::string& why) const {
    throw Unsupported(fmt::format("{}: torch binding: {}", k.node.label(), why));
  }
};

using Fn = std::function<ATs(const Ctx&)>;
struct TorchOp {
  Fn fn;
  bool differentiable = true;
  std::vector<std::size_t> no_grad_inputs = {};  // inputs ATen refuses to differentiate
  std::source_location where = {};
  std::vector<DType> dtypes = {};  // what the kernel takes; empty: the four floating types
};

class TorchTable {
 public:
  void add(const std::string& op, TorchOp k,
           std::source_location loc = std::source_location::current()) {
    k.where = loc;
    require_registered(op, "the torch kernel table");
    if (!ops.emplace(op, std::move(k)).second) fail("internal: torch kernel {} twice", op);
  }
  std::map<std::string, TorchOp> ops;
};

// A window's pads for at::constant_pad_nd: last dim first, (begin, end) pairs
// (torch_kernels_nn.cpp).
std::vector<std::int64_t> torch_pads(const Window& w);
// The last `nsp` entries of a window's per-axis array (strides, pads, dilations) as ATen
// takes them (torch_kernels_nn.cpp).
std::vector<std::int64_t> spatial(const std::array<std::int64_t, 3>& a, int nsp);

// One registration per family, mirroring src/ops.
void add_elementwise(TorchTable& t);  // torch_kernels_math.cpp
void add_quantization(TorchTable& t);
void add_linear(TorchTable& t);
void add_reductions(TorchTable& t);
void add_losses(TorchTable& t);
void add_conv_pool(TorchTable& t);  // torch_kernels_nn.cpp
void add_normalization(TorchTable& t);
void add_shape(TorchTable& t);
void add_spatial(TorchTable& t);  // torch_kernels_spatial.cpp
void add_signal(TorchTable& t);
void add_selection(TorchTable& t);
void add_recurrent(TorchTable& t);
void add_attention(TorchTable& t);  // PyTorch 2 only (scaled_dot_product_attention)

}  // namespace metaop::torch_kernels
