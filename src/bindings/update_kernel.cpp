#include "bindings/update_kernel.h"

#include <algorithm>

#include "bindings/factory.h"
#include "bindings/isolate.h"
#include "ops/kernel_util.h"

namespace metaop {

std::vector<std::string> update_binding_names() {
  std::vector<std::string> names;
  for (const auto& b : binding_infos())
    if (b.update) names.push_back(b.name);
  return names;
}

bool has_update_kernel(const std::string& binding) {
  const BindingInfo* b = find_binding_info(binding);
  return b && b->update;
}

namespace {

const BindingInfo& with_update(const std::string& binding) {
  const BindingInfo* b = find_binding_info(binding);
  if (!b || !b->update)
    fail("binding '{}' has no optimizer (update kernels: {})", binding,
         fmt::join(update_binding_names(), ", "));
  return *b;
}

}  // namespace

std::unique_ptr<UpdateKernel> make_update_kernel(const std::string& binding,
                                                 const OptimizerConfig& c) {
  validate(c);
  const BindingInfo& b = with_update(binding);
  if (!b.plugin.empty() && b.isolate && isolation() == Isolation::Process)
    return std::make_unique<IsolatedUpdate>(plugin_binding(b), c);
  return make_update_kernel_in_process(binding, c);
}

std::unique_ptr<UpdateKernel> make_update_kernel_in_process(const std::string& binding,
                                                            const OptimizerConfig& c) {
  validate(c);
  const BindingInfo& b = with_update(binding);
  if (b.plugin.empty()) return std::make_unique<ReferenceUpdate>(c);
  return load_plugin_binding(b).update(c);
}

ReferenceUpdate::ReferenceUpdate(OptimizerConfig c) : c_(std::move(c)) {
  validate(c_);
}

namespace {

// The rule over n elements: weights read as double, each new weight rounded once to T.
template <typename T>
void update_all(const UpdateRule& rule, bool first, std::size_t n, const T* w, const T* g, T* out,
                std::vector<double>& m, std::vector<double>& v) {
  for (std::size_t i = 0; i < n; ++i) {
    UpdateElement e = rule(first, static_cast<double>(w[i]), static_cast<double>(g[i]),
                           m.empty() ? 0.0 : m[i], v.empty() ? 0.0 : v[i]);
    out[i] = static_cast<T>(e.w);
    if (!m.empty()) m[i] = e.m;
    if (!v.empty()) v[i] = e.v;
  }
}

}  // namespace

Tensor ReferenceUpdate::step(const std::string& weight, long t, const Tensor& w, const Tensor& g) {
  std::size_t n = static_cast<std::size_t>(w.numel()), slots = optimizer_slots(c_).size();
  auto& m = m_[weight];
  auto& v = v_[weight];
  shape_[weight] = w.shape();
  bool first = slots > 0 && m.size() != n;
  if (first) {
    if (slots > 0) m.assign(n, 0.0);
    if (slots > 1) v.assign(n, 0.0);
  }
  UpdateRule rule(c_, t);
  if (w.dtype() == DType::Float32 && g.dtype() == DType::Float32) {
    Tensor out(DType::Float32, w.shape());
    update_all(rule, first, n, w.data<float>(), g.data<float>(), out.data<float>(), m, v);
    return out;
  }
  auto wd = w.to_f64(), gd = g.to_f64();
  std::vector<double> nw(n);
  update_all(rule, first, n, wd.data(), gd.data(), nw.data(), m, v);
  return Tensor::from_f64(nw, w.shape(), w.dtype());
}

Tensors ReferenceUpdate::state(const std::string& weight) const {
  Tensors out;
  auto m = m_.find(weight), v = v_.find(weight);
  if (m == m_.end()) return out;
  const Shape& s = shape_.at(weight);
  if (!m->second.empty()) out.push_back(Tensor::from_f64(m->second, s, DType::Float64));
  if (v != v_.end() && !v->second.empty())
    out.push_back(Tensor::from_f64(v->second, s, DType::Float64));
  return out;
}

void ReferenceUpdate::set_state(const std::string& weight, long, const Tensors& slots) {
  if (!slots.empty()) shape_[weight] = slots[0].shape();
  auto& m = m_[weight];
  auto& v = v_[weight];
  m = slots.size() > 0 ? slots[0].to_f64() : std::vector<double>{};
  v = slots.size() > 1 ? slots[1].to_f64() : std::vector<double>{};
}

}  // namespace metaop
