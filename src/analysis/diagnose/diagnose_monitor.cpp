#include "analysis/diagnose/diagnose_monitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "analysis/diagnose/diagnose_static.h"

namespace metaop {

const std::vector<std::string>& symptom_kinds() {
  static const std::vector<std::string> kinds = {
      "nonfinite_loss",     "exploding_loss",   "exploding_gradient",
      "vanishing_gradient", "dead_relu",        "saturation",
      "stagnant_loss",      "slow_convergence", "nonfinite_activation",
      "chance_level",       "oscillating_loss", "few_updates"};
  return kinds;
}

bool few_updates_setting(std::size_t steps_per_epoch, std::size_t total, std::int64_t batch,
                         std::int64_t samples) {
  return steps_per_epoch > 0 && steps_per_epoch <= 2 && total < kFewUpdates &&
         batch > kUsualBatch && samples >= kBatchRuleSamples;
}

void validate(const DiagnoseThresholds& t) {
  auto positive = [](const char* option, double v) {
    if (!(v > 0) || !std::isfinite(v)) fail("{} {}: must be a positive number", option, v);
  };
  auto share = [](const char* option, double v) {
    if (!(v > 0 && v <= 1)) fail("{} {}: must be in (0, 1]", option, v);
  };
  positive("--vanish-ratio", t.vanish_ratio);
  positive("--vanish-first", t.vanish_first);
  positive("--explode-ratio", t.explode_ratio);
  share("--dead-fraction", t.dead_fraction);
  share("--saturated-fraction", t.saturated_fraction);
  positive("--saturation-preactivation", t.saturation_preactivation);
  share("--saturation-output", t.saturation_output);
  positive("--slow-gain", t.slow_gain);
  if (t.stagnation_epochs < 2)
    fail("--stagnation-epochs {}: must be at least 2", t.stagnation_epochs);
  positive("--stagnation-change", t.stagnation_change);
  positive("--oscillation-rise", t.oscillation_rise);
  if (!(t.loss_growth > 1)) fail("--loss-growth {}: must be above 1", t.loss_growth);
  share("--converged", t.converged);
  positive("--update-ratio-high", t.update_ratio_high);
  positive("--update-ratio-low", t.update_ratio_low);
  share("--chance-margin", t.chance_margin);
}

bool MonitorRecord::has(const std::string& kind) const {
  return first(kind) != nullptr;
}

const Symptom* MonitorRecord::first(const std::string& kind) const {
  for (const auto& s : symptoms)
    if (s.kind == kind) return &s;
  return nullptr;
}

namespace {

// Calls f(i, value) for every element, with float32 and float64 read directly.
template <typename F>
void each_value(const Tensor& t, F&& f) {
  std::int64_t n = t.numel();
  if (t.dtype() == DType::Float32) {
    const float* p = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i) f(i, static_cast<double>(p[i]));
  } else if (t.dtype() == DType::Float64) {
    const double* p = t.data<double>();
    for (std::int64_t i = 0; i < n; ++i) f(i, p[i]);
  } else {
    auto v = t.to_f64();
    for (std::int64_t i = 0; i < n; ++i) f(i, v[static_cast<std::size_t>(i)]);
  }
}

// Sum of squares of n float32 values, in double, with four accumulators (the loop is the
// monitors' main cost on large models: it runs over every weight and gradient at every step).
double sum_squares(const float* p, std::int64_t n) {
  double a = 0, b = 0, c = 0, d = 0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += static_cast<double>(p[i]) * p[i];
    b += static_cast<double>(p[i + 1]) * p[i + 1];
    c += static_cast<double>(p[i + 2]) * p[i + 2];
    d += static_cast<double>(p[i + 3]) * p[i + 3];
  }
  for (; i < n; ++i) a += static_cast<double>(p[i]) * p[i];
  return (a + b) + (c + d);
}

// L2 norm: infinite or NaN when an element is not finite (the sum of squares of finite float32
// values cannot overflow a double).
double norm(const Tensor& t) {
  if (t.dtype() == DType::Float32) return std::sqrt(sum_squares(t.data<float>(), t.numel()));
  double s = 0;
  each_value(t, [&](std::int64_t, double v) { s += v * v; });
  return std::sqrt(s);
}

// |after - before| / |before| in one pass over both.
double relative_change(const Tensor& after, const Tensor& before) {
  double num = 0, den = 0;
  if (after.dtype() == DType::Float32 && before.dtype() == DType::Float32 &&
      after.numel() == before.numel()) {
    const float *p = after.data<float>(), *q = before.data<float>();
    double a = 0, b = 0, c = 0, d = 0;
    std::int64_t i = 0, n = after.numel();
    for (; i + 2 <= n; i += 2) {
      double x0 = static_cast<double>(p[i]) - q[i], x1 = static_cast<double>(p[i + 1]) - q[i + 1];
      a += x0 * x0;
      b += x1 * x1;
      c += static_cast<double>(q[i]) * q[i];
      d += static_cast<double>(q[i + 1]) * q[i + 1];
    }
    for (; i < n; ++i) {
      double x = static_cast<double>(p[i]) - q[i];
      a += x * x;
      c += static_cast<double>(q[i]) * q[i];
    }
    num = a + b;
    den = c + d;
  } else {
    auto x = after.to_f64(), y = before.to_f64();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      num += (x[i] - y[i]) * (x[i] - y[i]);
      den += y[i] * y[i];
    }
  }
  return den > 0 && std::isfinite(den) ? std::sqrt(num / den) : NAN;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

bool is_layer(const std::string& op) {
  return op == "Gemm" || op == "MatMul" || op == "Conv" || op == "ConvTranspose";
}

// Units of an activation: axis 1 (features, channels), or the whole value for rank < 2.
std::pair<std::int64_t, std::int64_t> units_of(const Tensor& y) {
  if (y.rank() < 2) return {1, 1};
  std::int64_t units = y.dim(1), inner = 1;
  for (std::int64_t d = 2; d < y.rank(); ++d) inner *= y.dim(d);
  return {units, inner};
}

// Which units of ReLU output y hold a non-zero value for some sample (1) at this step. Block by
// block (a sample's unit): most blocks hold a non-zero value early.
std::vector<std::uint8_t> alive_units(const Tensor& y, std::int64_t units, std::int64_t inner) {
  std::vector<std::uint8_t> alive(static_cast<std::size_t>(units), 0);
  std::int64_t blocks = units ? y.numel() / inner : 0;
  if (y.dtype() == DType::Float32) {
    const float* p = y.data<float>();
    for (std::int64_t b = 0; b < blocks; ++b) {
      auto& a = alive[static_cast<std::size_t>(b % units)];
      if (a) continue;
      const float* q = p + b * inner;
      for (std::int64_t i = 0; i < inner; ++i)
        if (q[i] != 0) {
          a = 1;
          break;
        }
    }
  } else {
    each_value(y, [&](std::int64_t i, double val) {
      if (val != 0) alive[static_cast<std::size_t>((i / inner) % units)] = 1;
    });
  }
  return alive;
}

// The share of the units of ReLU output y dead at this step; the units alive join `window`
// (those alive in the window so far).
double dead_share(const Tensor& y, std::vector<std::uint8_t>& window) {
  auto [units, inner] = units_of(y);
  std::vector<std::uint8_t> alive = alive_units(y, units, inner);
  if (window.size() != alive.size()) window.assign(alive.size(), 0);
  std::int64_t dead = 0;
  for (std::size_t u = 0; u < alive.size(); ++u) {
    dead += !alive[u];
    window[u] |= alive[u];
  }
  return static_cast<double>(dead) / static_cast<double>(units);
}

// The share of the values of Sigmoid or Tanh output y that are saturated: the output within
// `so` of an asymptote, or the pre-activation x (when known) beyond +-`pre`.
double saturated_share(const Tensor& y, const Tensor* x, bool sigmoid, double so, double pre) {
  auto near = [&](double val) {
    return sigmoid ? (val < so || val > 1 - so) : std::fabs(val) > 1 - so;
  };
  std::int64_t n = 0;
  if (x && x->dtype() == DType::Float32 && y.dtype() == DType::Float32) {
    const float *px = x->data<float>(), *py = y.data<float>();
    for (std::int64_t i = 0; i < y.numel(); ++i) n += near(py[i]) || std::fabs(px[i]) > pre;
  } else {
    auto ys = y.to_f64();
    auto xs = x ? x->to_f64() : std::vector<double>(ys.size(), 0.0);
    for (std::size_t i = 0; i < ys.size(); ++i) n += near(ys[i]) || std::fabs(xs[i]) > pre;
  }
  return y.numel() ? static_cast<double>(n) / static_cast<double>(y.numel()) : 0;
}

}  // namespace

std::size_t feeding_layer(const Graph& g, std::size_t index) {
  std::map<std::string, std::size_t> producer;
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& o : g.nodes[k].outputs) producer[o] = k;
  static const std::set<std::string> through = {"Add",
                                                "Sub",
                                                "Mul",
                                                "Div",
                                                "BatchNormalization",
                                                "Identity",
                                                "Reshape",
                                                "Flatten",
                                                "Dropout",
                                                "MaxPool",
                                                "AveragePool",
                                                "Transpose",
                                                "Squeeze",
                                                "Unsqueeze",
                                                "LayerNormalization",
                                                "InstanceNormalization",
                                                "Pad"};
  const Node* n = &g.nodes.at(index);
  for (int hops = 0; hops < 16; ++hops) {
    // The first input that some node produces (not a weight or constant).
    const std::string* in = nullptr;
    for (const auto& i : n->inputs)
      if (!i.empty() && producer.count(i)) {
        in = &i;
        break;
      }
    if (!in) return SIZE_MAX;
    std::size_t p = producer.at(*in);
    const Node& m = g.nodes[p];
    if (is_layer(m.op_type)) return p;
    if (!through.count(m.op_type)) return SIZE_MAX;
    n = &m;
  }
  return SIZE_MAX;
}

TrainMonitor::TrainMonitor(const Graph& g, const TrainConfig& c, std::int64_t samples,
                           const DiagnoseThresholds& t)
    : t_(t) {
  rec_.thresholds = t;
  rec_.batch_size = c.batch_size;
  rec_.samples = samples;
  rec_.steps_per_epoch = static_cast<std::size_t>((samples + c.batch_size - 1) /
                                                  std::max<std::int64_t>(c.batch_size, 1));
  rec_.window = t.window ? t.window : std::max<std::size_t>(rec_.steps_per_epoch, 1);
  rec_.total = rec_.steps_per_epoch * static_cast<std::size_t>(std::max(c.epochs, 1));
  if (!g.outputs.empty()) output_ = g.outputs[0].name;
  loss_ = c.loss;
  // Trainable weights in the order of the nodes that read them.
  auto trainable = trained_weights(g, c, &rec_.frozen);
  std::set<std::string> todo(trainable.begin(), trainable.end());
  rec_.schedule = c.schedule;
  rec_.lr = c.optimizer.lr;
  rec_.epochs = c.epochs;
  for (const auto& n : g.nodes)
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      if (!todo.count(n.inputs[i])) continue;
      todo.erase(n.inputs[i]);
      WeightSeries w;
      w.weight = n.inputs[i];
      w.node = n.name;
      w.op_type = n.op_type;
      w.kernel = (is_layer(n.op_type) && i == 1) || (n.op_type == "MatMul" && i == 0);
      if (w.kernel) {
        if (first_kernel_ == SIZE_MAX) first_kernel_ = rec_.weights.size();
        last_kernel_ = rec_.weights.size();
      }
      rec_.weights.push_back(std::move(w));
    }
  // Hidden activations: a saturated Sigmoid or Tanh at the output is a confident prediction,
  // which the loss judges.
  std::size_t out = output_producer(g);
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const auto& op = g.nodes[k].op_type;
    if (op != "Relu" && op != "Sigmoid" && op != "Tanh") continue;
    if (op != "Relu" && k == out) continue;
    rec_.activations.push_back({g.nodes[k].name, op, k, {}, {}});
  }
  alive_.resize(rec_.activations.size());
}

void TrainMonitor::add(Symptom s) {
  for (const auto& o : rec_.symptoms)
    if (o.kind == s.kind && o.node == s.node) return;  // the first occurrence is kept
  rec_.symptoms.push_back(std::move(s));
}

bool TrainMonitor::observe(const StepView& v) {
  auto t0 = std::chrono::steady_clock::now();
  bool go_on = watch(v);
  rec_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return go_on;
}

bool TrainMonitor::watch(const StepView& v) {
  std::size_t step = v.step;
  last_step_ = step;
  rec_.losses.push_back(v.loss);
  if (step == 1 && !output_.empty())
    if (auto it = v.forward->values.find(output_); it != v.forward->values.end())
      rec_.first_output = it->second;
  double first = rec_.losses.front();
  if (!std::isfinite(v.loss)) {
    add({"nonfinite_loss", step, "", "", v.loss, 0,
         fmt::format("the loss is {} at step {}", v.loss, step)});
  } else if (std::isfinite(first) && first > 0 && v.loss > t_.loss_growth * first) {
    add({"exploding_loss", step, "", "", v.loss / first, t_.loss_growth,
         fmt::format("the loss grew from {:.4g} (step 1) to {:.4g} at step {} ({:.3g}x; "
                     "threshold {:g}x)",
                     first, v.loss, step, v.loss / first, t_.loss_growth)});
  }
  record_accuracy(v);
  judge_gradients(v);
  judge_activations(v);
  if (!std::isfinite(v.loss)) find_nonfinite(v);
  if (step % rec_.window == 0 || step == rec_.total) end_window(step);
  return !(stop_on_nonfinite && !std::isfinite(v.loss));
}

void TrainMonitor::record_accuracy(const StepView& v) {
  bool classes = loss_ == LossKind::CrossEntropy || loss_ == LossKind::NLL;
  bool binary = loss_ == LossKind::BCE || loss_ == LossKind::BCEWithLogits;
  if ((!classes && !binary) || !v.forward) return;
  auto out = v.forward->values.find(output_), lab = v.forward->values.find(kLabelsInput);
  if (out == v.forward->values.end() || lab == v.forward->values.end()) return;
  const Tensor& y = out->second;
  auto o = y.to_f64(), l = lab->second.to_f64();
  std::int64_t right = 0, total = 0;
  if (binary) {
    double cut = loss_ == LossKind::BCE ? 0.5 : 0.0;  // probabilities, or logits
    if (o.size() != l.size()) return;
    for (std::size_t i = 0; i < o.size(); ++i, ++total) right += (o[i] > cut) == (l[i] > 0.5);
  } else {
    // Output [N, C, d...], labels [N, d...]: the class is the largest output along axis 1.
    if (y.rank() < 2) return;
    std::int64_t n = y.dim(0), c = y.dim(1), inner = n * c != 0 ? y.numel() / (n * c) : 0;
    if (static_cast<std::int64_t>(l.size()) != n * inner) return;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < inner; ++i, ++total) {
        std::int64_t best = 0;
        for (std::int64_t k = 1; k < c; ++k)
          if (o[static_cast<std::size_t>((s * c + k) * inner + i)] >
              o[static_cast<std::size_t>((s * c + best) * inner + i)])
            best = k;
        right += static_cast<double>(best) == l[static_cast<std::size_t>(s * inner + i)];
      }
  }
  if (total > 0) rec_.accuracies.push_back(static_cast<double>(right) / static_cast<double>(total));
}

double MonitorRecord::epoch_accuracy(std::size_t e) const {
  if (accuracies.empty() || steps_per_epoch == 0) return NAN;
  std::size_t epochs = (accuracies.size() + steps_per_epoch - 1) / steps_per_epoch;
  if (e == SIZE_MAX) e = epochs - 1;
  if (e >= epochs) return NAN;
  std::size_t from = e * steps_per_epoch, to = std::min(accuracies.size(), from + steps_per_epoch);
  double sum = 0;
  for (std::size_t i = from; i < to; ++i) sum += accuracies[i];
  return sum / static_cast<double>(to - from);
}

void TrainMonitor::judge_gradients(const StepView& v) {
  bool nonfinite = false;
  for (auto& w : rec_.weights) {
    double gn = NAN, ratio = NAN;
    if (auto g = v.grads->find(w.weight); g != v.grads->end()) gn = norm(g->second);
    auto before = v.previous->find(w.weight);
    auto after = v.weights->find(w.weight);
    if (before != v.previous->end() && after != v.weights->end())
      ratio = relative_change(after->second, before->second);
    w.grad_norm.push_back(gn);
    w.update_ratio.push_back(ratio);
    if (!std::isfinite(gn) && !nonfinite) {
      nonfinite = true;
      if (std::isfinite(v.loss))
        add({"exploding_gradient", v.step, w.node, w.op_type, INFINITY, t_.explode_ratio,
             fmt::format("the gradient of '{}' is not finite at step {} while the loss is {:.4g}",
                         w.weight, v.step, v.loss)});
    }
  }
  double ratio = NAN, first_norm = NAN;
  if (first_kernel_ != SIZE_MAX && last_kernel_ != first_kernel_) {
    first_norm = rec_.weights[first_kernel_].grad_norm.back();
    double last = rec_.weights[last_kernel_].grad_norm.back();
    if (last > 0) ratio = first_norm / last;
  }
  rec_.grad_ratio.push_back(ratio);
  // At the initial weights one step says it: exploding gradients blow the weights up within the
  // window, and its median would no longer show them.
  if (v.step == 1 && ratio > t_.explode_ratio) {
    const auto& fw = rec_.weights[first_kernel_];
    add({"exploding_gradient", 1, fw.node, fw.op_type, ratio, t_.explode_ratio,
         fmt::format("at the initial weights (step 1) the gradient norm of the first layer's "
                     "weight '{}' is {:.3g} times the last layer's '{}' (threshold {:g})",
                     fw.weight, ratio, rec_.weights[last_kernel_].weight, t_.explode_ratio)});
  }
  window_ratio_.push_back(ratio);
  window_first_.push_back(first_norm);
  if (nonfinite) find_nonfinite(v);
}

void TrainMonitor::judge_activations(const StepView& v) {
  for (std::size_t a = 0; a < rec_.activations.size(); ++a) {
    auto& s = rec_.activations[a];
    const Node& node = v.graph->nodes[s.index];
    auto yi = v.forward->values.find(node.outputs[0]);
    if (yi == v.forward->values.end() || !is_floating(yi->second.dtype())) {
      s.per_step.push_back(NAN);
      continue;
    }
    const Tensor& y = yi->second;
    if (s.op_type == "Relu") {
      s.per_step.push_back(dead_share(y, alive_[a]));
      continue;
    }
    // Sigmoid, Tanh: output near an asymptote, or pre-activation far out.
    auto xi = v.forward->values.find(node.inputs[0]);
    const Tensor* x =
        xi != v.forward->values.end() && xi->second.numel() == y.numel() ? &xi->second : nullptr;
    s.per_step.push_back(saturated_share(y, x, s.op_type == "Sigmoid", t_.saturation_output,
                                         t_.saturation_preactivation));
  }
}

void TrainMonitor::find_nonfinite(const StepView& v) {
  if (nonfinite_searched_) return;
  nonfinite_searched_ = true;
  for (const auto& r : v.forward->records) {
    const Node& node = v.graph->nodes[r.node];
    for (const auto& o : node.outputs) {
      auto it = v.forward->values.find(o);
      if (o.empty() || it == v.forward->values.end() || !is_floating(it->second.dtype())) continue;
      std::int64_t bad = 0;
      each_value(it->second, [&](std::int64_t, double val) { bad += !std::isfinite(val); });
      if (bad == 0) continue;
      add({"nonfinite_activation", v.step, node.name, node.op_type, static_cast<double>(bad), 0,
           fmt::format("the first non-finite values in run order at step {}: {} of {} in '{}', "
                       "the output of {}",
                       v.step, bad, it->second.numel(), o, node.label())});
      return;
    }
  }
}

void TrainMonitor::end_window(std::size_t step) {
  if (step < window_start_) return;
  double steps = static_cast<double>(step - window_start_ + 1);
  for (std::size_t a = 0; a < rec_.activations.size(); ++a) {
    auto& s = rec_.activations[a];
    double share = 0;
    if (s.op_type == "Relu") {
      const auto& alive = alive_[a];
      std::size_t dead = 0;
      for (auto b : alive) dead += !b;
      share = alive.empty() ? 0 : static_cast<double>(dead) / static_cast<double>(alive.size());
      s.per_window.push_back(share);
      if (share >= t_.dead_fraction)
        add({"dead_relu", step, s.node, s.op_type, share, t_.dead_fraction,
             fmt::format("{:.0f}% of the {} units of {} output 0 for every sample of steps "
                         "{}-{} (threshold {:.0f}%)",
                         100 * share, alive.size(), s.node, window_start_, step,
                         100 * t_.dead_fraction)});
      alive_[a].assign(alive.size(), 0);
      continue;
    }
    double sum = 0;
    std::size_t from = s.per_step.size() - static_cast<std::size_t>(steps);
    for (std::size_t i = from; i < s.per_step.size(); ++i)
      sum += std::isfinite(s.per_step[i]) ? s.per_step[i] : 0;
    share = sum / steps;
    s.per_window.push_back(share);
    if (share > t_.saturated_fraction)
      add({"saturation", step, s.node, s.op_type, share, t_.saturated_fraction,
           fmt::format("{:.0f}% of the values of {} are saturated over steps {}-{} (output "
                       "within {:g} of an asymptote or pre-activation beyond +-{:g}; threshold "
                       "{:.0f}%)",
                       100 * share, s.node, window_start_, step, t_.saturation_output,
                       t_.saturation_preactivation, 100 * t_.saturated_fraction)});
  }
  double ratio = median(window_ratio_), first = median(window_first_);
  if (first_kernel_ != SIZE_MAX && std::isfinite(ratio)) {
    const auto& fw = rec_.weights[first_kernel_];
    const auto& lw = rec_.weights[last_kernel_];
    if (ratio < t_.vanish_ratio && first < t_.vanish_first)
      add({"vanishing_gradient", step, fw.node, fw.op_type, ratio, t_.vanish_ratio,
           fmt::format("over steps {}-{} the gradient norm of the first layer's weight '{}' is "
                       "{:.3g} (median; threshold {:g}), {:.3g} of the last layer's '{}' "
                       "(threshold {:g})",
                       window_start_, step, fw.weight, first, t_.vanish_first, ratio, lw.weight,
                       t_.vanish_ratio)});
    if (ratio > t_.explode_ratio)
      add({"exploding_gradient", step, fw.node, fw.op_type, ratio, t_.explode_ratio,
           fmt::format("over steps {}-{} the gradient norm of the first layer's weight '{}' is "
                       "{:.3g} times the last layer's '{}' (median; threshold {:g})",
                       window_start_, step, fw.weight, ratio, lw.weight, t_.explode_ratio)});
  }
  window_ratio_.clear();
  window_first_.clear();
  window_start_ = step + 1;
}

void TrainMonitor::judge_loss_windows() {
  for (double l : rec_.losses)
    if (!std::isfinite(l)) return;  // the non-finite loss is the symptom
  std::size_t spe = std::max<std::size_t>(rec_.steps_per_epoch, 1);
  std::vector<double> means;
  for (std::size_t e = 0; (e + 1) * spe <= rec_.losses.size(); ++e) {
    double s = 0;
    for (std::size_t i = e * spe; i < (e + 1) * spe; ++i) s += rec_.losses[i];
    means.push_back(s / static_cast<double>(spe));
  }
  if (means.size() < 3) return;
  judge_chance(means.back(), means.size() * spe);
  if (means.back() <= t_.converged * means.front()) return;
  judge_oscillation(means, spe);
  judge_few_updates(means, spe);
  // The gain per epoch, on average from the first epoch to the last third (mean-loss noise of
  // single epochs averages out), relative to the first epoch's loss.
  std::size_t tail = std::max<std::size_t>(1, means.size() / 3);
  double last = 0;
  for (std::size_t e = means.size() - tail; e < means.size(); ++e) last += means[e];
  last /= static_cast<double>(tail);
  double span = static_cast<double>(means.size()) - 1 - (static_cast<double>(tail) - 1) / 2;
  double gain = (means.front() - last) / means.front() / span;
  if (gain < t_.slow_gain)
    add({"slow_convergence", means.size() * spe, "", "", gain, t_.slow_gain,
         fmt::format("over {} epochs the mean loss went from {:.4g} (first epoch) to {:.4g} "
                     "(last {}): a gain of {:.3g} of the first epoch's loss per epoch "
                     "(threshold {:g})",
                     means.size(), means.front(), last, tail, gain, t_.slow_gain)});
  std::size_t k = static_cast<std::size_t>(std::max(t_.stagnation_epochs, 2));
  for (std::size_t e = 0; e + k <= means.size(); ++e) {
    auto [lo, hi] = std::minmax_element(means.begin() + static_cast<std::ptrdiff_t>(e),
                                        means.begin() + static_cast<std::ptrdiff_t>(e + k));
    double spread = (*hi - *lo) / std::max(std::fabs(*hi), 1e-30);
    if (spread >= t_.stagnation_change) continue;
    add({"stagnant_loss", (e + k) * spe, "", "", spread, t_.stagnation_change,
         fmt::format("the mean loss of epochs {}-{} stays at {:.6g} (relative spread {:.2g}; "
                     "threshold {:g})",
                     e + 1, e + k, *hi, spread, t_.stagnation_change)});
    break;
  }
}

// The epochs' mean losses that rise again after falling: steps that overshoot swing the loss up
// and down from one epoch to the next, where a healthy run's epoch means fall, or stay.
void TrainMonitor::judge_oscillation(const std::vector<double>& means, std::size_t spe) {
  double rise = 0;
  std::size_t rises = 0;
  for (std::size_t e = 1; e < means.size(); ++e) {
    if (means[e] <= means[e - 1]) continue;
    rise += means[e] - means[e - 1];
    ++rises;
    if (rise < t_.oscillation_rise * means.front()) continue;
    const std::size_t shown = std::min<std::size_t>(e + 1, 12);  // epoch means in the detail
    add({"oscillating_loss", (e + 1) * spe, "", "", rise / means.front(), t_.oscillation_rise,
         fmt::format(
             "the mean loss of an epoch rose again {} time(s) by epoch {}, by {:.4g} in "
             "all: {:.3g} times the first epoch's {:.4g} (threshold {:g}); the means of "
             "epochs 1-{}: {:.3g}{}",
             rises, e + 1, rise, rise / means.front(), means.front(), t_.oscillation_rise, shown,
             fmt::join(means.begin(), means.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
             e + 1 > shown ? ", ..." : "")});
    return;
  }
}

// A run of few updates, one or two an epoch, whose loss was still falling in its last epoch (by
// at least the slow-convergence gain of the first epoch's loss): it stopped while learning.
void TrainMonitor::judge_few_updates(const std::vector<double>& means, std::size_t spe) {
  if (!few_updates_setting(spe, rec_.total, rec_.batch_size, rec_.samples)) return;
  double drop = (means[means.size() - 2] - means.back()) / means.front();
  if (!(drop >= t_.slow_gain)) return;
  add({"few_updates", means.size() * spe, "", "", static_cast<double>(rec_.total),
       static_cast<double>(kFewUpdates),
       fmt::format("the run made {} update{} in all ({} per epoch: batches of {} of the {} "
                   "samples; threshold {}), and its mean loss still fell by {:.3g} of the first "
                   "epoch's in the last epoch ({:.4g} -> {:.4g}): it stopped while learning",
                   rec_.total, rec_.total == 1 ? "" : "s", spe, rec_.batch_size, rec_.samples,
                   kFewUpdates, drop, means[means.size() - 2], means.back())});
}

void TrainMonitor::judge_chance(double last_epoch, std::size_t step) {
  double trivial = rec_.trivial_loss;
  if (!(trivial > 0) || !std::isfinite(trivial) || last_epoch < t_.chance_margin * trivial) return;
  add({"chance_level", step, "", "", last_epoch / trivial, t_.chance_margin,
       fmt::format("the last epoch's mean loss {:.4g} is {:.3g} times the trivial predictor's "
                   "{:.4g} ({}); a model that learns from its inputs ends below {:g} times it",
                   last_epoch, last_epoch / trivial, trivial,
                   rec_.trivial_what.empty() ? "ignoring the inputs" : rec_.trivial_what,
                   t_.chance_margin)});
}

void TrainMonitor::finish() {
  if (finished_) return;
  finished_ = true;
  if (last_step_ >= window_start_) end_window(last_step_);
  judge_loss_windows();
}

std::shared_ptr<TrainMonitor> install_monitor(const Graph& g, TrainConfig& config,
                                              std::int64_t samples, const DiagnoseThresholds& t,
                                              bool stop_on_nonfinite) {
  auto m = std::make_shared<TrainMonitor>(g, config, samples, t);
  m->stop_on_nonfinite = stop_on_nonfinite;
  auto before = config.on_step;
  config.on_step = [m, before](const StepView& v) {
    bool go_on = before ? before(v) : true;
    return m->observe(v) && go_on;
  };
  return m;
}

}  // namespace metaop
