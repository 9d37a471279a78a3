#include "ops/registry.h"

#include "ops/vjp_util.h"

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
    register_recurrent_ops(r);
    register_attention_ops(r);
    register_signal_ops(r);
    register_grid_sample_ops(r);
    register_quantized_ops(r);
    register_detection_ops(r);
    register_det_ops(r);
    register_ngram_ops(r);
    register_training_ops(r);
    register_float32_definitions(r);
    register_float32_vjps(r);
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
  out.reserve(ops_.size());
  for (const auto& [t, op] : ops_) out.push_back(t);
  return out;
}

OpBuilder OpRegistry::op(std::string type, Family family, ReferenceForward reference, Where where) {
  std::string name = type;
  add(MetaOp(std::move(type), family, std::move(reference)), where);
  return OpBuilder(*this, std::move(name));
}

OpBuilder OpRegistry::amend(const std::string& type) {
  at(type, "amend");
  return OpBuilder(*this, type);
}

template <class D>
OpBuilder& OpBuilder::declare(D MetaOp::*field, D value, const char* concern, Where where) {
  MetaOp& op = r_.at(type_, concern);
  op.*field = std::move(value);
  op.where.emplace_back(concern, where);
  return *this;
}

OpBuilder& OpBuilder::error(ErrorModel m, Where where) {
  r_.set_error_model(type_, std::move(m), where);
  return *this;
}
OpBuilder& OpBuilder::vjp(ReferenceVjp f, Where where) {
  r_.set_vjp(type_, std::move(f), where);
  return *this;
}
OpBuilder& OpBuilder::backward_error(VjpMagnitudeFn f, std::string doc, double ulps, Where where) {
  r_.set_backward_error_model(type_, std::move(f), std::move(doc), ulps, where);
  return *this;
}
OpBuilder& OpBuilder::domain(Domain d, Where where) {
  r_.set_domain(type_, std::move(d), where);
  return *this;
}
OpBuilder& OpBuilder::subgradient(SubgradientFn f, Where where) {
  r_.set_subgradient(type_, std::move(f), where);
  return *this;
}
OpBuilder& OpBuilder::danger(DangerZones zones, Where where) {
  r_.set_danger(type_, std::move(zones), where);
  return *this;
}

OpBuilder& OpBuilder::inputs(InputRoles roles, Where where) {
  return declare(&MetaOp::inputs, std::move(roles), "inputs", where);
}
OpBuilder& OpBuilder::cases(std::vector<CaseSpec> cases, Where where) {
  MetaOp& op = r_.at(type_, "cases");
  for (auto& c : cases) op.cases.push_back(std::move(c));
  op.where.emplace_back("cases", where);
  return *this;
}
OpBuilder& OpBuilder::undefined(Undefined u, Where where) {
  return declare(&MetaOp::undefined, std::move(u), "undefined inputs", where);
}
OpBuilder& OpBuilder::training(TrainingMode t, Where where) {
  return declare(&MetaOp::training, std::move(t), "training mode", where);
}
OpBuilder& OpBuilder::faults(std::vector<std::string> names, Where where) {
  return declare(&MetaOp::faults, std::move(names), "faults", where);
}
OpBuilder& OpBuilder::explain(ExplainWords words, Where where) {
  return declare(&MetaOp::explain, std::move(words), "explanation", where);
}

OpBuilder& OpBuilder::dtypes(std::vector<DType> types, Where where) {
  return declare(&MetaOp::dtypes, std::move(types), "dtypes", where);
}

OpBuilder& OpBuilder::float32(Float32Evaluate twin, std::string formula, std::string better,
                              Where where) {
  return declare(
      &MetaOp::float32,
      {Float32Definition::How::twin, std::move(twin), std::move(formula), std::move(better)},
      "float32 definition", where);
}
OpBuilder& OpBuilder::float32_rounded(Where where) {
  return declare(&MetaOp::float32, {Float32Definition::How::rounded, {}, "", ""},
                 "float32 definition", where);
}
OpBuilder& OpBuilder::vjp_float32(Float32VjpEvaluate twin, std::string formula, std::string better,
                                  Where where) {
  return declare(
      &MetaOp::vjp_float32,
      {Float32Definition::How::twin, std::move(twin), std::move(formula), std::move(better)},
      "vjp float32 definition", where);
}
OpBuilder& OpBuilder::vjp_float32_rounded(Where where) {
  return declare(&MetaOp::vjp_float32, {Float32Definition::How::rounded, {}, "", ""},
                 "vjp float32 definition", where);
}
OpBuilder& OpBuilder::data_movement_vjp(std::vector<int> data_inputs, std::vector<int> zero_fill,
                                        Where where) {
  vjp(metaop::data_movement_vjp(data_inputs, zero_fill), where);
  return vjp_float32(data_movement_vjp_f32(std::move(data_inputs), std::move(zero_fill)),
                     "the gradient moved back, summed where an element was copied more than once",
                     "a wider accumulator for the repeated copies", where);
}
OpBuilder& OpBuilder::conventions(std::vector<Convention> c, Where where) {
  return declare(&MetaOp::conventions, std::move(c), "conventions", where);
}

OpBuilder& OpBuilder::onnx_domain(std::string domain, Where where) {
  return declare(&MetaOp::onnx_domain, std::move(domain), "ONNX domain", where);
}

void OpRegistry::add(MetaOp op, Where where) {
  if (ops_.count(op.type)) fail("internal: meta op {} registered twice", op.type);
  op.where.emplace_back("forward", where);
  std::string t = op.type;
  ops_.emplace(std::move(t), std::move(op));
}

void require_registered(const std::string& type, const std::string& what) {
  if (!OpRegistry::instance().find(type))
    fail("internal: {} names '{}', which is not a registered meta op", what, type);
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
  // Danger zones may be declared before or after the rest of the domain.
  if (domain.danger.empty()) domain.danger = std::move(op.domain.danger);
  op.domain = std::move(domain);
  op.where.emplace_back("domain", where);
}

void OpRegistry::set_danger(const std::string& type, DangerZones zones, Where where) {
  MetaOp& op = at(type, "danger zones");
  op.domain.danger = std::move(zones);
  op.where.emplace_back("danger zones", where);
}

}  // namespace metaop
