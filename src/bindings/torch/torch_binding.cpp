// The torch binding: ATen's kernels for forward (torch_kernels_*.cpp, one table), torch
// autograd on the single op for backward.
#include "bindings/torch/torch_binding.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/version.h>

#include "bindings/plugin.h"
#include "bindings/torch/aten_convert.h"
#include "bindings/torch/torch_kernels.h"
#include "bindings/torch/torch_optimizer.h"

#ifndef METAOP_TORCH_BINDING
#define METAOP_TORCH_BINDING "torch"
#endif

namespace metaop {

const char* torch_binding_name() {
  return METAOP_TORCH_BINDING;
}

using torch_kernels::ATs;
using torch_kernels::Ctx;
using torch_kernels::TorchOp;

namespace {

const std::map<std::string, TorchOp>& ops() {
  static const auto table = [] {
    torch_kernels::TorchTable t;
    torch_kernels::add_elementwise(t);
    torch_kernels::add_linear(t);
    torch_kernels::add_reductions(t);
    torch_kernels::add_losses(t);
    torch_kernels::add_conv_pool(t);
    torch_kernels::add_normalization(t);
    torch_kernels::add_shape(t);
    torch_kernels::add_spatial(t);
    torch_kernels::add_signal(t);
    torch_kernels::add_selection(t);
    torch_kernels::add_recurrent(t);
    torch_kernels::add_quantization(t);
    torch_kernels::add_attention(t);
    return t.ops;
  }();
  return table;
}

}  // namespace

namespace {
// ATen's one-time warnings (e.g. "scatter_reduce() is in beta") would otherwise go to stderr
// through glog in the middle of our output.
class QuietWarnings : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning&) override {}
#else
  void process(const c10::SourceLocation&, const std::string&, const bool) override {}
#endif
};
}  // namespace

TorchBinding::TorchBinding() {
  static QuietWarnings quiet;
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(&quiet);
#else
  c10::Warning::set_warning_handler(&quiet);
#endif
  set_threads(framework_threads());
}

void TorchBinding::set_threads(int n) {
  at::set_num_threads(n);
}

std::unique_ptr<UpdateKernel> TorchBinding::update_kernel(const OptimizerConfig& c) const {
  return std::make_unique<TorchUpdate>(c);
}

Support TorchBinding::supports(const std::string& op_type) const {
  Support s;
  auto it = ops().find(op_type);
  if (it == ops().end()) {
    s.reason = "no ATen mapping";
    return s;
  }
  s.forward = true;
  s.backward = it->second.differentiable;
  s.dtypes = it->second.dtypes;
  if (s.dtypes.empty())
    s.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  return s;
}

namespace {

ATs run_op(const Node& node, std::int64_t opset, const Tensors& inputs, const ATs& x) {
  auto it = ops().find(node.op_type);
  if (it == ops().end()) throw Unsupported(node.label() + ": torch binding has no " + node.op_type);
  KernelContext k{node, opset};
  try {
    return it->second.fn(Ctx{k, inputs, x});
  } catch (const c10::Error& e) {
    // ATen refuses: a dtype without a CPU kernel (float16 ops), a shape it does not take...
    std::string msg = e.what_without_backtrace();
    auto nl = msg.find('\n');
    throw Unsupported(fmt::format("{}: ATen: {}", node.label(), msg.substr(0, nl)));
  }
}

}  // namespace

Tensors TorchBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  at::NoGradGuard no_grad;
  ATs x;
  for (const auto& t : inputs) x.push_back(to_aten(t));
  ATs y = run_op(node, opset, inputs, x);
  Tensors out;
  for (const auto& t : y) out.push_back(from_aten(t, node.label()));
  return out;
}

// ATen's autograd differentiates the forward kernel: its location is this function's.
const std::source_location kTorchBackward = std::source_location::current();

std::vector<std::string> TorchBinding::where(const std::string& op_type) const {
  auto it = ops().find(op_type);
  if (it == ops().end()) return {};
  std::vector<std::string> w{fmt::format("forward: {} (ATen)", location(it->second.where))};
  if (it->second.differentiable)
    w.push_back(
        fmt::format("backward: {} (torch autograd of the forward)", location(kTorchBackward)));
  return w;
}

Tensors TorchBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                               const Tensors&, const Tensors& output_grads) {
  auto it = ops().find(node.op_type);
  if (it == ops().end() || !it->second.differentiable)
    throw Unsupported(node.label() + ": torch binding has no backward for " + node.op_type);
  at::AutoGradMode grad_mode(true);
  ATs x, wrt;
  std::vector<std::size_t> wrt_index;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor t = to_aten(inputs[i]);
    const auto& skip = it->second.no_grad_inputs;
    if (t.defined() && at::isFloatingType(t.scalar_type()) &&
        std::find(skip.begin(), skip.end(), i) == skip.end()) {
      t.set_requires_grad(true);
      wrt.push_back(t);
      wrt_index.push_back(i);
    }
    x.push_back(t);
  }
  ATs y = run_op(node, opset, inputs, x);
  ATs outs, gouts;
  for (std::size_t i = 0; i < y.size() && i < output_grads.size(); ++i) {
    if (!output_grads[i].defined() || !y[i].defined()) continue;
    if (!y[i].requires_grad()) {
      if (!at::isFloatingType(y[i].scalar_type())) continue;  // indices, masks
      throw Unsupported(fmt::format("{}: ATen does not differentiate output #{} '{}'", node.label(),
                                    i, i < node.outputs.size() ? node.outputs[i] : ""));
    }
    outs.push_back(y[i]);
    gouts.push_back(to_aten(output_grads[i]));
  }
  Tensors grads(inputs.size());
  if (outs.empty() || wrt.empty()) return grads;
  auto g = torch::autograd::grad(outs, wrt, gouts, false, false, true);
  // An input ATen took as a plain number (Clip bounds, the Pad value) gets no gradient: it is
  // left undefined, which says "not differentiated", rather than a false zero.
  for (std::size_t j = 0; j < wrt.size(); ++j)
    if (g[j].defined()) grads[wrt_index[j]] = from_aten(g[j], node.label());
  return grads;
}

}  // namespace metaop
