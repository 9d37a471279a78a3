// The transformer ops of opset 23. Attention: scaled dot-product attention over 3-D or 4-D Q, K
// and V, with multi-head, grouped-query and multi-query heads, an optional boolean or additive
// mask (broadcast), bottom-right causal masking, a past key/value cache (present_key and
// present_value), softcap, and the four qk_matmul_output modes; a fully masked query row gives
// zeros (the text's errata). One loop written once over the number type:
// the reference runs it in double, the float32 twin (triage) in float as the function body
// writes it (Q and K each scaled by sqrt(scale), one matmul, softcap, mask, softmax with the
// maximum subtracted, matmul), and the error model runs it in double carrying each value's
// first-order rounding bound. The VJP covers Q, K, V, the cache and a floating mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The node's problem in canonical form: Q [B, Hq, Sq, D], K [B, Hkv, T, D] and V [B, Hkv, T, Dv]
// after the cache (T = past + kv length), the additive bias [B, Hq, Sq, T] from the mask and
// is_causal, and which rows have every key masked.
struct Attn {
  std::int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Skv = 0, past = 0, T = 0, D = 0, Dv = 0;
  bool three_d = false;
  double scale = 0, softcap = 0;
  std::int64_t mode = 0;
  std::vector<double> q, k, v, bias;  // canonical layouts, row-major
  std::vector<bool> masked_row;       // [B, Hq, Sq]
  // Per bias element, the mask's element (-1: no mask).
  std::vector<std::int64_t> mask_at;
  bool float_mask = false;
  std::size_t qi(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>(((b * Hq + h) * Sq + i) * D);
  }
  std::size_t ki(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return static_cast<std::size_t>(((b * Hkv + h) * T + j) * D);
  }
  std::size_t vi(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return static_cast<std::size_t>(((b * Hkv + h) * T + j) * Dv);
  }
  std::size_t row(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>((b * Hq + h) * Sq + i);
  }
  // The kv head a query head reads: each kv head serves Hq / Hkv consecutive query heads.
  std::int64_t kv_head(std::int64_t h) const { return h / (Hq / Hkv); }
};

// The concatenation of the cache and the new keys (or values) along the sequence axis.
std::vector<double> with_past(const std::vector<double>& past, const std::vector<double>& now,
                              std::int64_t BH, std::int64_t P, std::int64_t S, std::int64_t d) {
  std::vector<double> r;
  r.reserve(static_cast<std::size_t>(BH * (P + S) * d));
  for (std::int64_t g = 0; g < BH; ++g) {
    r.insert(r.end(), past.begin() + g * P * d, past.begin() + (g + 1) * P * d);
    r.insert(r.end(), now.begin() + g * S * d, now.begin() + (g + 1) * S * d);
  }
  return r;
}

// [B, S, H, d] <-> [B, H, S, d]: 3-D inputs' layout from the canonical one (`to_heads` false) or
// back (true); 4-D as they are.
std::vector<double> relayout(const Attn& a, const std::vector<double>& g, std::int64_t H,
                             std::int64_t S, std::int64_t d, bool to_heads) {
  if (!a.three_d) return g;
  std::vector<double> r(g.size());
  for (std::int64_t b = 0; b < a.B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S; ++i)
        for (std::int64_t e = 0; e < d; ++e) {
          auto heads = static_cast<std::size_t>(((b * H + h) * S + i) * d + e);
          auto seq = static_cast<std::size_t>(((b * S + i) * H + h) * d + e);
          r[to_heads ? heads : seq] = g[to_heads ? seq : heads];
        }
  return r;
}

// The heads and lengths: 4-D inputs carry them, 3-D ones split their hidden sizes by
// q_num_heads and kv_num_heads.
void attention_shapes(const KernelContext& c, const Tensor& Q, const Tensor& K, const Tensor& V,
                      Attn& a) {
  if ((Q.rank() != 3 && Q.rank() != 4) || K.rank() != Q.rank() || V.rank() != Q.rank())
    fail("{}: Q, K and V must all be 3-D or all 4-D (got shapes {}, {} and {})", c.node.label(),
         shape_str(Q.shape()), shape_str(K.shape()), shape_str(V.shape()));
  a.three_d = Q.rank() == 3;
  const Shape &q = Q.shape(), &k = K.shape(), &v = V.shape();
  a.B = q[0];
  if (a.three_d) {
    a.Hq = attr_i_or(c, "q_num_heads", 0);
    a.Hkv = attr_i_or(c, "kv_num_heads", 0);
    if (a.Hq <= 0 || a.Hkv <= 0 || q[2] % a.Hq || k[2] % a.Hkv || v[2] % a.Hkv)
      fail(
          "{}: 3-D Q, K and V need q_num_heads and kv_num_heads dividing their hidden sizes {}, "
          "{} and {} (got {} and {})",
          c.node.label(), q[2], k[2], v[2], a.Hq, a.Hkv);
    a.Sq = q[1];
    a.Skv = k[1];
    a.D = q[2] / a.Hq;
    a.Dv = v[2] / a.Hkv;
  } else {
    a.Hq = q[1];
    a.Sq = q[2];
    a.D = q[3];
    a.Hkv = k[1];
    a.Skv = k[2];
    a.Dv = v[3];
  }
  const std::int64_t kd = a.three_d ? k[2] / a.Hkv : k[3], vh = a.three_d ? a.Hkv : v[1];
  const std::int64_t kb = k[0], vb = v[0], vs = a.three_d ? v[1] : v[2];
  if (kd != a.D || vh != a.Hkv || kb != a.B || vb != a.B || vs != a.Skv)
    fail("{}: K {} and V {} do not fit Q {}", c.node.label(), shape_str(k), shape_str(v),
         shape_str(q));
  if (a.Hkv <= 0 || a.Hq % a.Hkv)
    fail("{}: {} query heads are not a multiple of {} key/value heads", c.node.label(), a.Hq,
         a.Hkv);
}

// present_key and present_value: the cache, if given, then the new keys and values.
void attention_cache(const KernelContext& c, const Tensors& in, Attn& a) {
  if (has_input(in, 4) != has_input(in, 5))
    fail("{}: past_key and past_value come together", c.node.label());
  if (has_input(in, 4)) {
    const Tensor &pk = in[4], &pv = in[5];
    a.past = pk.rank() == 4 ? pk.shape()[2] : -1;
    if (pk.shape() != Shape{a.B, a.Hkv, a.past, a.D} ||
        pv.shape() != Shape{a.B, a.Hkv, a.past, a.Dv})
      fail("{}: past_key {} and past_value {} do not fit [{}, {}, past, {} / {}]", c.node.label(),
           shape_str(pk.shape()), shape_str(pv.shape()), a.B, a.Hkv, a.D, a.Dv);
    a.k = with_past(pk.to_f64(), a.k, a.B * a.Hkv, a.past, a.Skv, a.D);
    a.v = with_past(pv.to_f64(), a.v, a.B * a.Hkv, a.past, a.Skv, a.Dv);
  }
  a.T = a.past + a.Skv;
}

// The bias: the mask (boolean: 0 or -inf; numbers: added) broadcast as the text says (ONNX's
// reference evaluator also pads a shorter last dimension with -inf, which the text does not
// allow and ONNX Runtime refuses), plus -inf where is_causal forbids key j to query i
// (j > i + past); and which rows it masks whole.
void attention_bias(const KernelContext& c, const Tensors& in, Attn& a) {
  const Shape full{a.B, a.Hq, a.Sq, a.T};
  a.bias.assign(static_cast<std::size_t>(shape_numel(full)), 0.0);
  a.mask_at.assign(a.bias.size(), -1);
  if (has_input(in, 3)) {
    const Tensor& m = in[3];
    Shape ms4 = with_rank(m.shape(), 4);
    bool fits = m.rank() >= 1 && m.rank() <= 4;
    for (std::size_t d = 0; fits && d < 4; ++d) fits = ms4[d] == 1 || ms4[d] == full[d];
    if (!fits)
      fail(
          "{}: attn_mask {} does not broadcast to [{}, {}, {}, {}] (batch, query heads, query "
          "length, past + key length)",
          c.node.label(), shape_str(m.shape()), a.B, a.Hq, a.Sq, a.T);
    a.float_mask = is_floating(m.dtype());
    const bool boolean = m.dtype() == DType::Bool;
    auto mv = m.to_f64();
    auto ms = strides_of(ms4);
    for (std::int64_t d = 0; d < 4; ++d)
      if (ms4[d] == 1) ms[d] = 0;  // broadcast
    IndexIter it(full);
    for (std::size_t e = 0; e < a.bias.size(); ++e, it.next()) {
      const auto& ix = it.idx();
      a.mask_at[e] = ix[0] * ms[0] + ix[1] * ms[1] + ix[2] * ms[2] + ix[3] * ms[3];
      double x = mv[static_cast<std::size_t>(a.mask_at[e])];
      a.bias[e] = !boolean ? x : x != 0 ? 0.0 : -kInf;
    }
  }
  if (attr_i(c, "is_causal"))
    for (std::size_t e = 0; e < a.bias.size(); ++e) {
      auto j = static_cast<std::int64_t>(e) % a.T, i = static_cast<std::int64_t>(e) / a.T % a.Sq;
      if (j > i + a.past) a.bias[e] = -kInf;
    }
  a.masked_row.assign(static_cast<std::size_t>(a.B * a.Hq * a.Sq), true);
  for (std::size_t e = 0; e < a.bias.size(); ++e)
    if (a.bias[e] != -kInf) a.masked_row[e / static_cast<std::size_t>(a.T)] = false;
}

Attn attention_setup(const KernelContext& c, const Tensors& in) {
  const Tensor &Q = input(c, in, 0), &K = input(c, in, 1), &V = input(c, in, 2);
  for (auto [t, what] : {std::pair{&Q, "Q"}, {&K, "K"}, {&V, "V"}}) require_float(c, *t, what);
  Attn a;
  attention_shapes(c, Q, K, V, a);
  a.q = relayout(a, Q.to_f64(), a.Hq, a.Sq, a.D, true);
  a.k = relayout(a, K.to_f64(), a.Hkv, a.Skv, a.D, true);
  a.v = relayout(a, V.to_f64(), a.Hkv, a.Skv, a.Dv, true);
  attention_cache(c, in, a);
  double scale = attr_f_or(c, "scale", std::nan(""));
  a.scale = std::isnan(scale) ? 1 / std::sqrt(static_cast<double>(a.D)) : scale;
  a.softcap = attr_f(c, "softcap");
  a.mode = attr_i(c, "qk_matmul_output_mode");
  if (a.mode < 0 || a.mode > 3)
    fail("{}: qk_matmul_output_mode {} is not 0, 1, 2 or 3", c.node.label(), a.mode);
  attention_bias(c, in, a);
  return a;
}

// Per output, the first-order rounding bound of each element (units of u) when the error model
// runs the loop.
struct AttnBounds {
  AccumulationBound bound;
  std::vector<double> y, qk;
};

// One query row's work in number type N: the scores at each stage, the probabilities, and with
// the error model their bounds.
template <typename N>
struct Row {
  std::vector<N> raw, capped, x, p;
  std::vector<double> es, ec, ex, ep;
  N m = 0;
  explicit Row(std::int64_t T)
      : raw(static_cast<std::size_t>(T)),
        capped(raw.size()),
        x(raw.size()),
        p(raw.size()),
        es(raw.size()),
        ec(raw.size()),
        ex(raw.size()),
        ep(raw.size()) {}
};

// The row's scores: (Q sqrt(scale)) (K sqrt(scale))^T as the function body scales them (sqrt
// cast to N), softcap, + bias; their maximum.
template <typename N>
void scores(const Attn& a, std::int64_t b, std::int64_t h, std::int64_t i, Row<N>& r,
            const AttnBounds* err) {
  const N root = static_cast<N>(std::sqrt(a.scale));
  const double kd = err ? err->bound.kappa(static_cast<double>(a.D)) : 0;
  const std::size_t qo = a.qi(b, h, i), base = a.row(b, h, i) * static_cast<std::size_t>(a.T);
  r.m = static_cast<N>(-kInf);
  for (std::int64_t j = 0; j < a.T; ++j) {
    const std::size_t ko = a.ki(b, a.kv_head(h), j), J = static_cast<std::size_t>(j);
    N dot = 0;
    double abs = 0;
    for (std::int64_t d = 0; d < a.D; ++d) {
      dot += (static_cast<N>(a.q[qo + d]) * root) * (static_cast<N>(a.k[ko + d]) * root);
      abs += std::fabs(a.q[qo + d] * a.k[ko + d]);
    }
    r.raw[J] = dot;
    const N cap = static_cast<N>(a.softcap);
    r.capped[J] = a.softcap > 0 ? cap * std::tanh(dot / cap) : dot;
    const double bias = a.bias[base + J];
    r.x[J] = r.capped[J] + static_cast<N>(bias);
    r.m = std::max(r.m, r.x[J]);
    if (!err) continue;
    // sqrt(scale) rounded, each scaled factor and each product once, the D-term sum.
    r.es[J] = (kd + 4) * a.scale * abs;
    const double th = a.softcap > 0 ? std::tanh(static_cast<double>(dot) / a.softcap) : 0;
    r.ec[J] = a.softcap > 0 ? (1 - th * th) * (r.es[J] + std::fabs(static_cast<double>(dot))) +
                                  6 * std::fabs(static_cast<double>(r.capped[J]))
                            : r.es[J];
    // A -inf bias gives -inf exactly: no weight, no error.
    r.ex[J] =
        std::isinf(bias) ? 0 : r.ec[J] + (bias != 0 ? std::fabs(static_cast<double>(r.x[J])) : 0);
  }
}

// The row's softmax (the maximum subtracted) and its bounds: p_j (|x_j - m| + e_j + sum_k p_k
// (|x_k - m| + e_k) + kappa(T) + 4).
template <typename N>
void probabilities(const Attn& a, Row<N>& r, const AttnBounds* err) {
  N sum = 0;
  for (std::size_t j = 0; j < r.p.size(); ++j) sum += r.p[j] = std::exp(r.x[j] - r.m);
  for (auto& p : r.p) p /= sum;
  if (!err) return;
  const double kt = err->bound.kappa(static_cast<double>(a.T));
  auto own = [&](std::size_t j) { return std::fabs(static_cast<double>(r.x[j] - r.m)) + r.ex[j]; };
  double spread = 0;
  for (std::size_t j = 0; j < r.p.size(); ++j)
    if (r.p[j] > 0) spread += static_cast<double>(r.p[j]) * own(j);
  for (std::size_t j = 0; j < r.p.size(); ++j)
    r.ep[j] = r.p[j] > 0 ? static_cast<double>(r.p[j]) * (own(j) + spread + kt + 4) : 0;
}

// The row's qk_matmul_output at the stage its mode exposes (mode 3: the probabilities, zeros
// for a fully masked row), and the bounds.
template <typename N>
void expose_row(const Attn& a, const Row<N>& r, bool masked, std::size_t base, std::vector<N>& qk,
                AttnBounds* err) {
  if (a.mode == 3 && masked) return;
  const std::vector<N>& v = a.mode == 0 ? r.raw : a.mode == 1 ? r.capped : a.mode == 2 ? r.x : r.p;
  const std::vector<double>& e = a.mode == 0   ? r.es
                                 : a.mode == 1 ? r.ec
                                 : a.mode == 2 ? r.ex
                                               : r.ep;
  for (std::size_t j = 0; j < v.size(); ++j) {
    qk[base + j] = v[j];
    if (err) err->qk[base + j] = e[j];
  }
}

// The row of Y: P V over the keys of its kv head; its bound kappa(T) sum|p v| + sum e_p |v|.
template <typename N>
void weigh_values(const Attn& a, std::int64_t b, std::int64_t h, std::size_t row, const Row<N>& r,
                  std::vector<N>& y, AttnBounds* err) {
  const double kt = err ? err->bound.kappa(static_cast<double>(a.T)) : 0;
  for (std::int64_t d = 0; d < a.Dv; ++d) {
    N acc = 0;
    double abs = 0, carried = 0;
    for (std::int64_t j = 0; j < a.T; ++j) {
      const double vj = a.v[a.vi(b, a.kv_head(h), j) + static_cast<std::size_t>(d)];
      acc += r.p[j] * static_cast<N>(vj);
      abs += std::fabs(static_cast<double>(r.p[j]) * vj);
      carried += r.ep[static_cast<std::size_t>(j)] * std::fabs(vj);
    }
    const std::size_t o = row * static_cast<std::size_t>(a.Dv) + static_cast<std::size_t>(d);
    y[o] = acc;
    if (err) err->y[o] = kt * abs + carried;
  }
}

// One pass over the problem in number type N: Y [B, Hq, Sq, Dv] and qk_matmul_output
// [B, Hq, Sq, T] in canonical layout; with `err`, their bounds. A fully masked row stays zeros
// (Y's and mode 3's).
template <typename N>
void run_attention(const Attn& a, std::vector<N>& y, std::vector<N>& qk, AttnBounds* err) {
  y.assign(static_cast<std::size_t>(a.B * a.Hq * a.Sq * a.Dv), N(0));
  qk.assign(a.bias.size(), N(0));
  if (err) {
    err->y.assign(y.size(), 0.0);
    err->qk.assign(qk.size(), 0.0);
  }
  Row<N> r(a.T);
  for (std::int64_t b = 0; b < a.B; ++b)
    for (std::int64_t h = 0; h < a.Hq; ++h)
      for (std::int64_t i = 0; i < a.Sq; ++i) {
        const std::size_t row = a.row(b, h, i);
        const bool masked = a.masked_row[row];
        scores(a, b, h, i, r, err);
        if (!masked) probabilities(a, r, err);
        expose_row(a, r, masked, row * static_cast<std::size_t>(a.T), qk, err);
        if (!masked) weigh_values(a, b, h, row, r, y, err);
      }
}

// Y in Q's layout: [B, Hq, Sq, Dv], or [B, Sq, Hq * Dv] for 3-D inputs.
std::vector<double> y_layout(const Attn& a, const std::vector<double>& y) {
  return relayout(a, y, a.Hq, a.Sq, a.Dv, false);
}

Shape y_shape(const Attn& a) {
  return a.three_d ? Shape{a.B, a.Sq, a.Hq * a.Dv} : Shape{a.B, a.Hq, a.Sq, a.Dv};
}

// The node's outputs (as many as it names): Y, present_key, present_value, qk_matmul_output.
template <typename N>
Tensors attention_outputs(const KernelContext& c, const Tensors& in) {
  Attn a = attention_setup(c, in);
  std::vector<N> y, qk;
  run_attention<N>(a, y, qk, nullptr);
  auto f64 = [](const std::vector<N>& v) { return std::vector<double>(v.begin(), v.end()); };
  Tensors out{Tensor::from_f64(y_layout(a, f64(y)), y_shape(a), in[0].dtype()),
              Tensor::from_f64(a.k, {a.B, a.Hkv, a.T, a.D}, in[1].dtype()),
              Tensor::from_f64(a.v, {a.B, a.Hkv, a.T, a.Dv}, in[2].dtype()),
              Tensor::from_f64(f64(qk), {a.B, a.Hq, a.Sq, a.T}, in[0].dtype())};
  out.resize(std::min(out.size(), c.node.outputs.size()));
  return out;
}

Magnitudes attention_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                               const AccumulationBound& bound) {
  Attn a = attention_setup(c, in);
  AttnBounds e{bound, {}, {}};
  std::vector<double> y, qk;
  run_attention<double>(a, y, qk, &e);
  Magnitudes m{y_layout(a, e.y), std::vector<double>(a.k.size(), 0.0),
               std::vector<double>(a.v.size(), 0.0), e.qk};
  m.resize(std::min(m.size(), c.node.outputs.size()));
  return m;
}

// The gradients the VJP gathers, in canonical layouts.
struct AttnGrads {
  std::vector<double> gy, gqk, dq, dk, dv, dbias;
};

// One query row back from Y = P V: dP = gY V^T (+ mode 3's gradient), dX = P (dP - sum(P dP))
// (+ mode 2's), dC = dX (+ mode 1's), dS = dC (1 - tanh^2) with softcap (+ mode 0's), then
// dQ = scale dS K, dK = scale dS^T Q, dV = P^T gY, summed over the query heads sharing a kv
// head. A fully masked row's P is constant (zeros): no gradient passes through it.
void row_backward(const Attn& a, std::int64_t b, std::int64_t h, std::int64_t i, Row<double>& r,
                  AttnGrads& g) {
  const std::size_t row = a.row(b, h, i), base = row * static_cast<std::size_t>(a.T);
  const std::size_t qo = a.qi(b, h, i), T = static_cast<std::size_t>(a.T);
  const std::int64_t kv = a.kv_head(h);
  scores(a, b, h, i, r, nullptr);
  auto mode = [&](std::int64_t m, std::size_t j) { return a.mode == m ? g.gqk[base + j] : 0.0; };
  std::vector<double> dx(T, 0.0);
  if (!a.masked_row[row]) {
    probabilities(a, r, nullptr);
    std::vector<double> dp(T);
    double dot = 0;
    for (std::size_t j = 0; j < T; ++j) {
      const std::size_t vo = a.vi(b, kv, static_cast<std::int64_t>(j));
      dp[j] = mode(3, j);
      for (std::int64_t d = 0; d < a.Dv; ++d) {
        const double gyd = g.gy[row * static_cast<std::size_t>(a.Dv) + static_cast<std::size_t>(d)];
        dp[j] += gyd * a.v[vo + d];
        g.dv[vo + d] += r.p[j] * gyd;
      }
      dot += r.p[j] * dp[j];
    }
    for (std::size_t j = 0; j < T; ++j) dx[j] = r.p[j] * (dp[j] - dot);
  }
  for (std::size_t j = 0; j < T; ++j) {
    dx[j] += mode(2, j);
    g.dbias[base + j] = dx[j];
    const double th = a.softcap > 0 ? std::tanh(r.raw[j] / a.softcap) : 0;
    const double ds = (dx[j] + mode(1, j)) * (1 - th * th) + mode(0, j);
    const std::size_t ko = a.ki(b, kv, static_cast<std::int64_t>(j));
    for (std::int64_t d = 0; d < a.D; ++d) {
      g.dq[qo + d] += a.scale * ds * a.k[ko + d];
      g.dk[ko + d] += a.scale * ds * a.q[qo + d];
    }
  }
}

// The cache's part (past) or the new part of a [B, Hkv, T, d] gradient of present_key or
// present_value.
std::vector<double> cache_part(const Attn& a, const std::vector<double>& full, std::int64_t d,
                               bool past) {
  std::vector<double> part;
  for (std::int64_t gh = 0; gh < a.B * a.Hkv; ++gh) {
    auto from = full.begin() + (gh * a.T + (past ? 0 : a.past)) * d;
    part.insert(part.end(), from, from + (past ? a.past : a.Skv) * d);
  }
  return part;
}

// The VJP: every row back (row_backward); present_key's and present_value's gradients add to
// the cache's and the new keys' and values'; a floating mask gathers the bias's gradient.
Tensors attention_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                      const Tensors& grads) {
  Attn a = attention_setup(c, in);
  AttnGrads g;
  g.gy = relayout(a, grad_of(grads, out, 0), a.Hq, a.Sq, a.Dv, true);
  auto given = [&](std::size_t o, std::size_t n) {
    return out.size() > o ? grad_of(grads, out, o) : std::vector<double>(n, 0.0);
  };
  g.dk = given(1, a.k.size());
  g.dv = given(2, a.v.size());
  g.gqk = given(3, a.bias.size());
  g.dq.assign(a.q.size(), 0.0);
  g.dbias.assign(a.bias.size(), 0.0);
  Row<double> r(a.T);
  for (std::int64_t b = 0; b < a.B; ++b)
    for (std::int64_t h = 0; h < a.Hq; ++h)
      for (std::int64_t i = 0; i < a.Sq; ++i) row_backward(a, b, h, i, r, g);
  Tensors res(in.size());
  res[0] = grad_like(relayout(a, g.dq, a.Hq, a.Sq, a.D, false), in[0]);
  res[1] = grad_like(relayout(a, cache_part(a, g.dk, a.D, false), a.Hkv, a.Skv, a.D, false), in[1]);
  res[2] =
      grad_like(relayout(a, cache_part(a, g.dv, a.Dv, false), a.Hkv, a.Skv, a.Dv, false), in[2]);
  if (has_input(in, 3) && a.float_mask) {
    std::vector<double> gm(static_cast<std::size_t>(in[3].numel()), 0.0);
    for (std::size_t e = 0; e < g.dbias.size(); ++e)
      gm[static_cast<std::size_t>(a.mask_at[e])] += g.dbias[e];
    res[3] = grad_like(gm, in[3]);
  }
  if (has_input(in, 4)) {
    res[4] = grad_like(cache_part(a, g.dk, a.D, true), in[4]);
    res[5] = grad_like(cache_part(a, g.dv, a.Dv, true), in[5]);
  }
  return res;
}

// The backward bound (units of u), row by row as row_backward, each value's first-order
// rounding bound carried: P's from the forward (probabilities), dP = gY V^T kappa(Dv) sum|gY V|,
// sum(P dP) kappa(T) sum|p dP| plus the carried bounds, dX = P (dP - sum(P dP)) with the
// subtraction's and the product's roundings, softcap's (1 - tanh^2) with its argument's and its
// own roundings, then dQ, dK (scale applied once more) and dV as sums of products, kappa of the
// terms they add (over the keys for dQ, over the query rows sharing a kv head for dK and dV).
struct AttnGradBounds {
  std::vector<double> dq, dk_abs, dk_err, dv_abs, dv_err, dbias;
};

void row_backward_bound(const Attn& a, std::int64_t b, std::int64_t h, std::int64_t i,
                        Row<double>& r, const AttnGrads& g, const AttnBounds& fwd,
                        AttnGradBounds& e) {
  const std::size_t row = a.row(b, h, i), base = row * static_cast<std::size_t>(a.T);
  const std::size_t qo = a.qi(b, h, i), T = static_cast<std::size_t>(a.T);
  const std::int64_t kv = a.kv_head(h);
  const AccumulationBound& bound = fwd.bound;
  scores(a, b, h, i, r, &fwd);
  auto mode = [&](std::int64_t m, std::size_t j) { return a.mode == m ? g.gqk[base + j] : 0.0; };
  std::vector<double> dx(T, 0.0), edx(T, 0.0);
  if (!a.masked_row[row]) {
    probabilities(a, r, &fwd);
    std::vector<double> dp(T), edp(T);
    const double kdv = bound.kappa(static_cast<double>(a.Dv));
    double dot = 0, dot_abs = 0, dot_carried = 0;
    for (std::size_t j = 0; j < T; ++j) {
      const std::size_t vo = a.vi(b, kv, static_cast<std::int64_t>(j));
      dp[j] = mode(3, j);
      double abs = std::fabs(mode(3, j));
      for (std::int64_t d = 0; d < a.Dv; ++d) {
        const double gyd = g.gy[row * static_cast<std::size_t>(a.Dv) + static_cast<std::size_t>(d)];
        dp[j] += gyd * a.v[vo + d];
        abs += std::fabs(gyd * a.v[vo + d]);
        e.dv_abs[vo + d] += std::fabs(r.p[j] * gyd);
        e.dv_err[vo + d] += r.ep[j] * std::fabs(gyd);
      }
      edp[j] = kdv * abs;
      dot += r.p[j] * dp[j];
      dot_abs += std::fabs(r.p[j] * dp[j]);
      dot_carried += r.ep[j] * std::fabs(dp[j]) + r.p[j] * edp[j];
    }
    const double edot = bound.kappa(static_cast<double>(a.T)) * dot_abs + dot_carried;
    for (std::size_t j = 0; j < T; ++j) {
      const double diff = dp[j] - dot;
      dx[j] = r.p[j] * diff;
      edx[j] =
          r.ep[j] * std::fabs(diff) + r.p[j] * (edp[j] + edot + std::fabs(diff)) + std::fabs(dx[j]);
    }
  }
  const double kt = bound.kappa(static_cast<double>(a.T));
  std::vector<double> dq_abs(static_cast<std::size_t>(a.D), 0.0), dq_err(dq_abs.size(), 0.0);
  for (std::size_t j = 0; j < T; ++j) {
    dx[j] += mode(2, j);
    e.dbias[base + j] = edx[j] + (a.mode == 2 ? std::fabs(dx[j]) : 0.0);
    const double th = a.softcap > 0 ? std::tanh(r.raw[j] / a.softcap) : 0;
    const double dc = dx[j] + mode(1, j), slope = 1 - th * th;
    const double ds = dc * slope + mode(0, j);
    // 1 - tanh^2 from a rounded tanh of a rounded argument (raw's bound es over softcap).
    const double eslope =
        a.softcap > 0 ? 2 * std::fabs(th) * slope * r.es[j] / a.softcap + 8 * th * th + 2 : 0;
    const double eds = slope * (e.dbias[base + j] + (a.mode == 1 ? std::fabs(dc) : 0.0)) +
                       std::fabs(dc) * eslope + 2 * std::fabs(ds);
    const std::size_t ko = a.ki(b, kv, static_cast<std::int64_t>(j));
    for (std::int64_t d = 0; d < a.D; ++d) {
      dq_abs[d] += a.scale * std::fabs(ds * a.k[ko + d]);
      dq_err[d] += a.scale * eds * std::fabs(a.k[ko + d]);
      e.dk_abs[ko + d] += a.scale * std::fabs(ds * a.q[qo + d]);
      e.dk_err[ko + d] += a.scale * eds * std::fabs(a.q[qo + d]);
    }
  }
  for (std::int64_t d = 0; d < a.D; ++d) e.dq[qo + d] = (kt + 2) * dq_abs[d] + dq_err[d];
}

Magnitudes attention_vjp_bound(const KernelContext& c, const Tensors& in, const Tensors& out,
                               const Tensors& grads, const AccumulationBound& bound) {
  Attn a = attention_setup(c, in);
  AttnGrads g;
  g.gy = relayout(a, grad_of(grads, out, 0), a.Hq, a.Sq, a.Dv, true);
  g.gqk = out.size() > 3 ? grad_of(grads, out, 3) : std::vector<double>(a.bias.size(), 0.0);
  AttnGradBounds e;
  e.dq.assign(a.q.size(), 0.0);
  e.dk_abs.assign(a.k.size(), 0.0);
  e.dk_err = e.dk_abs;
  e.dv_abs.assign(a.v.size(), 0.0);
  e.dv_err = e.dv_abs;
  e.dbias.assign(a.bias.size(), 0.0);
  // present_key's and present_value's own gradients, added once.
  if (out.size() > 1)
    for (auto [o, abs] : {std::pair{std::size_t{1}, &e.dk_abs}, {std::size_t{2}, &e.dv_abs}}) {
      const auto gp = grad_of(grads, out, o);
      for (std::size_t k = 0; k < gp.size() && k < abs->size(); ++k) (*abs)[k] += std::fabs(gp[k]);
    }
  const AttnBounds fwd{bound, {}, {}};
  Row<double> r(a.T);
  for (std::int64_t b = 0; b < a.B; ++b)
    for (std::int64_t h = 0; h < a.Hq; ++h)
      for (std::int64_t i = 0; i < a.Sq; ++i) row_backward_bound(a, b, h, i, r, g, fwd, e);
  // dK and dV add the rows of the Hq / Hkv query heads that share a kv head (and the given
  // present gradient).
  const std::int64_t sharing = a.Sq * (a.Hq / a.Hkv) + 1;
  const double rows = bound.kappa(static_cast<double>(sharing));
  std::vector<double> dk(a.k.size()), dv(a.v.size());
  for (std::size_t k = 0; k < dk.size(); ++k) dk[k] = (rows + 2) * e.dk_abs[k] + e.dk_err[k];
  for (std::size_t k = 0; k < dv.size(); ++k) dv[k] = (rows + 1) * e.dv_abs[k] + e.dv_err[k];
  Magnitudes m(in.size());
  m[0] = relayout(a, e.dq, a.Hq, a.Sq, a.D, false);
  m[1] = relayout(a, cache_part(a, dk, a.D, false), a.Hkv, a.Skv, a.D, false);
  m[2] = relayout(a, cache_part(a, dv, a.Dv, false), a.Hkv, a.Skv, a.Dv, false);
  if (has_input(in, 3) && a.float_mask) {
    // The mask's gradient sums the bias's over the positions it was broadcast to.
    std::vector<double> gm(static_cast<std::size_t>(in[3].numel()), 0.0), n(gm.size(), 0.0);
    for (std::size_t k = 0; k < e.dbias.size(); ++k) {
      gm[static_cast<std::size_t>(a.mask_at[k])] += e.dbias[k];
      n[static_cast<std::size_t>(a.mask_at[k])] += 1;
    }
    for (std::size_t k = 0; k < gm.size(); ++k) gm[k] *= 1 + bound.kappa(n[k]);
    m[3] = gm;
  }
  if (has_input(in, 4)) {
    m[4] = cache_part(a, dk, a.D, true);
    m[5] = cache_part(a, dv, a.Dv, true);
  }
  return m;
}

// ---- RotaryEmbedding (opset 23): each token's head vector rotated pairwise by its position's
// angles: (x1, x2) -> (c x1 - s x2, s x1 + c x2), the pairs being the two halves of the first
// rotary_embedding_dim elements (or, interleaved, neighbours); the rest pass unchanged. The
// caches are read by position_ids ([max_pos, rot / 2]) or per token ([B, S, rot / 2]).

struct Rope {
  std::int64_t B = 0, H = 0, S = 0, D = 0, rot = 0;
  bool three_d = false, interleaved = false;
  std::vector<double> x, cos, sin;
  std::vector<std::int64_t> cache_row;  // per token (b, s): its row of the caches
  // Element e of head h at token (b, s), in X's own layout.
  std::size_t at(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t e) const {
    return static_cast<std::size_t>(three_d ? ((b * S + t) * H + h) * D + e
                                            : ((b * H + h) * S + t) * D + e);
  }
  // The two elements of pair k (k < rot / 2).
  std::pair<std::int64_t, std::int64_t> pair(std::int64_t k) const {
    return interleaved ? std::pair{2 * k, 2 * k + 1} : std::pair{k, k + rot / 2};
  }
  // f(a1, a2, c) for each rotated pair: its two elements' offsets in X and its caches' offset.
  template <typename F>
  void each_pair(F f) const {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < S; ++t)
          for (std::int64_t k = 0; k < rot / 2; ++k) {
            auto [i1, i2] = pair(k);
            f(at(b, h, t, i1), at(b, h, t, i2), cache_at(b, t, k));
          }
  }
  std::size_t cache_at(std::int64_t b, std::int64_t t, std::int64_t k) const {
    return static_cast<std::size_t>(cache_row[static_cast<std::size_t>(b * S + t)] * (rot / 2) + k);
  }
};

Rope rope_setup(const KernelContext& c, const Tensors& in) {
  const Tensor &X = input(c, in, 0), &C = input(c, in, 1), &Sn = input(c, in, 2);
  require_float(c, X, "input X");
  Rope r;
  r.three_d = X.rank() == 3;
  if (X.rank() != 3 && X.rank() != 4)
    fail("{}: X must be 3-D or 4-D (got shape {})", c.node.label(), shape_str(X.shape()));
  r.B = X.shape()[0];
  if (r.three_d) {
    r.H = attr_i_or(c, "num_heads", 0);
    if (r.H <= 0 || X.shape()[2] % r.H)
      fail("{}: a 3-D X of hidden size {} needs num_heads dividing it (got {})", c.node.label(),
           X.shape()[2], r.H);
    r.S = X.shape()[1];
    r.D = X.shape()[2] / r.H;
  } else {
    r.H = X.shape()[1];
    r.S = X.shape()[2];
    r.D = X.shape()[3];
  }
  r.rot = attr_i(c, "rotary_embedding_dim");
  if (r.rot == 0) r.rot = r.D;
  if (r.rot < 0 || r.rot > r.D || r.rot % 2)
    fail("{}: rotary_embedding_dim {} is not even and at most the head size {}", c.node.label(),
         r.rot, r.D);
  r.interleaved = attr_i(c, "interleaved") != 0;
  const std::int64_t half = r.rot / 2;
  if (C.shape() != Sn.shape() || C.rank() < 1 || C.shape().back() != half)
    fail(
        "{}: cos_cache {} and sin_cache {} must match, their last dimension rotary_embedding_dim "
        "/ 2 = {}",
        c.node.label(), shape_str(C.shape()), shape_str(Sn.shape()), half);
  r.cache_row.resize(static_cast<std::size_t>(r.B * r.S));
  if (has_input(in, 3)) {
    const Tensor& pos = in[3];
    if (C.rank() != 2 || pos.shape() != Shape{r.B, r.S})
      fail("{}: with position_ids {} the caches must be [max_position, {}] (got {})",
           c.node.label(), shape_str(pos.shape()), half, shape_str(C.shape()));
    auto p = pos.to_f64();
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] < 0 || p[i] >= static_cast<double>(C.shape()[0]))
        fail("{}: position_ids[{}] = {} is outside the caches' {} rows", c.node.label(), i, p[i],
             C.shape()[0]);
      r.cache_row[i] = static_cast<std::int64_t>(p[i]);
    }
  } else {
    if (C.shape() != Shape{r.B, r.S, half})
      fail("{}: without position_ids the caches must be [{}, {}, {}] (got {})", c.node.label(), r.B,
           r.S, half, shape_str(C.shape()));
    for (std::size_t i = 0; i < r.cache_row.size(); ++i)
      r.cache_row[i] = static_cast<std::int64_t>(i);
  }
  r.x = X.to_f64();
  r.cos = C.to_f64();
  r.sin = Sn.to_f64();
  return r;
}

// The rotation in number type N; with `err`, each output's first-order bound (two products and
// a sum: |c x1| + |s x2| + |y|; the elements not rotated exact).
template <typename N>
std::vector<N> run_rope(const Rope& r, std::vector<double>* err) {
  std::vector<N> y(r.x.begin(), r.x.end());
  if (err) err->assign(y.size(), 0.0);
  r.each_pair([&](std::size_t a1, std::size_t a2, std::size_t ci) {
    const N x1 = static_cast<N>(r.x[a1]), x2 = static_cast<N>(r.x[a2]);
    const N co = static_cast<N>(r.cos[ci]), si = static_cast<N>(r.sin[ci]);
    y[a1] = co * x1 - si * x2;
    y[a2] = si * x1 + co * x2;
    if (err) {
      (*err)[a1] = std::fabs(r.cos[ci] * r.x[a1]) + std::fabs(r.sin[ci] * r.x[a2]) +
                   std::fabs(static_cast<double>(y[a1]));
      (*err)[a2] = std::fabs(r.sin[ci] * r.x[a1]) + std::fabs(r.cos[ci] * r.x[a2]) +
                   std::fabs(static_cast<double>(y[a2]));
    }
  });
  return y;
}

template <typename N>
Tensors rotary(const KernelContext& c, const Tensors& in) {
  Rope r = rope_setup(c, in);
  auto y = run_rope<N>(r, nullptr);
  return {Tensor::from_f64(std::vector<double>(y.begin(), y.end()), in[0].shape(), in[0].dtype())};
}

Magnitudes rotary_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                            const AccumulationBound&) {
  Rope r = rope_setup(c, in);
  std::vector<double> m;
  run_rope<double>(r, &m);
  return {m};
}

// The rotation's transpose: dx1 = c g1 + s g2, dx2 = c g2 - s g1; the caches gather
// dc = x1 g1 + x2 g2 and ds = x1 g2 - x2 g1 (summed where positions repeat).
Tensors rotary_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads) {
  Rope r = rope_setup(c, in);
  auto g = grad_of(grads, out, 0);
  std::vector<double> dx = g, dc(r.cos.size(), 0.0), ds(r.sin.size(), 0.0);
  r.each_pair([&](std::size_t a1, std::size_t a2, std::size_t ci) {
    dx[a1] = r.cos[ci] * g[a1] + r.sin[ci] * g[a2];
    dx[a2] = r.cos[ci] * g[a2] - r.sin[ci] * g[a1];
    dc[ci] += r.x[a1] * g[a1] + r.x[a2] * g[a2];
    ds[ci] += r.x[a1] * g[a2] - r.x[a2] * g[a1];
  });
  Tensors res(in.size());
  res[0] = grad_like(dx, in[0]);
  res[1] = grad_like(dc, in[1]);
  res[2] = grad_like(ds, in[2]);
  return res;
}

// RotaryEmbedding's registration (register_attention_ops' second op).
void register_rotary(OpRegistry& r) {
  using case_input::floats;
  using error_models::condition;
  r.op("RotaryEmbedding", Family::linear, rotary<double>)
      .vjp(rotary_vjp)
      .error(condition(rotary_magnitude,
                       "two products and a sum: |c x1| + |s x2| + |y| (the elements not rotated "
                       "exact), 4 ulp"))
      .float32(
          [](const KernelContext& c, const Tensors& in, SumOrder) { return rotary<float>(c, in); },
          "c x1 - s x2 and s x1 + c x2 in float32", "none needed")
      // position_ids come from the model's input (exporters compute them or take them in); the
      // caches of that form are constants.
      .inputs(InputRoles{{0, 3}})
      .cases({// 4-D, halves, the caches read by position
              {23,
               {floats({2, 3, 4, 8}), floats({6, 4}, -1, 1), floats({6, 4}, -1, 1),
                case_input::ints({2, 4}, {0, 1, 2, 3, 5, 4, 3, 3})}},
              // 3-D, interleaved, partial rotation, the caches per token
              {23,
               {floats({2, 3, 12}), floats({2, 3, 2}, -1, 1), floats({2, 3, 2}, -1, 1)},
               {{"num_heads", Attribute::of_int(2)},
                {"interleaved", Attribute::of_int(1)},
                {"rotary_embedding_dim", Attribute::of_int(4)}}}});
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  using case_input::floats;
  using error_models::condition;
  auto heads = [](std::int64_t q, std::int64_t kv) {
    return std::map<std::string, Attribute>{{"q_num_heads", Attribute::of_int(q)},
                                            {"kv_num_heads", Attribute::of_int(kv)}};
  };
  auto with = [](std::map<std::string, Attribute> m, const char* k, Attribute v) {
    m[k] = std::move(v);
    return m;
  };
  r.op("Attention", Family::linear, attention_outputs<double>)
      .vjp(attention_vjp)
      .error(condition(attention_magnitude,
                       "first-order: scores (kappa(D) + 4) scale sum|q k|, softcap (1 - "
                       "tanh^2)(e + |s|) + 6|t|, the mask's addition one rounding, softmax p_j "
                       "(|x_j - m| + e_j + sum_k p_k (|x_k - m| + e_k) + kappa(T) + 4), Y kappa(T) "
                       "sum|p v| + sum e_p |v|; the cache exact; 4 ulp"))
      .backward_error(attention_vjp_bound,
                      "first-order, row by row: P's forward bound carried, dP kappa(Dv) sum|gY V|, "
                      "sum(P dP) kappa(T) sum|p dP| + carried, dX = P (dP - sum) with its two "
                      "roundings, softcap's 1 - tanh^2, dQ (kappa(T) + 2) scale sum|dS K|, dK and "
                      "dV kappa(rows sharing the kv head) sums; 4 ulp")
      .float32([](const KernelContext& c, const Tensors& in,
                  SumOrder) { return attention_outputs<float>(c, in); },
               "the function body in float32: (Q sqrt(scale)) (K sqrt(scale))^T, softcap, + mask, "
               "softmax with the maximum subtracted, times V; sums in the written order",
               "accumulating the dot products and P V in a wider type")
      .inputs(InputRoles::combine())
      .cases(
          {// multi-head, 4-D, a decoding step: causal with a cache and a boolean mask, all
           // four outputs
           {23,
            {floats({2, 3, 4, 8}),
             floats({2, 3, 4, 8}),
             floats({2, 3, 4, 6}),
             {{4, 6}, DType::Bool, {1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1,
                                    1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1}},
             floats({2, 3, 2, 8}),
             floats({2, 3, 2, 6})},
            {{"is_causal", Attribute::of_int(1)}},
            4},
           // grouped-query, 3-D, an additive mask, softcap
           {23,
            {floats({2, 4, 24}), floats({2, 6, 8}), floats({2, 6, 10}), floats({4, 6})},
            with(heads(6, 2), "softcap", Attribute::of_float(2.0f)),
            1},
           // multi-query, 4-D, a scale, the probabilities exposed (mode 3)
           {23,
            {floats({1, 4, 3, 5}), floats({1, 1, 7, 5}), floats({1, 1, 7, 5})},
            {{"scale", Attribute::of_float(0.3f)}, {"qk_matmul_output_mode", Attribute::of_int(3)}},
            4},
           // causal with a cache and more new keys than queries: the frontier is i + past
           {23,
            {floats({1, 2, 3, 8}),
             floats({1, 2, 5, 8}),
             floats({1, 2, 5, 8}),
             {{3, 8}, DType::Bool, std::vector<std::int64_t>(24, 1)},
             floats({1, 2, 3, 8}),
             floats({1, 2, 3, 8})},
            {{"is_causal", Attribute::of_int(1)}},
            3},
           // grouped-query, 3-D, an additive mask broadcast over the batch, causal, no cache
           {23,
            {floats({2, 5, 32}), floats({2, 5, 16}), floats({2, 5, 12}), floats({5, 5})},
            with(heads(4, 2), "is_causal", Attribute::of_int(1)),
            1}});
  register_rotary(r);
}

}  // namespace metaop
