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

void OpRegistry::add(MetaOp op, Where where) {
  if (ops_.count(op.type)) fail("internal: meta op {} registered twice", op.type);
  op.where.emplace_back("forward", where);
  std::string t = op.type;
  ops_.emplace(std::move(t), std::move(op));
}

MetaOp& OpRegistry::at(const std::string& type, const char* concern) {
  auto it = ops_.find(type);
  if (it == ops_.end()) fail("internal: {} for unknown meta op {}", concern, type);
  return it->second;
}

void OpRegistry::set_error_model(const std::string& type, ErrorModel model, Where where) {
  MetaOp& op = at(type, "error model");
  op.error = std::move(model);
  op.where.emplace_back("error model", where);
}

void OpRegistry::set_vjp(const std::string& type, ReferenceVjp vjp, Where where) {
  MetaOp& op = at(type, "VJP");
  op.vjp = std::move(vjp);
  op.where.emplace_back("vjp", where);
}

void OpRegistry::set_subgradient(const std::string& type, SubgradientFn fn, Where where) {
  MetaOp& op = at(type, "subgradient");
  op.subgradient = std::move(fn);
  op.where.emplace_back("subgradient", where);
}

void OpRegistry::set_backward_error_model(const std::string& type, VjpMagnitudeFn fn,
                                          std::string doc, double ulps, Where where) {
  MetaOp& op = at(type, "backward error model");
  if (!op.error.declared()) fail("internal: backward error model of {} before the forward's", type);
  op.error.backward = std::move(fn);
  op.error.backward_doc = std::move(doc);
  op.error.backward_ulps = ulps;
  op.where.emplace_back("backward error model", where);
}

void OpRegistry::set_domain(const std::string& type, Domain domain, Where where) {
  MetaOp& op = at(type, "domain");
  op.domain = std::move(domain);
  op.where.emplace_back("domain", where);
}

}  // namespace metaop
