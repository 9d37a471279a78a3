#include "analysis/diagnose/diagnose_width.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "analysis/diagnose/diagnose_layers.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_static.h"

namespace metaop {

namespace {

// Whether the targets are the inputs (an autoencoder).
bool reconstructs(const Tensor& X, const Tensor& Y) {
  return X.defined() && Y.defined() && X.shape() == Y.shape() && is_floating(Y.dtype()) &&
         X.to_f64() == Y.to_f64();
}

// Uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)]: PyTorch's default for a Linear's weight and bias.
Tensor linear_init(const Shape& shape, DType t, std::int64_t fan_in, std::mt19937_64& rng) {
  double bound = 1 / std::sqrt(static_cast<double>(std::max<std::int64_t>(fan_in, 1)));
  std::uniform_real_distribution<double> u(-bound, bound);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = u(rng);
  return Tensor::from_f64(v, shape, t);
}

}  // namespace

double last_epoch_loss(const MonitorRecord& rec) {
  const auto& l = rec.losses;
  std::size_t n = std::min<std::size_t>(std::max<std::size_t>(rec.steps_per_epoch, 1), l.size());
  if (n == 0) return NAN;
  double sum = 0;
  for (std::size_t i = l.size() - n; i < l.size(); ++i) sum += l[i];
  return sum / static_cast<double>(n);
}

std::vector<std::string> stall_symptoms(const MonitorRecord& rec) {
  std::vector<std::string> out;
  for (const auto& sy : rec.symptoms)
    if (sy.kind == "chance_level" || sy.kind == "stagnant_loss" || sy.kind == "slow_convergence")
      out.push_back(symptom_label(sy));
  return out;
}

double unexplained_loss(const DiagnoseResult& r) {
  const MonitorRecord& rec = r.run.record;
  if (!r.run.trained || !(rec.trivial_loss > 0) || !std::isfinite(rec.trivial_loss)) return NAN;
  for (const auto& d : r.diagnoses())
    if (d.definite || d.category == "framework" || d.score > 0.4) return NAN;
  double loss = last_epoch_loss(rec);
  return std::isfinite(loss) && loss >= kExperimentAbove * rec.trivial_loss ? loss : NAN;
}

std::vector<NarrowLayer> narrow_layers(const Graph& g, const Tensor& X, const Tensor& Y) {
  if (reconstructs(X, Y)) return {};
  DenseLayers layers(g);
  // The last layer: the one whose output the model's output comes from.
  std::size_t out = output_producer(g);
  std::size_t last = out == SIZE_MAX ? SIZE_MAX : feeding_layer(g, out);
  if (layers.all().count(out)) last = out;
  if (!layers.all().count(last)) return {};
  std::int64_t output = layers.all().at(last).fan_out;
  std::vector<NarrowLayer> found;
  for (const auto& [k, d] : layers.all()) {
    if (k == last || d.fan_out >= output) continue;
    auto next = layers.next(d);
    if (next.layer == SIZE_MAX) continue;
    NarrowLayer n;
    n.node = g.nodes[k].name;
    n.next = g.nodes[next.layer].name;
    n.width = d.fan_out;
    n.output = output;
    n.widened = std::max(2 * output, 4 * d.fan_out);
    found.push_back(std::move(n));
  }
  return found;
}

Graph widen_layer(const Graph& g, const std::string& node, std::int64_t width, std::uint64_t seed) {
  DenseLayers layers(g);
  const Dense* d = nullptr;
  for (const auto& [k, x] : layers.all())
    if (g.nodes[k].name == node) d = &x;
  if (!d) fail("{}: '{}' is not a dense layer (Gemm, or MatMul by a weight)", g.path, node);
  auto next = layers.next(*d);
  if (next.layer == SIZE_MAX)
    fail("{}: layer '{}' does not feed another dense layer through activations alone", g.path,
         node);
  const Dense& m = layers.all().at(next.layer);
  Graph out = g;
  std::mt19937_64 rng(seed);
  const Tensor& w = g.initializers.at(d->weight);
  out.initializers[d->weight] = linear_init(
      d->out_rows ? Shape{width, d->fan_in} : Shape{d->fan_in, width}, w.dtype(), d->fan_in, rng);
  if (!d->bias.empty()) {
    const Tensor& b = g.initializers.at(d->bias);
    Shape bs = b.shape();
    bs.back() = width;  // [w] or [1, w]
    out.initializers[d->bias] = linear_init(bs, b.dtype(), d->fan_in, rng);
  }
  const Tensor& wm = g.initializers.at(m.weight);
  out.initializers[m.weight] = linear_init(
      m.out_rows ? Shape{m.fan_out, width} : Shape{width, m.fan_out}, wm.dtype(), width, rng);
  // The shapes ONNX inferred for the values in between hold the old width.
  for (const auto& v : next.path) out.value_info.erase(v);
  out.value_info.erase(g.nodes[d->index].outputs.at(0));
  return out;
}

void width_check(DiagnoseResult& r, const TrainSetup& s, const DiagnoseOptions& o) {
  const MonitorRecord& rec = r.run.record;
  double loss = unexplained_loss(r);
  if (std::isnan(loss)) return;
  for (const NarrowLayer& n : narrow_layers(s.graph, s.X, s.Y)) {
    TrainSetup t = s;
    t.graph = widen_layer(s.graph, n.node, n.widened, widen_seed(s));
    if (o.status)
      o.status(fmt::format("training again with layer '{}' widened from {} to {} outputs", n.node,
                           n.width, n.widened));
    MonitoredRun m = monitored_run(t, o.thresholds);
    double wide = last_epoch_loss(m.diagnosis.record);
    if (!m.diagnosis.trained || !std::isfinite(wide) || wide >= kClearlyLower * loss) continue;
    Diagnosis d;
    d.category = "architecture";
    d.node = n.node;
    for (const auto& x : s.graph.nodes)
      if (x.name == n.node) d.op_type = x.op_type;
    d.score = 0.7;
    d.symptoms = stall_symptoms(rec);
    d.evidence = fmt::format(
        "layer '{}' has {} output{} and feeds '{}', narrower than the model's {} outputs; the "
        "run's last epoch ends at a mean loss of {:.4g} ({:.3g} times the trivial predictor's "
        "{:.4g}), and the same training with the layer widened to {} outputs ends at {:.4g} "
        "({:.3g} times the run's; it counts below {:g})",
        n.node, n.width, n.width == 1 ? "" : "s", n.next, n.output, loss, loss / rec.trivial_loss,
        rec.trivial_loss, n.widened, wide, wide / loss, kClearlyLower);
    d.fix.kind = "widen_layer";
    d.fix.node = n.node;
    d.fix.factor = static_cast<double>(n.widened);
    d.fix.description =
        fmt::format("layer '{}' widened from {} to {} outputs", n.node, n.width, n.widened);
    supersede_fallbacks(r.diagnoses(), d);
    r.diagnoses().push_back(std::move(d));
  }
  std::stable_sort(r.diagnoses().begin(), r.diagnoses().end(),
                   [](const Diagnosis& a, const Diagnosis& b) { return a.score > b.score; });
}

}  // namespace metaop
