// The only file with LibTorch's optimizer headers (they pull in torch::nn).
#include "bindings/torch/torch_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <map>

#include "bindings/torch/aten_convert.h"
#include "ops/kernel_util.h"

namespace metaop {

struct TorchUpdate::Impl {
  OptimizerConfig c;
  struct Entry {
    at::Tensor param;  // a leaf tensor holding the weight between steps
    std::unique_ptr<torch::optim::Optimizer> opt;
  };
  std::map<std::string, Entry> entries;

  Entry& entry(const std::string& weight, const Tensor& w) {
    auto& e = entries[weight];
    if (e.opt) return e;
    e.param = to_aten(w).set_requires_grad(true);
    std::vector<at::Tensor> params{e.param};
    if (c.kind == "sgd")
      e.opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(c.lr)
                                                              .momentum(c.momentum)
                                                              .nesterov(c.nesterov)
                                                              .weight_decay(c.weight_decay));
    else if (c.kind == "adam")
      e.opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(c.lr)
                                                               .betas({c.beta1, c.beta2})
                                                               .eps(c.eps)
                                                               .weight_decay(c.weight_decay));
    else
      e.opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(c.lr)
                                                                .betas({c.beta1, c.beta2})
                                                                .eps(c.eps)
                                                                .weight_decay(c.weight_decay));
    return e;
  }

  // The key of a parameter's state: its TensorImpl in LibTorch 2, that address as text in 1.13.
#if TORCH_VERSION_MAJOR >= 2
  static void* key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
  static std::string key(const at::Tensor& p) {
    return c10::guts::to_string(p.unsafeGetTensorImpl());
  }
#endif
};

TorchUpdate::TorchUpdate(OptimizerConfig c) : impl_(std::make_unique<Impl>()) {
  validate(c);
  impl_->c = std::move(c);
}

TorchUpdate::~TorchUpdate() = default;

Tensor TorchUpdate::step(const std::string& weight, long, const Tensor& w, const Tensor& g) {
  auto& e = impl_->entry(weight, w);
  {
    at::NoGradGuard no_grad;
    // The weight as the plan has it (an injected fault may have changed the last result).
    e.param.copy_(to_aten(w));
  }
  e.param.mutable_grad() = to_aten(g);
  try {
    e.opt->step();
  } catch (const c10::Error& err) {
    std::string what = err.what_without_backtrace();
    // ATen has no kernel for this dtype (e.g. addcmul on CPU float16): a normal answer.
    if (what.find("not implemented for") != std::string::npos)
      throw Unsupported(fmt::format("torch optimizer on weight '{}' ({}): {}", weight,
                                    dtype_name(w.dtype()), what));
    fail("torch optimizer on weight '{}': {}", weight, what);
  }
  return from_aten(e.param, weight);
}

Tensors TorchUpdate::state(const std::string& weight) const {
  Tensors out;
  auto it = impl_->entries.find(weight);
  if (it == impl_->entries.end()) return out;
  const auto& st = it->second.opt->state();
  auto s = st.find(Impl::key(it->second.param));
  if (s == st.end()) return out;
  if (impl_->c.kind == "sgd") {
    auto& ps = static_cast<const torch::optim::SGDParamState&>(*s->second);
    if (ps.momentum_buffer().defined()) out.push_back(from_aten(ps.momentum_buffer(), weight));
  } else if (impl_->c.kind == "adam") {
    auto& ps = static_cast<const torch::optim::AdamParamState&>(*s->second);
    out = {from_aten(ps.exp_avg(), weight), from_aten(ps.exp_avg_sq(), weight)};
  } else {
    auto& ps = static_cast<const torch::optim::AdamWParamState&>(*s->second);
    out = {from_aten(ps.exp_avg(), weight), from_aten(ps.exp_avg_sq(), weight)};
  }
  return out;
}

void TorchUpdate::set_state(const std::string& weight, long t, const Tensors& slots) {
  auto it = impl_->entries.find(weight);
  if (slots.empty()) {  // back to before the first step
    if (it != impl_->entries.end()) it->second.opt->state().erase(Impl::key(it->second.param));
    return;
  }
  // A weight not stepped yet gets its optimizer now (its value is copied in at each step).
  auto& e = impl_->entry(weight, slots[0]);
  auto& st = e.opt->state();
  auto k = Impl::key(e.param);
  auto slot = [&](std::size_t i) { return to_aten(slots.at(i)).reshape(e.param.sizes()); };
  if (impl_->c.kind == "sgd") {
    auto ps = std::make_unique<torch::optim::SGDParamState>();
    ps->momentum_buffer(slot(0));
    st[k] = std::move(ps);
  } else if (impl_->c.kind == "adam") {
    auto ps = std::make_unique<torch::optim::AdamParamState>();
    ps->step(t);
    ps->exp_avg(slot(0));
    ps->exp_avg_sq(slot(1));
    st[k] = std::move(ps);
  } else {
    auto ps = std::make_unique<torch::optim::AdamWParamState>();
    ps->step(t);
    ps->exp_avg(slot(0));
    ps->exp_avg_sq(slot(1));
    st[k] = std::move(ps);
  }
}

}  // namespace metaop
