// Recurrent meta operators: RNN, GRU and LSTM (ONNX's cells, forward, reverse or
// bidirectional, with sequence_lens, initial states, LSTM's peepholes and input_forget, GRU's
// linear_before_reset, clip, both layouts and every activation the text lists). One loop, written
// once over the number type: the reference runs it in double, its float32 twin (triage) in float,
// and the error model runs it in double while carrying each value's first-order rounding bound
// from step to step. The VJP is backpropagation through time: the forward's states kept, each
// step's gates recomputed from them in double and differentiated by hand.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/vjp_util.h"
#include "tensor/text.h"

// GCC 12 at -O2 reports a false -Wfree-nonheap-object on the std::vector<double> locals of the
// GRU step (GCC bug 108088, as in ops/shape.cpp); they are ordinary heap allocations.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif

namespace metaop {

namespace {

enum class Cell { rnn, gru, lstm };

Cell cell_of(const Node& n) {
  return n.op_type == "LSTM" ? Cell::lstm : n.op_type == "GRU" ? Cell::gru : Cell::rnn;
}
int gates_of(Cell c) {
  return c == Cell::lstm ? 4 : c == Cell::gru ? 3 : 1;
}

// An activation of the recurrence, with its alpha and beta.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

template <typename T>
T activate(const Activation& a, T x) {
  const T al = static_cast<T>(a.alpha), be = static_cast<T>(a.beta);
  const std::string& n = a.name;
  if (n == "Sigmoid") return T(1) / (T(1) + std::exp(-x));
  if (n == "Tanh") return std::tanh(x);
  if (n == "Relu") return std::max(x, T(0));
  if (n == "Affine") return al * x + be;
  if (n == "LeakyRelu") return x < 0 ? al * x : x;
  if (n == "ThresholdedRelu") return x > al ? x : T(0);
  if (n == "ScaledTanh") return al * std::tanh(be * x);
  if (n == "HardSigmoid") return std::clamp(al * x + be, T(0), T(1));
  if (n == "Elu") return x < 0 ? al * (std::exp(x) - T(1)) : x;
  if (n == "Softsign") return x / (T(1) + std::fabs(x));
  return std::log(T(1) + std::exp(x));  // Softplus
}

// f'(x), for the VJP; its magnitude is the error model's slope.
double derivative(const Activation& a, double x) {
  const std::string& n = a.name;
  if (n == "Sigmoid") {
    double s = 1 / (1 + std::exp(-x));
    return s * (1 - s);
  }
  if (n == "Tanh") return 1 - std::tanh(x) * std::tanh(x);
  if (n == "Relu") return x > 0 ? 1 : 0;
  if (n == "Affine") return a.alpha;
  if (n == "LeakyRelu") return x < 0 ? a.alpha : 1;
  if (n == "ThresholdedRelu") return x > a.alpha ? 1 : 0;
  if (n == "ScaledTanh") {
    double t = std::tanh(a.beta * x);
    return a.alpha * a.beta * (1 - t * t);
  }
  if (n == "HardSigmoid") {
    double v = a.alpha * x + a.beta;
    return v > 0 && v < 1 ? a.alpha : 0;
  }
  if (n == "Elu") return x < 0 ? a.alpha * std::exp(x) : 1;
  if (n == "Softsign") return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x)));
  return 1 / (1 + std::exp(-x));  // Softplus
}

double slope(const Activation& a, double x) {
  return std::fabs(derivative(a, x));
}

// The activations' alpha and beta where the node gives none: those of the ONNX ops they name.
void default_parameters(Activation& a, bool has_alpha, bool has_beta) {
  struct D {
    const char* name;
    double alpha, beta;
  };
  static const D defaults[] = {{"Affine", 1, 0},          {"LeakyRelu", 0.01, 0},
                               {"ThresholdedRelu", 1, 0}, {"ScaledTanh", 1, 1},
                               {"HardSigmoid", 0.2, 0.5}, {"Elu", 1, 0}};
  for (const auto& d : defaults)
    if (a.name == d.name) {
      if (!has_alpha) a.alpha = d.alpha;
      if (!has_beta) a.beta = d.beta;
    }
}

// A recurrent node's shapes, attributes and inputs, in double.
struct Recurrence {
  Cell cell = Cell::rnn;
  int gates = 1;
  std::int64_t seq = 0, batch = 0, in = 0, hidden = 0, dirs = 1;
  bool layout1 = false, input_forget = false, linear_before_reset = false;
  double clip = 0;  // 0: none
  std::string direction = "forward";
  std::vector<Activation> acts;  // per direction: f, g (GRU, LSTM), h (LSTM)
  std::vector<std::int64_t> lens;
  std::vector<double> x, w, r, b, h0, c0, p;
  // Where X[t, b, i], Y[t, d, b, j] and a state [d, b, j] (Y_h, Y_c, the initial ones) are, in
  // either layout.
  std::size_t x_at(std::int64_t t, std::int64_t bi, std::int64_t i) const {
    return static_cast<std::size_t>(layout1 ? (bi * seq + t) * in + i : (t * batch + bi) * in + i);
  }
  std::size_t y_at(std::int64_t t, std::int64_t d, std::int64_t bi, std::int64_t j) const {
    return static_cast<std::size_t>(layout1 ? ((bi * seq + t) * dirs + d) * hidden + j
                                            : ((t * dirs + d) * batch + bi) * hidden + j);
  }
  std::size_t state_at(std::int64_t d, std::int64_t bi, std::int64_t j) const {
    return static_cast<std::size_t>(layout1 ? (bi * dirs + d) * hidden + j
                                            : (d * batch + bi) * hidden + j);
  }
  bool reversed(std::int64_t d) const { return direction == "reverse" || d == 1; }
};

// The activations: the node's list (one set per direction) or the cell's defaults, with their
// alpha and beta (consumed in order by the activations that take them).
std::vector<Activation> activations(const Node& n, Cell cell, std::int64_t dirs) {
  std::vector<std::string> names = n.has_attr("activations") ? n.attrs.at("activations").strings
                                   : cell == Cell::lstm
                                       ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                   : cell == Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                       : std::vector<std::string>{"Tanh"};
  const std::size_t per_dir = cell == Cell::lstm ? 3 : cell == Cell::gru ? 2 : 1;
  if (names.size() == per_dir && dirs == 2) {
    const std::vector<std::string> one = names;  // (a vector's own range cannot be inserted)
    names.insert(names.end(), one.begin(), one.end());
  }
  // RNN's schema default is [Tanh, Tanh], one per direction of a bidirectional node: a
  // one-direction node uses the first.
  if (names.size() == 2 * per_dir && dirs == 1) names.resize(per_dir);
  if (names.size() != per_dir * static_cast<std::size_t>(dirs))
    fail("{}: {} activations for {} direction(s) of {} each", n.label(), names.size(), dirs,
         per_dir);
  std::vector<double> alphas =
      n.has_attr("activation_alpha") ? n.attr_floats("activation_alpha") : std::vector<double>{};
  std::vector<double> betas =
      n.has_attr("activation_beta") ? n.attr_floats("activation_beta") : std::vector<double>{};
  static const std::vector<std::string> known = {
      "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
      "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus"};
  static const std::vector<std::string> with_alpha = {
      "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"};
  static const std::vector<std::string> with_beta = {"Affine", "ScaledTanh", "HardSigmoid"};
  auto in = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<Activation> acts;
  std::size_t ai = 0, bi = 0;
  for (const auto& name : names) {
    if (!in(known, name))
      throw Unsupported(fmt::format("{}: activation '{}'", n.label(), printable(name, 64)));
    Activation a{name};
    bool has_alpha = in(with_alpha, name) && ai < alphas.size();
    bool has_beta = in(with_beta, name) && bi < betas.size();
    if (has_alpha) a.alpha = alphas[ai++];
    if (has_beta) a.beta = betas[bi++];
    default_parameters(a, has_alpha, has_beta);
    acts.push_back(a);
  }
  return acts;
}

// initial_h or initial_c (input i) into `to`, kept [dirs, batch, hidden] (layout 1 gives them
// [batch, dirs, hidden]).
void read_state(const KernelContext& c, const Tensors& in, std::size_t i, const Recurrence& s,
                std::vector<double>& to) {
  to.assign(static_cast<std::size_t>(s.dirs * s.batch * s.hidden), 0.0);
  if (!has_input(in, i)) return;
  Shape want = s.layout1 ? Shape{s.batch, s.dirs, s.hidden} : Shape{s.dirs, s.batch, s.hidden};
  if (in[i].shape() != want)
    fail("{}: input {} has shape {}, expected {}", c.node.label(), i, shape_str(in[i].shape()),
         shape_str(want));
  auto v = in[i].to_f64();
  for (std::int64_t d = 0; d < s.dirs; ++d)
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t j = 0; j < s.hidden; ++j)
        to[static_cast<std::size_t>((d * s.batch + b) * s.hidden + j)] = v[s.state_at(d, b, j)];
}

// Input i in double, its shape checked (absent: `fill` values of `want`'s size).
std::vector<double> read_param(const KernelContext& c, const Tensors& in, std::size_t i,
                               const Shape& want, const char* what) {
  if (!has_input(in, i))
    return std::vector<double>(static_cast<std::size_t>(shape_numel(want)), 0.0);
  if (in[i].shape() != want)
    fail("{}: {} has shape {}, expected {}", c.node.label(), what, shape_str(in[i].shape()),
         shape_str(want));
  return in[i].to_f64();
}

void read_lengths(const KernelContext& c, const Tensors& in, Recurrence& s) {
  s.lens.assign(static_cast<std::size_t>(s.batch), s.seq);
  if (!has_input(in, 4)) return;
  s.lens = in[4].to_i64();
  if (static_cast<std::int64_t>(s.lens.size()) != s.batch)
    fail("{}: sequence_lens has {} values for a batch of {}", c.node.label(), s.lens.size(),
         s.batch);
  for (auto l : s.lens)
    if (l < 0 || l > s.seq)
      fail("{}: sequence length {} outside [0, {}]", c.node.label(), l, s.seq);
}

Recurrence recurrence(const KernelContext& c, const Tensors& in) {
  const Node& n = c.node;
  Recurrence s;
  s.cell = cell_of(n);
  s.gates = gates_of(s.cell);
  const Tensor& x = input(c, in, 0);
  require_float(c, x, "input X");
  if (x.rank() != 3) fail("{}: X must be 3-D, got {}", n.label(), shape_str(x.shape()));
  s.layout1 = attr_i_or(c, "layout", 0) != 0;
  s.seq = s.layout1 ? x.dim(1) : x.dim(0);
  s.batch = s.layout1 ? x.dim(0) : x.dim(1);
  s.in = x.dim(2);
  s.hidden = attr_i(c, "hidden_size");
  s.direction = attr_s(c, "direction");
  if (s.direction != "forward" && s.direction != "reverse" && s.direction != "bidirectional")
    fail("{}: direction '{}'", n.label(), printable(s.direction, 64));
  s.dirs = s.direction == "bidirectional" ? 2 : 1;
  s.clip = attr_f_or(c, "clip", 0);
  if (s.cell == Cell::lstm) s.input_forget = attr_i(c, "input_forget") != 0;
  if (s.cell == Cell::gru) s.linear_before_reset = attr_i(c, "linear_before_reset") != 0;
  const std::int64_t gh = s.gates * s.hidden;
  s.x = x.to_f64();
  input(c, in, 1);
  input(c, in, 2);
  s.w = read_param(c, in, 1, {s.dirs, gh, s.in}, "W");
  s.r = read_param(c, in, 2, {s.dirs, gh, s.hidden}, "R");
  s.b = read_param(c, in, 3, {s.dirs, 2 * gh}, "B");
  read_lengths(c, in, s);
  read_state(c, in, 5, s, s.h0);
  read_state(c, in, 6, s, s.c0);
  if (s.cell == Cell::lstm) s.p = read_param(c, in, 7, {s.dirs, 3 * s.hidden}, "P");
  s.acts = activations(n, s.cell, s.dirs);
  return s;
}

// First-order rounding bounds (units of u) of the values the loop computes, per output.
struct Bounds {
  AccumulationBound bound;
  std::vector<double> y, yh, yc;
};

// One direction of the recurrence over one batch element, in T; with `track` (T = double) also
// each value's rounding bound as a float32 kernel computes it: sums of products kappa(n)
// sum|terms|, each activation 4 ulp of its value plus its slope times its argument's bound, the
// products and sums of the cell state one rounding each, a state's bound carried to the next
// step through R (and P).
template <typename T>
class Runner {
 public:
  Runner(const Recurrence& s, std::int64_t d, std::int64_t b, const AccumulationBound* bound)
      : s_(s), d_(d), b_(b), H_(s.hidden), I_(s.in), track_(bound != nullptr) {
    const auto G = s.gates;
    W_ = s.w.data() + d * G * H_ * I_;
    R_ = s.r.data() + d * G * H_ * H_;
    Wb_ = s.b.data() + d * 2 * G * H_;
    Rb_ = Wb_ + G * H_;
    const std::size_t per_dir = s.cell == Cell::lstm ? 3 : s.cell == Cell::gru ? 2 : 1;
    const std::size_t base = static_cast<std::size_t>(d) * per_dir;
    f_ = &s.acts[base];
    g_ = &s.acts[base + (per_dir > 1 ? 1 : 0)];
    h_act_ = &s.acts[base + (per_dir > 2 ? 2 : 0)];
    if (bound) {
      k_in_ = bound->kappa(static_cast<double>(I_ + 2));
      k_rec_ = bound->kappa(static_cast<double>(H_ + 1));
      k_all_ = bound->kappa(static_cast<double>(I_ + H_ + 3));
      epre_.assign(static_cast<std::size_t>(G * H_), 0.0);
    }
    h.resize(static_cast<std::size_t>(H_));
    c.resize(h.size());
    eh.assign(h.size(), 0.0);
    ec.assign(h.size(), 0.0);
    for (std::int64_t j = 0; j < H_; ++j) {
      h[j] = static_cast<T>(s.h0[static_cast<std::size_t>((d * s.batch + b) * H_ + j)]);
      c[j] = static_cast<T>(s.c0[static_cast<std::size_t>((d * s.batch + b) * H_ + j)]);
    }
  }

  // The state after step t: h (and c), and their bounds.
  void step(std::int64_t t) {
    sums(t);
    std::vector<T> nh(h.size()), nc(c);
    std::vector<double> neh(eh.size(), 0.0), nec(ec.size(), 0.0);
    if (s_.cell == Cell::rnn)
      for (std::int64_t j = 0; j < H_; ++j)
        nh[j] = gate(j, *f_, xw_[j] + hr_[j], pre_bound(j), neh[j]);
    else if (s_.cell == Cell::gru)
      gru(nh, neh);
    else
      for (std::int64_t j = 0; j < H_; ++j) lstm(j, nh[j], nc[j], neh[j], nec[j]);
    h = std::move(nh);
    c = std::move(nc);
    eh = std::move(neh);
    ec = std::move(nec);
  }

  std::vector<T> h, c;
  std::vector<double> eh, ec;
  // With a bound: each gate row's pre-activation bound in the last step (the W row's order).
  const std::vector<double>& pre_bounds() const { return epre_; }

 private:
  std::size_t x_at(std::int64_t t, std::int64_t i) const { return s_.x_at(t, b_, i); }

  // Every gate's x W^T + Wb and h R^T + Rb, with |terms| and the previous state's bound
  // carried through R.
  void sums(std::int64_t t) {
    const std::int64_t n = s_.gates * H_;
    xw_.assign(static_cast<std::size_t>(n), T(0));
    hr_.assign(xw_.size(), T(0));
    axw_.assign(xw_.size(), 0.0);
    ahr_.assign(xw_.size(), 0.0);
    ehr_.assign(xw_.size(), 0.0);
    for (std::int64_t k = 0; k < n; ++k) {
      T acc = static_cast<T>(Wb_[k]), racc = static_cast<T>(Rb_[k]);
      for (std::int64_t i = 0; i < I_; ++i)
        acc += static_cast<T>(s_.x[x_at(t, i)]) * static_cast<T>(W_[k * I_ + i]);
      for (std::int64_t j = 0; j < H_; ++j) racc += h[j] * static_cast<T>(R_[k * H_ + j]);
      xw_[k] = acc;
      hr_[k] = racc;
      if (!track_) continue;
      axw_[k] = std::fabs(Wb_[k]);
      for (std::int64_t i = 0; i < I_; ++i) axw_[k] += std::fabs(s_.x[x_at(t, i)] * W_[k * I_ + i]);
      ahr_[k] = std::fabs(Rb_[k]);
      for (std::int64_t j = 0; j < H_; ++j) {
        ahr_[k] += std::fabs(static_cast<double>(h[j]) * R_[k * H_ + j]);
        ehr_[k] += std::fabs(R_[k * H_ + j]) * eh[j];
      }
    }
  }

  double pre_bound(std::int64_t k, double extra_abs = 0, double extra_err = 0) const {
    return track_ ? k_all_ * (axw_[k] + ahr_[k] + extra_abs) + ehr_[k] + extra_err : 0;
  }

  // An activation of a (clipped) pre-activation, and its bound: the slope times the argument's
  // bound, plus 4 ulp of the value.
  T gate(std::int64_t row, const Activation& a, T pre, double epre, double& e) const {
    if (track_) epre_[row] = epre;
    if (s_.clip > 0) pre = std::clamp(pre, static_cast<T>(-s_.clip), static_cast<T>(s_.clip));
    T v = activate(a, pre);
    if (track_) e = slope(a, static_cast<double>(pre)) * epre + 4 * std::fabs(double(v));
    return v;
  }

  // GRU: gates z, r, h in W's rows; z and r of every unit first (the candidate reads all of r).
  void gru(std::vector<T>& nh, std::vector<double>& neh) const {
    std::vector<T> z(h.size()), r(h.size());
    std::vector<double> ez(h.size(), 0.0), er(h.size(), 0.0);
    for (std::int64_t j = 0; j < H_; ++j) {
      z[j] = gate(j, *f_, xw_[j] + hr_[j], pre_bound(j), ez[j]);
      r[j] = gate(H_ + j, *f_, xw_[H_ + j] + hr_[H_ + j], pre_bound(H_ + j), er[j]);
    }
    for (std::int64_t j = 0; j < H_; ++j) {
      const std::int64_t kh = 2 * H_ + j;
      double epre = 0, eht = 0;
      T pre = s_.linear_before_reset ? reset_after(kh, r[j], er[j], epre)
                                     : reset_before(kh, r, er, epre);
      T ht = gate(kh, *g_, pre, epre, eht);
      nh[j] = (T(1) - z[j]) * ht + z[j] * h[j];
      if (track_)
        neh[j] = std::fabs(double(T(1) - z[j])) * eht + std::fabs(double(ht)) * ez[j] +
                 std::fabs(double(z[j])) * eh[j] + std::fabs(double(h[j])) * ez[j] +
                 3 * (std::fabs(double((T(1) - z[j]) * ht)) + std::fabs(double(z[j] * h[j])));
    }
  }

  // linear_before_reset: x W_h^T + Wb_h + r . (h R_h^T + Rb_h).
  T reset_after(std::int64_t kh, T r, double er, double& epre) const {
    if (track_)
      epre = k_in_ * axw_[kh] + std::fabs(double(r)) * (k_rec_ * ahr_[kh] + ehr_[kh]) +
             std::fabs(double(hr_[kh])) * er + 2 * std::fabs(double(r * hr_[kh]));
    return xw_[kh] + r * hr_[kh];
  }

  // Otherwise: x W_h^T + Wb_h + (r . h) R_h^T + Rb_h, a sum of its own over the gated state.
  T reset_before(std::int64_t kh, const std::vector<T>& r, const std::vector<double>& er,
                 double& epre) const {
    T acc = static_cast<T>(Rb_[kh]);
    double abs_sum = std::fabs(Rb_[kh]), carried = 0;
    for (std::int64_t i = 0; i < H_; ++i) {
      acc += r[i] * h[i] * static_cast<T>(R_[kh * H_ + i]);
      if (!track_) continue;
      abs_sum += std::fabs(double(r[i] * h[i]) * R_[kh * H_ + i]);
      carried += std::fabs(R_[kh * H_ + i]) *
                 (std::fabs(double(r[i])) * eh[i] + std::fabs(double(h[i])) * er[i] +
                  std::fabs(double(r[i] * h[i])));
    }
    if (track_) epre = k_all_ * (axw_[kh] + abs_sum) + carried;
    return xw_[kh] + acc;
  }

  // LSTM: gates i, o, f, c in W's rows; peepholes i, o, f in P.
  void lstm(std::int64_t j, T& nh, T& nc, double& neh, double& nec) const {
    const std::int64_t ki = j, ko = H_ + j, kf = 2 * H_ + j, kc = 3 * H_ + j;
    const double* P = s_.p.data() + d_ * 3 * H_;
    const T cp = c[j];
    const double acp = std::fabs(double(cp));
    double ei = 0, ef = 0, eg = 0, eo = 0, ehc = 0;
    T ig = gate(ki, *f_, xw_[ki] + hr_[ki] + static_cast<T>(P[j]) * cp,
                pre_bound(ki, std::fabs(P[j]) * acp, std::fabs(P[j]) * ec[j]), ei);
    T fg = T(1) - ig;
    if (s_.input_forget)
      ef = ei + std::fabs(double(fg));
    else
      fg =
          gate(kf, *f_, xw_[kf] + hr_[kf] + static_cast<T>(P[2 * H_ + j]) * cp,
               pre_bound(kf, std::fabs(P[2 * H_ + j]) * acp, std::fabs(P[2 * H_ + j]) * ec[j]), ef);
    T gg = gate(kc, *g_, xw_[kc] + hr_[kc], pre_bound(kc), eg);
    nc = fg * cp + ig * gg;
    if (track_)
      nec = std::fabs(double(fg)) * ec[j] + acp * ef + std::fabs(double(ig)) * eg +
            std::fabs(double(gg)) * ei +
            2 * (std::fabs(double(fg * cp)) + std::fabs(double(ig * gg)));
    T og = gate(ko, *f_, xw_[ko] + hr_[ko] + static_cast<T>(P[H_ + j]) * nc,
                pre_bound(ko, std::fabs(P[H_ + j] * double(nc)), std::fabs(P[H_ + j]) * nec), eo);
    T hc = activate(*h_act_, nc);
    if (track_) ehc = slope(*h_act_, double(nc)) * nec + 4 * std::fabs(double(hc));
    nh = og * hc;
    if (track_)
      neh = std::fabs(double(og)) * ehc + std::fabs(double(hc)) * eo + std::fabs(double(nh));
  }

  const Recurrence& s_;
  std::int64_t d_, b_, H_, I_;
  bool track_;
  const double *W_ = nullptr, *R_ = nullptr, *Wb_ = nullptr, *Rb_ = nullptr;
  const Activation *f_ = nullptr, *g_ = nullptr, *h_act_ = nullptr;
  double k_in_ = 0, k_rec_ = 0, k_all_ = 0;
  std::vector<T> xw_, hr_;
  std::vector<double> axw_, ahr_, ehr_;
  mutable std::vector<double> epre_;
};

// Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and (LSTM) Y_c
// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]); with `err`, their bounds.
template <typename T>
Tensors run_recurrence(const Recurrence& s, DType dt, Bounds* err) {
  const std::int64_t H = s.hidden, B = s.batch, S = s.seq;
  std::vector<T> y(static_cast<std::size_t>(S * s.dirs * B * H), T(0)),
      yh(static_cast<std::size_t>(s.dirs * B * H)), yc(yh.size());
  if (err) {
    err->y.assign(y.size(), 0.0);
    err->yh.assign(yh.size(), 0.0);
    err->yc.assign(yc.size(), 0.0);
  }
  for (std::int64_t d = 0; d < s.dirs; ++d)
    for (std::int64_t b = 0; b < B; ++b) {
      Runner<T> run(s, d, b, err ? &err->bound : nullptr);
      const bool reverse = s.reversed(d);
      const std::int64_t len = s.lens[static_cast<std::size_t>(b)];
      for (std::int64_t step = 0; step < len; ++step) {
        std::int64_t t = reverse ? len - 1 - step : step;
        run.step(t);
        for (std::int64_t j = 0; j < H; ++j) {
          y[s.y_at(t, d, b, j)] = run.h[j];
          if (err) err->y[s.y_at(t, d, b, j)] = run.eh[j];
        }
      }
      for (std::int64_t j = 0; j < H; ++j) {
        yh[s.state_at(d, b, j)] = run.h[j];
        yc[s.state_at(d, b, j)] = run.c[j];
        if (err) {
          err->yh[s.state_at(d, b, j)] = run.eh[j];
          err->yc[s.state_at(d, b, j)] = run.ec[j];
        }
      }
    }
  auto out = [&](const std::vector<T>& v, const Shape& shape) {
    return Tensor::from_f64(std::vector<double>(v.begin(), v.end()), shape, dt);
  };
  Shape ys = s.layout1 ? Shape{B, S, s.dirs, H} : Shape{S, s.dirs, B, H};
  Shape st = s.layout1 ? Shape{B, s.dirs, H} : Shape{s.dirs, B, H};
  Tensors res{out(y, ys), out(yh, st)};
  if (s.cell == Cell::lstm) res.push_back(out(yc, st));
  return res;
}

Tensors recurrent(const KernelContext& c, const Tensors& in) {
  Recurrence s = recurrence(c, in);
  return run_recurrence<double>(s, in[0].dtype(), nullptr);
}

Tensors recurrent_f32(const KernelContext& c, const Tensors& in, SumOrder) {
  Recurrence s = recurrence(c, in);
  return run_recurrence<float>(s, in[0].dtype(), nullptr);
}

Magnitudes recurrent_magnitude(const KernelContext& c, const Tensors& in, const Tensors&,
                               const AccumulationBound& bound) {
  Recurrence s = recurrence(c, in);
  Bounds e;
  e.bound = bound;
  run_recurrence<double>(s, in[0].dtype(), &e);
  Magnitudes m{e.y, e.yh};
  if (s.cell == Cell::lstm) m.push_back(e.yc);
  return m;
}

// ---- The VJP: backpropagation through time, written once over the gradient's number type:
// double for the VJP, Mag for its bound.
//
// Mag, a gradient's magnitude: `a` is the same backpropagation with every local derivative (a
// forward value the backward multiplies by) replaced by its absolute value, the sum over the
// backward's paths of |products|; `e` the first-order error (units of u) that the forward's own
// rounding puts into those local derivatives, carried along. A float32 kernel's gradient is then
// off by at most (e + depth a) u, depth the most roundings one path meets (recurrent_vjp_bound).
struct Mag {
  double a = 0, e = 0;
};
Mag operator+(Mag x, Mag y) {
  return {x.a + y.a, x.e + y.e};
}
Mag& operator+=(Mag& x, Mag y) {
  return x = x + y;
}
Mag& operator-=(Mag& x, Mag y) {
  return x = x + y;  // magnitudes add
}
// A local derivative: its value and its error bound (units of u).
struct Local {
  double v = 0, e = 0;
};
Mag operator*(Mag g, Local f) {
  return {std::fabs(f.v) * g.a, std::fabs(f.v) * g.e + f.e * g.a};
}

// The gradient of every input the node has (X, W, R, B, initial_h, initial_c, P), in the inputs'
// layouts.
template <typename N>
struct RecurrentGrads {
  explicit RecurrentGrads(const Recurrence& s)
      : x(s.x.size()),
        w(s.w.size()),
        r(s.r.size()),
        b(s.b.size()),
        h0(s.h0.size()),
        c0(s.c0.size()),
        p(s.p.size()) {}
  std::vector<N> x, w, r, b, h0, c0, p;
};

// One step's forward values the backward reads: the state after it, and (for the bound) the
// state's bounds and each gate row's pre-activation bound.
struct KeptStep {
  std::vector<double> h, c, eh, ec, epre;
};

// |f''| / |f'| at most, for the error of a derivative computed at a rounded argument: 1 for
// Sigmoid, Softplus and Elu, 2 for Tanh and Softsign, 2 |beta| for ScaledTanh, 0 where f' is
// piecewise constant.
double curvature(const Activation& a) {
  if (a.name == "ScaledTanh") return 2 * std::max(1.0, std::fabs(a.beta));
  if (a.name == "Tanh" || a.name == "Softsign") return 2;
  if (a.name == "Sigmoid" || a.name == "Softplus" || a.name == "Elu") return 1;
  return 0;
}

// |d f' / d y| where a kernel computes f' from the output y = f(x): Tanh 1 - y^2, Sigmoid
// y (1 - y), ScaledTanh a b (1 - (y / a)^2), Elu (x < 0) y + a; 0 for the others, whose
// derivative is computed from x (or is piecewise constant).
double output_slope(const Activation& a, double y) {
  if (a.name == "Tanh") return 2 * std::fabs(y);
  if (a.name == "Sigmoid") return std::fabs(1 - 2 * y);
  if (a.name == "ScaledTanh" && a.alpha != 0) return 2 * std::fabs(a.beta * y / a.alpha);
  if (a.name == "Elu" && y < 0) return 1;
  return 0;
}

// One direction of one batch element: its states from the forward (Runner<double>, tracking the
// bounds when N is Mag), then the steps in the opposite order, each cell recomputed from its
// input and the state before it.
template <typename N>
class Backprop {
  static constexpr bool kBound = std::is_same_v<N, Mag>;

 public:
  Backprop(const Recurrence& s, std::int64_t d, std::int64_t b, const AccumulationBound* bound,
           RecurrentGrads<N>& g)
      : s_(s), d_(d), b_(b), H_(s.hidden), I_(s.in), G_(s.gates), bound_(bound), g_(g) {
    W_ = s.w.data() + d * G_ * H_ * I_;
    R_ = s.r.data() + d * G_ * H_ * H_;
    Wb_ = s.b.data() + d * 2 * G_ * H_;
    Rb_ = Wb_ + G_ * H_;
    P_ = s.cell == Cell::lstm ? s.p.data() + d * 3 * H_ : nullptr;
    const std::size_t per_dir = s.cell == Cell::lstm ? 3 : s.cell == Cell::gru ? 2 : 1;
    const std::size_t base = static_cast<std::size_t>(d) * per_dir;
    f_ = &s.acts[base];
    gact_ = &s.acts[base + (per_dir > 1 ? 1 : 0)];
    hact_ = &s.acts[base + (per_dir > 2 ? 2 : 0)];
  }

  // gy: Y's gradient; gyh, gyc: Y_h's and Y_c's (layouts as the outputs').
  void run(const std::vector<double>& gy, const std::vector<double>& gyh,
           const std::vector<double>& gyc) {
    const std::int64_t len = s_.lens[static_cast<std::size_t>(b_)];
    const bool reverse = s_.reversed(d_);
    auto time = [&](std::int64_t step) { return reverse ? len - 1 - step : step; };
    Runner<double> fwd(s_, d_, b_, kBound ? bound_ : nullptr);
    kept_.push_back({fwd.h, fwd.c, fwd.eh, fwd.ec, {}});
    for (std::int64_t step = 0; step < len; ++step) {
      fwd.step(time(step));
      kept_.push_back({fwd.h, fwd.c, fwd.eh, fwd.ec, fwd.pre_bounds()});
    }
    std::vector<N> dh(static_cast<std::size_t>(H_)), dc(dh.size());
    for (std::int64_t j = 0; j < H_; ++j) {
      dh[j] = grad(gyh[s_.state_at(d_, b_, j)]);
      if (s_.cell == Cell::lstm) dc[j] = grad(gyc[s_.state_at(d_, b_, j)]);
    }
    for (std::int64_t step = len - 1; step >= 0; --step) {
      const std::int64_t t = time(step);
      for (std::int64_t j = 0; j < H_; ++j) dh[j] += grad(gy[s_.y_at(t, d_, b_, j)]);
      cell(t, kept_[step], kept_[step + 1], dh, dc);
    }
    for (std::int64_t j = 0; j < H_; ++j) {
      g_.h0[s_.state_at(d_, b_, j)] += dh[j];
      if (s_.cell == Cell::lstm) g_.c0[s_.state_at(d_, b_, j)] += dc[j];
    }
  }

 private:
  // An output gradient (exact) and a local derivative with its error bound, as N reads them.
  static N grad(double g) {
    if constexpr (kBound)
      return Mag{std::fabs(g), 0};
    else
      return g;
  }
  static auto local(double v, double e) {
    if constexpr (kBound)
      return Local{v, e};
    else
      return v;
  }

  // An activation of a pre-activation (its bound epre), clipped as the forward clips it: the
  // value and df/dpre, each with its bound as a float32 kernel computes them: the value 4 ulp
  // plus the slope times the argument's bound; the derivative 4 ulp plus its curvature times the
  // argument's bound, plus, where kernels compute it from the rounded output (Tanh: 1 - y^2),
  // its slope in the output times the output's bound (saturated, that is all of it).
  struct Act {
    double v, d, ev, ed;
  };
  Act act(const Activation& a, double pre, double epre) const {
    const bool clipped = s_.clip > 0 && std::fabs(pre) > s_.clip;
    const double v = activate(a, clipped ? std::clamp(pre, -s_.clip, s_.clip) : pre);
    const double d = clipped ? 0.0 : derivative(a, pre);
    const double ev = std::fabs(d) * epre + 4 * std::fabs(v);
    return {v, d, ev,
            curvature(a) * std::fabs(d) * epre + 4 * std::fabs(d) +
                (clipped ? 0.0 : output_slope(a, v) * ev)};
  }

  // Gate row k's pre-activation gradient into the parameters, X and the previous state: `dxw`
  // through x W^T + Wb, `dhr` through `hin` R^T + Rb (hin the previous state, or GRU's r . h,
  // with its bounds ehin).
  void into_params(std::int64_t t, std::int64_t k, N dxw, N dhr, const std::vector<double>& hin,
                   const std::vector<double>& ehin, std::vector<N>* dhin) {
    const auto d_off = static_cast<std::size_t>(d_ * G_ * H_);
    const auto b_off = static_cast<std::size_t>(d_ * 2 * G_ * H_);
    g_.b[b_off + k] += dxw;
    g_.b[b_off + G_ * H_ + k] += dhr;
    for (std::int64_t i = 0; i < I_; ++i) {
      const std::size_t xa = s_.x_at(t, b_, i);
      g_.w[(d_off + k) * I_ + i] += dxw * local(s_.x[xa], 0);
      g_.x[xa] += dxw * local(W_[k * I_ + i], 0);
    }
    for (std::int64_t j = 0; j < H_; ++j) {
      g_.r[(d_off + k) * H_ + j] += dhr * local(hin[j], ehin[j]);
      if (dhin) (*dhin)[j] += dhr * local(R_[k * H_ + j], 0);
    }
  }

  // x W^T + Wb and hin R^T + Rb of gate row k.
  double xw(std::int64_t t, std::int64_t k) const {
    double a = Wb_[k];
    for (std::int64_t i = 0; i < I_; ++i) a += s_.x[s_.x_at(t, b_, i)] * W_[k * I_ + i];
    return a;
  }
  double hr(std::int64_t k, const std::vector<double>& hin) const {
    double a = Rb_[k];
    for (std::int64_t j = 0; j < H_; ++j) a += hin[j] * R_[k * H_ + j];
    return a;
  }

  // One step back: dh, dc (the gradients of the state after step t, `next`) become those of the
  // state before it (`prev`).
  void cell(std::int64_t t, const KeptStep& prev, const KeptStep& next, std::vector<N>& dh,
            std::vector<N>& dc) {
    std::vector<N> dh_prev(dh.size()), dc_prev(dc.size());
    if (s_.cell == Cell::rnn) {
      for (std::int64_t j = 0; j < H_; ++j) {
        const Act f = act(*f_, xw(t, j) + hr(j, prev.h), epre(next, j));
        const N dpre = dh[j] * local(f.d, f.ed);
        into_params(t, j, dpre, dpre, prev.h, prev.eh, &dh_prev);
      }
    } else if (s_.cell == Cell::gru) {
      gru(t, prev, next, dh, dh_prev);
    } else {
      for (std::int64_t j = 0; j < H_; ++j) lstm(t, j, prev, next, dh[j], dc[j], dh_prev, dc_prev);
    }
    dh = std::move(dh_prev);
    dc = std::move(dc_prev);
  }

  double epre(const KeptStep& k, std::int64_t row) const {
    return kBound ? k.epre[static_cast<std::size_t>(row)] : 0.0;
  }

  // GRU: z, r, h in W's rows; h' = (1 - z) ht + z h.
  void gru(std::int64_t t, const KeptStep& prev, const KeptStep& next, const std::vector<N>& dh,
           std::vector<N>& dh_prev) {
    const std::vector<double>& h = prev.h;
    std::vector<Act> z, r;
    std::vector<double> rh(h.size()), erh(h.size());
    for (std::int64_t j = 0; j < H_; ++j) {
      z.push_back(act(*f_, xw(t, j) + hr(j, h), epre(next, j)));
      r.push_back(act(*f_, xw(t, H_ + j) + hr(H_ + j, h), epre(next, H_ + j)));
      rh[j] = r[j].v * h[j];
      erh[j] = std::fabs(r[j].v) * prev.eh[j] + std::fabs(h[j]) * r[j].ev + std::fabs(rh[j]);
    }
    std::vector<N> dr(h.size()), drh(h.size());  // drh: through (r . h) R_h^T
    for (std::int64_t j = 0; j < H_; ++j) {
      const std::int64_t kh = 2 * H_ + j;
      const double rec = hr(kh, s_.linear_before_reset ? h : rh);
      const double pre = xw(t, kh) + (s_.linear_before_reset ? r[j].v * rec : rec);
      const Act ht = act(*gact_, pre, epre(next, kh));
      dh_prev[j] += dh[j] * local(z[j].v, z[j].ev);
      const N dz = dh[j] * local(h[j] - ht.v, prev.eh[j] + ht.ev);
      const N dpre = dh[j] * local(1 - z[j].v, z[j].ev) * local(ht.d, ht.ed);
      if (s_.linear_before_reset) {
        dr[j] += dpre * local(rec, rec_bound(kh, h, prev.eh));
        into_params(t, kh, dpre, dpre * local(r[j].v, r[j].ev), h, prev.eh, &dh_prev);
      } else {
        into_params(t, kh, dpre, dpre, rh, erh, &drh);
      }
      const N dzp = dz * local(z[j].d, z[j].ed);
      into_params(t, j, dzp, dzp, h, prev.eh, &dh_prev);
    }
    for (std::int64_t j = 0; j < H_; ++j) {
      dr[j] += drh[j] * local(h[j], prev.eh[j]);
      dh_prev[j] += drh[j] * local(r[j].v, r[j].ev);
      const N drp = dr[j] * local(r[j].d, r[j].ed);
      into_params(t, H_ + j, drp, drp, h, prev.eh, &dh_prev);
    }
  }

  // The bound on h R_h^T + Rb_h of row k, as the forward's (a sum of H + 1 terms, the state's
  // bounds carried through R).
  double rec_bound(std::int64_t k, const std::vector<double>& h, const std::vector<double>& eh) {
    if (!kBound) return 0;
    double abs = std::fabs(Rb_[k]), carried = 0;
    for (std::int64_t j = 0; j < H_; ++j) {
      abs += std::fabs(h[j] * R_[k * H_ + j]);
      carried += std::fabs(R_[k * H_ + j]) * eh[j];
    }
    return bound_->kappa(static_cast<double>(H_ + 1)) * abs + carried;
  }

  // LSTM: gates i, o, f, c in W's rows, peepholes i, o, f in P; c' = f c + i g, h' = o h(c').
  void lstm(std::int64_t t, std::int64_t j, const KeptStep& prev, const KeptStep& next, N dh, N dc,
            std::vector<N>& dh_prev, std::vector<N>& dc_prev) {
    const std::vector<double>&h = prev.h, &c = prev.c;
    const double ec = prev.ec[j], nec = next.ec[j];
    const std::int64_t ki = j, ko = H_ + j, kf = 2 * H_ + j, kc = 3 * H_ + j;
    const double pi = P_[j], po = P_[H_ + j], pf = P_[2 * H_ + j];
    const Act ig = act(*f_, xw(t, ki) + hr(ki, h) + pi * c[j], epre(next, ki));
    Act fg{1 - ig.v, 0, ig.ev + std::fabs(1 - ig.v), 0};
    if (!s_.input_forget) fg = act(*f_, xw(t, kf) + hr(kf, h) + pf * c[j], epre(next, kf));
    const Act gg = act(*gact_, xw(t, kc) + hr(kc, h), epre(next, kc));
    const double nc = fg.v * c[j] + ig.v * gg.v;
    const Act og = act(*f_, xw(t, ko) + hr(ko, h) + po * nc, epre(next, ko));
    const Act hc = act(*hact_, nc, nec);
    // Through h' = o h(c'), then c' (its peephole into o included).
    const N dpre_o = dh * local(hc.v, hc.ev) * local(og.d, og.ed);
    dc += dh * local(og.v, og.ev) * local(hc.d, hc.ed) + dpre_o * local(po, 0);
    const auto pa = static_cast<std::size_t>(d_ * 3 * H_);
    g_.p[pa + H_ + j] += dpre_o * local(nc, nec);
    N di = dc * local(gg.v, gg.ev);
    const N dfg = dc * local(c[j], ec);
    dc_prev[j] += dc * local(fg.v, fg.ev);
    N dpre_f{};
    if (s_.input_forget) {
      di -= dfg;
    } else {
      dpre_f = dfg * local(fg.d, fg.ed);
      dc_prev[j] += dpre_f * local(pf, 0);
      g_.p[pa + 2 * H_ + j] += dpre_f * local(c[j], ec);
    }
    const N dpre_i = di * local(ig.d, ig.ed);
    dc_prev[j] += dpre_i * local(pi, 0);
    g_.p[pa + j] += dpre_i * local(c[j], ec);
    const N dpre_c = dc * local(ig.v, ig.ev) * local(gg.d, gg.ed);
    const std::pair<std::int64_t, N> rows[] = {
        {ki, dpre_i}, {ko, dpre_o}, {kf, dpre_f}, {kc, dpre_c}};
    for (const auto& [k, dp] : rows) into_params(t, k, dp, dp, h, prev.eh, &dh_prev);
  }

  const Recurrence& s_;
  std::int64_t d_, b_, H_, I_, G_;
  const AccumulationBound* bound_;
  RecurrentGrads<N>& g_;
  std::vector<KeptStep> kept_;
  const double *W_ = nullptr, *R_ = nullptr, *Wb_ = nullptr, *Rb_ = nullptr, *P_ = nullptr;
  const Activation *f_ = nullptr, *gact_ = nullptr, *hact_ = nullptr;
};

template <typename N>
RecurrentGrads<N> backprop(const Recurrence& s, const Tensors& out, const Tensors& grads,
                           const AccumulationBound* bound) {
  RecurrentGrads<N> g(s);
  const auto gy = grad_of(grads, out, 0), gyh = grad_of(grads, out, 1);
  const auto gyc = s.cell == Cell::lstm ? grad_of(grads, out, 2) : std::vector<double>{};
  for (std::int64_t d = 0; d < s.dirs; ++d)
    for (std::int64_t b = 0; b < s.batch; ++b) Backprop<N>(s, d, b, bound, g).run(gy, gyh, gyc);
  return g;
}

// The gradients (present inputs only) at their input numbers.
template <typename N, typename F>
std::vector<std::pair<std::size_t, std::vector<double>>> per_input(const Tensors& in,
                                                                   const RecurrentGrads<N>& g,
                                                                   F value) {
  std::vector<std::pair<std::size_t, std::vector<double>>> res;
  const std::pair<std::size_t, const std::vector<N>*> of[] = {
      {0, &g.x}, {1, &g.w}, {2, &g.r}, {3, &g.b}, {5, &g.h0}, {6, &g.c0}, {7, &g.p}};
  for (const auto& [i, v] : of)
    if (has_input(in, i)) {
      std::vector<double> d;
      d.reserve(v->size());
      for (const N& e : *v) d.push_back(value(e));
      res.emplace_back(i, std::move(d));
    }
  return res;
}

Tensors recurrent_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                      const Tensors& grads) {
  const Recurrence s = recurrence(c, in);
  Tensors res(in.size());
  for (auto& [i, g] :
       per_input(in, backprop<double>(s, out, grads, nullptr), [](double v) { return v; }))
    res[i] = grad_like(g, in[i]);
  return res;
}

// The backward bound (units of u): e + depth a of each gradient's Mag, depth the most roundings
// one backward path meets. A path crosses at most every step once, each step's cell a few
// products and sums plus the sum over the G H gate rows into the previous state; then the sums
// into a parameter (over the batch and the steps) or into X (over the gate rows of both
// directions).
Magnitudes recurrent_vjp_bound(const KernelContext& c, const Tensors& in, const Tensors& out,
                               const Tensors& grads, const AccumulationBound& bound) {
  const Recurrence s = recurrence(c, in);
  const auto GH = static_cast<double>(s.gates * s.hidden);
  const double depth = static_cast<double>(s.seq) * (bound.kappa(GH + 2) + 8) +
                       bound.kappa(static_cast<double>(s.dirs * s.batch * s.seq)) +
                       bound.kappa(static_cast<double>(s.dirs) * GH) + 2;
  Magnitudes m(in.size());
  for (auto& [i, v] : per_input(in, backprop<Mag>(s, out, grads, &bound),
                                [depth](const Mag& g) { return g.e + depth * g.a; }))
    m[i] = std::move(v);
  return m;
}

constexpr const char* kRecurrentDoc =
    "first-order, carried from step to step: gate sums kappa(I + H + 3) sum|terms| plus "
    "|R| times the previous state's bound (and |P| the cell's), each activation 4 ulp plus its "
    "slope times its argument's bound, the cell's products and sums one rounding each; 4 ulp";

constexpr const char* kRecurrentBackwardDoc =
    "backpropagation through time on absolute local derivatives (a), times the most roundings "
    "a path meets (steps (kappa(G H + 2) + 8) + kappa(dirs B S) + kappa(dirs G H) + 2), plus the "
    "forward's rounding carried into each local derivative (activations' slope and curvature "
    "times the pre-activation's bound); 4 ulp";

CaseInput weights(Shape s) {
  return case_input::floats(std::move(s), -0.6, 0.6);
}

}  // namespace

void register_recurrent_ops(OpRegistry& r) {
  using error_models::condition;
  // A cell's case: X [seq 4, batch 2, input 3] with W, R (and B) of `gates` gates of `h` units
  // per direction, and the attributes beyond hidden_size.
  auto cell_case = [](int gates, std::int64_t h, std::int64_t dirs, bool bias,
                      std::map<std::string, Attribute> attrs, std::size_t outputs) {
    std::vector<CaseInput> in{case_input::floats({4, 2, 3}), weights({dirs, gates * h, 3}),
                              weights({dirs, gates * h, h})};
    if (bias) in.push_back(weights({dirs, 2 * gates * h}));
    attrs["hidden_size"] = Attribute::of_int(h);
    return CaseSpec{14, std::move(in), std::move(attrs), outputs};
  };
  const auto both = [] {
    return std::map<std::string, Attribute>{{"direction", Attribute::of_string("bidirectional")}};
  };
  auto add = [&](const char* op, std::vector<CaseSpec> cases) {
    r.op(op, Family::linear, recurrent)
        .vjp(recurrent_vjp)
        .error(condition(recurrent_magnitude, kRecurrentDoc))
        .backward_error(recurrent_vjp_bound, kRecurrentBackwardDoc)
        .float32(recurrent_f32, "the recurrence as the text writes it, in float32",
                 "none needed beyond the sums' order")
        .cases(std::move(cases));
  };
  add("RNN", {cell_case(1, 5, 1, true, {}, 2), cell_case(1, 5, 2, false, both(), 2)});
  add("GRU", {cell_case(3, 4, 1, true, {}, 2),
              cell_case(3, 4, 1, true, {{"linear_before_reset", Attribute::of_int(1)}}, 2),
              cell_case(3, 4, 2, false, both(), 2)});
  add("LSTM", {cell_case(4, 4, 1, true, {}, 3), cell_case(4, 4, 2, true, both(), 3),
               cell_case(4, 4, 1, false, {{"direction", Attribute::of_string("reverse")}}, 3)});
}

}  // namespace metaop
