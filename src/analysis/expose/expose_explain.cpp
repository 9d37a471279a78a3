// The verdict's one line: which node first produced a non-finite value, which of its danger
// zones it was in, and how the value that put it there came about (one or two producers up,
// through masks to the comparison that decided them and what made its operand).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "analysis/expose/expose.h"
#include "analysis/expose/expose_search.h"
#include "ops/kernel_util.h"
#include "ops/params.h"
#include "ops/registry.h"

namespace metaop {

namespace {

std::string num(double v) {
  return fmt::format("{:.9g}", v);
}

bool nan_tensor(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return false;
  for (double v : t.to_f64())
    if (std::isnan(v)) return true;
  return false;
}

class Explainer {
 public:
  Explainer(const Graph& g, const std::map<std::string, Tensor>& values) : g_(g), values_(values) {
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
  }

  const Tensor* value(const std::string& name) const {
    auto it = values_.find(name);
    return name.empty() || it == values_.end() ? nullptr : &it->second;
  }

  Tensors inputs_of(const Node& n) const {
    Tensors t;
    for (const auto& i : n.inputs) t.push_back(value(i) ? *value(i) : Tensor());
    return t;
  }
  Tensors outputs_of(const Node& n) const {
    Tensors t;
    for (const auto& o : n.outputs) t.push_back(value(o) ? *value(o) : Tensor());
    return t;
  }

  // Element `e` of input k of node n, following numpy broadcasting from its output 0.
  double operand(const Node& n, std::size_t k, std::int64_t e) const {
    const Tensor* in = value(n.inputs[k]);
    const Tensor* out = value(n.outputs[0]);
    if (!in || !out) return NAN;
    if (in->shape() == out->shape()) return in->f64_at(e);
    return in->f64_at(broadcast_map(in->shape(), out->shape())[static_cast<std::size_t>(e)]);
  }

  // How element e of value `name` came about, in a few words.
  std::string cause(const std::string& name, std::int64_t e, int depth) const {
    const Tensor* t = value(name);
    if (!t) return fmt::format("'{}'", name);
    double v = t->f64_at(e);
    auto it = producer_.find(name);
    if (it == producer_.end())
      return fmt::format("{} '{}' is {} at element {}",
                         g_.initializers.count(name) ? "weight" : "input", name, num(v), e);
    const Node& p = g_.nodes[it->second];
    const std::string who = p.op_type + " " + p.name;
    // Through a mask: the branch a Where took, the boolean a Cast or a Not turned into it, and
    // the comparison that decided it.
    if (p.op_type == "Where") return where_cause(p, e, v, depth);
    if ((p.op_type == "Cast" || p.op_type == "Not") && p.inputs.size() == 1 && value(p.inputs[0]) &&
        value(p.inputs[0])->dtype() == DType::Bool) {
      double b = operand(p, 0, e);
      std::string s = fmt::format("{} gave {} from {}", who, num(v), b != 0 ? "true" : "false");
      if (depth < 3) s += ", " + cause(p.inputs[0], element_of(p, 0, e), depth + 1);
      return s;
    }
    if (auto sym = comparison_symbol(p.op_type)) {
      std::string s = fmt::format("{}: {} {} {} is {}", who, num(operand(p, 0, e)), *sym,
                                  num(operand(p, 1, e)), v != 0 ? "true" : "false");
      if (std::optional<std::size_t> k = computed_operand(p); k && depth < 3)
        s += fmt::format(" ({})", cause(p.inputs[*k], element_of(p, *k, e), depth + 1));
      return s;
    }
    // The op's own words (ops/manifest.h, ExplainWords).
    switch (words(p).form) {
      case ExplainForm::softmax:
        return softmax_cause(p, e, v);
      case ExplainForm::unary:
        return unary_cause(p, e, v);
      case ExplainForm::arithmetic:
        return arithmetic_cause(p, e, v, depth);
      case ExplainForm::reduce:
        return reduce_cause(p, e, v, depth);
      case ExplainForm::clamp:
        return fmt::format("{} clamped {} to {}", who, num(operand(p, 0, e)), num(v));
      case ExplainForm::value:
        break;
    }
    return fmt::format("{} gave {}", who, num(v));
  }

  // Which element of input k element e of n's output 0 reads (numpy broadcasting).
  std::int64_t element_of(const Node& n, std::size_t k, std::int64_t e) const {
    const Tensor* in = value(n.inputs[k]);
    const Tensor* out = value(n.outputs[0]);
    if (!in || !out || in->shape() == out->shape()) return e;
    return broadcast_map(in->shape(), out->shape())[static_cast<std::size_t>(e)];
  }

  // The operand of a comparison that the model computed or was given (a layer's output, a graph
  // input), not a constant it is compared against: the first such, if any.
  std::optional<std::size_t> computed_operand(const Node& p) const {
    for (std::size_t k = 0; k < p.inputs.size() && k < 2; ++k) {
      const std::string& name = p.inputs[k];
      if (name.empty() || g_.initializers.count(name)) continue;
      auto it = producer_.find(name);
      if (it != producer_.end()) {
        const std::string& op = g_.nodes[it->second].op_type;
        if (op == "Constant" || op == "ConstantOfShape") continue;
      }
      return k;
    }
    return std::nullopt;
  }

  static std::optional<std::string> comparison_symbol(const std::string& op) {
    if (op == "Less") return "<";
    if (op == "LessOrEqual") return "<=";
    if (op == "Greater") return ">";
    if (op == "GreaterOrEqual") return ">=";
    if (op == "Equal") return "==";
    return std::nullopt;
  }

  std::string where_cause(const Node& p, std::int64_t e, double v, int depth) const {
    bool cond = operand(p, 0, e) != 0;
    std::string s = fmt::format("Where {} took {} ({}) where its condition is {}", p.name,
                                cond ? "X" : "Y", num(v), cond ? "true" : "false");
    if (depth < 3) s += ": " + cause(p.inputs[0], element_of(p, 0, e), depth + 1);
    return s;
  }

  static const ExplainWords& words(const Node& n) {
    static const ExplainWords none;
    const MetaOp* op = OpRegistry::instance().find(n.op_type);
    return op ? op->explain : none;
  }
  static bool among(const std::vector<double>& values, double v) {
    return std::find(values.begin(), values.end(), v) != values.end();
  }

  // An element-wise unary op's output v at element e: underflow, saturation, clamping, overflow.
  std::string unary_cause(const Node& p, std::int64_t e, double v) const {
    const std::string who = p.op_type + " " + p.name;
    const ExplainWords& w = words(p);
    double x = operand(p, 0, e);
    for (double u : w.underflow)
      if (v == u) return fmt::format("{} underflowed to {} at x = {}", who, num(u), num(x));
    if (among(w.saturation, v))
      return fmt::format("{} saturated to {} at x = {}", who, num(v), num(x));
    if (w.clamps_to && v == *w.clamps_to)
      return fmt::format("{} clamped {} to {}", who, num(x), num(*w.clamps_to));
    if (std::isinf(v)) return fmt::format("{} overflowed at x = {}", who, num(x));
    return fmt::format("{} of {} gave {}", who, num(x), num(v));
  }

  // Sub, Add, Mul, Div: the operation at element e and its cancellation; at the top level, how
  // its telling operand came about.
  std::string arithmetic_cause(const Node& p, std::int64_t e, double v, int depth) const {
    const std::string who = p.op_type + " " + p.name;
    const ExplainWords& w = words(p);
    double a = operand(p, 0, e), b = operand(p, 1, e);
    std::string s = fmt::format("{}: {} {} {} = {}", who, num(a), w.symbol, num(b), num(v));
    if (w.cancellation && v == 0 && a != 0) s += " (cancellation)";
    if (w.cancellation && v != 0 && std::fabs(v) < 1e-4 * std::fabs(a)) s += " (cancellation)";
    if (depth < 1)
      if (std::optional<std::string> why = operand_cause(p, e, a, b, depth)) return s + "; " + *why;
    return s;
  }

  // The operand (a or b, at element e of p's output) a saturating or underflowing op produced
  // explains the rest: how it came about; nothing when no operand is telling.
  std::optional<std::string> operand_cause(const Node& p, std::int64_t e, double a, double b,
                                           int depth) const {
    for (std::size_t k = 0; k < 2 && k < p.inputs.size(); ++k) {
      auto pk = producer_.find(p.inputs[k]);
      if (pk == producer_.end()) continue;
      double x = k == 0 ? a : b;
      bool telling =
          words(g_.nodes[pk->second]).telling || (words(p).zero_operand_telling && x == 0);
      if (!telling) continue;
      const Tensor* in = value(p.inputs[k]);
      const Tensor* out = value(p.outputs[0]);
      std::int64_t ek = e;
      if (in && out && in->shape() != out->shape())
        ek = broadcast_map(in->shape(), out->shape())[static_cast<std::size_t>(e)];
      return cause(p.inputs[k], ek, depth + 1);
    }
    return std::nullopt;
  }

  std::string softmax_cause(const Node& p, std::int64_t e, double v) const {
    const Tensor* x = value(p.inputs[0]);
    if (!x) return fmt::format("Softmax {} gave {}", p.name, num(v));
    KernelContext c{p, g_.opset};
    AxisSplit sp = softmax_split(c, x->shape());
    std::int64_t o = e / (sp.n * sp.inner), i = e % sp.inner;
    double mx = -INFINITY;
    auto vx = x->to_f64();
    for (std::int64_t j = 0; j < sp.n; ++j)
      mx = std::max(mx, vx[static_cast<std::size_t>((o * sp.n + j) * sp.inner + i)]);
    double gap = mx - vx[static_cast<std::size_t>(e)];
    if (v == 0)
      return fmt::format("Softmax {} underflowed to 0 for a logit gap of {}", p.name, num(gap));
    if (v == 1) return fmt::format("Softmax {} saturated to 1", p.name);
    return fmt::format("Softmax {} gave {} (logit gap {})", p.name, num(v), num(gap));
  }

  std::string reduce_cause(const Node& p, std::int64_t e, double v, int depth) const {
    const Tensor* x = value(p.inputs[0]);
    const std::string who = p.op_type + " " + p.name;
    if (!x) return fmt::format("{} gave {}", who, num(v));
    KernelContext c{p, g_.opset};
    Tensors ins = inputs_of(p);
    ReduceAxes ra = reduce_axes(c, ins, x->rank());
    Shape kept = x->shape();
    if (!ra.noop)
      for (auto a : ra.axes) kept[static_cast<std::size_t>(a)] = 1;
    auto map = broadcast_map(kept, x->shape());
    auto vx = x->to_f64();
    std::size_t n = 0, zeros = 0;
    double sum_abs = 0;
    std::int64_t first = -1;
    for (std::size_t i = 0; i < vx.size(); ++i) {
      if (map[i] != e) continue;
      ++n;
      zeros += vx[i] == 0;
      sum_abs += std::fabs(vx[i]);
      if (first < 0) first = static_cast<std::int64_t>(i);
    }
    if (n > 0 && zeros == n) {
      std::string s = fmt::format("all {} terms of {} are 0", n, who);
      auto pk = producer_.find(p.inputs[0]);
      const Node* q = pk != producer_.end() ? &g_.nodes[pk->second] : nullptr;
      if (depth < 1 && q && words(*q).clamps_to == 0.0)
        s += fmt::format(" ({} {} clamped every one of them)", q->op_type, q->name);
      else if (depth < 1 && first >= 0)
        s += " (" + cause(p.inputs[0], first, depth + 1) + ")";
      return s;
    }
    const ExplainWords& w = words(p);
    if (w.cancellation && sum_abs > 0 &&
        std::fabs(v) * static_cast<double>(w.mean ? n : 1) < 1e-4 * sum_abs)
      return fmt::format("{} of {} terms gave {} (cancellation: sum of |terms| {})", who, n, num(v),
                         num(sum_abs));
    return fmt::format("{} of {} terms gave {}", who, n, num(v));
  }

  const Graph& g_;
  const std::map<std::string, Tensor>& values_;
  std::map<std::string, std::size_t> producer_;
};

// The origin: the first node with a non-finite output from finite inputs; failing that (a
// non-finite constant upstream), the first NaN made from inputs without NaN; g.nodes.size()
// when there is none.
std::size_t find_origin(const Graph& g, const Explainer& ex,
                        const std::vector<std::size_t>& run_order) {
  for (int pass = 0; pass < 2; ++pass)
    for (auto k : run_order) {
      const Node& n = g.nodes[k];
      // A constant's -inf is the program's own mask value (masked_fill(m, -inf)), given like an
      // input's: where it turns into NaN is the origin.
      if (n.op_type == "Constant" || n.op_type == "ConstantOfShape") continue;
      bool in_ok = true, out_bad = false;
      for (const auto& t : ex.inputs_of(n))
        in_ok &= pass == 0 ? expose_detail::all_finite(t) : !nan_tensor(t);
      for (const auto& t : ex.outputs_of(n))
        out_bad |= pass == 0 ? !expose_detail::all_finite(t) : nan_tensor(t);
      if (in_ok && out_bad) return k;
    }
  return g.nodes.size();
}

// An overflow: the inputs that produced it (element `element` of the only one, or the largest).
std::string overflow_cause(const Tensors& ins, std::int64_t element) {
  double m = 0;
  for (const auto& t : ins)
    if (t.defined() && is_floating(t.dtype()))
      for (double v : t.to_f64()) m = std::max(m, std::fabs(v));
  return ins.size() == 1 ? fmt::format("input {}", num(ins[0].f64_at(element)))
                         : fmt::format("largest |input| {}", num(m));
}

// The first of node n's danger zones it is in (at distance 0), and how it got there; nothing when
// it is in none of them.
std::optional<std::string> zone_explanation(const Explainer& ex, const Node& n,
                                            const KernelContext& c, const Tensors& ins,
                                            const Tensors& outs) {
  const MetaOp* op = OpRegistry::instance().find(n.op_type);
  if (!op) return std::nullopt;
  for (const auto& z : op->domain.danger) {
    if (z.applies && !z.applies(c)) continue;
    ZoneDistances zd;
    try {
      zd = z.distances(c, ins, outs);
    } catch (const Error&) {
      continue;
    }
    for (std::size_t s = 0; s < zd.distance.size(); ++s) {
      if (zd.distance[s] != 0) continue;
      std::string what = z.describe(c, ins, outs, s);
      std::string why = z.watches_output ? overflow_cause(ins, zd.element[s])
                                         : ex.cause(n.inputs[static_cast<std::size_t>(z.index)],
                                                    zd.element[s], 0);
      return fmt::format("{} {} at {} ({})", n.op_type, what, n.name, why);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string explain_nonfinite(const Graph& g, const std::map<std::string, Tensor>& values,
                              const std::vector<std::size_t>& run_order, std::size_t* first) {
  Explainer ex(g, values);
  std::size_t origin = find_origin(g, ex, run_order);
  *first = origin;
  if (origin == g.nodes.size()) return "";
  const Node& n = g.nodes[origin];
  Tensors ins = ex.inputs_of(n), outs = ex.outputs_of(n);
  KernelContext c{n, g.opset};
  if (std::optional<std::string> zone = zone_explanation(ex, n, c, ins, outs)) return *zone;
  bool nan = false;
  for (const auto& t : outs) nan |= nan_tensor(t);
  bool finite_in = true;
  for (const auto& t : ins) finite_in &= expose_detail::all_finite(t);
  return fmt::format("{} produced {} at {} from {} inputs{}", n.op_type, nan ? "NaN" : "inf",
                     n.name, finite_in ? "finite" : "infinite",
                     finite_in ? " (no declared danger zone of the op covers it)" : "");
}

}  // namespace metaop
