#pragma once
// The search of `metaop expose` (internal to src/analysis): the varied tensors and their box,
// each target's trajectory, and the Searcher that runs the schedules (expose_search.cpp) and
// the verdict on the binding (expose_verdict.cpp).
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "analysis/expose/expose.h"
#include "engine/executor.h"

namespace metaop::expose_detail {

constexpr double kInf = std::numeric_limits<double>::infinity();
// GRIST's step: 0.15 in input units (its inputs were images in [0, 1]); ours starts at the same
// fraction of a [-1, 1] box.
constexpr double kGristStep = 0.15;
constexpr double kStartFraction = 0.075;

struct Varied {
  std::string name;
  bool weight = false;
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<double> lo, hi;
};

using Point = std::vector<std::vector<double>>;

struct Evaluation {
  bool ok = false;
  RunResult run;
  std::vector<double> distance;  // per target: the closest site's distance (+inf: none)
  // Per target: inside its zone on the binding (its float32 rounding) though not on the
  // reference; the search's distances stay the reference's.
  std::vector<char> binding_zone;
  std::vector<std::size_t> site;
  bool nonfinite_output = false;
};

struct TargetState {
  Point point, best;
  double current = kInf, best_distance = kInf, start = kInf;
  double sigma = kStartFraction;  // sign step, as a fraction of each element's box width
  int fails = 0, restarts = 0, harmless = 0, mismatches = 0;
  // Binding runs at the reference's plateau that found no zone: each doubles the evaluations
  // before the next one (reset when the reference comes closer).
  int binding_misses = 0;
  std::int64_t next_binding = 0;
  std::int64_t next_verify = 0;  // evaluations before the next verdict run for it
  std::int64_t steps = 0, exposed_step = 0;
  std::string found_by;
  bool done = false, independent = false, exposed = false;
  TargetStatus status = TargetStatus::Searching;  // once settled
  double seconds = 0;
  std::vector<std::pair<std::int64_t, double>> history;
  // Verdict of the exposing point.
  Point exposing;
  std::string first_node, first_op, explanation;
  std::vector<std::string> nonfinite_outputs;
};

inline bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return true;
  for (double v : t.to_f64())
    if (!std::isfinite(v)) return false;
  return true;
}

inline std::vector<double> rounded(const std::vector<double>& v, const Shape& s, DType t) {
  return Tensor::from_f64(v, s, t).to_f64();
}

class Searcher {
 public:
  Searcher(const Graph& g, const std::map<std::string, Tensor>& inputs, const ExposeOptions& opt)
      : g_(g), work_(g), inputs_(inputs), opt_(opt), rng_(opt.seed) {
    targets_ = expose_targets(g);
    if (opt_.iterations < 0) fail("--iterations {}: must be 0 (no cap) or more", opt_.iterations);
    if (!(opt_.time_limit > 0)) fail("--time-limit {}: must be above 0", opt_.time_limit);
    if (!(opt_.weight_radius >= 0))
      fail("--weight-radius {}: must be 0 or more", opt_.weight_radius);
    choose_varied();
    bind_plan_.set_default(opt_.binding);
    check_supported(g_, ref_plan_);
  }

  ExposeResult run();

 private:
  void choose_varied();
  bool chosen(const std::string& name) const;  // by --vary NAME,... (every one without)
  void vary_inputs();
  void vary_weights();
  Point start_point() const;
  void apply(const Point& p);
  Evaluation evaluate(const Point& p);
  ZoneDistances zone_distances(std::size_t t, const std::map<std::string, Tensor>& values) const;
  // Gradient of target t's distance at its closest site, per varied tensor; empty when the
  // VJPs cannot give one.
  std::vector<std::vector<double>> gradient(std::size_t t, const Evaluation& e);
  void consider(const Point& p, const Evaluation& e);
  void verify(const Point& p);
  bool reaches(std::size_t from, std::size_t to);
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  bool budget_left() const {
    return (opt_.iterations == 0 || steps_ < opt_.iterations) && elapsed() < opt_.time_limit &&
           !(opt_.stop_at_first && exposed_count() > 0);
  }
  std::string stop_reason() const;
  // The applied point on the binding, every value kept; nullopt where the binding fails.
  std::optional<RunResult> run_binding();
  // Marks in e the targets in `due` inside their zone on the binding's run of the applied point.
  void binding_distances(Evaluation& e, const std::vector<std::size_t>& due);
  bool all_done() const {
    for (const auto& s : state_)
      if (!s.done) return false;
    return true;
  }
  std::size_t exposed_count() const {
    std::size_t n = 0;
    for (const auto& s : state_) n += s.exposed;
    return n;
  }
  void tick() {
    ++steps_;
    step_in_progress_ = steps_ + 1;
    if (opt_.progress)
      opt_.progress(steps_, opt_.iterations, elapsed(), exposed_count(), targets_.size());
  }
  Point clip(Point p) const;
  Point uniform_point();
  void run_random();
  void run_slice(std::size_t t, int steps, bool grist);
  // The points a step of target t tries from where it is, `grad` its gradient there.
  std::vector<Point> step_candidates(std::size_t t, const Evaluation& at,
                                     const std::vector<std::vector<double>>& grad, bool grist,
                                     std::vector<std::string>& phases);
  Point grist_step(Point p, const std::vector<std::vector<double>>& grad) const;
  void gradient_steps(std::size_t t, const std::vector<std::vector<double>>& grad,
                      std::vector<Point>& candidates) const;
  // From `from`, x - reach * w^2 g / sum(w^2 g^2), each element scaled by its box width w:
  // the step that removes `reach` of a distance whose gradient is g under the linear model
  // (clipped); nothing when g is zero or not finite.
  std::optional<Point> newton_move(const Point& from, const std::vector<std::vector<double>>& grad,
                                   double reach) const;
  // The values that depend on a varied tensor (the varied ones included).
  std::set<std::string> live_values() const;
  void mark_independent();
  // The comparisons (Less, Greater, LessOrEqual, GreaterOrEqual) upstream of each target that
  // depend on a varied tensor, closest first: a mask, a count or a threshold built from them has
  // no gradient, so the search moves their operands across the boundary instead.
  void find_comparisons();
  // Boundary moves of target t from where it is: every element of one comparison (in turn)
  // pushed to one side, by a Gauss-Newton step on the margins of the elements still on the other.
  void boundary_steps(std::size_t t, const Evaluation& at, std::vector<Point>& candidates,
                      std::vector<std::string>& phases);
  // The moves of one set of residuals of comparison n's margins: the residuals (or their signs,
  // `alike`) carried back to the varied tensors through the reference's VJPs, and a
  // Gauss-Newton step along that gradient, as computed and three times as far.
  void margin_moves(std::size_t t, const Evaluation& at, const Node& n,
                    const std::vector<double>& residual, bool alike, const std::string& phase,
                    std::vector<Point>& candidates, std::vector<std::string>& phases);
  void try_constant_starts(const Point& start);
  void search_rounds();
  ExposeResult result();
  void restart(std::size_t t);
  TargetOutcome outcome(std::size_t t);

  const Graph& g_;
  Graph work_;  // g_ with the varied weights' current values
  std::map<std::string, Tensor> inputs_;
  ExposeOptions opt_;
  std::mt19937_64 rng_;
  Plan ref_plan_, bind_plan_;
  std::vector<ExposeTarget> targets_;
  std::vector<Varied> varied_;
  std::vector<TargetState> state_;
  std::vector<std::vector<std::size_t>> comparisons_;  // per target: node indices
  std::vector<std::string> notes_;
  std::chrono::steady_clock::time_point t0_;
  std::int64_t steps_ = 0, evaluations_ = 0, verifications_ = 0, binding_entries_ = 0;
  std::int64_t step_in_progress_ = 0;  // the step whose points are being evaluated (0: start)
  std::string phase_ = "start point";  // what produced the points being evaluated
  std::map<std::pair<std::size_t, std::size_t>, bool> reach_cache_;
  std::set<std::string> fallback_ops_;
  std::vector<std::pair<Point, Evaluation>> outcome_cache_;
};

}  // namespace metaop::expose_detail
