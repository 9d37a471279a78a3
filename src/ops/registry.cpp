#include "ops/registry.h"

namespace metaop {

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_linear_ops(r);
    register_conv_ops(r);
    register_pool_ops(r);
    register_norm_ops(r);
    register_reduce_ops(r);
    register_shape_ops(r);
    register_index_ops(r);
    register_resize_ops(r);
    register_loss_ops(r);
    return r;
  }();
  return registry;
}

const MetaOp* OpRegistry::find(const std::string& type) const {
  auto it = ops_.find(type);
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [t, op] : ops_) out.push_back(t);
  return out;
}

void OpRegistry::add(MetaOp op) {
  if (ops_.count(op.type)) fail("internal: meta op {} registered twice", op.type);
  std::string t = op.type;
  ops_.emplace(std::move(t), std::move(op));
}

void OpRegistry::set_error_model(const std::string& type, ErrorModel model) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: error model for unknown meta op {}", type);
  it->second.error = std::move(model);
}

void OpRegistry::set_vjp(const std::string& type, ReferenceVjp vjp) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: VJP for unknown meta op {}", type);
  it->second.vjp = std::move(vjp);
}

void OpRegistry::set_subgradient(const std::string& type, SubgradientFn fn) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: subgradient for unknown meta op {}", type);
  it->second.subgradient = std::move(fn);
}

void OpRegistry::set_backward_error_model(const std::string& type, VjpMagnitudeFn fn,
                                          std::string doc, double ulps) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: backward error model for unknown meta op {}", type);
  if (!it->second.error.declared()) fail("internal: backward error model before the forward's");
  it->second.error.backward = std::move(fn);
  it->second.error.backward_doc = std::move(doc);
  it->second.error.backward_ulps = ulps;
}

void OpRegistry::set_domain(const std::string& type, Domain domain) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: domain for unknown meta op {}", type);
  // Danger zones may be declared before or after the rest of the domain.
  if (domain.danger.empty()) domain.danger = std::move(it->second.domain.danger);
  it->second.domain = std::move(domain);
}

void OpRegistry::set_danger(const std::string& type, DangerZones zones) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: danger zones for unknown meta op {}", type);
  it->second.domain.danger = std::move(zones);
}

}  // namespace metaop
