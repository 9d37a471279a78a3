// Recurrent meta operators: RNN, GRU and LSTM (ONNX's cells, forward, reverse or
// bidirectional, with sequence_lens, initial states, LSTM's peepholes and input_forget, GRU's
// linear_before_reset, clip, both layouts and every activation the text lists). One loop, written
// once over the number type: the reference runs it in double, its float32 twin (triage) in float,
// and the error model runs it in double while carrying each value's first-order rounding bound
// from step to step. No VJP: training through a recurrent node falls back to the reference.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/kernel_util.h"
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

// |f'(x)|, for the error model.
double slope(const Activation& a, double x) {
  const std::string& n = a.name;
  if (n == "Sigmoid") {
    double s = 1 / (1 + std::exp(-x));
    return s * (1 - s);
  }
  if (n == "Tanh") return 1 - std::tanh(x) * std::tanh(x);
  if (n == "Relu") return x > 0 ? 1 : 0;
  if (n == "Affine") return std::fabs(a.alpha);
  if (n == "LeakyRelu") return x < 0 ? std::fabs(a.alpha) : 1;
  if (n == "ThresholdedRelu") return x > a.alpha ? 1 : 0;
  if (n == "ScaledTanh") {
    double t = std::tanh(a.beta * x);
    return std::fabs(a.alpha * a.beta) * (1 - t * t);
  }
  if (n == "HardSigmoid") {
    double v = a.alpha * x + a.beta;
    return v > 0 && v < 1 ? std::fabs(a.alpha) : 0;
  }
  if (n == "Elu") return x < 0 ? std::fabs(a.alpha) * std::exp(x) : 1;
  if (n == "Softsign") return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x)));
  return 1 / (1 + std::exp(-x));  // Softplus
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
        to[static_cast<std::size_t>((d * s.batch + b) * s.hidden + j)] = v[static_cast<std::size_t>(
            s.layout1 ? (b * s.dirs + d) * s.hidden + j : (d * s.batch + b) * s.hidden + j)];
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
        nh[j] = gate(*f_, xw_[j] + hr_[j], pre_bound(j), neh[j]);
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

 private:
  std::size_t x_at(std::int64_t t, std::int64_t i) const {
    return static_cast<std::size_t>(s_.layout1 ? (b_ * s_.seq + t) * I_ + i
                                               : (t * s_.batch + b_) * I_ + i);
  }

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
  T gate(const Activation& a, T pre, double epre, double& e) const {
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
      z[j] = gate(*f_, xw_[j] + hr_[j], pre_bound(j), ez[j]);
      r[j] = gate(*f_, xw_[H_ + j] + hr_[H_ + j], pre_bound(H_ + j), er[j]);
    }
    for (std::int64_t j = 0; j < H_; ++j) {
      const std::int64_t kh = 2 * H_ + j;
      double epre = 0, eht = 0;
      T pre = s_.linear_before_reset ? reset_after(kh, r[j], er[j], epre)
                                     : reset_before(kh, r, er, epre);
      T ht = gate(*g_, pre, epre, eht);
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
    T ig = gate(*f_, xw_[ki] + hr_[ki] + static_cast<T>(P[j]) * cp,
                pre_bound(ki, std::fabs(P[j]) * acp, std::fabs(P[j]) * ec[j]), ei);
    T fg = T(1) - ig;
    if (s_.input_forget)
      ef = ei + std::fabs(double(fg));
    else
      fg =
          gate(*f_, xw_[kf] + hr_[kf] + static_cast<T>(P[2 * H_ + j]) * cp,
               pre_bound(kf, std::fabs(P[2 * H_ + j]) * acp, std::fabs(P[2 * H_ + j]) * ec[j]), ef);
    T gg = gate(*g_, xw_[kc] + hr_[kc], pre_bound(kc), eg);
    nc = fg * cp + ig * gg;
    if (track_)
      nec = std::fabs(double(fg)) * ec[j] + acp * ef + std::fabs(double(ig)) * eg +
            std::fabs(double(gg)) * ei +
            2 * (std::fabs(double(fg * cp)) + std::fabs(double(ig * gg)));
    T og = gate(*f_, xw_[ko] + hr_[ko] + static_cast<T>(P[H_ + j]) * nc,
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
};

// Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and (LSTM) Y_c
// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]); with `err`, their bounds.
template <typename T>
Tensors run_recurrence(const Recurrence& s, DType dt, Bounds* err) {
  const std::int64_t H = s.hidden, B = s.batch, S = s.seq;
  auto at_y = [&](std::int64_t t, std::int64_t d, std::int64_t b, std::int64_t j) {
    return static_cast<std::size_t>(s.layout1 ? ((b * S + t) * s.dirs + d) * H + j
                                              : ((t * s.dirs + d) * B + b) * H + j);
  };
  auto at_state = [&](std::int64_t d, std::int64_t b, std::int64_t j) {
    return static_cast<std::size_t>(s.layout1 ? (b * s.dirs + d) * H + j : (d * B + b) * H + j);
  };
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
      const bool reverse = s.direction == "reverse" || d == 1;
      const std::int64_t len = s.lens[static_cast<std::size_t>(b)];
      for (std::int64_t step = 0; step < len; ++step) {
        std::int64_t t = reverse ? len - 1 - step : step;
        run.step(t);
        for (std::int64_t j = 0; j < H; ++j) {
          y[at_y(t, d, b, j)] = run.h[j];
          if (err) err->y[at_y(t, d, b, j)] = run.eh[j];
        }
      }
      for (std::int64_t j = 0; j < H; ++j) {
        yh[at_state(d, b, j)] = run.h[j];
        yc[at_state(d, b, j)] = run.c[j];
        if (err) {
          err->yh[at_state(d, b, j)] = run.eh[j];
          err->yc[at_state(d, b, j)] = run.ec[j];
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

constexpr const char* kRecurrentDoc =
    "first-order, carried from step to step: gate sums kappa(I + H + 3) sum|terms| plus "
    "|R| times the previous state's bound (and |P| the cell's), each activation 4 ulp plus its "
    "slope times its argument's bound, the cell's products and sums one rounding each; 4 ulp";

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
        .error(condition(recurrent_magnitude, kRecurrentDoc))
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
