#include "analysis/diagnose/diagnose_static.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analysis/diagnose/diagnose_baseline.h"
#include "analysis/diagnose/diagnose_layers.h"
#include "analysis/diagnose/diagnose_monitor.h"
#include "analysis/diagnose/diagnose_rules.h"
#include "ops/kernel_util.h"

namespace metaop {

namespace {

bool is_layer(const std::string& op) {
  return op == "Gemm" || op == "MatMul" || op == "Conv" || op == "ConvTranspose";
}

std::map<std::string, std::size_t> producers(const Graph& g) {
  std::map<std::string, std::size_t> p;
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& o : g.nodes[k].outputs) p[o] = k;
  return p;
}

// Whether `value` is the model's first input, seen through ops that only move data.
bool from_input(const Graph& g, const std::map<std::string, std::size_t>& prod, std::string value) {
  static const std::set<std::string> moves = {"Identity", "Reshape",   "Flatten", "Transpose",
                                              "Squeeze",  "Unsqueeze", "Dropout", "Cast"};
  for (int hops = 0; hops < 16; ++hops) {
    if (!g.inputs.empty() && value == g.inputs[0].name) return true;
    auto it = prod.find(value);
    if (it == prod.end() || !moves.count(g.nodes[it->second].op_type)) return false;
    value = g.nodes[it->second].inputs.at(0);
  }
  return false;
}

double rms(const Tensor& t) {
  auto v = t.to_f64();
  double s = 0;
  for (double x : v) s += x * x;
  return v.empty() ? 0 : std::sqrt(s / static_cast<double>(v.size()));
}

// A layer's fan-in and fan-out from its weight `w` (Gemm, MatMul, or Conv-like: output and
// input channels times the kernel's size).
void set_fans(LayerInit& l, const KernelContext& c, const Tensor& w) {
  const Node& n = c.node;
  std::int64_t k_size = 1;
  for (std::int64_t d = 2; d < w.rank(); ++d) k_size *= w.dim(d);
  if (n.op_type == "Gemm") {
    bool tb = attr_i(c, "transB") != 0;
    l.fan_in = tb ? w.dim(1) : w.dim(0);
    l.fan_out = tb ? w.dim(0) : w.dim(1);
  } else if (n.op_type == "MatMul") {
    l.fan_in = w.dim(-2);
    l.fan_out = w.dim(-1);
  } else {  // Conv and the other layers
    l.fan_in = w.dim(1) * k_size;
    l.fan_out = w.dim(0) * k_size;
  }
}

double element_mean(const Tensor& t) {
  auto b = t.to_f64();
  double s = 0;
  for (double x : b) s += x;
  return b.empty() ? 0 : s / static_cast<double>(b.size());
}

std::vector<LayerInit> layer_inits(const Graph& g) {
  auto trainable = trainable_initializers(g);
  std::set<std::string> train(trainable.begin(), trainable.end());
  auto prod = producers(g);
  std::vector<LayerInit> out;
  std::map<std::size_t, std::size_t> of_node;  // node index -> layers index
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_layer(n.op_type) || n.inputs.size() < 2) continue;
    std::size_t wi =
        train.count(n.inputs[1]) ? 1 : (n.op_type == "MatMul" && train.count(n.inputs[0]) ? 0 : 9);
    if (wi == 9) continue;
    const Tensor& w = g.initializers.at(n.inputs[wi]);
    if (w.rank() < 2) continue;
    LayerInit l;
    l.node = n.name;
    l.op_type = n.op_type;
    l.weight = n.inputs[wi];
    set_fans(l, KernelContext{n, g.opset}, w);
    l.gain = rms(w) * std::sqrt(static_cast<double>(std::max<std::int64_t>(l.fan_in, 1)));
    if (n.inputs.size() > 2 && train.count(n.inputs[2])) l.bias = n.inputs[2];
    if (l.bias.empty() && n.op_type == "MatMul")  // Linear exported as MatMul + Add
      for (const auto& m : g.nodes)
        if (m.op_type == "Add" && m.inputs.size() == 2 && m.inputs[0] == n.outputs[0] &&
            train.count(m.inputs[1]))
          l.bias = m.inputs[1];
    if (!l.bias.empty()) l.bias_mean = element_mean(g.initializers.at(l.bias));
    l.first = from_input(g, prod, n.inputs[wi == 1 ? 0 : 1]);
    of_node[k] = out.size();
    out.push_back(std::move(l));
  }
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const auto& op = g.nodes[k].op_type;
    if (op != "Relu" && op != "LeakyRelu" && op != "Sigmoid" && op != "Tanh") continue;
    std::size_t layer = feeding_layer(g, k);
    if (auto it = of_node.find(layer); it != of_node.end() && out[it->second].activation.empty())
      out[it->second].activation = op;
  }
  return out;
}

// Per feature (axis 1) of x: mean and standard deviation of the finite values, and which
// features hold non-finite ones.
// A definite data diagnosis when some features hold non-finite values (`nonfinite`: their
// count per feature).
void nonfinite_features(StaticChecks& c, const std::vector<std::int64_t>& nonfinite,
                        const std::string& input) {
  std::vector<std::int64_t> bad;
  for (std::size_t f = 0; f < nonfinite.size(); ++f)
    if (nonfinite[f]) bad.push_back(static_cast<std::int64_t>(f));
  if (bad.empty()) return;
  Diagnosis d;
  d.category = "data";
  d.input = input;
  d.features = bad;
  d.definite = true;
  d.score = 1;
  d.evidence = fmt::format(
      "input '{}' holds non-finite values in {} feature(s) (first: {}, "
      "{} values)",
      input, bad.size(), bad[0], nonfinite[static_cast<std::size_t>(bad[0])]);
  c.definite.push_back(std::move(d));
}

// Scale: the root mean square of each feature, against 1 and against the median feature's
// (`n`: the samples).
void feature_scale(StaticChecks& c, const std::string& input, std::int64_t n) {
  std::vector<double> scale(c.feature_mean.size());
  for (std::size_t f = 0; f < scale.size(); ++f)
    scale[f] =
        std::sqrt(c.feature_mean[f] * c.feature_mean[f] + c.feature_std[f] * c.feature_std[f]);
  std::vector<double> sorted;
  for (double s : scale)
    if (s > 0) sorted.push_back(s);
  std::sort(sorted.begin(), sorted.end());
  double med = sorted.empty() ? 1 : sorted[sorted.size() / 2];
  for (std::size_t f = 0; f < scale.size(); ++f) {
    double s = scale[f];
    if (s == 0) continue;  // a constant zero feature carries nothing, and harms nothing
    if (s > 10 || s < 0.01 || s / med > 100 || s / med < 0.01)
      c.off_scale.push_back(static_cast<std::int64_t>(f));
  }
  if (c.off_scale.empty()) return;
  for (auto f : c.off_scale) {
    double x = scale[static_cast<std::size_t>(f)];
    c.off_scale_factor = std::max({c.off_scale_factor, x, 1 / x, x / med, med / x});
  }
  auto worst = *std::max_element(c.off_scale.begin(), c.off_scale.end(), [&](auto a, auto b) {
    return std::fabs(std::log(scale[static_cast<std::size_t>(a)])) <
           std::fabs(std::log(scale[static_cast<std::size_t>(b)]));
  });
  auto w = static_cast<std::size_t>(worst);
  c.data_detail = fmt::format(
      "{} of {} feature(s) of input '{}' are far from unit scale or from the others' (median "
      "scale {:.3g}); the farthest, feature {}, has mean {:.4g} and standard deviation {:.4g} "
      "over {} samples",
      c.off_scale.size(), scale.size(), input, med, worst, c.feature_mean[w], c.feature_std[w], n);
}

void feature_stats(StaticChecks& c, const Tensor& x, const std::string& input) {
  std::int64_t n = x.dim(0), features = x.rank() >= 2 ? x.dim(1) : 1, inner = 1;
  for (std::int64_t d = 2; d < x.rank(); ++d) inner *= x.dim(d);
  if (features == 0 || inner == 0) return;
  // Block by block (a sample's feature: `inner` contiguous values), float32 read in place: the
  // data can be large, a float64 copy of it would double that.
  std::vector<double> sum(static_cast<std::size_t>(features)), sq(sum.size()), cnt(sum.size());
  std::vector<std::int64_t> nonfinite(sum.size());
  std::vector<double> widened = x.dtype() == DType::Float32 ? std::vector<double>{} : x.to_f64();
  const float* p = x.dtype() == DType::Float32 ? x.data<float>() : nullptr;
  auto value = [&](std::int64_t i) {
    return p ? static_cast<double>(p[i]) : widened[static_cast<std::size_t>(i)];
  };
  std::int64_t blocks = inner ? x.numel() / inner : 0;
  auto each = [&](auto&& f) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      auto feature = static_cast<std::size_t>(b % features);
      for (std::int64_t i = b * inner; i < (b + 1) * inner; ++i) f(feature, value(i));
    }
  };
  each([&](std::size_t f, double v) {
    if (!std::isfinite(v)) {
      ++nonfinite[f];
      return;
    }
    sum[f] += v;
    cnt[f] += 1;
  });
  c.feature_mean.resize(sum.size());
  for (std::size_t f = 0; f < sum.size(); ++f) c.feature_mean[f] = cnt[f] ? sum[f] / cnt[f] : 0;
  each([&](std::size_t f, double v) {
    if (std::isfinite(v)) sq[f] += (v - c.feature_mean[f]) * (v - c.feature_mean[f]);
  });
  c.feature_std.resize(sum.size());
  for (std::size_t f = 0; f < sum.size(); ++f)
    c.feature_std[f] = cnt[f] ? std::sqrt(sq[f] / cnt[f]) : 0;
  nonfinite_features(c, nonfinite, input);
  feature_scale(c, input, n);
  for (std::size_t f = 0; f < sum.size(); ++f)
    if (cnt[f] > 0 && c.feature_std[f] == 0)
      c.constant_features.push_back(static_cast<std::int64_t>(f));
  // Every feature constant: every input the same, which duplicate_inputs judges.
  std::size_t k = c.constant_features.size();
  if (k > 0 && k < sum.size())
    c.notes.push_back(fmt::format(
        "{} of {} features of input '{}' have one value in every sample ({}{}): they carry "
        "nothing the model can learn from",
        k, sum.size(), input,
        fmt::join(
            c.constant_features.begin(),
            c.constant_features.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(k, 8)),
            ", "),
        k > 8 ? ", ..." : ""));
}

Diagnosis loss_diagnosis(const std::string& what, const Node* node, Fix fix, std::string why) {
  Diagnosis d;
  d.category = "loss";
  d.loss = what;
  if (node) {
    d.node = node->name;
    d.op_type = node->op_type;
  }
  d.definite = true;
  d.score = 1;
  d.evidence = std::move(why);
  d.fix = std::move(fix);
  d.symptoms = {};
  return d;
}

bool has_loss_diagnosis(const StaticChecks& c) {
  for (const auto& d : c.definite)
    if (d.category == "loss") return true;
  return false;
}

Fix swap_loss(const std::string& to, const std::string& why) {
  Fix f;
  f.kind = "swap_loss";
  f.loss = to;
  f.description = "loss swapped for " + to + " (" + why + ")";
  return f;
}

void check_labels(StaticChecks& c, const Graph& g, const Tensor& Y, LossKind loss) {
  if (loss == LossKind::CrossEntropy || loss == LossKind::NLL) {
    if (Y.dtype() != DType::Int64 && Y.dtype() != DType::Int32) return;  // with_loss says so
    if (!g.outputs.empty()) {
      const auto& dims = g.outputs[0].dims;
      if (dims && dims->size() >= 2 && (*dims)[1] > 0) c.classes = (*dims)[1];
    }
    if (c.classes <= 0) return;  // not known before running: the loss kernel will say
    auto labels = Y.to_i64();
    if (labels.empty()) return;
    auto [lo, hi] = std::minmax_element(labels.begin(), labels.end());
    if (*lo >= 0 && *hi < c.classes) return;
    std::int64_t outside = 0;
    for (auto l : labels) outside += l < 0 || l >= c.classes;
    Diagnosis d;
    d.category = "data";
    d.input = "labels";
    d.definite = true;
    d.score = 1;
    d.evidence = fmt::format(
        "{} of {} labels are outside the class range [0, {}) of the model's "
        "output (labels span {}..{})",
        outside, labels.size(), c.classes, *lo, *hi);
    if (*lo >= 1 && *hi <= c.classes) {  // numbered from 1
      d.fix.kind = "shift_labels";
      d.fix.shift = -1;
      d.fix.description = "labels numbered from 0 (each label minus 1)";
    }
    c.definite.push_back(std::move(d));
    c.trainable = false;
  } else if (loss == LossKind::BCE || loss == LossKind::BCEWithLogits) {
    if (!is_floating(Y.dtype())) return;
    auto v = Y.to_f64();
    std::int64_t outside = 0;
    for (double y : v) outside += !(y >= 0 && y <= 1);
    if (!outside) return;
    Diagnosis d;
    d.category = "data";
    d.input = "labels";
    d.definite = true;
    d.score = 1;
    d.evidence = fmt::format("{} of {} labels are outside [0, 1], the range of {}", outside,
                             v.size(), loss == LossKind::BCE ? "bce" : "bce_with_logits");
    c.definite.push_back(std::move(d));
  }
}

}  // namespace

std::size_t output_producer(const Graph& g) {
  if (g.outputs.empty()) return SIZE_MAX;
  auto prod = producers(g);
  static const std::set<std::string> moves = {"Identity", "Reshape", "Flatten", "Squeeze",
                                              "Unsqueeze"};
  std::string v = g.outputs[0].name;
  for (int hops = 0; hops < 16; ++hops) {
    auto it = prod.find(v);
    if (it == prod.end()) return SIZE_MAX;
    if (!moves.count(g.nodes[it->second].op_type)) return it->second;
    v = g.nodes[it->second].inputs.at(0);
  }
  return SIZE_MAX;
}

namespace {

// A definite architecture fault of the output's activation `prod`, whose fix removes it.
void output_activation_fault(StaticChecks& c, const Node& prod, std::string evidence) {
  Diagnosis d;
  d.category = "architecture";
  d.node = prod.name;
  d.op_type = prod.op_type;
  d.definite = true;
  d.score = 1;
  d.evidence = std::move(evidence);
  d.fix.kind = "remove_node";
  d.fix.node = prod.name;
  d.fix.description = "the output's " + prod.op_type + " '" + prod.name + "' removed";
  c.definite.push_back(std::move(d));
}

// The output activation's range against the targets' (DeepDiagnosis's out-of-range check): a
// definite diagnosis when some targets lie outside it.
void output_range(StaticChecks& c, const Node& prod, const Tensor& Y) {
  const std::string& op = prod.op_type;
  double lo = op == "Tanh" ? -1 : 0, hi = op == "Relu" ? INFINITY : 1;
  auto v = Y.to_f64();
  std::int64_t outside = 0;
  for (double y : v) outside += y < lo || y > hi;
  if (!outside) return;
  output_activation_fault(
      c, prod,
      fmt::format("the model's output comes from {}, whose values lie in [{:g}, {:g}], and {} of "
                  "{} targets lie outside it: mse can never reach them",
                  prod.label(), lo, hi, outside, v.size()));
}

// Ops that keep a model affine in its input (per sample): data movement, sums, scaling by
// constants, pooling by averages, batch normalization. Anything else counts as a nonlinearity.
bool keeps_affine(const Graph& g, const Node& n) {
  static const std::set<std::string> moves = {"Identity",
                                              "Reshape",
                                              "Flatten",
                                              "Transpose",
                                              "Squeeze",
                                              "Unsqueeze",
                                              "Dropout",
                                              "Cast",
                                              "Concat",
                                              "Split",
                                              "Slice",
                                              "Gather",
                                              "Pad",
                                              "Expand",
                                              "Shape",
                                              "Constant",
                                              "ConstantOfShape",
                                              "AveragePool",
                                              "Neg",
                                              "ReduceMean",
                                              "ReduceSum",
                                              "GlobalAveragePool",
                                              "BatchNormalization"};
  if (is_layer(n.op_type) || moves.count(n.op_type)) return true;
  if (n.op_type == "Add" || n.op_type == "Sub") return true;
  auto constant = [&](std::size_t i) {
    return i < n.inputs.size() && g.initializers.count(n.inputs[i]) != 0;
  };
  if (n.op_type == "Mul") return constant(0) || constant(1);  // scaling by a constant
  if (n.op_type == "Div") return constant(1);
  return false;
}

// The layers, when there are two or more and every node between the input and the output but
// the output's own Softmax, LogSoftmax or Sigmoid (the link to the loss) keeps the model affine.
std::vector<std::string> linear_layers(const Graph& g, const std::vector<LayerInit>& layers) {
  if (layers.size() < 2) return {};
  std::size_t out = output_producer(g);
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const auto& op = g.nodes[k].op_type;
    if (k == out && (op == "Softmax" || op == "LogSoftmax" || op == "Sigmoid")) continue;
    if (!keeps_affine(g, g.nodes[k])) return {};
  }
  std::vector<std::string> names(layers.size());
  std::transform(layers.begin(), layers.end(), names.begin(),
                 [](const LayerInit& l) { return l.node; });
  return names;
}

// An output activation whose range keeps the loss away from its labels: logits squeezed into
// [0, 1] (Sigmoid) or [-1, 1] (Tanh) under cross_entropy; logits at or above 0 (Relu) under
// bce_with_logits, which then predicts every label 1 with probability at least 1/2.
void bounded_logits(StaticChecks& c, const Node& prod, LossKind loss) {
  const std::string& op = prod.op_type;
  std::string why;
  if (loss == LossKind::CrossEntropy && (op == "Sigmoid" || op == "Tanh")) {
    double width = op == "Sigmoid" ? 1 : 2;
    std::string floor =
        c.classes >= 2
            ? fmt::format(
                  ": with {} classes the loss cannot go below ln(1 + {} e^-{:g}) = {:.4g} "
                  "per sample",
                  c.classes, c.classes - 1, width,
                  std::log1p(static_cast<double>(c.classes - 1) * std::exp(-width)))
            : "";
    why = fmt::format(
        "the model's output comes from {}, so the logits cross_entropy sees lie within {:g} of "
        "each other and no class gets a probability near 1{}",
        prod.label(), width, floor);
  } else if (loss == LossKind::BCEWithLogits && op == "Relu") {
    why = fmt::format(
        "the model's output comes from {}, so every logit bce_with_logits sees is at least 0: "
        "every label is predicted 1 with probability at least 1/2, and each label 0 costs at "
        "least ln 2",
        prod.label());
  } else {
    return;
  }
  output_activation_fault(c, prod, std::move(why));
}

// A definite initialization fault when hidden layers start with identical units that training
// keeps identical (symmetric_layers): the first such layer, whose fix re-initializes them all.
void symmetric_units(StaticChecks& c, const Graph& g) {
  auto found = symmetric_layers(g);
  if (found.empty()) return;
  std::vector<std::string> names;
  for (const auto& s : found) {
    names.push_back(g.nodes[s.index].name);
    for (auto& l : c.layers)
      if (l.node == names.back()) l.symmetric = true;
  }
  const SymmetricLayer& s = found.front();
  const Node& n = g.nodes[s.index];
  const LayerInit* l = nullptr;
  for (const auto& x : c.layers)
    if (x.node == n.name) l = &x;
  if (!l) return;
  Diagnosis d = initialization_diagnosis(
      *l, 1,
      fmt::format(
          "layer '{}' starts with its {} units identical (every unit's weights and bias the same: "
          "weight {:.4g} ...), and '{}', which it feeds, weighs them alike: every unit gets the "
          "same gradient at every step, so they stay identical and the layer computes one feature "
          "however long it trains{}",
          n.name, s.units, s.value, g.nodes[s.next].name,
          found.size() > 1 ? fmt::format("; so do the units of {}",
                                         fmt::join(names.begin() + 1, names.end(), ", "))
                           : ""));
  d.definite = true;
  c.definite.push_back(std::move(d));
}

}  // namespace

StaticChecks static_checks(const Graph& g, const Tensor& X, const Tensor& Y, LossKind loss) {
  StaticChecks c;
  c.layers = layer_inits(g);
  c.linear_layers = linear_layers(g, c.layers);
  symmetric_units(c, g);
  std::string input = g.inputs.empty() ? "input" : g.inputs[0].name;
  if (X.rank() >= 1 && X.dim(0) > 0 && is_floating(X.dtype())) feature_stats(c, X, input);
  check_labels(c, g, Y, loss);
  baseline_checks(c, Y, loss);
  if (c.trainable) duplicate_inputs(c, X, Y, loss, input);
  std::size_t p = output_producer(g);
  const Node* prod = p == SIZE_MAX ? nullptr : &g.nodes[p];
  std::string op = prod ? prod->op_type : "";
  if (loss == LossKind::CrossEntropy && op == "Softmax") {
    Fix f;
    f.kind = "remove_node";
    f.node = prod->name;
    f.description = "the Softmax '" + prod->name + "' removed (its input becomes the output)";
    c.definite.push_back(loss_diagnosis(
        "cross_entropy after a Softmax", prod, f,
        fmt::format("the model's output comes from {}, and cross_entropy applies its own "
                    "softmax: the loss sees softmax(softmax(x)), whose gradients are squeezed "
                    "into a narrow range",
                    prod->label())));
  } else if (loss == LossKind::CrossEntropy && op == "LogSoftmax") {
    c.notes.push_back(fmt::format(
        "the output comes from {} and cross_entropy applies log_softmax again: redundant but "
        "exact (log_softmax is idempotent), so not a fault",
        prod->label()));
  } else if (loss == LossKind::NLL && op == "Softmax") {
    Fix f;
    f.kind = "replace_op";
    f.node = prod->name;
    f.from = "Softmax";
    f.op_type = "LogSoftmax";
    f.description = "the Softmax '" + prod->name + "' replaced by LogSoftmax";
    c.definite.push_back(
        loss_diagnosis("nll on probabilities", prod, f,
                       fmt::format("nll takes log-probabilities, the model's output comes from {} "
                                   "(probabilities)",
                                   prod->label())));
  } else if (loss == LossKind::BCE && (is_layer(op) || op == "Add")) {
    c.definite.push_back(loss_diagnosis(
        "bce on unbounded outputs", prod, swap_loss("bce_with_logits", "the output is logits"),
        fmt::format("bce takes probabilities in [0, 1], the model's output comes from {}, whose "
                    "values are unbounded",
                    prod->label())));
  } else if (loss == LossKind::MSE && (op == "Relu" || op == "Sigmoid" || op == "Tanh") &&
             is_floating(Y.dtype())) {
    output_range(c, *prod, Y);
  } else if (loss == LossKind::BCEWithLogits && op == "Sigmoid") {
    // Removing the Sigmoid keeps the stable loss (bce on a Sigmoid's output takes log(0) once
    // the Sigmoid rounds to 0 or 1).
    Fix f;
    f.kind = "remove_node";
    f.node = prod->name;
    f.description = "the Sigmoid '" + prod->name + "' removed (its input becomes the output)";
    c.definite.push_back(loss_diagnosis(
        "bce_with_logits after a Sigmoid", prod, f,
        fmt::format("the model's output comes from {} and bce_with_logits applies its own "
                    "sigmoid: the loss sees sigmoid(sigmoid(x)), confined to [0.5, 0.73]",
                    prod->label())));
  } else if (prod) {
    bounded_logits(c, *prod, loss);
  }
  return c;
}

void check_first_output(StaticChecks& c, const Graph& g, LossKind loss, const Tensor& output) {
  if (has_loss_diagnosis(c) || !output.defined() || output.rank() < 1 ||
      !is_floating(output.dtype()))
    return;
  std::size_t p = output_producer(g);
  const Node* prod = p == SIZE_MAX ? nullptr : &g.nodes[p];
  auto v = output.to_f64();
  if (loss == LossKind::BCE) {
    std::int64_t outside = 0;
    for (double y : v) outside += !(y >= 0 && y <= 1);
    if (outside)
      c.definite.push_back(loss_diagnosis(
          "bce on values outside [0, 1]", prod,
          swap_loss("bce_with_logits",
                    "the output is "
                    "logits"),
          fmt::format("bce takes probabilities, and {} of {} of the model's outputs on the first "
                      "batch are outside [0, 1]",
                      outside, v.size())));
    return;
  }
  if ((loss != LossKind::NLL && loss != LossKind::CrossEntropy) || output.rank() < 2) return;
  // Rows along axis 1: their sums (probabilities?) and log-sum-exps (log-probabilities?).
  std::int64_t classes = output.dim(1), inner = 1;
  for (std::int64_t d = 2; d < output.rank(); ++d) inner *= output.dim(d);
  std::int64_t rows = output.numel() / std::max<std::int64_t>(classes, 1);
  std::int64_t not_logp = 0, probs = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t n = r / inner, i = r % inner;
    double mx = -INFINITY, sum = 0;
    bool in01 = true, nonpos = true;
    for (std::int64_t k = 0; k < classes; ++k) {
      double x = v[static_cast<std::size_t>((n * classes + k) * inner + i)];
      mx = std::max(mx, x);
      sum += x;
      in01 &= x >= 0 && x <= 1;
      nonpos &= x <= 1e-6;
    }
    double lse = 0;
    for (std::int64_t k = 0; k < classes; ++k)
      lse += std::exp(v[static_cast<std::size_t>((n * classes + k) * inner + i)] - mx);
    lse = mx + std::log(lse);
    not_logp += !(nonpos && std::fabs(lse) < 1e-3);
    probs += in01 && std::fabs(sum - 1) < 1e-3;
  }
  if (loss == LossKind::NLL && not_logp > 0)
    c.definite.push_back(loss_diagnosis(
        "nll on outputs that are not log-probabilities", prod,
        swap_loss("cross_entropy", "the output is logits"),
        fmt::format("nll takes log-probabilities (rows with log-sum-exp 0), and {} of {} rows of "
                    "the model's output on the first batch are not",
                    not_logp, rows)));
  if (loss == LossKind::CrossEntropy && classes >= 2 && probs == rows)
    c.definite.push_back(loss_diagnosis(
        "cross_entropy on probabilities", prod, Fix{},
        fmt::format("every row of the model's output on the first batch is a probability "
                    "distribution (values in [0, 1] summing to 1), and cross_entropy applies "
                    "its own softmax to them")));
}

}  // namespace metaop
