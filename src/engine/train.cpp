#include "engine/train.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace metaop {

const char* const kLossOutput = "metaop_loss";
const char* const kLabelsInput = "metaop_labels";

LossKind parse_loss(const std::string& s) {
  if (s == "mse") return LossKind::MSE;
  if (s == "cross_entropy") return LossKind::CrossEntropy;
  if (s == "nll") return LossKind::NLL;
  if (s == "bce") return LossKind::BCE;
  if (s == "bce_with_logits") return LossKind::BCEWithLogits;
  if (s == "output") return LossKind::Output;
  fail("--loss {}: expected mse, cross_entropy, nll, bce, bce_with_logits or output", s);
}

namespace {

ValueInfo tensor_value(const std::string& name, DType t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.onnx_elem_type = dtype_to_onnx(t);
  return v;
}

// Labels that the loss can take, next to the model's output y of dtype dt.
void check_labels(const Graph& g, LossKind kind, DType labels_dtype, const ValueInfo& y, DType dt) {
  bool class_labels = kind == LossKind::CrossEntropy || kind == LossKind::NLL;
  if (class_labels && labels_dtype != DType::Int64 && labels_dtype != DType::Int32)
    fail("labels are {}: cross_entropy and nll take integer class labels",
         dtype_name(labels_dtype));
  if (!class_labels && labels_dtype != dt)
    fail("labels are {} but the model's output '{}' is {}", dtype_name(labels_dtype), y.name,
         dtype_name(dt));
  if (class_labels && g.opset < 12)
    fail("{}: opset {} has no {} (needs opset 12)", g.path, g.opset,
         kind == LossKind::NLL ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss");
}

// The loss's nodes, from output o (of dtype dt) and the labels to kLossOutput, appended to h
// (named "metaop_loss/<op>_<k>").
void add_loss_nodes(Graph& h, LossKind kind, const std::string& o, DType dt) {
  int k = 0;
  auto add = [&](const std::string& op, std::vector<std::string> ins, const std::string& out,
                 std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.name = fmt::format("metaop_loss/{}_{}", op, k++);
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    h.nodes.push_back(std::move(n));
    return out;
  };
  std::string l = kLabelsInput, L = kLossOutput;
  std::map<std::string, Attribute> mean{{"keepdims", Attribute::of_int(0)}};
  Attribute red;
  red.kind = Attribute::Kind::String;
  red.s = "mean";
  switch (kind) {
    case LossKind::CrossEntropy:
      add("SoftmaxCrossEntropyLoss", {o, l}, L, {{"reduction", red}});
      break;
    case LossKind::NLL:
      add("NegativeLogLikelihoodLoss", {o, l}, L, {{"reduction", red}});
      break;
    case LossKind::MSE: {
      auto d = add("Sub", {o, l}, "metaop_loss/diff");
      auto sq = add("Mul", {d, d}, "metaop_loss/square");
      add("ReduceMean", {sq}, L, mean);
      break;
    }
    case LossKind::BCEWithLogits: {
      // softplus(x) - x y: the stable form of -(y log s(x) + (1 - y) log(1 - s(x))).
      auto sp = add("Softplus", {o}, "metaop_loss/softplus");
      auto xy = add("Mul", {o, l}, "metaop_loss/xy");
      auto d = add("Sub", {sp, xy}, "metaop_loss/terms");
      add("ReduceMean", {d}, L, mean);
      break;
    }
    case LossKind::BCE: {
      h.initializers["metaop_loss/one"] = Tensor::scalar(1.0, dt);
      auto lp = add("Log", {o}, "metaop_loss/log_p");
      auto q = add("Sub", {"metaop_loss/one", o}, "metaop_loss/q");
      auto lq = add("Log", {q}, "metaop_loss/log_q");
      auto ny = add("Sub", {"metaop_loss/one", l}, "metaop_loss/not_y");
      auto a = add("Mul", {l, lp}, "metaop_loss/a");
      auto b = add("Mul", {ny, lq}, "metaop_loss/b");
      auto s = add("Add", {a, b}, "metaop_loss/sum");
      auto m = add("ReduceMean", {s}, "metaop_loss/mean", mean);
      add("Neg", {m}, L);
      break;
    }
    case LossKind::Output:
      break;
  }
}

}  // namespace

Graph with_loss(const Graph& g, LossKind kind, DType labels_dtype) {
  if (g.outputs.empty()) fail("{}: the model has no output", g.path);
  Graph h = g;
  const ValueInfo& y = g.outputs[0];
  DType dt = y.dtype.value_or(DType::Float32);
  if (!is_floating(dt))
    fail("{}: output '{}' is {}, not floating point", g.path, y.name, dtype_name(dt));
  h.outputs = {tensor_value(kLossOutput, dt)};
  if (kind == LossKind::Output) {
    Node n;
    n.name = "metaop_loss/identity";
    n.op_type = "Identity";
    n.inputs = {y.name};
    n.outputs = {kLossOutput};
    h.nodes.push_back(n);
    return h;
  }
  check_labels(g, kind, labels_dtype, y, dt);
  h.inputs.push_back(tensor_value(kLabelsInput, labels_dtype));
  add_loss_nodes(h, kind, y.name, dt);
  return h;
}

void update_running_stats(Graph& g, const RunResult& forward) {
  // The (output, input) pairs each op's training mode writes back (ops/manifest.h), where the
  // node has every such output.
  for (const auto& n : g.nodes) {
    const MetaOp* op = OpRegistry::instance().find(n.op_type);
    if (!op || op->training.state.empty()) continue;
    std::size_t last = 0;
    for (const auto& [o, i] : op->training.state) last = std::max(last, o);
    if (n.outputs.size() <= last) continue;
    for (const auto& [o, i] : op->training.state) {
      const std::string& stat = n.inputs.at(i);
      auto v = forward.values.find(n.outputs[o]);
      if (n.outputs[o].empty() || v == forward.values.end() || !g.initializers.count(stat))
        continue;
      g.initializers[stat] = v->second;
    }
  }
}

// Rows `rows` of x (along axis 0), copied bytewise.
Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& rows) {
  std::int64_t per = x.dim(0) ? x.numel() / x.dim(0) : 0;
  std::vector<std::int64_t> idx;
  idx.reserve(rows.size() * static_cast<std::size_t>(per));
  for (auto r : rows)
    for (std::int64_t j = 0; j < per; ++j) idx.push_back(r * per + j);
  Shape s = x.shape();
  s[0] = static_cast<std::int64_t>(rows.size());
  return take(x, s, idx);
}

std::vector<const NodeProfile*> slowest(const std::vector<NodeProfile>& profile, std::size_t n) {
  std::vector<const NodeProfile*> out;
  out.reserve(profile.size());
  for (const auto& p : profile) out.push_back(&p);
  std::stable_sort(out.begin(), out.end(), [](const NodeProfile* x, const NodeProfile* y) {
    return x->forward_seconds + x->backward_seconds > y->forward_seconds + y->backward_seconds;
  });
  out.resize(std::min(out.size(), n));
  return out;
}

std::vector<std::string> weights_named(const Graph& g, const std::vector<std::string>& trainable,
                                       const std::string& target) {
  std::set<std::string> hit;
  for (const auto& w : trainable)
    if (w == target) hit.insert(w);
  for (const auto& n : g.nodes)
    if (n.name == target || n.op_type == target)
      for (const auto& i : n.inputs)
        if (std::find(trainable.begin(), trainable.end(), i) != trainable.end()) hit.insert(i);
  return {hit.begin(), hit.end()};
}

std::string LrSchedule::text() const {
  if (kind == "step") return fmt::format("step:{}:{:g}", step, gamma);
  if (kind == "exp") return fmt::format("exp:{:g}", gamma);
  return kind;
}

LrSchedule parse_lr_schedule(const std::string& s) {
  LrSchedule r;
  auto bad = [&](const char* why) {
    fail("--lr-schedule {}: {} (step:EPOCHS:GAMMA, exp:GAMMA, cosine or none)", s, why);
  };
  auto number = [&](const std::string& v) {
    try {
      std::size_t used = 0;
      double x = std::stod(v, &used);
      if (used != v.size()) bad("not a number");
      return x;
    } catch (const std::logic_error&) {
      bad("not a number");
    }
    return 0.0;
  };
  std::vector<std::string> parts;
  for (std::size_t from = 0;;) {
    std::size_t to = s.find(':', from);
    parts.push_back(s.substr(from, to == std::string::npos ? std::string::npos : to - from));
    if (to == std::string::npos) break;
    from = to + 1;
  }
  r.kind = parts.empty() ? "" : parts[0];
  if (r.kind == "none" || r.kind == "cosine") {
    if (parts.size() != 1) bad("takes no parameters");
  } else if (r.kind == "step") {
    if (parts.size() != 3) bad("step takes EPOCHS and GAMMA");
    double n = number(parts[1]);
    if (!(n >= 1) || n != std::floor(n) || n > 1e6) bad("EPOCHS must be a whole number from 1");
    r.step = static_cast<int>(n);
    r.gamma = number(parts[2]);
  } else if (r.kind == "exp") {
    if (parts.size() != 2) bad("exp takes GAMMA");
    r.gamma = number(parts[1]);
  } else {
    bad("unknown schedule");
  }
  if ((r.kind == "step" || r.kind == "exp") && !(r.gamma > 0 && std::isfinite(r.gamma)))
    bad("GAMMA must be above 0");
  return r;
}

double scheduled_lr(const LrSchedule& s, double lr, int epoch, int epochs) {
  if (s.kind == "step") return lr * std::pow(s.gamma, epoch / s.step);
  if (s.kind == "exp") return lr * std::pow(s.gamma, epoch);
  if (s.kind == "cosine") {
    const double pi = std::acos(-1.0);
    return lr * (1 + std::cos(pi * epoch / std::max(epochs, 1))) / 2;
  }
  return lr;
}

std::vector<std::string> trained_weights(const Graph& g, const TrainConfig& config,
                                         std::vector<std::string>* frozen) {
  auto all = trainable_initializers(g);
  std::set<std::string> cold;
  for (const auto& f : config.frozen) {
    auto hit = weights_named(g, all, f);
    if (hit.empty())
      fail("--freeze {}: names no trainable weight, node or op type of {}", f, g.path);
    cold.insert(hit.begin(), hit.end());
  }
  std::vector<std::string> warm;
  for (const auto& w : all)
    if (!cold.count(w)) warm.push_back(w);
  if (frozen) *frozen = {cold.begin(), cold.end()};
  return warm;
}

namespace {

// The update kernels of a run, one per binding, made on first use (by the config's factory, when
// it has one).
class UpdateKernels {
 public:
  UpdateKernels(const Graph& g, const TrainConfig& c, const std::vector<std::string>& trainable)
      : c_(c) {
    for (const auto& [w, b] : c.update_bind) {
      if (std::find(trainable.begin(), trainable.end(), w) == trainable.end())
        fail("update binding for '{}': not a trainable weight of {}", w, g.path);
      if (!has_update_kernel(b))
        fail("update binding '{}' for weight '{}': no optimizer (update kernels: {})", b, w,
             fmt::join(update_binding_names(), ", "));
    }
    if (!has_update_kernel(c.update_binding))
      fail("update binding '{}': no optimizer (update kernels: {})", c.update_binding,
           fmt::join(update_binding_names(), ", "));
  }
  const OptimizerConfig& optimizer() const { return opt_; }
  // A new learning rate (a schedule's next epoch): each kernel made so far is made again with
  // it and given its predecessor's state of every weight (`t`: the steps taken), as a
  // scheduler's change of the optimizer's lr leaves its state alone.
  void set_lr(double lr, const std::vector<std::string>& weights, long t) {
    if (lr == opt_.lr) return;
    opt_.lr = lr;
    for (auto& [b, k] : kernels_) {
      auto next = make(b);
      for (const auto& w : weights) {
        if (binding_of(w) != b) continue;
        try {
          if (Tensors st = k->state(w); !st.empty()) next->set_state(w, t, st);
        } catch (const Crash&) {
          // A kernel that crashed has no state to hand on: the weight starts the next epoch
          // afresh, as after a crash within one (step_or_reference).
        }
      }
      k = next;
    }
  }
  const std::string& binding_of(const std::string& weight) const {
    auto it = c_.update_bind.find(weight);
    return it == c_.update_bind.end() ? c_.update_binding : it->second;
  }
  UpdateKernel& of(const std::string& weight) {
    const std::string& b = binding_of(weight);
    auto& k = kernels_[b];
    if (!k) k = make(b);
    return *k;
  }

 private:
  std::shared_ptr<UpdateKernel> make(const std::string& b) const {
    return c_.make_update ? c_.make_update(b, opt_)
                          : std::shared_ptr<UpdateKernel>(make_update_kernel(b, opt_));
  }
  const TrainConfig& c_;
  OptimizerConfig opt_ = c_.optimizer;
  std::map<std::string, std::shared_ptr<UpdateKernel>> kernels_;
};

// Data and labels that training can take: as many samples of each, labels that fit the loss,
// and a batch size and epoch count of at least 1.
void check_training_data(const Graph& g, const Tensor& X, const Tensor& Y,
                         const TrainConfig& config) {
  if (g.inputs.size() != 1)
    fail("{}: training feeds one model input, the model has {}", g.path, g.inputs.size());
  if (X.rank() < 1 || Y.rank() < 1 || X.dim(0) != Y.dim(0))
    fail("data {} and labels {} must have the same number of samples (first dim)",
         shape_str(X.shape()), shape_str(Y.shape()));
  if (X.dim(0) == 0)
    fail("the data {} holds no samples (its first dim is 0)", shape_str(X.shape()));
  if (config.loss == LossKind::CrossEntropy || config.loss == LossKind::NLL) {
    // One class index per sample (and per extra spatial position of the scores).
    const auto& dims = g.outputs.empty() ? std::nullopt : g.outputs[0].dims;
    std::int64_t want = dims ? static_cast<std::int64_t>(dims->size()) - 1 : 1;
    if (Y.rank() != want)
      fail(
          "labels {}: {} takes one class index per sample, shape [N{}] for the model's output "
          "of rank {}",
          shape_str(Y.shape()), config.loss == LossKind::NLL ? "nll" : "cross_entropy",
          want > 1 ? ", ..." : "", want + 1);
  }
  if (config.batch_size < 1) fail("--batch-size {}: must be at least 1", config.batch_size);
  if (config.epochs < 1) fail("--epochs {}: must be at least 1", config.epochs);
}

// Ops that draw random numbers in training mode (Dropout's mask; ops/manifest.h) run on the
// reference with a per-step, per-node seed: every plan drops the same elements, so runs stay
// comparable.
void seed_dropout(Graph& h, Plan& plan, std::uint64_t seed, std::size_t step) {
  for (std::size_t k = 0; k < h.nodes.size(); ++k)
    if (const MetaOp* op = OpRegistry::instance().find(h.nodes[k].op_type);
        op && op->training.random) {
      h.nodes[k].attrs["metaop_dropout_seed"] =
          Attribute::of_int(static_cast<std::int64_t>(seed * 1000003 + (step + 1) * 7919 + k));
      plan.bind_op(h.nodes[k].name, "reference");
    }
}

// Each node's time, peak heap and binding of one step, forward and backward.
void add_to_profile(std::vector<NodeProfile>& profile, const RunResult& f,
                    const BackwardResult& b) {
  for (const auto& rec : f.records) {
    auto& p = profile[rec.node];
    p.forward_seconds += rec.seconds;
    p.forward_peak = std::max(p.forward_peak, rec.heap_peak);
    p.forward_binding = rec.binding;
  }
  for (const auto& rec : b.records) {
    auto& p = profile[rec.node];
    p.backward_seconds += rec.seconds;
    p.backward_peak = std::max(p.backward_peak, rec.heap_peak);
    p.backward_binding = rec.binding;
  }
}

// Step t of `name` on its kernel; when the kernel crashes or hangs (in its worker process), on
// the reference from the kernel's last state instead, and the kernel is given the reference's
// state after the step, so that the run goes on (`call` says what happened).
Tensor step_or_reference(UpdateKernel& k, const OptimizerConfig& opt, long t, const Tensor& w,
                         const Tensor& grad, UpdateCall& call) {
  const std::string& name = call.weight;
  try {
    return k.step(name, t, w, grad);
  } catch (const Crash& e) {
    call.crash = e.what();
    call.hang = dynamic_cast<const Hang*>(&e) != nullptr;
  }
  Tensors before = k.state(name);
  ReferenceUpdate ref(opt);
  ref.set_state(name, t - 1, before);
  Tensor nw = ref.step(name, t, w, grad);
  Tensors after = ref.state(name);
  DType state_dtype = before.empty() ? w.dtype() : before[0].dtype();
  for (auto& s : after) s = s.to(state_dtype);
  try {
    k.set_state(name, t, after);
  } catch (const Crash&) {
    // Its state is then the one before the step: the next step's problem, found there.
  }
  return nw;
}

// Step `step` (counted from 1) of the optimizer on every weight that has a gradient; returns
// the weights before it when the config's on_step wants them (handles, no copies). On a
// watched step, on_update sees each weight's update with the kernel's state around it.
std::map<std::string, Tensor> update_weights(Graph& h, const BackwardResult& b,
                                             UpdateKernels& kernels, const TrainConfig& config,
                                             std::size_t step, bool watched) {
  long t = static_cast<long>(step);
  std::map<std::string, Tensor> previous;
  for (const auto& [name, grad] : b.grads) {
    UpdateKernel& k = kernels.of(name);
    Tensor& w = h.initializers.at(name);
    if (config.on_step) previous[name] = w;
    UpdateCall call;
    call.weight = name;
    call.binding = k.name();
    call.t = t;
    call.optimizer = &kernels.optimizer();
    if (!(watched && config.on_update)) {
      w = step_or_reference(k, kernels.optimizer(), t, w, grad, call);
      continue;
    }
    Tensors before_state = k.state(name);
    Tensor before = w;
    w = step_or_reference(k, kernels.optimizer(), t, w, grad, call);
    Tensors after_state = k.state(name);
    call.before = &before;
    call.grad = &grad;
    call.after = &w;
    call.state_before = &before_state;
    call.state_after = &after_state;
    config.on_update(step, call);
  }
  return previous;
}

}  // namespace

TrainResult train(const Graph& g, const Tensor& X, const Tensor& Y, Plan& plan,
                  const TrainConfig& config) {
  check_training_data(g, X, Y, config);
  Graph h = with_loss(g, config.loss, Y.dtype());
  TrainResult res;
  res.trainable = trained_weights(g, config, &res.frozen);
  if (res.trainable.empty())
    fail("{}: the model has no trainable (float) initializer{}", g.path,
         res.frozen.empty() ? "" : " that --freeze leaves to train");
  std::set<std::string> wrt(res.trainable.begin(), res.trainable.end());
  validate(config.optimizer);
  UpdateKernels kernels(g, config, res.trainable);
  std::int64_t N = X.dim(0);
  std::size_t steps_per_epoch =
      static_cast<std::size_t>((N + config.batch_size - 1) / config.batch_size);
  std::size_t total = steps_per_epoch * static_cast<std::size_t>(config.epochs), step = 0;
  bool stopped = false;
  RunOptions keep;
  keep.keep_all = true;
  res.profile.reserve(h.nodes.size());
  for (const auto& n : h.nodes) res.profile.push_back({n.name, n.op_type, 0, 0, 0, 0, "", ""});
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    kernels.set_lr(scheduled_lr(config.schedule, config.optimizer.lr, epoch, config.epochs),
                   res.trainable, static_cast<long>(step));
    std::vector<std::int64_t> order(static_cast<std::size_t>(N));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(config.seed + static_cast<std::uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
    for (std::int64_t start = 0; start < N; start += config.batch_size) {
      std::vector<std::int64_t> rows(order.begin() + start,
                                     order.begin() + std::min(N, start + config.batch_size));
      std::map<std::string, Tensor> inputs{{g.inputs[0].name, take_rows(X, rows)}};
      if (config.loss != LossKind::Output) inputs[kLabelsInput] = take_rows(Y, rows);
      validate_inputs(h, inputs);
      seed_dropout(h, plan, config.seed, step);
      auto t0 = std::chrono::steady_clock::now();
      RunResult f = run_graph(h, inputs, plan, keep);
      bool watched = config.watch && config.watch(step + 1);
      if (watched && config.on_forward) config.on_forward(step + 1, h, f);
      const Tensor& loss = f.outputs.at(kLossOutput);
      if (loss.numel() != 1)
        fail("{}: the loss has shape {}; training needs a scalar", g.path, shape_str(loss.shape()));
      double lv = loss.to_f64()[0];
      res.losses.push_back(lv);
      BackwardObserver observe;
      if (watched && config.on_backward)
        observe = [&](const Node& n, const Tensors& ins, const Tensors& outs, const Tensors& gs,
                      const Tensors& gin, const NodeRecord& rec) {
          config.on_backward(step + 1, n, ins, outs, gs, gin, rec);
        };
      BackwardResult b =
          run_backward(h, f, {{kLossOutput, Tensor::from_f64({1.0}, loss.shape(), loss.dtype())}},
                       plan, wrt, observe);
      update_running_stats(h, f);
      add_to_profile(res.profile, f, b);
      std::map<std::string, Tensor> previous =
          update_weights(h, b, kernels, config, step + 1, watched);
      bool go_on = !config.on_step || config.on_step({step + 1, total, lv, &h, &f, &b.grads,
                                                      &previous, &h.initializers});
      // Forward, backward and update (and, on checked steps, the checks; the monitor's time).
      res.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (config.after_step) config.after_step(step + 1, h.initializers);
      ++step;
      if (config.progress) config.progress(step, total, lv);
      if (!go_on) {
        stopped = true;
        break;
      }
    }
    if (stopped) break;
  }
  // Trained weights and the running statistics training mode updated.
  for (const auto& [name, t] : g.initializers) res.weights[name] = h.initializers.at(name);
  for (const auto& w : res.trainable) res.update_bindings[w] = kernels.binding_of(w);
  return res;
}

}  // namespace metaop
