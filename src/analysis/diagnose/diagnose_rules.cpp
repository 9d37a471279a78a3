#include "analysis/diagnose/diagnose_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "analysis/diagnose/diagnose_static.h"

namespace metaop {

// An SGD momentum at or above this (and below 1, which has its own rule) makes the effective step
// lr / (1 - momentum) twenty times the learning rate or more.
constexpr double kMomentumHigh = 0.95;

// Weight decays at or above these (L2 in the gradient: sgd, adam; decoupled: adamw) pull the
// weights to zero faster than the data's gradients pull them away; regression targets this many
// times off unit scale (either way) make MSE's gradients off scale.
constexpr double kWeightDecayHigh = 0.1, kWeightDecayHighDecoupled = 1, kTargetScaleOff = 100;

// A batch at or below which a step's gradient is the noise of a sample or two, and what a repair
// of too few updates aims at over the run's epochs (kUsualBatch, kFewUpdates: diagnose_monitor.h).
constexpr std::int64_t kTinyBatch = 2;
constexpr std::int64_t kEnoughUpdates = 256;

std::string symptom_label(const Symptom& s) {
  return s.node.empty() ? s.kind : s.kind + "@" + s.node;
}

bool explains(const Diagnosis& d, const std::string& label) {
  for (const auto& s : d.symptoms)
    if (s.rfind(label, 0) == 0) return true;
  return false;
}

void supersede_fallbacks(std::vector<Diagnosis>& list, const Diagnosis& found) {
  for (auto& x : list)
    if (x.score <= 0.4 && !x.definite)
      std::erase_if(x.symptoms, [&](const std::string& l) {
        return std::find(found.symptoms.begin(), found.symptoms.end(), l) != found.symptoms.end();
      });
  std::erase_if(list, [](const Diagnosis& x) { return !x.definite && x.symptoms.empty(); });
}

Diagnosis initialization_diagnosis(const LayerInit& l, double score, std::string evidence) {
  Diagnosis d;
  d.category = "initialization";
  d.node = l.node;
  d.op_type = l.op_type;
  d.weight = l.weight;
  d.score = score;
  d.evidence = std::move(evidence);
  d.fix.kind = "reinitialize";
  d.fix.node = l.node;
  d.fix.init = l.activation == "Relu" || l.activation == "LeakyRelu" ? "he" : "xavier";
  d.fix.description =
      fmt::format("{} re-initialization of '{}'{}", d.fix.init == "he" ? "He" : "Xavier", l.weight,
                  l.bias.empty() ? "" : " and its bias '" + l.bias + "' zeroed");
  return d;
}

namespace {

bool is_loss_node(const std::string& node) {
  return node.rfind("metaop_loss/", 0) == 0;
}

// Ops whose output leaves the finite range on valid-looking inputs (a domain or an overflow).
bool domain_op(const std::string& op) {
  return op == "Log" || op == "Sqrt" || op == "Div" || op == "Pow" || op == "Reciprocal" ||
         op == "Exp";
}

class Rules {
 public:
  Rules(const Graph& g, const StaticChecks& c, const MonitorRecord& r, const OptimizerConfig& o,
        const DiagnoseThresholds& t)
      : g_(g), c_(c), r_(r), o_(o), t_(t) {}

  std::vector<Diagnosis> run() {
    for (auto d : c_.definite) {
      d.definite = true;
      list_.push_back(std::move(d));
    }
    for (const auto& s : r_.symptoms) symptom(s);
    // A loss that stops falling in a run with dead, saturated or vanishing units is explained
    // by their causes.
    for (const auto& s : r_.symptoms)
      if ((s.kind == "stagnant_loss" || s.kind == "slow_convergence" || s.kind == "chance_level") &&
          stalled_units())
        attach(s, {"dead_relu", "saturation", "vanishing_gradient"});
    // A run that diverged ends at chance level because it diverged, and its loss that rose
    // (a negative gain) is no slow convergence.
    for (const auto& s : r_.symptoms)
      if (rose_with_divergence(s))
        attach(s, {"exploding_loss", "nonfinite_loss", "nonfinite_activation", "exploding_gradient",
                   "oscillating_loss"});
    std::stable_sort(list_.begin(), list_.end(),
                     [](const Diagnosis& a, const Diagnosis& b) { return a.score > b.score; });
    return list_;
  }

 private:
  // Large updates say less about the learning rate when the inputs or the initial weights are
  // off scale: those make the gradients large by themselves.
  bool confounded() const {
    return !c_.off_scale.empty() || abnormal_layer(true) != nullptr ||
           !compounding_layers().empty() || targets_off_scale();
  }
  // Adds symptom `s` to the diagnoses whose first symptom is of one of `kinds`.
  void attach(const Symptom& s, const std::vector<std::string>& kinds) {
    for (auto& d : list_) {
      if (d.definite || d.symptoms.empty() || explains(d, symptom_label(s))) continue;
      for (const auto& k : kinds)
        if (d.symptoms[0].rfind(k, 0) == 0) {
          d.symptoms.push_back(symptom_label(s));
          break;
        }
    }
  }
  // Steps too large: the loss or the gradients left their range, or the loss swings.
  bool diverged() const {
    return r_.has("exploding_loss") || r_.has("nonfinite_loss") || r_.has("nonfinite_activation") ||
           r_.has("exploding_gradient") || r_.has("oscillating_loss");
  }
  bool rose_with_divergence(const Symptom& s) const {
    return (s.kind == "chance_level" || (s.kind == "slow_convergence" && s.value < 0)) &&
           diverged();
  }
  bool stalled_units() const {
    return r_.has("dead_relu") || r_.has("saturation") || r_.has("vanishing_gradient");
  }
  static std::string key(const Diagnosis& d) {
    return d.category + "|" + d.hyperparameter + "|" + d.node + "|" + d.input + "|" + d.loss + "|" +
           d.fix.kind + "|" + (d.fix.factor < 1 ? "down" : "up");
  }
  // Adds a cause of symptom `s`, or strengthens the same cause found for another symptom.
  void add(Diagnosis d, const Symptom& s) {
    std::string label = symptom_label(s);
    for (auto& o : list_)
      if (key(o) == key(d)) {
        if (!explains(o, label)) o.symptoms.push_back(label);
        if (d.score > o.score) {
          o.score = d.score;
          o.evidence = d.evidence + "; " + o.evidence;
        }
        return;
      }
    d.symptoms.push_back(label);
    list_.push_back(std::move(d));
  }

  const LayerInit* layer(const std::string& node) const {
    for (const auto& l : c_.layers)
      if (l.node == node) return &l;
    return nullptr;
  }
  std::size_t index_of(const std::string& node) const {
    for (std::size_t k = 0; k < g_.nodes.size(); ++k)
      if (g_.nodes[k].name == node) return k;
    return SIZE_MAX;
  }
  // The layer with the most abnormal initial gain: too large (`large`) or too small.
  const LayerInit* abnormal_layer(bool large) const {
    const LayerInit* worst = nullptr;
    for (const auto& l : c_.layers) {
      bool off = large ? l.gain > kGainHigh : l.gain < kGainLow;
      if (off && (!worst || (large ? l.gain > worst->gain : l.gain < worst->gain))) worst = &l;
    }
    return worst;
  }
  // The product of the layers' gains, each over sqrt 2 before a Relu or LeakyRelu: how much a
  // deep stack scales its input at the initial weights (about 1 under He's initialization).
  double compounded_gain() const {
    double p = 1;
    for (const auto& l : c_.layers)
      p *= l.activation == "Relu" || l.activation == "LeakyRelu" ? l.gain / std::sqrt(2.0) : l.gain;
    return p;
  }
  // The layers above kGainCompound, in graph order, when their stack starts the outputs far
  // off scale (kCompoundHigh, kFirstLossHigh) and no layer is abnormal by itself; else none.
  std::vector<const LayerInit*> compounding_layers() const {
    std::vector<const LayerInit*> out;
    if (abnormal_layer(true) || r_.losses.empty() || !(r_.trivial_loss > 0) ||
        !(r_.losses.front() >= kFirstLossHigh * r_.trivial_loss) ||
        compounded_gain() < kCompoundHigh)
      return out;
    for (const auto& l : c_.layers)
      if (l.gain > kGainCompound) out.push_back(&l);
    return out;
  }
  Diagnosis compounding_initialization(const std::vector<const LayerInit*>& ls) const {
    const LayerInit& l = *ls.front();
    double largest = 0;
    for (const LayerInit* x : ls) largest = std::max(largest, x->gain);
    Diagnosis d = initialization(
        l, 0.8,
        fmt::format("the first step's loss, at the initial weights, is {:.3g} times the trivial "
                    "predictor's {:.4g}: the outputs start far off scale. {} layer(s) from '{}' on "
                    "have initial gains above {:g} (up to {:.3g}; each within the per-layer "
                    "bound {:g}), and the stack's gains compound to {:.3g}x (each layer's gain "
                    "std*sqrt(fan_in), over sqrt 2 before a Relu, multiplied: He's "
                    "initialization keeps that product at 1)",
                    r_.losses.front() / r_.trivial_loss, r_.trivial_loss, ls.size(), l.node,
                    kGainCompound, largest, kGainHigh, compounded_gain()));
    for (std::size_t k = 1; k < ls.size(); ++k) d.fix.also.push_back(ls[k]->node);
    return d;
  }

  // The update-to-weight ratio of the layers at step i (1-based): the median over the layers'
  // weights, so that one layer with tiny initial weights (whose ratio is huge) does not speak
  // for the learning rate.
  double layer_update_ratio(std::size_t i) const {
    std::vector<double> v;
    for (const auto& w : r_.weights)
      if (w.kernel && i - 1 < w.update_ratio.size() && std::isfinite(w.update_ratio[i - 1]))
        v.push_back(w.update_ratio[i - 1]);
    if (v.empty()) return NAN;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  // The largest of those at a step before `step`.
  double update_ratio_before(std::size_t step) const {
    double worst = 0;
    for (std::size_t i = 1; i < step && i <= r_.losses.size(); ++i)
      if (double x = layer_update_ratio(i); std::isfinite(x)) worst = std::max(worst, x);
    return worst;
  }
  // Their median over the run.
  double typical_update_ratio() const {
    std::vector<double> per_step;
    for (std::size_t i = 1; i <= r_.losses.size(); ++i)
      if (double x = layer_update_ratio(i); std::isfinite(x)) per_step.push_back(x);
    if (per_step.empty()) return NAN;
    std::nth_element(per_step.begin(),
                     per_step.begin() + static_cast<std::ptrdiff_t>(per_step.size() / 2),
                     per_step.end());
    return per_step[per_step.size() / 2];
  }
  double loss_rise_before(std::size_t step) const {
    double first = r_.losses.empty() ? NAN : r_.losses[0], worst = 0;
    for (std::size_t i = 1; i + 1 < step && i < r_.losses.size(); ++i)
      if (std::isfinite(r_.losses[i])) worst = std::max(worst, r_.losses[i] / first);
    return worst;
  }

  // The power of ten (at least 10) that brings an update-to-weight ratio to about 1e-3, the
  // usual value: the update grows with the learning rate for SGD and Adam alike.
  static double raise_factor(double ratio) {
    double e = std::round(std::log10(1e-3 / std::max(ratio, 1e-12)));
    return std::pow(10.0, std::clamp(e, 1.0, 6.0));
  }
  Diagnosis learning_rate(double factor, double score, std::string evidence) const {
    Diagnosis d = hyperparameter("learning_rate", score, std::move(evidence));
    d.fix.kind = "learning_rate";
    d.fix.factor = factor;
    d.fix.description = fmt::format("learning rate {:g} -> {:g}", o_.lr, o_.lr * factor);
    return d;
  }
  static Diagnosis initialization(const LayerInit& l, double score, std::string evidence) {
    return initialization_diagnosis(l, score, std::move(evidence));
  }
  // Inputs far off scale come before what they cause downstream (large updates, dead units):
  // 0.9 when a feature is 100x or more off, else `score`.
  Diagnosis data(double score, const std::string& why) const {
    if (c_.off_scale_factor >= 100) score = std::max(score, 0.9);
    Diagnosis d;
    d.category = "data";
    d.input = g_.inputs.empty() ? "input" : g_.inputs[0].name;
    d.features = c_.off_scale;
    d.score = score;
    d.evidence = why + ": " + c_.data_detail;
    d.fix.kind = "standardize";
    d.fix.description = "inputs standardized per feature (mean 0, standard deviation 1)";
    return d;
  }
  Diagnosis activation(const std::string& node, const std::string& op, double score,
                       std::string evidence, const std::string& to, bool every) const {
    Diagnosis d;
    d.category = "activation";
    d.node = node;
    d.op_type = op;
    d.score = score;
    d.evidence = std::move(evidence);
    if (!to.empty()) {
      d.fix.kind = "replace_op";
      d.fix.node = every ? "" : node;
      d.fix.from = op;
      d.fix.op_type = to;
      d.fix.description = every ? fmt::format("every hidden {} replaced by {}", op, to)
                                : fmt::format("'{}' ({}) replaced by {}", node, op, to);
      if (to == "Relu" && (op == "Sigmoid" || op == "Tanh")) {
        d.fix.init = "he";  // ReLU layers want He's initialization to keep the signal's scale
        d.fix.description += ", with He initialization of the layers feeding them";
      }
    }
    return d;
  }
  std::string gain_text(const LayerInit& l) const {
    return fmt::format(
        "initial weights of '{}' have gain std*sqrt(fan_in) = {:.3g} (fan_in {}; "
        "PyTorch's default 0.58, He 1.41; abnormal outside [{:g}, {:g}])",
        l.node, l.gain, l.fan_in, kGainLow, kGainHigh);
  }

  void symptom(const Symptom& s) {
    settings(s);
    if (s.kind == "dead_relu" || s.kind == "saturation") return activation_symptom(s);
    if (s.kind == "vanishing_gradient") return vanishing(s);
    if (s.kind == "stagnant_loss" || s.kind == "slow_convergence" || s.kind == "chance_level")
      return slow(s);
    if (s.kind == "oscillating_loss") return oscillation(s);
    if (s.kind == "few_updates") return few_updates(s);
    return divergence(s);
  }

  // Settings that explain a symptom whichever it is: a momentum of 1 or more (the steps grow
  // without bound), a weight decay that pulls the weights to zero faster than the data pull
  // them away (a loss that does not fall), regression targets far from unit scale (MSE's
  // gradients scale with them).
  void settings(const Symptom& s) {
    if (o_.kind == "sgd" && o_.momentum >= 1) {
      Diagnosis d = hyperparameter("momentum", 0.95,
                                   fmt::format("SGD momentum {:g} is at least 1: the momentum "
                                               "buffer sums every past gradient without decay and "
                                               "the steps grow without bound (usual: 0.9)",
                                               o_.momentum));
      d.fix.kind = "momentum";
      d.fix.factor = 0.9;
      d.fix.description = fmt::format("momentum {:g} -> 0.9", o_.momentum);
      add(std::move(d), s);
    }
    bool loss_stalls = s.kind == "stagnant_loss" || s.kind == "slow_convergence" ||
                       s.kind == "chance_level" || s.kind == "vanishing_gradient";
    double high = o_.kind == "adamw" ? kWeightDecayHighDecoupled : kWeightDecayHigh;
    if (loss_stalls && o_.weight_decay >= high) {
      double factor = std::pow(10.0, -std::floor(std::log10(o_.weight_decay)) - 4);
      std::string pull =
          o_.kind == "adam"
              ? fmt::format(
                    "it adds {:g} x w to every weight's gradient, which outweighs the "
                    "data's gradient wherever that is below {:g} x |w|",
                    o_.weight_decay, o_.weight_decay)
              : fmt::format("it shrinks every weight by lr x decay = {:.3g} of itself per step",
                            o_.lr * o_.weight_decay);
      Diagnosis d = hyperparameter(
          "weight_decay", 0.9,
          fmt::format("weight decay {:g} ({}) is {:g} or more: {}, and pulls the weights to 0 "
                      "faster than the data's gradients pull them away (usual: 1e-5 to 1e-3{})",
                      o_.weight_decay, o_.kind == "adamw" ? "decoupled" : "L2, in the gradient",
                      high, pull, o_.kind == "adamw" ? ", 0.01 to 0.1 for adamw" : ""));
      d.fix.kind = "weight_decay";
      d.fix.factor = factor;
      d.fix.description =
          fmt::format("weight decay {:g} -> {:g}", o_.weight_decay, o_.weight_decay * factor);
      add(std::move(d), s);
    }
    if (loss_stalls) schedule_and_freeze(s);
    if (targets_off_scale()) {
      Diagnosis d;
      d.category = "data";
      d.input = "labels";
      d.score = 0.9;
      d.evidence = fmt::format(
          "regression targets far from unit scale (a target column has mean {:.4g} and standard "
          "deviation {:.4g}): MSE's loss and gradients scale with them, so no learning rate "
          "suits every layer",
          c_.target_mean, c_.target_sd);
      d.fix.kind = "standardize_targets";
      d.fix.description = "targets standardized per column (mean 0, standard deviation 1)";
      add(std::move(d), s);
    }
  }
  // A learning-rate schedule that takes the rate to 1% of its start or below within the first
  // half of the run (a StepLR stepped every epoch, a gamma meant for every 30), and frozen
  // weights: both leave a loss that stops falling while nothing else looks wrong.
  void schedule_and_freeze(const Symptom& s) {
    if (r_.schedule.kind != "none" && r_.epochs > 1 && r_.lr > 0) {
      int fell = -1;
      for (int e = 0; e < r_.epochs && fell < 0; ++e)
        // (1% with a rounding's slack: 0.1 * 0.1 of a rate is not exactly 0.01 of it)
        if (scheduled_lr(r_.schedule, r_.lr, e, r_.epochs) <= 0.01 * r_.lr * (1 + 1e-9)) fell = e;
      if (fell >= 0 && 2 * fell <= r_.epochs) {
        Diagnosis d = hyperparameter(
            "lr_schedule", 0.9,
            fmt::format("the learning-rate schedule {} takes the rate from {:g} to {:.3g} by "
                        "epoch {} of {} and to {:.3g} in the last: the weights stop moving "
                        "while the loss is still high",
                        r_.schedule.text(), r_.lr,
                        scheduled_lr(r_.schedule, r_.lr, fell, r_.epochs), fell + 1, r_.epochs,
                        scheduled_lr(r_.schedule, r_.lr, r_.epochs - 1, r_.epochs)));
        d.fix.kind = "lr_schedule";
        d.fix.description = fmt::format("learning-rate schedule {} -> none", r_.schedule.text());
        add(std::move(d), s);
      }
    }
    if (!r_.frozen.empty()) {
      double frozen = 0, all = 0;
      for (const auto& w : trainable_initializers(g_)) {
        double n = static_cast<double>(g_.initializers.at(w).numel());
        all += n;
        if (std::find(r_.frozen.begin(), r_.frozen.end(), w) != r_.frozen.end()) frozen += n;
      }
      double share = all > 0 ? frozen / all : 0;
      Diagnosis d = hyperparameter(
          "freeze", 0.5 + 0.4 * share,
          fmt::format("--freeze leaves {} weight(s) untrained, {:.0f}% of the parameters ({}): "
                      "what they compute stays as initialized",
                      r_.frozen.size(), 100 * share, fmt::join(r_.frozen, ", ")));
      d.fix.kind = "unfreeze";
      d.fix.description = "every weight trained (no --freeze)";
      add(std::move(d), s);
    }
  }
  bool targets_off_scale() const {
    return c_.target_scale >= kTargetScaleOff ||
           (c_.target_scale > 0 && c_.target_scale <= 1 / kTargetScaleOff);
  }
  Diagnosis hyperparameter(const char* name, double score, std::string evidence) const {
    Diagnosis d;
    d.category = "hyperparameter";
    d.hyperparameter = name;
    d.score = score;
    d.evidence = std::move(evidence);
    return d;
  }

  // Static faults of the loss and the labels explain what they cause; those of the
  // architecture and the inputs (an output that cannot reach the labels, inputs that do not
  // determine them) explain a loss that stops falling, and inputs that do not determine the
  // labels gradients that vanish (once the model predicts the labels' frequencies, nothing is
  // left to learn). Returns whether one did.
  bool static_loss(const Symptom& s) {
    bool stall =
        s.kind == "stagnant_loss" || s.kind == "slow_convergence" || s.kind == "chance_level";
    bool any = false;
    for (auto& d : list_) {
      bool inputs = d.category == "data" && d.input != "labels" && d.features.empty();
      bool cause = d.category == "loss" || d.input == "labels" ||
                   (stall && (d.category == "architecture" || d.category == "initialization")) ||
                   (inputs && (stall || s.kind == "vanishing_gradient"));
      if (!d.definite || !cause) continue;
      if (!explains(d, symptom_label(s))) d.symptoms.push_back(symptom_label(s));
      any = true;
    }
    return any;
  }

  // A model of two or more layers with nothing between them but affine ops computes what one
  // layer would.
  void architecture(const Symptom& s) {
    if (c_.linear_layers.empty()) return;
    Diagnosis d;
    d.category = "architecture";
    d.node = c_.linear_layers.front();
    d.op_type = layer(d.node) ? layer(d.node)->op_type : "";
    d.score = 0.6;
    d.evidence = fmt::format(
        "the model's {} layers ({}) have no nonlinearity between them: it computes an affine "
        "function of its input, as one layer would, and cannot fit labels that are not linearly "
        "separable",
        c_.linear_layers.size(), fmt::join(c_.linear_layers, ", "));
    d.fix.kind = "insert_relu";
    d.fix.description = "a Relu after every layer but the last";
    add(std::move(d), s);
  }

  // Non-finite or exploding loss, gradients, activations.
  // A loss node without a static mismatch: bce's log of a probability rounded to 0 or 1.
  void sigmoid_rounding(const Symptom& s, const std::string& where) {
    std::size_t p = output_producer(g_);
    if (p == SIZE_MAX || g_.nodes[p].op_type != "Sigmoid" || where.find("log") == std::string::npos)
      return;
    Diagnosis d;
    d.category = "loss";
    d.loss = "bce on a Sigmoid output that rounds to 0 or 1";
    d.node = g_.nodes[p].name;
    d.op_type = "Sigmoid";
    d.score = 0.85;
    d.evidence = fmt::format(
        "the first non-finite value is in the loss's {}: bce takes the "
        "log of the Sigmoid's output, which float32 rounds to exactly 0 "
        "or 1 for inputs beyond about +-17",
        where);
    d.fix.kind = "remove_node";
    d.fix.node = d.node;
    d.fix.loss = "bce_with_logits";
    d.fix.description = "the Sigmoid '" + d.node +
                        "' removed and bce_with_logits (the "
                        "stable form) used";
    add(std::move(d), s);
  }

  // Where the first non-finite values appear (as DeepLocalize localizes): a cause of its own
  // for an op with a restricted domain, else only when nothing else explains the symptom.
  void nonfinite_site(const Symptom& s, const std::string& where) {
    std::size_t k = index_of(where);
    const std::string op = k == SIZE_MAX ? "" : g_.nodes[k].op_type;
    bool domain = domain_op(op);
    bool explained = false;
    for (const auto& d : list_) explained |= explains(d, symptom_label(s));
    if (explained && !domain) return;
    add(activation(where, op, domain ? 0.5 : 0.3,
                   fmt::format("the first non-finite values appear at {} ({}){}", where, op,
                               domain ? ", an op with a restricted domain or that overflows" : ""),
                   "", false),
        s);
  }

  void divergence(const Symptom& s) {
    const Symptom* nf = r_.first("nonfinite_activation");
    std::string where = s.kind == "nonfinite_activation" ? s.node : (nf ? nf->node : "");
    bool at_init = s.step == 1 || (s.kind == "exploding_gradient" && !r_.grad_ratio.empty() &&
                                   r_.grad_ratio[0] > t_.explode_ratio);
    if (static_loss(s) && (where.empty() || is_loss_node(where))) return;
    if (!at_init) tiny_batch(s);
    if (is_loss_node(where)) sigmoid_rounding(s, where);
    if (!c_.off_scale.empty())
      add(data(at_init ? 0.8 : 0.7,
               "input features far from unit scale make the first layer's "
               "outputs and gradients large"),
          s);
    if (const LayerInit* l = abnormal_layer(true)) {
      std::size_t at = index_of(where), li = index_of(l->node);
      double score = at != SIZE_MAX && li <= at ? 0.85 : 0.75;
      add(initialization(*l, score, gain_text(*l)), s);
    } else if (auto ls = compounding_layers(); !ls.empty()) {
      add(compounding_initialization(ls), s);
    }
    if (!at_init) {
      double ratio = update_ratio_before(s.step), rise = loss_rise_before(s.step);
      bool strong = ratio > t_.update_ratio_high || rise >= 2;
      add(learning_rate(
              0.1, strong ? (confounded() ? 0.55 : 0.7) : 0.45,
              fmt::format(
                  "the symptom follows {} update(s) (not present at the initial "
                  "weights); largest update-to-weight ratio of the layers before "
                  "it {:.3g} (high above {:g}){}",
                  s.step - 1, ratio, t_.update_ratio_high,
                  rise > 1 ? fmt::format(", loss up to {:.3g}x the first step's", rise) : "")),
          s);
    }
    if (!where.empty() && !is_loss_node(where)) nonfinite_site(s, where);
  }

  // A loss that swings from one epoch to the next: steps that overshoot, from a high SGD
  // momentum (which multiplies the step by 1 / (1 - momentum)) or a high learning rate.
  void oscillation(const Symptom& s) {
    if (static_loss(s)) return;
    tiny_batch(s);
    bool momentum = o_.kind == "sgd" && o_.momentum >= kMomentumHigh && o_.momentum < 1;
    if (momentum) {
      Diagnosis d = hyperparameter(
          "momentum", 0.8,
          fmt::format("SGD momentum {:g} carries {:g} of every past step into the next: the "
                      "effective step is lr / (1 - momentum) = {:.3g} x the learning rate, and "
                      "the weights swing past the minimum (usual: 0.9)",
                      o_.momentum, o_.momentum, 1 / (1 - o_.momentum)));
      d.fix.kind = "momentum";
      d.fix.factor = 0.9;
      d.fix.description = fmt::format("momentum {:g} -> 0.9", o_.momentum);
      add(std::move(d), s);
    }
    double typical = typical_update_ratio();
    bool large = std::isfinite(typical) && typical > t_.update_ratio_high;
    add(learning_rate(0.1, large && !confounded() ? 0.75 : (momentum ? 0.5 : 0.6),
                      fmt::format("the loss swings from one epoch to the next, as steps that "
                                  "overshoot make it; median update-to-weight ratio of a step "
                                  "{:.3g} (high above {:g})",
                                  typical, t_.update_ratio_high)),
        s);
  }

  Diagnosis batch_size(double score, std::int64_t to, std::string evidence) const {
    Diagnosis d = hyperparameter("batch_size", score, std::move(evidence));
    d.fix.kind = "batch_size";
    d.fix.factor = static_cast<double>(to);
    d.fix.description = fmt::format("batch size {} -> {}", r_.batch_size, to);
    return d;
  }
  // The batch that gives the run's epochs enough updates (kEnoughUpdates), within [8, 32].
  std::int64_t batch_for_updates() const {
    std::int64_t b = r_.samples * std::max(r_.epochs, 1) / kEnoughUpdates;
    return std::clamp<std::int64_t>(b, 8, kUsualBatch);
  }
  // Steps that diverge or swing after training started, in batches of one or two samples: each
  // step follows one or two samples' gradients, noise about sqrt(32 / batch) times a batch of
  // 32's, at a learning rate that suits larger batches. Ranked above the learning rate (whose
  // own cause stays beside it): a batch this small is itself the unusual setting.
  void tiny_batch(const Symptom& s) {
    if (r_.batch_size <= 0 || r_.batch_size > kTinyBatch || r_.samples < kBatchRuleSamples) return;
    add(batch_size(
            0.8, kUsualBatch,
            fmt::format(
                "batches of {} of the {} samples: every step follows the "
                "gradient of {} sample{}, about {:.2g} times noisier than "
                "a batch of {}'s, and the learning rate {:g} drives those "
                "noisy steps past the minimum (usual batches: 16 to 256)",
                r_.batch_size, r_.samples, r_.batch_size, r_.batch_size == 1 ? "" : "s",
                std::sqrt(static_cast<double>(kUsualBatch) / static_cast<double>(r_.batch_size)),
                kUsualBatch, o_.lr)),
        s);
  }
  // A loss that stops short after few updates because each epoch is one or two batches of most
  // of the data: the run made `total` steps in all, too few to reach a minimum, however long
  // it ran in epochs.
  void few_updates(const Symptom& s) {
    if (!few_updates_setting(r_.steps_per_epoch, r_.total, r_.batch_size, r_.samples)) return;
    std::int64_t to = batch_for_updates();
    add(batch_size(0.75, to,
                   fmt::format("batches of {} of the {} samples make {} update{} per epoch, {} "
                               "in the whole run of {} epochs: too few for the weights to reach "
                               "a minimum (batches of {} make {})",
                               r_.batch_size, r_.samples, r_.steps_per_epoch,
                               r_.steps_per_epoch == 1 ? "" : "s", r_.total, r_.epochs, to,
                               (r_.samples + to - 1) / to * std::max(r_.epochs, 1))),
        s);
  }

  void vanishing(const Symptom& s) {
    static_loss(s);
    if (const LayerInit* l = abnormal_layer(false))
      add(initialization(*l, 0.8,
                         gain_text(*l) + ": the signal and its gradient shrink through "
                                         "it"),
          s);
    // Saturating activations between the layers.
    std::size_t out = output_producer(g_);
    std::string first_hidden, op;
    std::size_t hidden = 0;
    for (std::size_t k = 0; k < g_.nodes.size(); ++k) {
      const auto& n = g_.nodes[k];
      if ((n.op_type == "Sigmoid" || n.op_type == "Tanh") && k != out) {
        if (first_hidden.empty()) {
          first_hidden = n.name;
          op = n.op_type;
        }
        ++hidden;
      }
    }
    if (!first_hidden.empty())
      add(activation(first_hidden, op, hidden > 1 ? 0.7 : 0.55,
                     fmt::format("{} hidden {} activation(s), whose derivative is at most {} "
                                 "and shrinks the gradient at every layer it passes",
                                 hidden, op, op == "Sigmoid" ? "0.25" : "1"),
                     "Relu", true),
          s);
    bool small = false;
    for (auto f : c_.off_scale)
      small |= std::hypot(c_.feature_mean[static_cast<std::size_t>(f)],
                          c_.feature_std[static_cast<std::size_t>(f)]) < 1;
    if (small)
      add(data(0.5, "input features of tiny scale make the first layer's gradient tiny"), s);
  }

  // Dead units or saturation already at the initial weights: the first layer's input, or the
  // initialization of the layer feeding the activation (`l`, if any); `share` on the first batch.
  void activation_at_init(const Symptom& s, const LayerInit* l, double share) {
    bool dead = s.kind == "dead_relu";
    if (l && l->first && !c_.off_scale.empty())
      add(data(0.8, fmt::format("{} at the initial weights, behind the first layer '{}', which "
                                "reads the input",
                                dead ? "dead units" : "saturation", l->node)),
          s);
    if (l) {
      bool off = l->gain > kGainHigh || (dead && l->gain < kGainLow) ||
                 (dead && l->activation == "Relu" && l->bias_mean < -0.5);
      add(initialization(
              *l, off ? 0.85 : 0.55,
              fmt::format("{:.0f}% {} on the first batch, before any update; {}{}", 100 * share,
                          dead ? "dead units" : "saturated values", gain_text(*l),
                          l->bias.empty() ? "" : fmt::format("; bias mean {:.3g}", l->bias_mean))),
          s);
    }
  }

  // Dead units or saturation that appear only after training started (`a`: the series, if any).
  void activation_after_updates(const Symptom& s, const LayerInit* l, const ActivationSeries* a) {
    bool dead = s.kind == "dead_relu";
    if (const LayerInit* big = abnormal_layer(true))
      add(initialization(*big, 0.7,
                         fmt::format("{} after large updates, which the abnormal initial weights "
                                     "of '{}' cause: {}",
                                     dead ? "dead units appear" : "saturation appears", big->node,
                                     gain_text(*big))),
          s);
    if (l && l->first && !c_.off_scale.empty())
      add(data(0.7, fmt::format("{} behind the first layer '{}', which reads the input",
                                dead ? "dead units" : "saturation", l->node)),
          s);
    double ratio = update_ratio_before(s.step);
    add(learning_rate(0.1, ratio > t_.update_ratio_high && !confounded() ? 0.8 : 0.6,
                      fmt::format("{} only after training started ({:.0f}% on the first batch); "
                                  "largest update-to-weight ratio before it {:.3g} (high above "
                                  "{:g})",
                                  dead ? "dead units appear" : "saturation appears",
                                  a && !a->per_step.empty() ? 100 * a->per_step[0] : 0.0, ratio,
                                  t_.update_ratio_high)),
        s);
  }

  void activation_symptom(const Symptom& s) {
    std::size_t k = index_of(s.node);
    const ActivationSeries* a = nullptr;
    for (const auto& x : r_.activations)
      if (x.node == s.node) a = &x;
    bool dead = s.kind == "dead_relu";
    double limit = dead ? t_.dead_fraction : t_.saturated_fraction;
    bool at_init = a && !a->per_step.empty() && a->per_step[0] >= limit;
    std::size_t li = k == SIZE_MAX ? SIZE_MAX : feeding_layer(g_, k);
    const LayerInit* l = li == SIZE_MAX ? nullptr : layer(g_.nodes[li].name);
    if (at_init)
      activation_at_init(s, l, a->per_step[0]);
    else
      activation_after_updates(s, l, a);
    bool output = k != SIZE_MAX && k == output_producer(g_);
    if (!output)
      add(activation(s.node, s.kind == "dead_relu" ? "Relu" : g_.nodes[k].op_type, 0.3,
                     dead ? "ReLU units whose input stays negative get no gradient and stay dead"
                          : "saturated units pass almost no gradient",
                     dead ? "LeakyRelu" : "Relu", false),
          s);
  }

  void slow(const Symptom& s) {
    if (static_loss(s) || stalled_units()) return;  // explained by those (run())
    if (rose_with_divergence(s)) return;            // by the divergence's causes (run())
    double typical = typical_update_ratio();
    if (std::isfinite(typical) && typical < 1e-3)
      add(learning_rate(raise_factor(typical), typical < t_.update_ratio_low ? 0.85 : 0.65,
                        fmt::format("the weights barely move: the median largest update-to-weight "
                                    "ratio of a step is {:.3g} (low below {:g}; about 1e-3 is "
                                    "usual)",
                                    typical, t_.update_ratio_low)),
          s);
    if (std::isfinite(typical) && typical > t_.update_ratio_high)
      add(learning_rate(0.1, 0.6,
                        fmt::format("the median largest update-to-weight ratio of a step is {:.3g} "
                                    "(high above {:g}): the steps overshoot",
                                    typical, t_.update_ratio_high)),
          s);
    few_updates(s);
    architecture(s);
    if (!c_.off_scale.empty()) add(data(0.5, "input features far from unit scale"), s);
    if (const LayerInit* l = abnormal_layer(true)) add(initialization(*l, 0.5, gain_text(*l)), s);
    if (const LayerInit* l = abnormal_layer(false)) add(initialization(*l, 0.5, gain_text(*l)), s);
    bool explained = false;
    for (const auto& d : list_) explained |= explains(d, symptom_label(s));
    if (!explained && std::isfinite(typical))
      add(learning_rate(10, 0.4,
                        fmt::format("nothing else explains it (the weights move: median update-to-"
                                    "weight ratio {:.3g}): the steps may be too small",
                                    typical)),
          s);
  }

  const Graph& g_;
  const StaticChecks& c_;
  const MonitorRecord& r_;
  const OptimizerConfig& o_;
  const DiagnoseThresholds& t_;
  std::vector<Diagnosis> list_;
};

}  // namespace

std::vector<Diagnosis> diagnose_causes(const Graph& g, const StaticChecks& checks,
                                       const MonitorRecord& run, const OptimizerConfig& optimizer,
                                       const DiagnoseThresholds& t) {
  return Rules(g, checks, run, optimizer, t).run();
}

}  // namespace metaop
