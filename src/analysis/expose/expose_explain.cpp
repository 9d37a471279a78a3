// The verdict's one line: which node first produced a non-finite value, which of its danger
// zones it was in, and how the value that put it there came about: a walk back through its
// producers, each step to the operand element that made the value (through masks to the
// comparison that decided them, through sums to the dominant term, through products to the
// factor farther from 1), down to the graph input or weight it started from.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

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

  // Whether the explanation can say how n's inputs made its output (the op has its words).
  static bool walks_through(const Node& n) {
    ExplainForm f = words(n).form;
    return f != ExplainForm::value && f != ExplainForm::relay;
  }

  // How element e of value `name` came about: the walk back from it, one step per producer,
  // each step naming the operand element that made the value what it is, until a graph input,
  // a weight or a constant (the root), an op the walk cannot see through, or kMaxSteps.
  std::string cause(const std::string& name, std::int64_t e) const {
    std::string out;
    std::set<std::pair<std::string, std::int64_t>> seen;
    Next at{name, e};
    for (int steps = 0; at.name && steps < kMaxSteps; ++steps) {
      if (!seen.insert({*at.name, at.element}).second) break;
      Step s = step(*at.name, at.element);
      if (!s.text.empty()) out += (out.empty() ? "" : " <- ") + s.text;
      at = s.next;
    }
    return out;
  }

 private:
  static constexpr int kMaxSteps = 12;
  struct Next {
    std::optional<std::string> name;  // none: the walk ends here
    std::int64_t element = 0;
  };
  struct Step {
    std::string text;  // "" for a step the walk passes through silently (a reshape)
    Next next;
  };
  Next follow(const Node& p, std::size_t k, std::int64_t e) const {
    if (k >= p.inputs.size() || !value(p.inputs[k])) return {};
    return {p.inputs[k], element_of(p, k, e)};
  }

  // `[1, 3]`: the index of flat element e in a tensor of shape s.
  static std::string index_str(const Shape& s, std::int64_t e) {
    std::vector<std::int64_t> idx(s.size());
    for (std::size_t d = s.size(); d-- > 0;) {
      idx[d] = s[d] ? e % s[d] : 0;
      e = s[d] ? e / s[d] : 0;
    }
    return fmt::format("[{}]", fmt::join(idx, ", "));
  }
  // "input 'x'[1, 3]", "weight 'W'[0, 2]": where a value enters the graph.
  std::string origin_str(const std::string& name, std::int64_t e) const {
    const Tensor* t = value(name);
    return fmt::format("{} '{}'{}", g_.initializers.count(name) ? "weight" : "input", name,
                       t ? index_str(t->shape(), e) : "");
  }

  // One step of the walk: what element e of value `name` is, and where the walk goes on.
  Step step(const std::string& name, std::int64_t e) const {
    const Tensor* t = value(name);
    if (!t) return {fmt::format("'{}'", name), {}};
    double v = t->f64_at(e);
    auto it = producer_.find(name);
    if (it == producer_.end()) return {fmt::format("{} is {}", origin_str(name, e), num(v)), {}};
    const Node& p = g_.nodes[it->second];
    const std::string who = p.op_type + " " + p.name;
    // Through a mask: the branch a Where took, the boolean a Cast or a Not turned into it, and
    // the comparison that decided it.
    if (p.op_type == "Where") {
      bool cond = operand(p, 0, e) != 0;
      return {fmt::format("Where {} took {} ({}) where its condition is {}", p.name,
                          cond ? "X" : "Y", num(v), cond ? "true" : "false"),
              follow(p, 0, e)};
    }
    if ((p.op_type == "Cast" || p.op_type == "Not") && p.inputs.size() == 1 && value(p.inputs[0]) &&
        value(p.inputs[0])->dtype() == DType::Bool)
      return {
          fmt::format("{} gave {} from {}", who, num(v), operand(p, 0, e) != 0 ? "true" : "false"),
          follow(p, 0, e)};
    if ((p.op_type == "Cast" || p.op_type == "CastLike") && value(p.inputs[0]) &&
        is_floating(value(p.inputs[0])->dtype()))
      return {fmt::format("{} of {} gave {}", who, num(operand(p, 0, e)), num(v)), follow(p, 0, e)};
    if (p.op_type == "Gather") return gather_step(p, e, v);
    // Max and Min pass one operand on: the one they chose.
    if (p.op_type == "Max" || p.op_type == "Min")
      for (std::size_t k = 0; k < p.inputs.size(); ++k)
        if (value(p.inputs[k]) && operand(p, k, e) == v)
          return {fmt::format("{} chose {} (input {})", who, num(v), k), follow(p, k, e)};
    if (auto sym = comparison_symbol(p.op_type)) {
      std::optional<std::size_t> k = computed_operand(p);
      return {fmt::format("{}: {} {} {} is {}", who, num(operand(p, 0, e)), *sym,
                          num(operand(p, 1, e)), v != 0 ? "true" : "false"),
              k ? follow(p, *k, e) : Next{}};
    }
    // The op's own words (ops/manifest.h, ExplainWords).
    switch (words(p).form) {
      case ExplainForm::softmax:
        return softmax_step(p, e, v);
      case ExplainForm::unary:
        return {unary_text(p, e, v), follow(p, 0, e)};
      case ExplainForm::arithmetic:
        return arithmetic_step(p, e, v);
      case ExplainForm::reduce:
        return reduce_step(p, e, v);
      case ExplainForm::clamp:
        return {fmt::format("{} clamped {} to {}", who, num(operand(p, 0, e)), num(v)),
                follow(p, 0, e)};
      case ExplainForm::product:
        return product_step(p, e, v);
      case ExplainForm::relay:
        if (value(p.inputs[0]) && value(p.inputs[0])->numel() == t->numel())
          return {"", {p.inputs[0], e}};
        break;
      case ExplainForm::value:
        break;
    }
    return {fmt::format("{} gave {}", who, num(v)), {}};
  }

  // Which element of input k element e of n's output 0 reads (numpy broadcasting).
  std::int64_t element_of(const Node& n, std::size_t k, std::int64_t e) const {
    const Tensor* in = value(n.inputs[k]);
    const Tensor* out = value(n.outputs[0]);
    if (!in || !out || in->shape() == out->shape()) return e;
    return broadcast_map(in->shape(), out->shape())[static_cast<std::size_t>(e)];
  }

  // Whether value `name` is given to the model as a constant (a weight, a Constant node's
  // output), not computed by it or given as an input.
  bool is_constant(const std::string& name) const {
    if (name.empty() || g_.initializers.count(name)) return true;
    auto it = producer_.find(name);
    if (it == producer_.end()) return false;
    const std::string& op = g_.nodes[it->second].op_type;
    return op == "Constant" || op == "ConstantOfShape";
  }

  // The operand of a comparison that the model computed or was given (a layer's output, a graph
  // input), not a constant it is compared against: the first such, if any.
  std::optional<std::size_t> computed_operand(const Node& p) const {
    for (std::size_t k = 0; k < p.inputs.size() && k < 2; ++k)
      if (!is_constant(p.inputs[k])) return k;
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

  static const ExplainWords& words(const Node& n) {
    static const ExplainWords none;
    const MetaOp* op = OpRegistry::instance().find(n.op_type);
    return op ? op->explain : none;
  }
  static bool among(const std::vector<double>& values, double v) {
    return std::find(values.begin(), values.end(), v) != values.end();
  }

  // An element-wise unary op's output v at element e: underflow, saturation, clamping, overflow.
  std::string unary_text(const Node& p, std::int64_t e, double v) const {
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

  // Sub, Add, Mul, Div: the operation at element e and its cancellation; the walk goes on to
  // the operand that made the result: one a saturating or underflowing op produced (or a zero
  // factor), else for a sum the term of the result's sign with the larger magnitude, for a
  // product or a quotient the factor farther from 1 (a zero or an infinite one first).
  Step arithmetic_step(const Node& p, std::int64_t e, double v) const {
    const std::string who = p.op_type + " " + p.name;
    const ExplainWords& w = words(p);
    double a = operand(p, 0, e), b = operand(p, 1, e);
    std::string s = fmt::format("{}: {} {} {} = {}", who, num(a), w.symbol, num(b), num(v));
    if (w.cancellation && v == 0 && a != 0) s += " (cancellation)";
    if (w.cancellation && v != 0 && std::fabs(v) < 1e-4 * std::fabs(a)) s += " (cancellation)";
    if (p.inputs.size() < 2) return {s, {}};
    for (std::size_t k = 0; k < 2; ++k) {
      auto pk = producer_.find(p.inputs[k]);
      double x = k == 0 ? a : b;
      if ((pk != producer_.end() && words(g_.nodes[pk->second]).telling) ||
          (w.zero_operand_telling && x == 0))
        return {s, follow(p, k, e)};
    }
    std::string sym = w.symbol;
    std::size_t k = 0;
    if (sym == "^") {
      k = 0;  // a power: its base (the exponent is a constant but for the constant rule below)
    } else if (sym == "+" || sym == "-") {
      double ta = a, tb = sym == "-" ? -b : b;  // the two terms of the sum
      auto weight = [v](double term) {
        return (v == 0 || std::signbit(term) == std::signbit(v)) ? std::fabs(term) : -1.0;
      };
      k = weight(tb) > weight(ta) ? 1 : 0;
    } else {
      auto far = [](double x) {
        return x == 0 || std::isinf(x) ? INFINITY : std::fabs(std::log(std::fabs(x)));
      };
      k = far(b) > far(a) ? 1 : 0;
    }
    // A constant operand (a bias, an epsilon) says less than the computed one beside it.
    if (is_constant(p.inputs[k]) && !is_constant(p.inputs[1 - k])) k = 1 - k;
    return {s, follow(p, k, e)};
  }

  Step softmax_step(const Node& p, std::int64_t e, double v) const {
    const Tensor* x = value(p.inputs[0]);
    if (!x) return {fmt::format("Softmax {} gave {}", p.name, num(v)), {}};
    KernelContext c{p, g_.opset};
    AxisSplit sp = softmax_split(c, x->shape());
    std::int64_t o = e / (sp.n * sp.inner), i = e % sp.inner;
    double mx = -INFINITY;
    std::int64_t at_max = e;
    auto vx = x->to_f64();
    for (std::int64_t j = 0; j < sp.n; ++j) {
      std::int64_t f = (o * sp.n + j) * sp.inner + i;
      if (vx[static_cast<std::size_t>(f)] > mx) mx = vx[static_cast<std::size_t>(f)], at_max = f;
    }
    double xe = vx[static_cast<std::size_t>(e)];
    double gap = mx - xe;
    // The gap's larger end made it: the logit far below 0 or the maximum far above it.
    Next next{p.inputs[0], std::fabs(xe) >= std::fabs(mx) ? e : at_max};
    if (v == 0)
      return {fmt::format("Softmax {} underflowed to 0 for a logit gap of {}", p.name, num(gap)),
              next};
    if (v == 1) return {fmt::format("Softmax {} saturated to 1", p.name), next};
    return {fmt::format("Softmax {} gave {} (logit gap {})", p.name, num(v), num(gap)), next};
  }

  // Gather: element e of the output is one element of the data, through its index.
  Step gather_step(const Node& p, std::int64_t e, double v) const {
    const Tensor* data = value(p.inputs[0]);
    const Tensor* idx = p.inputs.size() > 1 ? value(p.inputs[1]) : nullptr;
    if (!data || !idx || data->rank() == 0)
      return {fmt::format("Gather {} gave {}", p.name, num(v)), {}};
    KernelContext c{p, g_.opset};
    std::int64_t axis = attr_i(c, "axis");
    if (axis < 0) axis += data->rank();
    if (axis < 0 || axis >= data->rank())
      return {fmt::format("Gather {} gave {}", p.name, num(v)), {}};
    const Shape& ds = data->shape();
    std::int64_t inner = 1;
    for (std::int64_t d = axis + 1; d < data->rank(); ++d) inner *= ds[static_cast<std::size_t>(d)];
    std::int64_t len = ds[static_cast<std::size_t>(axis)], ni = idx->numel();
    if (inner == 0 || ni == 0 || len == 0)
      return {fmt::format("Gather {} gave {}", p.name, num(v)), {}};
    std::int64_t in_pos = e % inner, rest = e / inner;
    std::int64_t at = static_cast<std::int64_t>(idx->f64_at(rest % ni)), outer = rest / ni;
    if (at < 0) at += len;
    return {"", {p.inputs[0], (outer * len + at) * inner + in_pos}};
  }

  // Element e of a MatMul's or a Gemm's output as a sum of k terms: where its largest term of
  // the result's sign (else of any sign) reads its two factors, and that term's magnitude.
  struct Terms {
    bool ok = false;
    std::int64_t m = 0, k = 0, n = 0;
    std::int64_t a = -1, b = -1;  // the largest term's factors (flat elements of A and B)
    double largest = -1, largest_any = -1;
  };
  Terms largest_term(const Node& p, const Tensor& a, const Tensor& b, std::int64_t e,
                     double v) const {
    Terms t;
    Shape sa = a.shape(), sb = b.shape();
    bool ta = false, tb = false;
    double alpha = 1;
    std::int64_t base_a = 0, base_b = 0;
    if (p.op_type == "Gemm") {
      KernelContext c{p, g_.opset};
      ta = attr_i(c, "transA") != 0, tb = attr_i(c, "transB") != 0;
      alpha = attr_f(c, "alpha");
      if (sa.size() != 2 || sb.size() != 2) return t;
      t.m = ta ? sa[1] : sa[0], t.k = ta ? sa[0] : sa[1], t.n = tb ? sb[0] : sb[1];
    } else {
      if (sa.size() == 1) sa.insert(sa.begin(), 1);
      if (sb.size() == 1) sb.push_back(1);
      t.m = sa[sa.size() - 2], t.k = sa.back(), t.n = sb.back();
      Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
      Shape batch = ba.size() >= bb.size() ? ba : bb;
      for (std::size_t d = 0; d < batch.size(); ++d) {
        std::int64_t da = d + ba.size() >= batch.size() ? ba[d + ba.size() - batch.size()] : 1;
        std::int64_t db = d + bb.size() >= batch.size() ? bb[d + bb.size() - batch.size()] : 1;
        batch[d] = std::max(da, db);
      }
      std::int64_t bi = t.m * t.n != 0 ? e / (t.m * t.n) : 0;
      base_a = broadcast_map(ba, batch)[static_cast<std::size_t>(bi)] * t.m * t.k;
      base_b = broadcast_map(bb, batch)[static_cast<std::size_t>(bi)] * t.k * t.n;
    }
    if (t.m * t.n == 0 || t.k == 0) return t;
    std::int64_t i = (e % (t.m * t.n)) / t.n, j = e % t.n, any_a = -1, any_b = -1;
    for (std::int64_t q = 0; q < t.k; ++q) {
      std::int64_t ia = base_a + (ta ? q * t.m + i : i * t.k + q);
      std::int64_t ib = base_b + (tb ? j * t.k + q : q * t.n + j);
      double term = alpha * a.f64_at(ia) * b.f64_at(ib), mag = std::fabs(term);
      if (mag > t.largest_any) t.largest_any = mag, any_a = ia, any_b = ib;
      if ((v == 0 || std::signbit(term) == std::signbit(v)) && mag > t.largest)
        t.largest = mag, t.a = ia, t.b = ib;
    }
    if (t.a < 0) t.a = any_a, t.b = any_b;
    t.ok = true;
    return t;
  }

  // MatMul and Gemm: element e's largest term (of the result's sign), whose factor the model
  // computed is where the walk goes on; both factors named when neither was computed.
  Step product_step(const Node& p, std::int64_t e, double v) const {
    const std::string who = p.op_type + " " + p.name;
    const Tensor* a = value(p.inputs[0]);
    const Tensor* b = p.inputs.size() > 1 ? value(p.inputs[1]) : nullptr;
    Terms t;
    if (a && b && a->rank() > 0 && b->rank() > 0) t = largest_term(p, *a, *b, e, v);
    if (!t.ok) return {fmt::format("{} gave {}", who, num(v)), {}};
    // Gemm's bias, beta C, where it outweighs every product (a layer whose inputs are 0).
    if (p.op_type == "Gemm" && p.inputs.size() > 2 && value(p.inputs[2])) {
      const Tensor* cc = value(p.inputs[2]);
      std::int64_t ec = broadcast_map(cc->shape(), {t.m, t.n})[static_cast<std::size_t>(e)];
      double bias = attr_f(KernelContext{p, g_.opset}, "beta") * cc->f64_at(ec);
      if (std::fabs(bias) > std::max(t.largest, 0.0) &&
          (v == 0 || std::signbit(bias) == std::signbit(v)))
        return {fmt::format("{} gave {}, mostly its bias {}", who, num(v), num(bias)),
                Next{p.inputs[2], ec}};
    }
    if (t.largest_any == 0)
      return {fmt::format("{} gave {}: all {} of its terms are 0", who, num(v), t.k),
              !is_constant(p.inputs[0]) ? Next{p.inputs[0], t.a} : Next{}};
    std::string s = fmt::format("{} gave {}, its largest of {} terms {} * {}", who, num(v), t.k,
                                num(a->f64_at(t.a)), num(b->f64_at(t.b)));
    const std::string &na = p.inputs[0], &nb = p.inputs[1];
    bool ca = !is_constant(na) && producer_.count(na), cb = !is_constant(nb) && producer_.count(nb);
    if (ca || cb) {
      // Name the factor the walk does not follow; the other is the next step.
      s += fmt::format(" (by {})", origin_or_value(ca ? nb : na, ca ? t.b : t.a));
      return {s, ca ? Next{na, t.a} : Next{nb, t.b}};
    }
    s += fmt::format(" ({} by {})", origin_str(na, t.a), origin_str(nb, t.b));
    return {s, {}};
  }
  // A factor named beside the walk: where it enters the graph, or the node that made it.
  std::string origin_or_value(const std::string& name, std::int64_t e) const {
    auto it = producer_.find(name);
    if (it == producer_.end()) return origin_str(name, e);
    const Tensor* t = value(name);
    return fmt::format("{}{}", name, t ? index_str(t->shape(), e) : "");
  }

  // A reduction at element e of its output: all terms 0 (and the clamp that zeroed them), a
  // cancellation, or its value; the walk goes on to the first term (all 0) or the largest.
  Step reduce_step(const Node& p, std::int64_t e, double v) const {
    const Tensor* x = value(p.inputs[0]);
    const std::string who = p.op_type + " " + p.name;
    if (!x) return {fmt::format("{} gave {}", who, num(v)), {}};
    KernelContext c{p, g_.opset};
    Tensors ins = inputs_of(p);
    ReduceAxes ra = reduce_axes(c, ins, x->rank());
    Shape kept = x->shape();
    if (!ra.noop)
      for (auto a : ra.axes) kept[static_cast<std::size_t>(a)] = 1;
    auto map = broadcast_map(kept, x->shape());
    auto vx = x->to_f64();
    std::size_t n = 0, zeros = 0;
    double sum_abs = 0, largest = -1;
    std::int64_t first = -1, at_largest = -1;
    for (std::size_t i = 0; i < vx.size(); ++i) {
      if (map[i] != e) continue;
      ++n;
      zeros += vx[i] == 0;
      sum_abs += std::fabs(vx[i]);
      if (first < 0) first = static_cast<std::int64_t>(i);
      if (std::fabs(vx[i]) > largest)
        largest = std::fabs(vx[i]), at_largest = static_cast<std::int64_t>(i);
    }
    if (n > 0 && zeros == n) {
      std::string s = fmt::format("all {} terms of {} are 0", n, who);
      auto pk = producer_.find(p.inputs[0]);
      const Node* q = pk != producer_.end() ? &g_.nodes[pk->second] : nullptr;
      if (q && words(*q).clamps_to == 0.0)
        s += fmt::format(" ({} {} clamped every one of them)", q->op_type, q->name);
      return {s, Next{p.inputs[0], first}};
    }
    const ExplainWords& w = words(p);
    Next next = at_largest >= 0 ? Next{p.inputs[0], at_largest} : Next{};
    if (w.cancellation && sum_abs > 0 &&
        std::fabs(v) * static_cast<double>(w.mean ? n : 1) < 1e-4 * sum_abs)
      return {fmt::format("{} of {} terms gave {} (cancellation: sum of |terms| {})", who, n,
                          num(v), num(sum_abs)),
              next};
    return {fmt::format("{} of {} terms gave {}", who, n, num(v)), next};
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
      const auto k = static_cast<std::size_t>(z.index);
      // An output's zone (an overflow): the walk from that output, through the node itself,
      // where the op's words can say how its inputs made it; else the inputs' magnitudes.
      std::string why = !z.watches_output ? ex.cause(n.inputs[k], zd.element[s])
                        : k < n.outputs.size() && ex.walks_through(n)
                            ? ex.cause(n.outputs[k], zd.element[s])
                            : overflow_cause(ins, zd.element[s]);
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
