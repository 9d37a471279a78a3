#include "ops/vjp_util.h"

#include <algorithm>
#include <cmath>

#include "ops/kernel_util.h"

namespace metaop {

std::vector<double> grad_of(const Tensors& grads, const Tensors& outputs, std::size_t o) {
  if (o < grads.size() && grads[o].defined()) return grads[o].to_f64();
  return std::vector<double>(static_cast<std::size_t>(outputs.at(o).numel()), 0.0);
}

std::vector<double> unbroadcast(const std::vector<double>& g, const Shape& out, const Shape& in) {
  if (out == in) return g;
  auto map = broadcast_map(in, out);
  std::vector<double> r(static_cast<std::size_t>(shape_numel(in)), 0.0);
  for (std::size_t i = 0; i < g.size(); ++i) r[map[i]] += g[i];
  return r;
}

std::vector<double> unbroadcast_f32(const std::vector<double>& g, const Shape& out, const Shape& in,
                                    SumOrder order) {
  auto map = broadcast_map(in, out);
  std::vector<std::vector<float>> terms(static_cast<std::size_t>(shape_numel(in)));
  for (std::size_t i = 0; i < g.size(); ++i) terms[map[i]].push_back(static_cast<float>(g[i]));
  std::vector<double> r(terms.size());
  for (std::size_t e = 0; e < r.size(); ++e) r[e] = float32_sum(std::move(terms[e]), order);
  return r;
}

Tensor grad_like(const std::vector<double>& g, const Tensor& like) {
  return Tensor::from_f64(g, like.shape(), like.dtype());
}

TieCollector::TieCollector(std::size_t elements)
    : lo_(elements, 0.0), hi_(elements, 0.0), group_(elements, -1), parent_(elements) {
  for (std::size_t i = 0; i < elements; ++i) parent_[i] = static_cast<std::int64_t>(i);
}

std::int64_t TieCollector::root(std::int64_t i) {
  while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
  return i;
}

void TieCollector::add(const std::vector<std::int64_t>& candidates, double g) {
  if (candidates.empty()) return;
  if (candidates.size() == 1) {
    lo_[candidates[0]] += g;
    hi_[candidates[0]] += g;
    return;
  }
  any_ = true;
  for (auto e : candidates) {
    lo_[e] += std::min(0.0, g);
    hi_[e] += std::max(0.0, g);
    group_[e] = 0;
    parent_[root(e)] = root(candidates[0]);
  }
}

GradientSet TieCollector::finish() {
  if (!any_) return {};
  for (std::size_t i = 0; i < group_.size(); ++i)
    if (group_[i] >= 0) group_[i] = root(static_cast<std::int64_t>(i));
  return {std::move(lo_), std::move(hi_), std::move(group_)};
}

namespace {

// data_movement_vjp's adjoint; with `order`, each input element's copies summed in float32 in that
// order (the float32 twin), else in float64.
Tensors moved_back(const std::vector<int>& data_inputs, const std::vector<int>& zero_fill,
                   const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads, const SumOrder* order) {
  const MetaOp* op = OpRegistry::instance().find(c.node.op_type);
  Tensors probe = in;
  std::vector<std::int64_t> base(in.size(), -1);
  std::int64_t next = 1;  // element numbers start at 1: 0 is what fills look like
  for (int k : data_inputs) {
    if (k >= static_cast<int>(in.size()) || !in[k].defined() || !is_floating(in[k].dtype()))
      continue;
    std::vector<double> ids(static_cast<std::size_t>(in[k].numel()));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<double>(next + i);
    base[k] = next;
    next += in[k].numel();
    probe[k] = Tensor::from_f64(ids, in[k].shape(), DType::Float64);
  }
  for (int k : zero_fill)
    if (k < static_cast<int>(in.size()) && in[k].defined())
      probe[k] =
          Tensor::from_f64(std::vector<double>(in[k].numel(), 0.0), in[k].shape(), DType::Float64);
  Tensors moved = op->reference(c, probe);
  // Each input element's copies, in the order of the outputs' elements.
  std::vector<std::vector<std::vector<float>>> terms(in.size());
  std::vector<std::vector<double>> gin(in.size());
  for (std::size_t k = 0; k < in.size(); ++k)
    if (base[k] >= 0) {
      gin[k].assign(static_cast<std::size_t>(in[k].numel()), 0.0);
      if (order) terms[k].resize(gin[k].size());
    }
  for (std::size_t o = 0; o < moved.size() && o < out.size(); ++o) {
    if (o >= grads.size() || !grads[o].defined() || !is_floating(moved[o].dtype())) continue;
    auto ids = moved[o].to_f64();
    auto g = grads[o].to_f64();
    for (std::size_t j = 0; j < ids.size(); ++j) {
      double id = ids[j];
      if (!(id >= 1) || id != std::floor(id)) continue;  // a fill
      auto n = static_cast<std::int64_t>(id);
      for (std::size_t k = 0; k < in.size(); ++k)
        if (base[k] >= 0 && n >= base[k] && n < base[k] + in[k].numel()) {
          auto e = static_cast<std::size_t>(n - base[k]);
          if (order)
            terms[k][e].push_back(static_cast<float>(g[j]));
          else
            gin[k][e] += g[j];
          break;
        }
    }
  }
  Tensors r(in.size());
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (base[k] < 0) continue;
    if (order)
      for (std::size_t e = 0; e < gin[k].size(); ++e)
        gin[k][e] = float32_sum(std::move(terms[k][e]), *order);
    r[k] = grad_like(gin[k], in[k]);
  }
  return r;
}

}  // namespace

ReferenceVjp data_movement_vjp(const std::vector<int>& data_inputs,
                               const std::vector<int>& zero_fill) {
  return [data_inputs, zero_fill](const KernelContext& c, const Tensors& in, const Tensors& out,
                                  const Tensors& grads) {
    return moved_back(data_inputs, zero_fill, c, in, out, grads, nullptr);
  };
}

Float32VjpEvaluate data_movement_vjp_f32(std::vector<int> data_inputs, std::vector<int> zero_fill) {
  return
      [data_inputs = std::move(data_inputs), zero_fill = std::move(zero_fill)](
          const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
          SumOrder order) { return moved_back(data_inputs, zero_fill, c, in, out, grads, &order); };
}

}  // namespace metaop
