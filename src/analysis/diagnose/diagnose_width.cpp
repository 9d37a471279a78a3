#include "analysis/diagnose/diagnose_width.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "analysis/diagnose/diagnose_static.h"
#include "engine/autodiff.h"
#include "ops/kernel_util.h"

namespace metaop {

namespace {

// The run ends above this share of its trivial predictor's loss for the check to run, and a
// widened model must end below this share of the run's last-epoch loss to name the layer.
constexpr double kCheckAbove = 1.0 / 3, kClearlyLower = 0.7;

// Activations a layer's outputs may pass through, unit by unit, on their way to the next layer.
bool unit_wise(const std::string& op) {
  static const std::set<std::string> ops = {"Relu", "LeakyRelu", "Tanh",     "Sigmoid", "Elu",
                                            "Selu", "Gelu",      "Softplus", "Identity"};
  return ops.count(op) != 0;
}

// A dense layer: Gemm, or MatMul with its weight as input 1; the weight 2-D and trainable.
struct Dense {
  std::size_t index = 0;
  std::string weight, bias;         // bias: Gemm's C, or the Add after a MatMul ("" when none)
  std::size_t bias_add = SIZE_MAX;  // the MatMul's bias Add
  bool out_rows = false;  // the weight holds one row per output ([out, in]: Gemm transB=1)
  std::int64_t fan_in = 0, fan_out = 0;
  std::string output;  // the layer's output value, after its bias Add
};

class Layers {
 public:
  explicit Layers(const Graph& g) : g_(g) {
    auto trainable = trainable_initializers(g);
    train_ = {trainable.begin(), trainable.end()};
    for (std::size_t k = 0; k < g.nodes.size(); ++k)
      for (const auto& i : g.nodes[k].inputs) consumers_[i].push_back(k);
    for (std::size_t k = 0; k < g.nodes.size(); ++k)
      if (auto d = dense(k)) by_node_[k] = *d;
  }

  const std::map<std::size_t, Dense>& all() const { return by_node_; }

  // The dense layer that `layer`'s output feeds through unit-wise activations alone (each the
  // only consumer of its input), with the values on the way; layer SIZE_MAX when it feeds
  // anything else.
  struct Feed {
    std::size_t layer = SIZE_MAX;
    std::vector<std::string> path;
  };
  Feed next(const Dense& layer) const {
    Feed f;
    std::string v = layer.output;
    f.path = {v};
    for (int hops = 0; hops < 8; ++hops) {
      for (const auto& o : g_.outputs)
        if (o.name == v) return {};
      auto it = consumers_.find(v);
      if (it == consumers_.end() || it->second.size() != 1) return {};
      std::size_t k = it->second.front();
      const Node& n = g_.nodes[k];
      if (by_node_.count(k) && n.inputs[0] == v) {
        f.layer = k;
        return f;
      }
      if (!unit_wise(n.op_type) || n.inputs.empty() || n.inputs[0] != v) return {};
      v = n.outputs.at(0);
      f.path.push_back(v);
    }
    return {};
  }

 private:
  std::optional<Dense> dense(std::size_t k) const {
    const Node& n = g_.nodes[k];
    if ((n.op_type != "Gemm" && n.op_type != "MatMul") || n.inputs.size() < 2 ||
        !train_.count(n.inputs[1]))
      return std::nullopt;
    const Tensor& w = g_.initializers.at(n.inputs[1]);
    if (w.rank() != 2) return std::nullopt;
    Dense d;
    d.index = k;
    d.weight = n.inputs[1];
    d.out_rows = n.op_type == "Gemm" && attr_i(KernelContext{n, g_.opset}, "transB") != 0;
    if (n.op_type == "Gemm" && attr_i(KernelContext{n, g_.opset}, "transA") != 0)
      return std::nullopt;
    d.fan_in = d.out_rows ? w.dim(1) : w.dim(0);
    d.fan_out = d.out_rows ? w.dim(0) : w.dim(1);
    d.output = n.outputs.at(0);
    if (n.op_type == "Gemm" && n.inputs.size() > 2 && train_.count(n.inputs[2])) {
      d.bias = n.inputs[2];
    } else if (n.op_type == "MatMul") {
      auto it = consumers_.find(d.output);
      if (it != consumers_.end() && it->second.size() == 1) {
        const Node& m = g_.nodes[it->second.front()];
        if (m.op_type == "Add" && m.inputs.size() == 2 && m.inputs[0] == d.output &&
            train_.count(m.inputs[1])) {
          d.bias = m.inputs[1];
          d.bias_add = it->second.front();
          d.output = m.outputs.at(0);
        }
      }
    }
    if (!d.bias.empty() && g_.initializers.at(d.bias).numel() != d.fan_out) return std::nullopt;
    return d;
  }

  const Graph& g_;
  std::set<std::string> train_;
  std::map<std::string, std::vector<std::size_t>> consumers_;
  std::map<std::size_t, Dense> by_node_;
};

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

// The mean loss of the run's last epoch.
double last_epoch_loss(const MonitorRecord& rec) {
  const auto& l = rec.losses;
  std::size_t n = std::min<std::size_t>(std::max<std::size_t>(rec.steps_per_epoch, 1), l.size());
  if (n == 0) return NAN;
  double sum = 0;
  for (std::size_t i = l.size() - n; i < l.size(); ++i) sum += l[i];
  return sum / static_cast<double>(n);
}

}  // namespace

std::vector<NarrowLayer> narrow_layers(const Graph& g, const Tensor& X, const Tensor& Y) {
  if (reconstructs(X, Y)) return {};
  Layers layers(g);
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
  Layers layers(g);
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
  if (!r.run.trained || !(rec.trivial_loss > 0) || !std::isfinite(rec.trivial_loss)) return;
  for (const auto& d : r.diagnoses())
    if (d.definite || d.category == "framework" || d.score > 0.4) return;
  double loss = last_epoch_loss(rec);
  if (!std::isfinite(loss) || loss < kCheckAbove * rec.trivial_loss) return;
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
    for (const auto& sy : rec.symptoms)
      if (sy.kind == "chance_level" || sy.kind == "stagnant_loss" || sy.kind == "slow_convergence")
        d.symptoms.push_back(symptom_label(sy));
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
    r.diagnoses().push_back(std::move(d));
  }
  std::stable_sort(r.diagnoses().begin(), r.diagnoses().end(),
                   [](const Diagnosis& a, const Diagnosis& b) { return a.score > b.score; });
}

}  // namespace metaop
