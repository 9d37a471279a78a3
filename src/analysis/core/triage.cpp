#include "analysis/core/triage.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "analysis/core/accuracy.h"
#include "ops/optimizer.h"
#include "tensor/dtype.h"

namespace metaop {

namespace {

bool any_float64(const Tensors& in) {
  for (const auto& t : in)
    if (t.defined() && t.dtype() == DType::Float64) return true;
  return false;
}

// Element i of output o, NaN where there is no such element.
double at(const Tensors& ts, std::ptrdiff_t o, std::ptrdiff_t i) {
  if (o < 0 || static_cast<std::size_t>(o) >= ts.size() || !ts[o].defined() || i >= ts[o].numel())
    return NAN;
  return ts[o].f64_at(i);
}

std::string element(const Node& node, const Tensors& ref, std::ptrdiff_t o, std::ptrdiff_t i) {
  const auto& names = node.outputs;
  std::string name = static_cast<std::size_t>(o) < names.size() ? names[o] : "output";
  return name + index_str(ref[o].shape(), i);
}

// The inputs with every subnormal value read as zero (its sign kept); empty when none has one.
Tensors flush_subnormals(const Tensors& in) {
  Tensors out = in;
  bool any = false;
  for (auto& t : out) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    double tiny = smallest_normal(t.dtype());
    auto v = t.to_f64();
    bool here = false;
    for (auto& e : v)
      if (e != 0 && std::fabs(e) < tiny) {
        e = std::copysign(0.0, e);
        here = true;
      }
    if (here) t = Tensor::from_f64(v, t.shape(), t.dtype());
    any = any || here;
  }
  return any ? out : Tensors{};
}

// Whether every element outside the model in `bad` is within it against `ref0`, the reference on
// the inputs with subnormals read as zero (as CPUs' denormals-are-zero mode reads them).
bool within_flushed(const Tensors& ref0, const std::vector<std::vector<double>>& tol,
                    const Tensors& got, const std::vector<std::vector<bool>>& bad) {
  auto bad0 = bad_elements(got, ref0, tol);
  for (std::size_t o = 0; o < bad.size(); ++o)
    for (std::size_t i = 0; i < bad[o].size(); ++i)
      if (bad[o][i] && (o >= bad0.size() || i >= bad0[o].size() || bad0[o][i])) return false;
  return true;
}

bool explained_by_flushing(const MetaOp& op, const KernelContext& ctx, const Tensors& in,
                           const std::vector<std::vector<double>>& tol, const Tensors& got,
                           const std::vector<std::vector<bool>>& bad) {
  Tensors flushed = flush_subnormals(in);
  if (flushed.empty()) return false;
  try {
    return within_flushed(op.reference(ctx, flushed), tol, got, bad);
  } catch (const std::exception&) {
    return false;
  }
}

// The same for a VJP: the kernel read subnormal inputs or output gradients as zero.
bool vjp_explained_by_flushing(const MetaOp& op, const KernelContext& ctx, const Tensors& in,
                               const Tensors& out, const Tensors& grads,
                               const std::vector<std::vector<double>>& tol, const Tensors& got,
                               const std::vector<std::vector<bool>>& bad) {
  Tensors flushed_in = flush_subnormals(in), flushed_g = flush_subnormals(grads);
  if (flushed_in.empty() && flushed_g.empty()) return false;
  try {
    return within_flushed(op.vjp(ctx, flushed_in.empty() ? in : flushed_in, out,
                                 flushed_g.empty() ? grads : flushed_g),
                          tol, got, bad);
  } catch (const std::exception&) {
    return false;  // the flushed values are outside the op's domain: nothing they explain
  }
}

constexpr const char* kFlushing =
    "subnormal-inputs: the kernel's outputs are those of the definition with subnormal inputs "
    "read as zero (denormals-are-zero); the ONNX text does not say whether a kernel may read them "
    "so";

// An element's error against the reference: 0 where both are the same non-finite value,
// infinite where either is non-finite otherwise.
double error_of(double v, double r) {
  if ((std::isnan(v) && std::isnan(r)) || v == r) return 0;
  if (!std::isfinite(v) || !std::isfinite(r)) return INFINITY;
  return std::fabs(v - r);
}

// The element marked in `bad` with the largest error relative to its tolerance (a non-finite
// mismatch first; the first of equals), as (output, index); {-1, -1} when none is.
std::pair<std::ptrdiff_t, std::ptrdiff_t> worst_bad(const std::vector<std::vector<bool>>& bad,
                                                    const Tensors& got, const Tensors& ref,
                                                    const std::vector<std::vector<double>>& tol) {
  std::pair<std::ptrdiff_t, std::ptrdiff_t> worst{-1, -1};
  double key = -1;
  for (std::size_t o = 0; o < bad.size(); ++o) {
    if (bad[o].empty()) continue;
    auto g = got[o].to_f64(), r = ref[o].to_f64();
    for (std::size_t i = 0; i < bad[o].size(); ++i) {
      if (!bad[o][i]) continue;
      double t = o < tol.size() && i < tol[o].size() ? tol[o][i] : 0;
      double e = error_of(g[i], r[i]);
      // A non-finite mismatch ranks first, also where the tolerance is infinite (inf / inf).
      double k = std::isinf(e) || !(t > 0) ? INFINITY : e / t;
      if (k > key) {
        key = k;
        worst = {static_cast<std::ptrdiff_t>(o), static_cast<std::ptrdiff_t>(i)};
      }
    }
  }
  return worst;
}

// Where the float32 evaluation is outside the model but kept some digits, a kernel is worse than
// it at an element where its error exceeds this many times the evaluation's: a kernel that fuses
// a step rounds differently from the definition as written, by a small factor, not by orders of
// magnitude.
constexpr double kWorseFactor = 4;
// A relative error of 2^-12: half of float32's 24 significant bits lost.
constexpr double kLostDigits = 0x1p-12;

// The twin's part of triage: the definition in float32 against the kernel at every element
// outside the model (`bad`; `worst`: the kernel's worst element).
Triage triage_by_twin(const Float32Definition& def, const KernelContext& ctx, const Tensors& in,
                      const Tensors& ref, const std::vector<std::vector<double>>& tol,
                      const Tensors& got, const std::vector<std::vector<bool>>& bad,
                      std::pair<std::ptrdiff_t, std::ptrdiff_t> worst,
                      std::string_view precision = "float32", bool has_sums = true) {
  auto [bo, bi] = worst;
  // The definition in float32, in each order its sums may take.
  const std::array<std::pair<SumOrder, const char*>, 3> orders{
      {{SumOrder::written, "in the order written"},
       {SumOrder::positives_first, "with the positive terms first"},
       {SumOrder::negatives_first, "with the negative terms first"}}};
  std::vector<Tensors> ys;
  std::vector<std::vector<std::vector<bool>>> ys_bad;
  try {
    for (const auto& [order, words] : orders) {
      if (!has_sums && !ys.empty()) break;  // one evaluation: the orders are all the same
      ys.push_back(def.evaluate(ctx, in, order));
      ys_bad.push_back(bad_elements(ys.back(), ref, tol));
    }
  } catch (const Float32Lost& e) {
    return {FindingClass::Float32Limit, fmt::format("{} in {} loses the result here: {}; {}",
                                                    def.formula, precision, e.what(), def.better)};
  } catch (const std::exception& e) {
    return {FindingClass::Untriaged, fmt::format("the float32 evaluation failed: {}", e.what())};
  }
  // An element outside the model is explained where an evaluation is outside it too, and either
  // lost the result there (a non-finite value, or half of float32's digits or more: the
  // formula's overflow, underflow or cancellation, however the kernel then fails) or is no more
  // than 4 times better than the kernel.
  auto explains = [&](std::size_t k, std::size_t o, std::size_t j) {
    if (o >= ys_bad[k].size() || j >= ys_bad[k][o].size() || !ys_bad[k][o][j]) return false;
    auto out = static_cast<std::ptrdiff_t>(o), e = static_cast<std::ptrdiff_t>(j);
    double r = at(ref, out, e), t = at(ys[k], out, e);
    double et = error_of(t, r);
    return std::isinf(et) || et >= kLostDigits * std::fabs(r) ||
           error_of(at(got, out, e), r) <= kWorseFactor * et;
  };
  // The elements no evaluation explains; which evaluation explains the worst element.
  std::vector<std::vector<bool>> unexplained(bad.size());
  bool any = false;
  std::ptrdiff_t worst_order = -1;
  for (std::size_t o = 0; o < bad.size(); ++o) {
    unexplained[o].assign(bad[o].size(), false);
    for (std::size_t j = 0; j < bad[o].size(); ++j) {
      if (!bad[o][j]) continue;
      std::ptrdiff_t by = -1;
      for (std::size_t k = 0; k < ys.size() && by < 0; ++k)
        if (explains(k, o, j)) by = static_cast<std::ptrdiff_t>(k);
      unexplained[o][j] = by < 0;
      any = any || by < 0;
      if (static_cast<std::ptrdiff_t>(o) == bo && static_cast<std::ptrdiff_t>(j) == bi)
        worst_order = by;
    }
  }
  if (any) {
    auto [o, e] = worst_bad(unexplained, got, ref, tol);
    double r = at(ref, o, e), t = at(ys[0], o, e), g = at(got, o, e);
    return {FindingClass::Defect,
            fmt::format("{} in {} gives {:.9g} at {} (exact {:.9g}, error {:.3g}); the "
                        "kernel gives {:.9g} (error {:.3g}), worse than the definition in "
                        "{}{}",
                        def.formula, precision, t, element(ctx.node, ref, o, e), r, error_of(t, r),
                        g, error_of(g, r), precision, has_sums ? " in any order of its sums" : "")};
  }
  // Every element the kernel gets wrong, the definition in float32 gets wrong too.
  auto k = static_cast<std::size_t>(worst_order);
  return {
      FindingClass::Float32Limit,
      fmt::format("{} in {}{} gives {:.9g} at {} too (exact {:.9g}); {}", def.formula, precision,
                  has_sums ? fmt::format(" ({})", orders[k].second) : "", at(ys[k], bo, bi),
                  element(ctx.node, ref, bo, bi), at(ref, bo, bi), def.better)};
}

// The same outputs: shapes, dtypes and values (NaN equal to NaN).
bool same_outputs(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t o = 0; o < a.size(); ++o) {
    if (a[o].defined() != b[o].defined()) return false;
    if (!a[o].defined()) continue;
    if (a[o].shape() != b[o].shape() || a[o].dtype() != b[o].dtype()) return false;
    auto x = a[o].to_f64(), y = b[o].to_f64();
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i] && !(std::isnan(x[i]) && std::isnan(y[i]))) return false;
  }
  return true;
}

// Outputs whose shapes differ from the reference's. Where the shapes follow the values
// (NonMaxSuppression, NonZero, Unique ...), a choice the text leaves open, or the definition
// evaluated in float32, may give the kernel's outputs exactly.
Triage triage_shapes(const MetaOp& op, const KernelContext& ctx, const Tensors& in,
                     const Tensors& ref, const Tensors& got,
                     const std::vector<std::vector<bool>>& bad) {
  for (const auto& c : op.conventions)
    if (c.applies && c.applies(ctx, in, ref, got, bad))
      return {FindingClass::Convention, fmt::format("{}: {}", c.name, c.onnx)};
  // Subnormal inputs read as zero, alone or with one of the op's open choices.
  if (Tensors flushed = flush_subnormals(in); !flushed.empty()) {
    const std::string flushing =
        "subnormal-inputs: the kernel reads subnormal inputs as zero (denormals-are-zero), which "
        "the ONNX text neither allows nor forbids";
    try {
      Tensors ref0 = op.reference(ctx, flushed);
      if (same_outputs(ref0, got)) return {FindingClass::Convention, flushing};
      for (const auto& c : op.conventions)
        if (c.applies && c.applies(ctx, flushed, ref0, got, {}))
          return {FindingClass::Convention,
                  fmt::format("{}; and {}: {}", flushing, c.name, c.onnx)};
    } catch (const std::exception&) {
      // The flushed inputs are outside the op's domain: nothing they explain.
    }
  }
  if (op.float32.how == Float32Definition::How::twin && !any_float64(in)) {
    try {
      if (same_outputs(op.float32.evaluate(ctx, in, SumOrder::written), got))
        return {FindingClass::Float32Limit,
                fmt::format("{} in float32 gives the kernel's outputs exactly, shapes included; {}",
                            op.float32.formula, op.float32.better)};
    } catch (const Float32Lost& e) {
      return {FindingClass::Float32Limit,
              fmt::format("{} in float32 loses the result here: {}; {}", op.float32.formula,
                          e.what(), op.float32.better)};
    } catch (const std::exception&) {
      // No float32 evaluation on these inputs: nothing it explains.
    }
  }
  return {FindingClass::Defect, "the outputs' shapes or dtypes differ from the reference's"};
}

}  // namespace

Triage triage(const MetaOp& op, const KernelContext& ctx, const Tensors& in, const Tensors& ref,
              const std::vector<std::vector<double>>& tol, const Tensors& got) {
  std::vector<std::vector<bool>> bad = bad_elements(got, ref, tol);
  auto [bo, bi] = worst_bad(bad, got, ref, tol);
  if (bo < 0) return triage_shapes(op, ctx, in, ref, got, bad);
  for (const auto& c : op.conventions)
    if (c.applies && c.applies(ctx, in, ref, got, bad))
      return {FindingClass::Convention, fmt::format("{}: {}", c.name, c.onnx)};
  if (explained_by_flushing(op, ctx, in, tol, got, bad))
    return {FindingClass::Convention, kFlushing};
  const Float32Definition& def = op.float32;
  switch (def.how) {
    case Float32Definition::How::undeclared:
      return {FindingClass::Untriaged,
              fmt::format("{} declares no float32 evaluation of its definition", op.type)};
    case Float32Definition::How::rounded:
      return {
          FindingClass::Defect,
          fmt::format("{}'s definition is one operation: its faithful float32 evaluation is "
                      "the exact result rounded once, {:.9g} at {}, where the kernel gives "
                      "{:.9g}",
                      op.type, at(ref, bo, bi), element(ctx.node, ref, bo, bi), at(got, bo, bi))};
    case Float32Definition::How::twin:
      break;
  }
  if (any_float64(in))
    return {FindingClass::Untriaged, "float64 data: a float32 evaluation does not apply"};
  return triage_by_twin(def, ctx, in, ref, tol, got, bad, {bo, bi});
}

Triage triage_local(const Node& node, std::int64_t opset, const Tensors& in, const LocalCheck& lc,
                    const Tensors& got) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) return {FindingClass::Untriaged, node.op_type + " has no meta operator"};
  return triage(*op, KernelContext{node, opset}, in, lc.reference, lc.tol, got);
}

Triage triage_backward(const Node& node, std::int64_t opset, const Tensors& in, const Tensors& out,
                       const Tensors& grads, const LocalCheck& lc, const Tensors& got) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) return {FindingClass::Untriaged, node.op_type + " has no reference VJP"};
  // The gradients are named after the inputs they belong to.
  Node named = node;
  named.outputs.clear();
  for (const auto& i : node.inputs) named.outputs.push_back("grad " + i);
  KernelContext ctx{node, opset}, named_ctx{named, opset};
  const Tensors& ref = lc.reference;
  std::vector<std::vector<bool>> bad = bad_elements(got, ref, lc.tol);
  auto [bo, bi] = worst_bad(bad, got, ref, lc.tol);
  if (bo < 0) {
    for (std::size_t k = 0; k < ref.size(); ++k)
      if (ref[k].defined() &&
          (k >= got.size() || !got[k].defined() || got[k].shape() != ref[k].shape() ||
           got[k].dtype() != ref[k].dtype()))
        return {FindingClass::Defect,
                fmt::format("the gradient of input #{} is missing, or its shape or dtype is not "
                            "the input's",
                            k)};
    return {FindingClass::Untriaged,
            "no element is outside the error model: a sum over tied elements is"};
  }
  if (vjp_explained_by_flushing(*op, ctx, in, out, grads, lc.tol, got, bad))
    return {FindingClass::Convention, kFlushing};
  const Float32Vjp& vjp = op->vjp_float32;
  switch (vjp.how) {
    case Float32Definition::How::undeclared:
      return {FindingClass::Untriaged,
              fmt::format("{}'s VJP declares no float32 evaluation", op->type)};
    case Float32Definition::How::rounded:
      return {FindingClass::Defect,
              fmt::format("each element of {}'s VJP is one operation on exact values: its "
                          "faithful float32 evaluation is the exact gradient rounded once, "
                          "{:.9g} at {}, where the kernel gives {:.9g}",
                          op->type, at(ref, bo, bi), element(named, ref, bo, bi), at(got, bo, bi))};
    case Float32Definition::How::twin:
      break;
  }
  if (any_float64(in) || any_float64(grads))
    return {FindingClass::Untriaged, "float64 data: a float32 evaluation does not apply"};
  Float32Definition def;
  def.how = Float32Definition::How::twin;
  def.evaluate = [&vjp, &ctx, &in, &out, &grads](const KernelContext&, const Tensors&,
                                                 SumOrder order) {
    return vjp.evaluate(ctx, in, out, grads, order);
  };
  def.formula = vjp.formula;
  def.better = vjp.better;
  return triage_by_twin(def, named_ctx, in, ref, lc.tol, got, bad, {bo, bi});
}

Triage triage_update(const OptimizerConfig& c, long t, const std::string& weight, const Tensors& in,
                     const LocalCheck& lc, const Tensors& got) {
  if (any_float64(in))
    return {FindingClass::Untriaged, "float64 weights: a float32 evaluation does not apply"};
  // The kernel's outputs in the reference's shapes (its state may come flat) and, as the
  // evaluation's, in float64: check_update scores them so, its tolerances counting the final
  // rounding.
  auto as_reference = [&in](const Tensors& ts) {
    Tensors r;
    for (const auto& g : ts)
      r.push_back((g.numel() == in[0].numel() ? g.reshaped(in[0].shape()) : g).to(DType::Float64));
    return r;
  };
  // A kernel that keeps other state than the rule (none, or of another size) is wrong whatever
  // its precision: check_update scored it before comparing a value.
  if (!lc.score.mismatch.empty())
    return {FindingClass::Defect,
            "the kernel's state differs in form from the optimizer's: " + lc.score.mismatch};
  Tensors outs = as_reference(got);
  std::vector<std::vector<bool>> bad = bad_elements(outs, lc.reference, lc.tol);
  auto worst = worst_bad(bad, outs, lc.reference, lc.tol);
  if (worst.first < 0)
    return {FindingClass::Untriaged, "no element of the kernel's step is outside the error model"};
  Node node;
  node.name = weight;
  node.op_type = c.kind;
  node.outputs = {weight};
  for (const auto& s : optimizer_slots(c)) node.outputs.push_back(s);
  Float32Definition def;
  def.how = Float32Definition::How::twin;
  def.evaluate = [&c, t, &as_reference](const KernelContext&, const Tensors& x, SumOrder) {
    return as_reference(faithful_update(c, t, x[0], x[1], Tensors(x.begin() + 2, x.end())));
  };
  def.formula = fmt::format("{}'s step as PyTorch's documentation writes it", c.kind);
  def.better = "the step computed in float64 arithmetic (state and intermediates) avoids it";
  return triage_by_twin(def, KernelContext{node, 0}, in, lc.reference, lc.tol, outs, bad, worst,
                        dtype_name(in[0].dtype()), false);
}

void triage_non_numerical(FindingCore& f) {
  switch (f.kind) {
    case FindingKind::Crash:
    case FindingKind::Hang:
      f.cls = FindingClass::Defect;
      f.class_basis = f.kind == FindingKind::Crash ? "the kernel crashed" : "the kernel hung";
      break;
    default:
      f.cls = FindingClass::None;
      f.class_basis.clear();
  }
}

bool fails_run(const FindingCore& f, bool float32_limits) {
  switch (f.cls) {
    case FindingClass::Defect:
    case FindingClass::Untriaged:
      return true;
    case FindingClass::Float32Limit:
      return float32_limits;
    case FindingClass::Convention:
      return false;
    case FindingClass::None:
      break;
  }
  return f.kind != FindingKind::Unsupported;
}

}  // namespace metaop
