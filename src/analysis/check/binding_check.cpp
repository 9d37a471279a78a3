#include "analysis/check/binding_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

#include "analysis/core/accuracy.h"
#include "analysis/core/triage.h"
#include "ops/registry.h"

namespace metaop {

std::string_view to_string(NodeStatus s) {
  switch (s) {
    case NodeStatus::Ok:
      return "ok";
    case NodeStatus::Mismatch:
      return "mismatch";
    case NodeStatus::Unsupported:
      return "unsupported";
    case NodeStatus::Error:
      return "error";
    case NodeStatus::Crash:
      return "crash";
  }
  return "?";
}

NodeVerdict judge(const Tensors& actual, const Tensors& ref, const Tolerance& tol,
                  const std::vector<std::string>& names) {
  NodeVerdict v{NodeStatus::Ok, "", 0, ""};
  for (std::size_t o = 0; o < ref.size() && o < actual.size(); ++o) {
    if (!ref[o].defined() || !actual[o].defined()) continue;
    std::string name = o < names.size() ? names[o] : fmt::format("#{}", o);
    if (actual[o].shape() != ref[o].shape()) {
      return {NodeStatus::Mismatch,
              fmt::format("{}: shape {} but the reference has {}", name,
                          shape_str(actual[o].shape()), shape_str(ref[o].shape())),
              INFINITY, "shape"};
    }
    if (actual[o].dtype() != ref[o].dtype())
      return {NodeStatus::Mismatch,
              fmt::format("{}: dtype {} but the reference has {}", name,
                          dtype_name(actual[o].dtype()), dtype_name(ref[o].dtype())),
              INFINITY, "shape"};
    auto a = actual[o].to_f64(), r = ref[o].to_f64();
    double scale = 0;
    for (double x : r)
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    bool exact = !is_floating(ref[o].dtype());
    for (std::size_t i = 0; i < r.size(); ++i) {
      double score;
      if (std::isnan(r[i]) || std::isnan(a[i]) || std::isinf(r[i]) || std::isinf(a[i])) {
        bool same = (std::isnan(r[i]) && std::isnan(a[i])) || a[i] == r[i];
        score = same ? 0 : INFINITY;
      } else if (exact) {
        score = a[i] == r[i] ? 0 : INFINITY;
      } else {
        double bound = tol.rtol * std::fabs(r[i]) + tol.atol_scale * scale + tol.abs_floor;
        double err = std::fabs(a[i] - r[i]);
        score = err == 0 ? 0 : bound == 0 ? INFINITY : err / bound;
      }
      if (score > v.worst) {
        v.worst = score;
        v.detail = fmt::format("{}[{}]: {:.9g}, reference {:.9g}", name, i, a[i], r[i]);
      }
    }
  }
  if (v.worst > 1) {
    v.status = NodeStatus::Mismatch;
    v.kind = std::isinf(v.worst) ? "nonfinite" : "accuracy";
  }
  return v;
}

namespace {

Tensors reference_forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) throw Unsupported(node.label() + ": no meta operator");
  return op->reference(KernelContext{node, opset}, inputs);
}

template <typename F>
NodeVerdict guarded(F&& f) {
  try {
    return f();
  } catch (const Unsupported& e) {
    return {NodeStatus::Unsupported, e.what(), 0, ""};
  } catch (const Crash& e) {
    return {NodeStatus::Crash, e.what(), INFINITY, "crash"};
  } catch (const BindingUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    return {NodeStatus::Error, e.what(), INFINITY, "error"};
  }
}

}  // namespace

NodeVerdict check_forward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs) {
  NodeVerdict v = guarded([&]() -> NodeVerdict {
    Tensors got = b.forward(node, opset, inputs);
    LocalCheck lc = check_local(node, opset, inputs, got);
    for (std::size_t o = 0; o < lc.reference.size(); ++o)
      if (lc.reference[o].defined() && o < node.outputs.size() && !node.outputs[o].empty() &&
          (o >= got.size() || !got[o].defined()))
        return {NodeStatus::Mismatch, fmt::format("output {} left out", node.outputs[o]), INFINITY,
                "omitted"};
    const Score& s = lc.score;
    if (!s.bad()) return {NodeStatus::Ok, "", s.score, ""};
    std::string kind = !s.mismatch.empty() ? "shape" : s.nonfinite > 0 ? "nonfinite" : "accuracy";
    NodeVerdict v{NodeStatus::Mismatch,
                  fmt::format("score {:.3g}: {}", s.score,
                              describe_worst(s, lc.reference, node.outputs, b.name())),
                  s.score, kind};
    Triage tr = triage_local(node, opset, inputs, lc, got);
    v.cls = to_string(tr.cls);
    v.class_basis = std::move(tr.basis);
    return v;
  });
  // Crashes, errors and outputs left out are defects.
  if (v.status != NodeStatus::Ok && v.status != NodeStatus::Unsupported && v.cls.empty())
    v.cls = "defect";
  return v;
}

namespace {

// A random cotangent for each floating-point output (the gradient the binding is fed), and the
// same values in float64. Outputs whose dtype is fixed whatever the inputs' (LayerNormalization's
// float32 Mean and InvStdDev, a Cast to float32) stay rounded when the reference runs in
// float64: finite differences cannot resolve them, so they get no gradient.
struct Cotangent {
  Tensors v;
  std::vector<std::vector<double>> v64;
};

Cotangent random_cotangent(const Node& node, std::int64_t opset, const Tensors& inputs,
                           const Tensors& outs, std::mt19937_64& rng) {
  Tensors x64_probe = inputs;
  for (auto& t : x64_probe)
    if (t.defined() && is_floating(t.dtype())) t = t.to(DType::Float64);
  Tensors outs64 = reference_forward(node, opset, x64_probe);
  std::uniform_real_distribution<double> u(-1, 1);
  Cotangent c{Tensors(outs.size()), std::vector<std::vector<double>>(outs.size())};
  for (std::size_t o = 0; o < outs.size(); ++o) {
    if (!outs[o].defined() || !is_floating(outs[o].dtype())) continue;
    if (o < outs64.size() && outs64[o].dtype() != DType::Float64) continue;
    c.v64[o].resize(outs[o].numel());
    for (auto& x : c.v64[o]) x = u(rng);
    c.v[o] = Tensor::from_f64(c.v64[o], outs[o].shape(), outs[o].dtype());
    c.v64[o] = c.v[o].to_f64();  // the gradient the binding sees, exactly
  }
  return c;
}

// The binding's backward. A binding may propagate only from the first output (e.g.
// LayerNormalization's Mean and InvStdDev are not differentiable in ATen): then that case is
// judged instead (the other outputs' cotangents dropped).
Tensors binding_backward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs,
                         const Tensors& outs, Cotangent& c) {
  try {
    return b.backward(node, opset, inputs, outs, c.v);
  } catch (const Unsupported&) {
    for (std::size_t o = 1; o < c.v.size(); ++o) {
      c.v[o] = Tensor();
      c.v64[o].clear();
    }
    return b.backward(node, opset, inputs, outs, c.v);
  }
}

// Finite differences of the reference's vector-Jacobian product, in float64 throughout.
struct FiniteDifferences {
  const Node& node;
  std::int64_t opset;
  const std::vector<std::vector<double>>& v64;
  Tensors x64;  // the inputs in float64
  double f0 = 0;
  int skipped = 0;

  double vjp_at(const Tensors& xs) const {
    Tensors y = reference_forward(node, opset, xs);
    double s = 0;
    for (std::size_t o = 0; o < y.size() && o < v64.size(); ++o) {
      if (v64[o].empty() || !y[o].defined()) continue;
      auto yv = y[o].to_f64();
      for (std::size_t j = 0; j < yv.size(); ++j) s += v64[o][j] * yv[j];
    }
    return s;
  }

  // The central difference at coordinate c of input i, or nothing where the function is not
  // differentiable (kinks such as ReLU at 0, ties of max, clip bounds) or not defined (outside
  // the op's domain): the one-sided slopes disagree, or a value is not finite.
  std::optional<double> slope(std::size_t i, const std::vector<double>& base, std::int64_t c,
                              const Shape& shape) {
    double h = 1e-6 * std::max(1.0, std::fabs(base[c]));
    auto at = [&](double delta) {
      auto moved = base;
      moved[c] += delta;
      Tensors xs = x64;
      xs[i] = Tensor::from_f64(moved, shape, DType::Float64);
      return vjp_at(xs);
    };
    double fp = at(h), fm = at(-h);
    double right = (fp - f0) / h, left = (f0 - fm) / h;
    if (!std::isfinite(fp) || !std::isfinite(fm) || !std::isfinite(f0)) {
      ++skipped;
      return std::nullopt;
    }
    if (std::fabs(right - left) > 1e-3 * (std::fabs(right) + std::fabs(left)) + 1e-6) {
      ++skipped;
      return std::nullopt;
    }
    // A jump right at the point (Sign at 0) has equal one-sided slopes that grow as 1/h:
    // the central difference at h/2 tells it from a smooth slope.
    double central = (fp - fm) / (2 * h), half = (at(h / 2) - at(-h / 2)) / h;
    if (std::fabs(central - half) > 1e-3 * (std::fabs(central) + std::fabs(half)) + 1e-6) {
      ++skipped;
      return std::nullopt;
    }
    return central;
  }
};

// Central differences resolve the VJP only to about eps * |v . f| / h: below that a gradient
// is indistinguishable from zero.
Tolerance vjp_tolerance(const Tolerance& tol, const Tensors& outs,
                        const std::vector<std::vector<double>>& v64) {
  Tolerance t = tol;
  double f_scale = 0;
  for (std::size_t o = 0; o < outs.size(); ++o) {
    if (v64[o].empty()) continue;
    auto yv = outs[o].to_f64();
    for (std::size_t j = 0; j < yv.size(); ++j)
      if (std::isfinite(yv[j])) f_scale += std::fabs(v64[o][j] * yv[j]);
  }
  t.abs_floor = std::max(t.abs_floor, 1e-9 * f_scale);
  return t;
}

}  // namespace

NodeVerdict check_backward(Binding& b, const Node& node, std::int64_t opset, const Tensors& inputs,
                           std::uint64_t seed, int samples, const Tolerance& tol) {
  return guarded([&]() -> NodeVerdict {
    Tensors outs = reference_forward(node, opset, inputs);
    std::mt19937_64 rng(seed);
    Cotangent cot = random_cotangent(node, opset, inputs, outs, rng);
    Tensors got = binding_backward(b, node, opset, inputs, outs, cot);

    FiniteDifferences fd{node, opset, cot.v64, inputs};
    for (auto& t : fd.x64)
      if (t.defined() && is_floating(t.dtype())) t = t.to(DType::Float64);
    fd.f0 = fd.vjp_at(fd.x64);
    // Inputs whose outputs are not all finite (ONNX's bfloat16 Cast data holds NaN and +-inf in
    // every set) leave v . f(x) non-finite at every point: no difference can be taken there.
    if (!std::isfinite(fd.f0))
      return {NodeStatus::Unsupported,
              "finite differences cannot check these inputs: the outputs are not all finite, so "
              "v . f(x) is not finite at any point",
              0, ""};
    int differentiable = 0;
    Tensors expect(inputs.size()), actual(inputs.size());
    std::vector<std::string> names;
    names.reserve(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      names.push_back(i < node.inputs.size() ? "grad " + node.inputs[i] : "grad");
      if (!inputs[i].defined() || !is_floating(inputs[i].dtype())) continue;
      if (i >= got.size() || !got[i].defined()) continue;  // not differentiable in this input
      if (inputs[i].numel() > 0) ++differentiable;
      std::int64_t n = inputs[i].numel();
      std::vector<std::int64_t> coords(n);
      std::iota(coords.begin(), coords.end(), 0);
      std::shuffle(coords.begin(), coords.end(), rng);
      coords.resize(std::min<std::int64_t>(n, samples));
      auto base = fd.x64[i].to_f64();
      auto g = got[i].to_f64();
      std::vector<double> fds, gb;
      for (std::int64_t c : coords)
        if (auto slope = fd.slope(i, base, c, inputs[i].shape())) {
          fds.push_back(*slope);
          gb.push_back(g[c]);
        }
      Shape s{static_cast<std::int64_t>(fds.size())};
      expect[i] = Tensor::from_f64(fds, s, DType::Float64);
      actual[i] = Tensor::from_f64(gb, s, DType::Float64);
    }
    NodeVerdict verdict = judge(actual, expect, vjp_tolerance(tol, outs, cot.v64), names);
    for (const auto& e : expect)
      if (e.defined()) verdict.compared += static_cast<int>(e.numel());
    verdict.skipped = fd.skipped;
    if (differentiable > 0 && verdict.compared == 0)
      return {NodeStatus::Error,
              fmt::format("no coordinate could be compared with finite differences ({} skipped "
                          "at kinks, outside the domain or at non-finite values)",
                          fd.skipped),
              INFINITY,
              "error",
              0,
              fd.skipped};
    return verdict;
  });
}

}  // namespace metaop
