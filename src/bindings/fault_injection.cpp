#include "bindings/fault_injection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bindings/factory.h"
#include "bindings/isolate.h"
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/params.h"
#include "ops/registry.h"

namespace metaop {

const std::vector<FaultInfo>& fault_catalog() {
  static const std::vector<FaultInfo> catalog = [] {
    std::vector<FaultInfo> c = {
        {"bias", "relative error 1e-3 on the output element of largest magnitude"},
        // Op-specific: the ops each applies to name it in their block (OpBuilder::faults).
        {"eps", "epsilon raised to max(100 eps, 1e-3)", true},
        {"nomax", "exp without subtracting the max, in float32", true},
        {"half_acc", "dot products accumulated sequentially in float16", true},
        {"offbyone", "window or index shifted by one (input rolled by one along its last axis)",
         true},
        {"drop_bias", "bias input ignored", true},
        {"naive_f32",
         "the op's definition computed as the ONNX text writes it, in float32 (its float32 "
         "evaluation, Float32Definition): a kernel no worse than the formula",
         true},
        {"nan", "NaN in the output element of largest magnitude"},
        {"swap", "two output dims transposed (data only; the shape is kept)"},
        // Also an update kernel's step (WEIGHT_NODE_OR_OP:FAULT@BINDING:update).
        {"abort", "the kernel aborts (SIGABRT, in its worker process)"},
        {"segv", "the kernel dies of a segmentation fault (SIGSEGV, in its worker process)"},
        {"hang", "the kernel never returns (killed after --kernel-timeout)"},
        // Backward (OP:FAULT@BINDING:backward).
        {"grad_sign", "backward: the gradient of the first input has its sign flipped"},
        {"grad_scale", "backward: the gradient of the first input is doubled"},
        // Update (WEIGHT_NODE_OR_OP:FAULT@BINDING:update; an op or node names its weights).
        {"update_sign", "update: the step applied with its sign flipped"},
        {"update_scale", "update: the step doubled"},
        {"half_state", "update: the optimizer state kept in float16 precision"},
        {"stale_state", "update: the optimizer state not written back"},
        {"update_nan", "update: NaN in the new weight's element of largest magnitude"},
    };
    const auto& reg = OpRegistry::instance();
    auto naive =
        std::find_if(c.begin(), c.end(), [](const auto& f) { return f.name == "naive_f32"; });
    for (const auto& type : reg.types())  // naive_f32: every op with a float32 twin
      if (reg.find(type)->float32.how == Float32Definition::How::twin)
        naive->op_types.push_back(type);
    for (const auto& type : reg.types())
      for (const auto& name : reg.find(type)->faults) {
        auto it = std::find_if(c.begin(), c.end(), [&](const auto& f) { return f.name == name; });
        if (it == c.end() || !it->op_specific)
          fail("internal: {} names fault '{}', which is not an op-specific fault", type, name);
        it->op_types.push_back(type);
      }
    return c;
  }();
  return catalog;
}

bool fault_applies(const std::string& fault, const std::string& op_type) {
  for (const auto& f : fault_catalog())
    if (f.name == fault)
      return !f.op_specific ||
             std::find(f.op_types.begin(), f.op_types.end(), op_type) != f.op_types.end();
  return false;
}

Phase fault_phase(const std::string& fault) {
  if (fault == "grad_sign" || fault == "grad_scale") return Phase::Backward;
  if (fault.starts_with("update_") || fault.ends_with("_state")) return Phase::Update;
  return Phase::Forward;
}

FaultSpec parse_fault(const std::string& spec) {
  FaultSpec f;
  auto colon = spec.find(':');
  if (colon == std::string::npos || colon == 0)
    fail("--inject '{}': expected OPTYPE_OR_NODE:FAULT[@BINDING]", spec);
  f.target = spec.substr(0, colon);
  std::string rest = spec.substr(colon + 1);
  if (auto at = rest.find('@'); at != std::string::npos) {
    f.binding = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (auto c = f.binding.find(':'); c != std::string::npos) {
      f.phase = parse_phase(std::string_view(f.binding).substr(c + 1),
                            fmt::format("--inject '{}'", spec));
      f.binding = f.binding.substr(0, c);
    }
  }
  f.fault = rest;
  std::vector<std::string> names;
  names.reserve(fault_catalog().size());
  for (const auto& c : fault_catalog()) names.push_back(c.name);
  if (std::find(names.begin(), names.end(), f.fault) == names.end())
    fail("--inject '{}': unknown fault '{}' (known: {})", spec, f.fault, fmt::join(names, ", "));
  Phase phase = fault_phase(f.fault);
  // A process fault is a forward fault, or a crash of an update kernel (WEIGHT:segv@torch:update).
  bool process = f.fault == "abort" || f.fault == "segv" || f.fault == "hang";
  if (phase != f.phase && !(process && f.phase == Phase::Update))
    fail("--inject '{}': {} is a{} {} fault (write {}:{}@BINDING{})", spec, f.fault,
         phase == Phase::Update ? "n" : "", phase, f.target, f.fault,
         phase == Phase::Forward ? "" : fmt::format(":{}", phase));
  if (!f.binding.empty()) {
    auto known = f.phase == Phase::Update ? update_binding_names() : binding_names();
    if (std::find(known.begin(), known.end(), f.binding) == known.end() || f.binding == "reference")
      fail("--inject '{}': '{}' is not a framework binding (known: {})", spec, f.binding,
           fmt::join(known, ", "));
  }
  return f;
}

FaultyBinding::FaultyBinding(std::unique_ptr<Binding> inner, std::vector<FaultSpec> faults)
    : inner_(std::move(inner)), faults_(std::move(faults)) {}

Support FaultyBinding::supports(const std::string& op_type) const {
  return inner_->supports(op_type);
}

const FaultSpec* FaultyBinding::match(const Node& node, Phase phase) const {
  for (const auto& f : faults_)
    if (f.phase == phase && (f.target == node.name || f.target == node.op_type)) return &f;
  return nullptr;
}

Tensors FaultyBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                const Tensors& outputs, const Tensors& output_grads) {
  const FaultSpec* f = match(node, Phase::Backward);
  Tensors g;
  try {
    g = inner_->backward(node, opset, inputs, outputs, output_grads);
  } catch (const Unsupported& e) {
    if (f) log_[node.name + ":backward"] = fmt::format("not applied: {}", e.what());
    throw;
  }
  if (!f) return g;
  if (g.empty() || !g[0].defined()) {
    log_[node.name + ":backward"] = "not applied: no gradient for the first input";
    return g;
  }
  auto v = g[0].to_f64();
  for (auto& x : v) x *= f->fault == "grad_sign" ? -1 : 2;
  g[0] = Tensor::from_f64(v, g[0].shape(), g[0].dtype());
  log_[node.name + ":backward"] = f->fault + " on the first input's gradient";
  return g;
}

namespace {

// The half_acc fault's kernel: every dot product summed sequentially with the running sum
// rounded to float16 after each term, as a kernel that accumulates in float16 would.
double to_half(double x) {
  return half_bits_to_f64(f64_to_half_bits(x));
}

void half_accumulating_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                            double alpha, const double* a, const double* b, double beta,
                            double* c) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        double av = ta ? a[p * m + i] : a[i * k + p], bv = tb ? b[j * k + p] : b[p * n + j];
        acc = to_half(acc + av * bv);
      }
      c[i * n + j] = to_half(alpha * acc + beta * c[i * n + j]);
    }
}

std::int64_t argmax_abs(const std::vector<double>& v) {
  std::int64_t best = -1;
  double m = -1;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::isfinite(v[i]) && std::fabs(v[i]) > m) {
      m = std::fabs(v[i]);
      best = static_cast<std::int64_t>(i);
    }
  return best;
}

// x[..., j] <- x[..., (j + 1) % n] along the last axis with more than one element.
Tensor roll_last_axis(const Tensor& x, std::string& where) {
  std::int64_t axis = -1;
  for (std::int64_t d = x.rank(); d-- > 0;)
    if (x.shape()[d] > 1) {
      axis = d;
      break;
    }
  if (axis < 0) return Tensor();
  where = fmt::format("input rolled by one along axis {}", axis);
  Shape s = x.shape();
  return take_mapped(
      x, s, [&](std::int64_t d, std::int64_t i) { return d == axis ? (i + 1) % s[d] : i; });
}

// Softmax / LogSoftmax / ReduceLogSumExp the naive way: float32 exp of the raw inputs.
Tensors no_max(const Node& node, std::int64_t opset, const Tensors& in) {
  KernelContext c{node, opset};
  const Tensor& x = in[0];
  auto v = x.to_f64();
  if (node.op_type == "ReduceLogSumExp") {
    auto axes = reduce_axes(c, in, x.rank());
    auto [kept, map] = groups_over(x.shape(), axes.axes);
    std::vector<float> s(static_cast<std::size_t>(shape_numel(kept)), 0.0f);
    for (std::int64_t i = 0; i < x.numel(); ++i) s[map[i]] += std::exp(static_cast<float>(v[i]));
    std::vector<double> y(s.begin(), s.end());
    for (auto& e : y) e = std::log(static_cast<float>(e));
    Shape out;
    for (std::int64_t d = 0; d < x.rank(); ++d)
      if (axes.keepdims || kept[d] == x.shape()[d] || axes.noop) out.push_back(kept[d]);
    return {Tensor::from_f64(y, out, x.dtype())};
  }
  auto [axis, outer, n, inner] = softmax_split(c, x.shape());
  (void)axis;
  std::vector<double> y(v.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * n + j) * inner + i; };
      float s = 0;
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(static_cast<float>(v[at(j)]));
      for (std::int64_t j = 0; j < n; ++j) {
        float e = std::exp(static_cast<float>(v[at(j)]));
        y[at(j)] = node.op_type == "Softmax" ? e / s : std::log(e / s);
      }
    }
  return {Tensor::from_f64(y, x.shape(), x.dtype())};
}

// Transposes the contents of the last two dims with more than one element; keeps the shape.
bool swap_dims(Tensor& y, std::string& where) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = y.rank(); d-- > 0 && dims.size() < 2;)
    if (y.shape()[d] > 1) dims.push_back(d);
  if (dims.size() < 2) return false;
  std::int64_t a = dims[1], b = dims[0];
  Shape t = y.shape();
  std::swap(t[a], t[b]);
  // Element at multi-index i of the transposed view comes from i with a and b exchanged.
  auto src_strides = strides_of(y.shape());
  auto n = y.numel();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  IndexIter it(t);
  for (std::int64_t i = 0; i < n; ++i, it.next()) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < y.rank(); ++d) {
      std::int64_t src_d = d == a ? b : d == b ? a : d;
      off += it.idx()[d] * src_strides[src_d];
    }
    idx[i] = off;
  }
  y = take(y, y.shape(), idx);
  where = fmt::format("dims {} and {} transposed", a, b);
  return true;
}

}  // namespace

Tensors FaultyBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  const FaultSpec* f = match(node, Phase::Forward);
  if (!f) return inner_->forward(node, opset, inputs);
  std::string note;
  Tensors out;
  try {
    out = faulty_forward(*f, node, opset, inputs, note);
  } catch (...) {
    if (!note.empty()) log_[node.name] = note;
    throw;
  }
  log_[node.name] = note;
  if (f->fault == "abort" || f->fault == "segv" || f->fault == "hang" ||
      note.rfind("not applied", 0) == 0)
    return out;
  // How much the fault changed the clean kernel's result (faults can be masked: a zero bias
  // dropped, a softmax whose inputs never overflow).
  Tensors clean = inner_->forward(node, opset, inputs);
  std::int64_t changed = 0;
  double worst = 0;
  for (std::size_t o = 0; o < out.size() && o < clean.size(); ++o) {
    if (!out[o].defined() || !clean[o].defined() || out[o].shape() != clean[o].shape()) continue;
    auto a = out[o].to_f64(), b = clean[o].to_f64();
    double scale = 0;
    for (double v : b)
      if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
      ++changed;
      double d = std::fabs(a[i] - b[i]) / (scale > 0 ? scale : 1);
      worst = std::max(worst, std::isnan(d) ? INFINITY : d);
    }
  }
  log_[node.name] = note + fmt::format(
                               "; changed {} elements of the clean result, by up to {:.3g} of its "
                               "largest",
                               changed, worst);
  return out;
}

namespace {

// abort, segv and hang: committed where the kernel runs, in the binding's worker (the
// isolation under test), or in a one-off child when the user asked for kernels in process.
Tensors planted_forward(Binding& inner, const std::string& fault, const Node& node,
                        std::int64_t opset, const Tensors& inputs, std::string& note) {
  note = fault == "abort"  ? "kernel aborted"
         : fault == "segv" ? "kernel segfaulted"
                           : "kernel hung";
  if (auto* iso = dynamic_cast<IsolatedBinding*>(&inner))
    return iso->forward_with_fault(fault, node, opset, inputs);
  return run_isolated(node.label() + ": " + inner.name(),
                      [fault]() -> Tensors { commit_planted_fault(fault); });
}

// eps, offbyone and drop_bias: the clean kernel run on an altered node or altered inputs.
Tensors altered_forward(Binding& inner, const std::string& fault, const Node& node,
                        std::int64_t opset, const Tensors& inputs, std::string& note) {
  if (fault == "eps") {
    Node faulty = node;
    double eps = attr_f(KernelContext{node, opset}, "epsilon"), bad = std::max(100 * eps, 1e-3);
    faulty.attrs["epsilon"] = Attribute::of_float(bad);
    note = fmt::format("epsilon {:g} -> {:g}", eps, bad);
    return inner.forward(faulty, opset, inputs);
  }
  if (fault == "offbyone") {
    if (!is_floating(inputs[0].dtype())) {
      // Rolling shapes or indices would break the graph, not model a kernel bug.
      note = "not applied: input 0 is not floating point";
      return inner.forward(node, opset, inputs);
    }
    Tensors in = inputs;
    Tensor rolled = roll_last_axis(inputs[0], note);
    if (!rolled.defined()) {
      note = "not applied: input has no axis longer than 1";
      return inner.forward(node, opset, inputs);
    }
    in[0] = rolled;
    return inner.forward(node, opset, in);
  }
  // drop_bias
  if (!has_input(inputs, 2)) {
    note = "not applied: no bias input";
    return inner.forward(node, opset, inputs);
  }
  Tensors in = inputs;
  in[2] = Tensor::from_f64(std::vector<double>(inputs[2].numel(), 0.0), inputs[2].shape(),
                           inputs[2].dtype());
  note = "bias input replaced by zeros";
  return inner.forward(node, opset, in);
}

// swap, bias and nan: the clean kernel's first output altered.
void alter_output(const std::string& fault, Tensors& out, std::string& note) {
  if (out.empty() || !out[0].defined() || !is_floating(out[0].dtype())) {
    note = "not applied: no floating output";
    return;
  }
  Tensor& y = out[0];
  if (fault == "swap") {
    if (!swap_dims(y, note)) note = "not applied: output has fewer than two dims longer than 1";
    return;
  }
  auto v = y.to_f64();
  auto i = argmax_abs(v);
  if (i < 0 || v[i] == 0) {
    note = "not applied: output is zero";
    return;
  }
  if (fault == "bias") v[i] *= 1 + 1e-3;
  if (fault == "nan") v[i] = NAN;
  note = fmt::format("{} at {}", fault, index_str(y.shape(), i));
  y = Tensor::from_f64(v, y.shape(), y.dtype());
}

}  // namespace

Tensors FaultyBinding::faulty_forward(const FaultSpec& spec, const Node& node, std::int64_t opset,
                                      const Tensors& inputs, std::string& note) {
  const std::string& fault = spec.fault;
  if (!fault_applies(fault, node.op_type)) {
    note = fmt::format("not applied: {} does not apply to {}", fault, node.op_type);
    return inner_->forward(node, opset, inputs);
  }
  if (fault == "abort" || fault == "segv" || fault == "hang")
    return planted_forward(*inner_, fault, node, opset, inputs, note);
  if (fault == "nomax") {
    note = "softmax without max subtraction";
    return no_max(node, opset, inputs);
  }
  if (fault == "naive_f32") {
    note = "the definition in float32";
    return OpRegistry::instance()
        .find(node.op_type)
        ->float32.evaluate(KernelContext{node, opset}, inputs, SumOrder::written);
  }
  if (fault == "half_acc") {
    note = "float16 accumulation";
    return forward_with_gemm(KernelContext{node, opset}, inputs, half_accumulating_gemm);
  }
  if (fault == "eps" || fault == "offbyone" || fault == "drop_bias")
    return altered_forward(*inner_, fault, node, opset, inputs, note);
  Tensors out = inner_->forward(node, opset, inputs);
  alter_output(fault, out, note);
  return out;
}

FaultyUpdate::FaultyUpdate(std::unique_ptr<UpdateKernel> inner,
                           std::map<std::string, FaultSpec> faults)
    : inner_(std::move(inner)), faults_(std::move(faults)) {}

namespace {

// abort, segv and hang in an update kernel: committed in its binding's worker, where the
// optimizer would run, or in a one-off child when the user asked for kernels in process.
Tensor planted_update(UpdateKernel& inner, const std::string& fault, const std::string& weight,
                      long t, const Tensor& w, const Tensor& g) {
  if (auto* iso = dynamic_cast<IsolatedUpdate*>(&inner))
    return iso->step_with_fault(fault, weight, t, w, g);
  return run_isolated(fmt::format("update of weight '{}': {} optimizer", weight, inner.name()),
                      [fault]() -> Tensors { commit_planted_fault(fault); })
      .at(0);
}

}  // namespace

Tensor FaultyUpdate::step(const std::string& weight, long t, const Tensor& w, const Tensor& g) {
  auto f = faults_.find(weight);
  if (f == faults_.end()) return inner_->step(weight, t, w, g);
  if (const std::string& fault = f->second.fault;
      fault == "abort" || fault == "segv" || fault == "hang") {
    if (!log_.contains(weight))
      log_[weight] = fault == "abort"  ? "optimizer aborted"
                     : fault == "segv" ? "optimizer segfaulted"
                                       : "optimizer hung";
    return planted_update(*inner_, fault, weight, t, w, g);
  }
  Tensors before = inner_->state(weight);
  Tensor nw = inner_->step(weight, t, w, g);
  const std::string& fault = f->second.fault;
  std::string note;
  // The log keeps the first application (or why none happened yet).
  auto keep = [&] {
    auto logged = log_.find(weight);
    if (logged == log_.end() || logged->second.starts_with("not applied")) log_[weight] = note;
  };
  if (fault == "update_sign" || fault == "update_scale") {
    auto a = w.to_f64(), b = nw.to_f64();
    double k = fault == "update_sign" ? -1 : 2;
    for (std::size_t i = 0; i < a.size(); ++i) b[i] = a[i] + k * (b[i] - a[i]);
    nw = Tensor::from_f64(b, nw.shape(), nw.dtype());
    note = fault == "update_sign" ? "step applied with the wrong sign" : "step doubled";
  } else if (fault == "update_nan") {
    auto b = nw.to_f64();
    auto i = argmax_abs(b);
    if (i < 0) {
      note = "not applied: no finite element";
      keep();
      return nw;
    }
    b[static_cast<std::size_t>(i)] = NAN;
    nw = Tensor::from_f64(b, nw.shape(), nw.dtype());
    note = fmt::format("NaN at {}", index_str(nw.shape(), i));
  } else if (fault == "half_state" || fault == "stale_state") {
    Tensors after = inner_->state(weight);
    if (after.empty()) {
      note = "not applied: the optimizer keeps no state";
      keep();
      return nw;
    }
    if (fault == "stale_state") {
      inner_->set_state(weight, t - 1, before);
      note = "state not written back";
    } else {
      for (auto& s : after) s = s.to(DType::Float16).to(s.dtype());
      inner_->set_state(weight, t, after);
      note = "state rounded to float16";
    }
  }
  keep();
  return nw;
}

}  // namespace metaop
