// The schedules of `metaop expose`: the box of each varied tensor, evaluation of every target's
// distance on the reference, gradients through the reference VJPs, the gradient strategy's
// sign and Newton steps with restarts, GRIST's plain schedule and random points.
#include "analysis/expose/expose_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "engine/autodiff.h"
#include "ops/kernel_util.h"
#include "ops/registry.h"
#include "ops/vjp_util.h"

namespace metaop::expose_detail {

bool Searcher::chosen(const std::string& name) const {
  return opt_.vary_names.empty() ||
         std::find(opt_.vary_names.begin(), opt_.vary_names.end(), name) != opt_.vary_names.end();
}

// Every floating-point input (those --vary names), in its clip box (--clip NAME=LO,HI, --clip,
// or the input's own range).
void Searcher::vary_inputs() {
  for (const auto& vi : g_.inputs) {
    const Tensor& t = inputs_.at(vi.name);
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;  // integers, booleans: left alone
    if (!chosen(vi.name)) continue;
    Varied v{vi.name, false, t.dtype(), t.shape(), {}, {}};
    auto x = t.to_f64();
    double lo = opt_.clip.first, hi = opt_.clip.second;
    if (auto own = opt_.input_clip.find(vi.name); own != opt_.input_clip.end()) {
      std::tie(lo, hi) = own->second;
    } else if (opt_.clip_from_inputs) {
      lo = *std::min_element(x.begin(), x.end());
      hi = *std::max_element(x.begin(), x.end());
      if (!std::isfinite(lo) || !std::isfinite(hi))
        fail("input '{}' has non-finite values: --clip-from-inputs needs finite ones", vi.name);
    }
    std::size_t outside = 0;
    for (double e : x) outside += !(e >= lo && e <= hi);
    if (outside)
      notes_.push_back(fmt::format(
          "input '{}': {} of {} values lie outside the clip box [{:.6g}, {:.6g}] and start "
          "clipped (give --clip LO,HI or --clip-from-inputs)",
          vi.name, outside, x.size(), lo, hi));
    v.lo.assign(x.size(), lo);
    v.hi.assign(x.size(), hi);
    varied_.push_back(std::move(v));
  }
}

// Every trainable weight, within --weight-radius times its largest magnitude (or the mean of
// the others' for a zero weight) of its value.
void Searcher::vary_weights() {
  auto names = trainable_initializers(g_);
  std::vector<double> scale;
  for (const auto& n : names) {
    double m = 0;
    for (double e : g_.initializers.at(n).to_f64()) m = std::max(m, std::fabs(e));
    scale.push_back(std::isfinite(m) ? m : 0);
  }
  double mean = 0, count = 0;
  for (double m : scale)
    if (m > 0) mean += m, ++count;
  mean = count ? mean / count : 1.0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Tensor& t = g_.initializers.at(names[i]);
    if (t.numel() == 0 || !chosen(names[i])) continue;
    Varied v{names[i], true, t.dtype(), t.shape(), {}, {}};
    double r = opt_.weight_radius * (scale[i] > 0 ? scale[i] : mean);
    for (double e : t.to_f64()) {
      v.lo.push_back(e - r);
      v.hi.push_back(e + r);
    }
    varied_.push_back(std::move(v));
  }
}

void Searcher::choose_varied() {
  for (const auto& [name, box] : opt_.input_clip) {
    bool input = false;
    for (const auto& vi : g_.inputs) input |= vi.name == name;
    if (!input)
      fail("--clip {}={},{}: the model has no input '{}'", name, box.first, box.second, name);
  }
  if (opt_.vary != ExposeVary::Weights) vary_inputs();
  if (opt_.vary != ExposeVary::Inputs) vary_weights();
  for (const auto& name : opt_.vary_names) {
    bool found = false;
    for (const auto& v : varied_) found |= v.name == name;
    if (!found)
      fail("--vary {}: not a floating-point input or trainable weight of {}", name, g_.path);
  }
  if (varied_.empty())
    fail("{}: nothing to vary: {}", g_.path,
         opt_.vary == ExposeVary::Inputs
             ? "the model has no floating-point input (try --vary weights)"
             : "the model has no floating-point input or trainable weight");
}

Point Searcher::start_point() const {
  Point p;
  for (const auto& v : varied_)
    p.push_back(v.weight ? g_.initializers.at(v.name).to_f64() : inputs_.at(v.name).to_f64());
  return clip(p);
}

Point Searcher::clip(Point p) const {
  for (std::size_t k = 0; k < varied_.size(); ++k) {
    auto& x = p[k];
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::isnan(x[i]) ? varied_[k].lo[i]
                              : std::clamp(x[i], varied_[k].lo[i], varied_[k].hi[i]);
    x = rounded(x, varied_[k].shape, varied_[k].dtype);
  }
  return p;
}

Point Searcher::uniform_point() {
  Point p;
  std::uniform_real_distribution<double> u(0, 1);
  for (const auto& v : varied_) {
    std::vector<double> x(v.lo.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = v.lo[i] + u(rng_) * (v.hi[i] - v.lo[i]);
    p.push_back(std::move(x));
  }
  return clip(p);
}

void Searcher::apply(const Point& p) {
  for (std::size_t k = 0; k < varied_.size(); ++k) {
    Tensor t = Tensor::from_f64(p[k], varied_[k].shape, varied_[k].dtype);
    if (varied_[k].weight)
      work_.initializers[varied_[k].name] = t;
    else
      inputs_[varied_[k].name] = t;
  }
}

ZoneDistances Searcher::zone_distances(std::size_t t,
                                       const std::map<std::string, Tensor>& values) const {
  const ExposeTarget& tg = targets_[t];
  const Node& n = g_.nodes[tg.node];
  Tensors ins, outs;
  auto value = [&](const std::string& name) {
    auto it = values.find(name);
    return name.empty() || it == values.end() ? Tensor() : it->second;
  };
  for (const auto& i : n.inputs) ins.push_back(value(i));
  for (const auto& o : n.outputs) outs.push_back(value(o));
  const DangerZone& z = OpRegistry::instance().find(n.op_type)->domain.danger[tg.zone];
  return z.distances(KernelContext{n, g_.opset}, ins, outs);
}

Evaluation Searcher::evaluate(const Point& p) {
  Evaluation e;
  apply(p);
  ++evaluations_;
  try {
    RunOptions ro;
    ro.keep_all = true;
    e.run = run_graph(work_, inputs_, ref_plan_, ro);
  } catch (const Error&) {
    // A point where the reference itself refuses (an index computed from a non-finite value):
    // not a point to move to.
    e.distance.assign(targets_.size(), kInf);
    e.site.assign(targets_.size(), 0);
    return e;
  }
  e.ok = true;
  for (const auto& o : g_.outputs) e.nonfinite_output |= !all_finite(e.run.outputs.at(o.name));
  e.distance.assign(targets_.size(), kInf);
  e.site.assign(targets_.size(), 0);
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    if (state_[t].independent && state_[t].done) continue;
    ZoneDistances zd;
    try {
      zd = zone_distances(t, e.run.values);
    } catch (const Error&) {
      continue;
    }
    for (std::size_t s = 0; s < zd.distance.size(); ++s)
      if (zd.distance[s] < e.distance[t]) {
        e.distance[t] = zd.distance[s];
        e.site[t] = s;
      }
  }
  // On the binding too, where the reference is back at its closest approach to a zone and comes
  // no closer (a plateau: the reference's float32-rounded values one step from the zone, or the
  // box's edge). There the binding's own float32 rounding may be inside. A run on a binding
  // costs several of the reference's on small graphs: not at every step of a descent, and at a
  // plateau less and less often while it finds nothing.
  std::vector<std::size_t> due;
  for (std::size_t t = 0; opt_.binding_distances && t < targets_.size(); ++t)
    if (!state_[t].done && std::isfinite(e.distance[t]) && e.distance[t] > 0 &&
        e.distance[t] == state_[t].best_distance && evaluations_ >= state_[t].next_binding)
      due.push_back(t);
  if (!due.empty()) binding_distances(e, due);
  return e;
}

std::optional<RunResult> Searcher::run_binding() {
  try {
    RunOptions ro;
    ro.keep_all = true;
    return run_graph(work_, inputs_, bind_plan_, ro);
  } catch (const Error&) {
    return std::nullopt;
  }
}

void Searcher::binding_distances(Evaluation& e, const std::vector<std::size_t>& due) {
  auto run = run_binding();
  if (!run) return;  // the verdict says what the binding does there
  e.binding_zone.assign(targets_.size(), 0);
  bool entered = false;
  for (std::size_t t : due) {
    double d = kInf;
    try {
      for (double x : zone_distances(t, run->values).distance) d = std::min(d, x);
    } catch (const Error&) {
    }
    auto& s = state_[t];
    if (d == 0) {
      e.binding_zone[t] = 1;
      entered = true;
    } else {
      s.next_binding = evaluations_ + (std::int64_t{1} << std::min(++s.binding_misses, 12));
    }
  }
  binding_entries_ += entered;
}

std::vector<std::vector<double>> Searcher::gradient(std::size_t t, const Evaluation& e) {
  if (!e.ok || !std::isfinite(e.distance[t])) return {};
  ZoneDistances zd;
  try {
    zd = zone_distances(t, e.run.values);
  } catch (const Error&) {
    return {};
  }
  if (e.site[t] >= zd.distance.size()) return {};
  auto slope = zd.slope(e.site[t]);
  double m = 0;
  for (double s : slope) m = std::max(m, std::fabs(s));
  if (!(m > 0) || !std::isfinite(m)) return {};
  const Tensor& watched = e.run.values.at(targets_[t].watched);
  std::set<std::string> wrt;
  for (const auto& v : varied_) wrt.insert(v.name);
  // The seed is scaled to magnitude 1 (the distance's slope can be 1e40 near a zero); the VJPs
  // round to float32 on the way, so a gradient that underflows or overflows is recomputed with
  // the seed scaled by 2^+-60.
  double scale = 1 / m;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<double> seed(slope.size());
    for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = slope[i] * scale;
    BackwardResult br;
    try {
      br = run_backward(
          work_, e.run,
          {{targets_[t].watched, Tensor::from_f64(seed, watched.shape(), DType::Float64)}},
          ref_plan_, wrt);
    } catch (const Error&) {
      return {};  // an op on the path without a VJP
    }
    std::vector<std::vector<double>> grads;
    bool any = false, finite = true;
    for (const auto& v : varied_) {
      auto it = br.grads.find(v.name);
      std::vector<double> gk =
          it == br.grads.end() ? std::vector<double>(v.lo.size(), 0.0) : it->second.to_f64();
      for (auto& x : gk) {
        finite &= std::isfinite(x);
        any |= x != 0;
        x /= scale;
      }
      grads.push_back(std::move(gk));
    }
    if (any && finite) return grads;
    if (!any && !finite) return {};
    scale *= any ? std::ldexp(1.0, -60) : std::ldexp(1.0, 60);
  }
  return {};
}

void Searcher::restart(std::size_t t) {
  auto& s = state_[t];
  ++s.restarts;
  s.fails = 0;
  std::uniform_real_distribution<double> u(0, 1);
  int kind = s.best.empty() ? 2 : s.restarts % 3;
  if (kind == 0) {
    // Jitter around the closest point at a random scale of the box (1e-6 to 0.1 of it).
    double rho = std::pow(10.0, -1 - 5 * u(rng_));
    Point p = s.best;
    for (std::size_t k = 0; k < p.size(); ++k)
      for (std::size_t i = 0; i < p[k].size(); ++i)
        p[k][i] += (2 * u(rng_) - 1) * rho * (varied_[k].hi[i] - varied_[k].lo[i]);
    s.point = clip(p);
    s.sigma = rho;
  } else if (kind == 1) {
    // Jitter by a few ULPs (up to 2^10) of each value: zones reached only through rounding (a
    // cancellation just below 0, a cosine or a haversine just above 1) need many tries that
    // keep the point where it is and change only how it rounds.
    double ulps = std::ldexp(1.0, static_cast<int>(11 * u(rng_)));
    Point p = s.best;
    for (std::size_t k = 0; k < p.size(); ++k) {
      double eps = varied_[k].dtype == DType::Float64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
      for (auto& x : p[k])
        x += std::round((2 * u(rng_) - 1) * ulps) * eps * std::max(std::fabs(x), 1e-30);
    }
    s.point = clip(p);
    s.sigma = 1e-6;
  } else {
    s.point = uniform_point();
    s.sigma = kStartFraction;
  }
  s.current = kInf;
}

// `steps` steps of target t from its current point. GRIST's plain schedule moves by 0.15 along
// the sign of the gradient whatever happens; the gradient strategy tries a sign step and a
// Newton step (to the zone's edge under the linear model), keeps the better one only if it
// brings the target closer, and adapts the step.
std::vector<Point> Searcher::step_candidates(std::size_t t, const Evaluation& at,
                                             const std::vector<std::vector<double>>& grad,
                                             bool grist, std::vector<std::string>& phases) {
  auto& s = state_[t];
  std::vector<Point> candidates;
  if (grist) {
    if (!grad.empty()) candidates.push_back(grist_step(s.point, grad));
    phases.assign(candidates.size(), "GRIST step");
    return candidates;
  }
  if (grad.empty()) {
    // No gradient here (a flat region: dead ReLUs, comparisons): a random move of the step.
    std::uniform_real_distribution<double> u(0, 1);
    Point p = s.point;
    for (std::size_t v = 0; v < p.size(); ++v)
      for (std::size_t i = 0; i < p[v].size(); ++i)
        p[v][i] += (2 * u(rng_) - 1) * s.sigma * (varied_[v].hi[i] - varied_[v].lo[i]);
    candidates.push_back(clip(p));
    phases.push_back("random move (no gradient)");
  } else {
    gradient_steps(t, grad, candidates);
    phases.resize(candidates.size(), "gradient step");
  }
  // Where the gradient is blind or has just failed, and a comparison decides what reaches the
  // target: push the comparison's operands across.
  if (!comparisons_[t].empty() && (grad.empty() || s.fails > 0))
    boundary_steps(t, at, candidates, phases);
  return candidates;
}

void Searcher::find_comparisons() {
  static const std::set<std::string> kComparisons = {"Less", "Greater", "LessOrEqual",
                                                     "GreaterOrEqual"};
  std::set<std::string> live = live_values();
  std::map<std::string, std::size_t> producer;
  for (std::size_t k = 0; k < g_.nodes.size(); ++k)
    for (const auto& o : g_.nodes[k].outputs) producer[o] = k;
  comparisons_.assign(targets_.size(), {});
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    // Breadth first up from the target's node: the closest comparisons first.
    std::vector<std::size_t> queue = {targets_[t].node};
    std::set<std::size_t> seen = {targets_[t].node};
    for (std::size_t q = 0; q < queue.size() && comparisons_[t].size() < 3; ++q) {
      const Node& n = g_.nodes[queue[q]];
      if (q > 0 && kComparisons.count(n.op_type)) {
        bool depends = false;
        for (const auto& in : n.inputs) depends |= !in.empty() && live.count(in);
        if (depends) comparisons_[t].push_back(queue[q]);
        continue;  // what feeds a comparison reaches the target only through it
      }
      for (const auto& in : n.inputs)
        if (auto it = producer.find(in); it != producer.end() && seen.insert(it->second).second)
          queue.push_back(it->second);
    }
  }
}

namespace {

// The residuals that put every element of comparison `op` (margins m = a - b broadcast to its
// output) on side `want`; all zero when none is on the wrong side. The comparison is (m > 0)
// for Greater, (m >= 0) for GreaterOrEqual, (m < 0) and (m <= 0) for the others. Each element
// on the wrong side gets a residual that, removed, puts m half its distance (at least a few
// ULPs) past the boundary; elements on the right side closer to it than tau (half the wrong
// side's mean margin) one that keeps them there, so that a move does not trade one element for
// another.
std::vector<double> comparison_residuals(const std::string& op, const std::vector<double>& margin,
                                         const std::vector<double>& tiny, bool want) {
  bool greater = op == "Greater" || op == "GreaterOrEqual";
  bool strict = op == "Greater" || op == "Less";
  const double up = greater == want ? 1.0 : -1.0;  // which way m must go
  std::vector<char> wrong(margin.size(), 0);
  double wrong_sum = 0;
  std::size_t wrong_count = 0;
  for (std::size_t i = 0; i < margin.size(); ++i) {
    double m = margin[i];
    if (!std::isfinite(m)) continue;
    bool pos = strict ? m > 0 : m >= 0, neg = strict ? m < 0 : m <= 0;
    if ((greater ? pos : neg) == want) continue;
    wrong[i] = 1;
    wrong_sum += std::fabs(m);
    ++wrong_count;
  }
  std::vector<double> residual(margin.size(), 0.0);
  if (wrong_count == 0) return residual;
  double tau = 0.5 * wrong_sum / static_cast<double>(wrong_count);
  for (std::size_t i = 0; i < margin.size(); ++i) {
    double m = margin[i];
    if (!std::isfinite(m)) continue;
    if (wrong[i])
      residual[i] = m - up * std::max(0.5 * std::fabs(m), tiny[i]);
    else if (up * m < tau)
      residual[i] = m - up * std::max(tau, tiny[i]);
  }
  return residual;
}

}  // namespace

void Searcher::boundary_steps(std::size_t t, const Evaluation& at, std::vector<Point>& candidates,
                              std::vector<std::string>& phases) {
  if (!at.ok) return;
  const auto& s = state_[t];
  const Node& n =
      g_.nodes[comparisons_[t][static_cast<std::size_t>(s.steps) % comparisons_[t].size()]];
  auto value = [&](const std::string& name) {
    auto it = at.run.values.find(name);
    return it == at.run.values.end() ? Tensor() : it->second;
  };
  Tensor a = value(n.inputs[0]), b = value(n.inputs[1]), out = value(n.outputs[0]);
  if (!a.defined() || !b.defined() || !out.defined() || !is_floating(a.dtype()) ||
      !is_floating(b.dtype()))
    return;
  auto av = a.to_f64(), bv = b.to_f64();
  auto ma = broadcast_map(a.shape(), out.shape()), mb = broadcast_map(b.shape(), out.shape());
  std::vector<double> margin(ma.size()), tiny(ma.size());
  for (std::size_t i = 0; i < ma.size(); ++i) {
    double x = av[static_cast<std::size_t>(ma[i])], y = bv[static_cast<std::size_t>(mb[i])];
    margin[i] = x - y;
    tiny[i] = 1e-6 * (1 + std::fabs(x) + std::fabs(y));
  }
  const std::string who = n.name.empty() ? n.op_type : n.name;
  for (bool want : {false, true}) {
    auto residual = comparison_residuals(n.op_type, margin, tiny, want);
    if (std::all_of(residual.begin(), residual.end(), [](double r) { return r == 0; })) continue;
    // Two directions: Gauss-Newton on the residuals (exact when the margins are the varied
    // values themselves), and every element on the wrong side pushed alike (the residuals of
    // elements behind a saturated op, a Sigmoid before the threshold, would dominate the first).
    for (bool alike : {false, true}) {
      std::string phase = fmt::format("boundary move: {} made {}{}", who, want ? "true" : "false",
                                      alike ? ", elements alike" : "");
      margin_moves(t, at, n, residual, alike, phase, candidates, phases);
    }
  }
}

void Searcher::margin_moves(std::size_t t, const Evaluation& at, const Node& n,
                            const std::vector<double>& residual, bool alike,
                            const std::string& phase, std::vector<Point>& candidates,
                            std::vector<std::string>& phases) {
  const Tensor& a = at.run.values.at(n.inputs[0]);
  const Tensor& b = at.run.values.at(n.inputs[1]);
  const Tensor& out = at.run.values.at(n.outputs[0]);
  std::vector<double> seed(residual.size());
  double scale = 0, reach = 0;
  for (std::size_t i = 0; i < seed.size(); ++i) {
    seed[i] = alike ? (residual[i] > 0 ? 1.0 : (residual[i] < 0 ? -1.0 : 0.0)) : residual[i];
    scale = std::max(scale, std::fabs(seed[i]));
    reach += seed[i] * residual[i];
  }
  for (auto& x : seed) x /= scale;
  std::map<std::string, Tensor> seeds;
  auto add_seed = [&](const std::string& name, const Tensor& like, double sign) {
    auto g = unbroadcast(seed, out.shape(), like.shape());
    for (auto& x : g) x *= sign;
    if (auto it = seeds.find(name); it != seeds.end()) {
      auto prev = it->second.to_f64();
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += prev[i];
    }
    seeds[name] = Tensor::from_f64(g, like.shape(), DType::Float64);
  };
  add_seed(n.inputs[0], a, 1.0);
  add_seed(n.inputs[1], b, -1.0);
  std::set<std::string> wrt;
  for (const auto& v : varied_) wrt.insert(v.name);
  BackwardResult br;
  try {
    br = run_backward(work_, at.run, seeds, ref_plan_, wrt);
  } catch (const Error&) {
    return;  // an op on the path without a VJP
  }
  // The Newton move along the residuals' gradient: under the linear model it removes the
  // residuals weighted by the seed.
  std::vector<std::vector<double>> g;
  for (const auto& v : varied_) {
    auto it = br.grads.find(v.name);
    std::vector<double> gv =
        it == br.grads.end() ? std::vector<double>(v.lo.size(), 0.0) : it->second.to_f64();
    for (auto& x : gv) x *= scale;
    g.push_back(std::move(gv));
  }
  // The linear model undershoots through saturating ops: a step three times as far too.
  for (double factor : {1.0, 3.0})
    if (auto p = newton_move(state_[t].point, g, factor * reach)) {
      candidates.push_back(std::move(*p));
      phases.push_back(factor == 1.0 ? phase : phase + ", 3x step");
    }
}

// GRIST's step: each coordinate moved against its gradient's sign by a fixed step.
Point Searcher::grist_step(Point p, const std::vector<std::vector<double>>& grad) const {
  for (std::size_t v = 0; v < p.size(); ++v)
    for (std::size_t i = 0; i < p[v].size(); ++i) {
      double step =
          varied_[v].weight ? kStartFraction * (varied_[v].hi[i] - varied_[v].lo[i]) : kGristStep;
      p[v][i] -= step * (grad[v][i] > 0 ? 1 : (grad[v][i] < 0 ? -1 : 0));
    }
  return clip(p);
}

// A sign step of the trajectory's sigma, and a Newton step to the zone when the gradient is
// not zero.
void Searcher::gradient_steps(std::size_t t, const std::vector<std::vector<double>>& grad,
                              std::vector<Point>& candidates) const {
  const auto& s = state_[t];
  Point sign = s.point;
  for (std::size_t v = 0; v < grad.size(); ++v)
    for (std::size_t i = 0; i < grad[v].size(); ++i) {
      double w = varied_[v].hi[i] - varied_[v].lo[i], gi = grad[v][i];
      sign[v][i] -= s.sigma * w * (gi > 0 ? 1 : (gi < 0 ? -1 : 0));
    }
  candidates.push_back(clip(sign));
  // Zones at a point (a divisor at 0, a constant group) need the exact step; beyond a
  // threshold, overshooting is fine.
  const std::string& kind = targets_[t].kind;
  double over = kind == "zero_divisor" || kind == "zero_variance" ? 1.0 : 1.5;
  if (std::isfinite(s.current))
    if (auto newton = newton_move(s.point, grad, over * s.current)) candidates.push_back(*newton);
}

std::optional<Point> Searcher::newton_move(const Point& from,
                                           const std::vector<std::vector<double>>& grad,
                                           double reach) const {
  double norm = 0;
  for (std::size_t v = 0; v < grad.size(); ++v)
    for (std::size_t i = 0; i < grad[v].size(); ++i) {
      double w = varied_[v].hi[i] - varied_[v].lo[i];
      norm += w * w * grad[v][i] * grad[v][i];
    }
  if (!(norm > 0) || !std::isfinite(norm)) return std::nullopt;
  Point p = from;
  for (std::size_t v = 0; v < grad.size(); ++v)
    for (std::size_t i = 0; i < grad[v].size(); ++i) {
      double w = varied_[v].hi[i] - varied_[v].lo[i];
      p[v][i] -= reach * w * w * grad[v][i] / norm;
    }
  return clip(p);
}

void Searcher::run_slice(std::size_t t, int steps, bool grist) {
  auto& s = state_[t];
  if (!grist && s.best_distance < s.current && !s.best.empty()) {
    s.point = s.best;  // another trajectory came closer: continue from there
    s.current = kInf;
  }
  Evaluation cur = evaluate(s.point);
  consider(s.point, cur);
  s.current = cur.distance[t];
  auto start_over = [&] {
    restart(t);
    phase_ = "restart";
    cur = evaluate(s.point);
    consider(s.point, cur);
    s.current = cur.distance[t];
  };
  for (int k = 0; k < steps && !s.done && budget_left(); ++k) {
    ++s.steps;
    auto grad = gradient(t, cur);
    std::vector<std::string> phases;
    std::vector<Point> candidates = step_candidates(t, cur, grad, grist, phases);
    if (candidates.empty()) {  // GRIST without a gradient: it stays where it is
      tick();
      continue;
    }
    double best = kInf;
    std::size_t pick = 0;
    std::vector<Evaluation> evals;
    for (std::size_t c = 0; c < candidates.size() && !s.done; ++c) {
      phase_ = phases[c];
      evals.push_back(evaluate(candidates[c]));
      consider(candidates[c], evals.back());
      if (evals.back().distance[t] < best) {
        best = evals.back().distance[t];
        pick = c;
      }
    }
    tick();
    if (s.done) break;
    if (grist) {
      s.point = candidates[0];
      cur = std::move(evals[0]);
      s.current = cur.distance[t];
      continue;
    }
    if (best < s.current) {
      // A sign step (or random move) that worked: longer; a Newton step: shorter; a boundary
      // move says nothing about the step.
      if (phases[pick].rfind("boundary", 0) != 0)
        s.sigma = pick == 0 ? std::min(s.sigma * 2, 0.5) : std::max(s.sigma / 2, 1e-9);
      s.point = candidates[pick];
      cur = std::move(evals[pick]);
      s.current = best;
      s.fails = 0;
    } else {
      s.sigma /= 4;
      if (++s.fails >= 3 || s.sigma < 1e-9) start_over();
    }
  }
}

void Searcher::run_random() {
  while (budget_left() && !all_done()) {
    phase_ = "random point";
    Point p = uniform_point();
    Evaluation e = evaluate(p);
    for (auto& s : state_)
      if (!s.done) ++s.steps;
    consider(p, e);
    tick();
  }
}

// Targets whose node does not depend on any varied tensor keep their start distance.
std::set<std::string> Searcher::live_values() const {
  std::set<std::string> live;
  for (const auto& v : varied_) live.insert(v.name);
  for (auto k : topological_order(g_))
    for (const auto& in : g_.nodes[k].inputs)
      if (!in.empty() && live.count(in))
        for (const auto& o : g_.nodes[k].outputs) live.insert(o);
  return live;
}

void Searcher::mark_independent() {
  std::set<std::string> live = live_values();
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    bool depends = false;
    for (const auto& in : g_.nodes[targets_[t].node].inputs)
      depends |= !in.empty() && live.count(in);
    state_[t].independent = !depends;
  }
}

// Degenerate starting points: every varied input constant (at each bound, the middle of the
// box, 0), the classic edge case of normalizations, min-max scalings and norms, which
// gradients over the extremes alone approach slowly.
void Searcher::try_constant_starts(const Point& start) {
  phase_ = "constant start point";
  std::vector<std::function<double(double, double)>> levels = {
      [](double lo, double) { return lo; }, [](double, double hi) { return hi; },
      [](double lo, double hi) { return lo + (hi - lo) / 2; },
      [](double lo, double hi) { return lo <= 0 && 0 <= hi ? 0.0 : lo; }};
  for (const auto& level : levels) {
    Point p = start;
    for (std::size_t k = 0; k < varied_.size(); ++k)
      if (!varied_[k].weight)
        for (std::size_t i = 0; i < p[k].size(); ++i)
          p[k][i] = level(varied_[k].lo[i], varied_[k].hi[i]);
    p = clip(p);
    consider(p, evaluate(p));
  }
}

// Rounds of slices over the targets not done yet, until the budget runs out.
void Searcher::search_rounds() {
  bool grist = opt_.strategy == ExposeStrategy::Grist;
  for (int round = 0; budget_left() && !all_done(); ++round) {
    std::vector<std::size_t> order;
    for (std::size_t t = 0; t < targets_.size(); ++t)
      if (!state_[t].done) order.push_back(t);
    if (!grist && round > 0) {
      // Closest first (relative to where each started), restarts counting against.
      auto key = [&](std::size_t t) {
        const auto& s = state_[t];
        double rel = s.start > 0 && std::isfinite(s.start) ? s.best_distance / s.start : 1;
        return std::log10(std::max(rel, 1e-300)) + 0.5 * s.restarts;
      };
      std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return key(a) < key(b); });
    }
    std::size_t top = std::max<std::size_t>(1, order.size() / 3);
    for (std::size_t i = 0; i < order.size() && budget_left(); ++i) {
      if (state_[order[i]].done) continue;
      int slice = grist || round == 0 ? 4 : (i < top ? 16 : 4);
      run_slice(order[i], slice, grist);
    }
  }
}

ExposeResult Searcher::result() {
  ExposeResult r;
  r.model = g_.path;
  r.binding = opt_.binding;
  r.strategy = opt_.strategy;
  r.vary = opt_.vary;
  r.seconds = elapsed();
  r.iterations = steps_;
  for (const auto& v : varied_) {
    r.varied.push_back(v.name);
    r.boxes[v.name] = {*std::min_element(v.lo.begin(), v.lo.end()),
                       *std::max_element(v.hi.begin(), v.hi.end())};
  }
  r.evaluations = evaluations_;  // before the outcomes' own evaluations
  r.binding_entries = binding_entries_;
  r.stop_reason = stop_reason();
  for (std::size_t t = 0; t < targets_.size(); ++t) r.targets.push_back(outcome(t));
  r.verifications = verifications_;
  r.notes = notes_;
  if (!fallback_ops_.empty())
    r.notes.push_back(fmt::format("{} lacks {}: those nodes ran on the reference in the verdict",
                                  opt_.binding, fmt::join(fallback_ops_, ", ")));
  return r;
}

std::string Searcher::stop_reason() const {
  if (opt_.stop_at_first && exposed_count() > 0) return "the first exposure (--stop-at-first)";
  if (all_done()) return "every target settled (exposed, reached, or independent of the varied)";
  if (opt_.iterations != 0 && steps_ >= opt_.iterations)
    return fmt::format("the step cap (--iterations {}) after {:.1f} of {:g} s", opt_.iterations,
                       elapsed(), opt_.time_limit);
  return fmt::format("the time limit (--time-limit {:g} s)", opt_.time_limit);
}

ExposeResult Searcher::run() {
  state_.resize(targets_.size());
  mark_independent();
  find_comparisons();
  Point start = start_point();
  // Start the binding (its plugin, worker process and framework: a LibTorch takes a fraction of
  // a second) before the clock, so that the search's seconds are the search's.
  try {
    apply(start);
    run_graph(work_, inputs_, bind_plan_, RunOptions{});
  } catch (const Error&) {
    // the verdict will say what the binding does
  }
  t0_ = std::chrono::steady_clock::now();
  phase_ = "start point";
  Evaluation e0 = evaluate(start);
  if (!e0.ok) {
    // The model fails on the reference at the start point: say so (the CLI exits 2).
    apply(start);
    RunOptions ro;
    run_graph(work_, inputs_, ref_plan_, ro);
  }
  for (std::size_t t = 0; t < targets_.size(); ++t) {
    auto& s = state_[t];
    s.point = s.best = start;
    s.start = s.current = s.best_distance = e0.distance[t];
    s.history.emplace_back(0, 1.0);
  }
  consider(start, e0);
  if (opt_.strategy == ExposeStrategy::Gradient && opt_.constant_starts) try_constant_starts(start);
  step_in_progress_ = 1;
  for (auto& s : state_)
    if (s.independent && !s.done) {
      s.done = true;
      s.status = TargetStatus::Independent;
    }
  if (opt_.strategy == ExposeStrategy::Random)
    run_random();
  else
    search_rounds();
  return result();
}

}  // namespace metaop::expose_detail
