// metaop train: trains a model under a binding plan (forward and backward node by node).
#include <fmt/core.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "analysis/accuracy.h"
#include "analysis/train_check.h"
#include "bindings/fault_injection.h"
#include "cli/commands.h"
#include "cli/inputs.h"
#include "cli/plan_options.h"
#include "cli/process_options.h"
#include "engine/train.h"
#include "graph/onnx_io.h"
#include "ops/kernel_util.h"
#include "report/check_report.h"
#include "report/train_report.h"

namespace metaop::cli {

namespace {

struct TrainArgs {
  std::string model, data, labels, loss, hparams, json_file, save;
  TrainConfig config;
  std::string bind = "reference";
  std::vector<std::string> bind_ops;
  std::vector<std::string> bind_update;  // BINDING, or WEIGHT_NODE_OR_OP=BINDING
  int threads = 1;
  bool check = false;
  std::size_t check_every = 1;
  std::vector<std::string> inject;
  std::string compare;
  std::string report_dir, repro_dir;
  CLI::App* cmd = nullptr;
};

// Hyperparameters from a JSON object; flags given on the command line win.
void apply_hparams(TrainArgs& a) {
  if (a.hparams.empty()) return;
  std::ifstream f(a.hparams);
  if (!f) fail("--hparams {}: cannot open", a.hparams);
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    fail("--hparams {}: not JSON: {}", a.hparams, e.what());
  }
  auto& o = a.config.optimizer;
  static const std::set<std::string> known = {"optimizer",    "lr",         "momentum", "nesterov",
                                              "weight_decay", "beta1",      "beta2",    "eps",
                                              "epochs",       "batch_size", "seed"};
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k)) fail("--hparams {}: unknown key '{}'", a.hparams, k);
    if (a.cmd->count("--" + std::string(k == "batch_size"     ? "batch-size"
                                        : k == "weight_decay" ? "weight-decay"
                                                              : k)))
      continue;
    try {
      if (k == "optimizer") o.kind = v.get<std::string>();
      if (k == "lr") o.lr = v.get<double>();
      if (k == "momentum") o.momentum = v.get<double>();
      if (k == "nesterov") o.nesterov = v.get<bool>();
      if (k == "weight_decay") o.weight_decay = v.get<double>();
      if (k == "beta1") o.beta1 = v.get<double>();
      if (k == "beta2") o.beta2 = v.get<double>();
      if (k == "eps") o.eps = v.get<double>();
      if (k == "epochs") a.config.epochs = v.get<int>();
      if (k == "batch_size") a.config.batch_size = v.get<std::int64_t>();
      if (k == "seed") a.config.seed = v.get<std::uint64_t>();
    } catch (const std::exception& e) {
      fail("--hparams {}: key '{}': {}", a.hparams, k, e.what());
    }
  }
}

// The update kernels of a plan whose nodes run on `bind`: --bind-update's, else the binding's own
// optimizer when it has one, else the reference's rule.
void configure_update(TrainConfig& c, const Graph& g, const std::string& bind,
                      const std::vector<std::string>& specs) {
  c.update_binding = has_update_kernel(bind) ? bind : "reference";
  c.update_bind.clear();
  auto trainable = trainable_initializers(g);
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    std::string b = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (!has_update_kernel(b))
      fail("--bind-update '{}': '{}' has no optimizer (update kernels: {})", spec, b,
           fmt::join(update_binding_names(), ", "));
    if (eq == std::string::npos) {
      c.update_binding = b;
      continue;
    }
    auto ws = weights_named(g, trainable, spec.substr(0, eq));
    if (ws.empty())
      fail("--bind-update '{}': '{}' is no trainable weight, node or op type of {}", spec,
           spec.substr(0, eq), g.path);
    for (const auto& w : ws) c.update_bind[w] = b;
  }
}

// --compare B1,B2,...: the same training (initial weights, data order, steps) under each
// binding; per-step loss and weight divergence from the first, and on the first
// batch the first node (in run order) whose values drift from the first plan's by more than
// 1e-4 relative.
int compare(TrainArgs& a, const Graph& g, const Tensor& X, const Tensor& Y) {
  std::vector<std::string> plans = split_list(a.compare);
  auto known = binding_names();
  for (const auto& b : plans)
    if (std::find(known.begin(), known.end(), b) == known.end())
      fail("--compare {}: unknown binding '{}'", a.compare, b);
  if (plans.size() < 2) fail("--compare {}: name at least two bindings", a.compare);
  a.config.loss = parse_loss(a.loss);
  std::map<std::string, TrainResult> runs;
  // The first plan's weights after every step (kept: memory grows with steps x model size), and
  // each other plan's drift from them, step by step.
  std::vector<std::map<std::string, Tensor>> base_weights;
  std::map<std::string, std::vector<double>> drift_per_step;
  for (const auto& b : plans) {
    Plan p;
    configure_plan(p, b, a.bind_ops, a.threads);
    check_supported(g, p);
    TrainConfig c = a.config;
    c.progress = {};
    configure_update(c, g, b, a.bind_update);
    bool first_plan = b == plans[0];
    c.after_step = [&](std::size_t, const std::map<std::string, Tensor>& w) {
      std::map<std::string, Tensor> mine;
      for (const auto& [name, t] : g.initializers) mine[name] = w.at(name);
      if (first_plan)
        base_weights.push_back(std::move(mine));
      else
        drift_per_step[b].push_back(weight_drift(mine, base_weights.at(drift_per_step[b].size())));
    };
    runs[b] = train(g, X, Y, p, c);
  }
  const auto& base = runs.at(plans[0]);
  fmt::print("{}: {} steps, loss {}; divergence from --bind {}\n\n{:>5}", a.model,
             base.losses.size(), a.loss, plans[0], "step");
  for (const auto& b : plans) fmt::print(" {:>16}", b);
  fmt::print("  {:>12}  {:>12}\n", "max rel diff", "weight drift");
  for (std::size_t s = 0; s < base.losses.size(); ++s) {
    double worst = 0;
    fmt::print("{:>5}", s + 1);
    for (const auto& b : plans) {
      double l = runs.at(b).losses.at(s);
      fmt::print(" {:>16.9g}", l);
      worst = std::max(worst,
                       std::fabs(l - base.losses[s]) / std::max(std::fabs(base.losses[s]), 1e-30));
    }
    double wd = 0;
    for (const auto& [b, d] : drift_per_step) wd = std::max(wd, d.at(s));
    fmt::print("  {:>12.3g}  {:>12.3g}\n", worst, wd);
  }
  nlohmann::json j;
  j["schema"] = "metaop-train-compare/1";
  j["model"] = a.model;
  j["plans"] = plans;
  for (const auto& b : plans) {
    double d = weight_drift(runs.at(b).weights, base.weights);
    fmt::print("final weights under {}: relative drift {:.3g} from {}\n", b, d, plans[0]);
    j["losses"][b] = runs.at(b).losses;
    j["weight_drift"][b] = d;
    if (drift_per_step.count(b)) j["weight_drift_per_step"][b] = drift_per_step.at(b);
  }
  // Where the values part, on the first batch at the initial weights.
  Graph h = with_loss(g, a.config.loss, Y.dtype());
  std::int64_t n = std::min<std::int64_t>(a.config.batch_size, X.dim(0));
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  auto take_first = [&](const Tensor& t) {
    std::int64_t per = t.numel() / t.dim(0);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * per));
    std::iota(idx.begin(), idx.end(), 0);
    Shape s = t.shape();
    s[0] = n;
    return take(t, s, idx);
  };
  std::map<std::string, Tensor> inputs{{g.inputs[0].name, take_first(X)}};
  if (a.config.loss != LossKind::Output) inputs[kLabelsInput] = take_first(Y);
  RunOptions keep;
  keep.keep_all = true;
  std::map<std::string, RunResult> fwd;
  for (const auto& b : plans) {
    Plan p;
    configure_plan(p, b, a.bind_ops, a.threads);
    for (const auto& node : h.nodes)
      if (node.op_type == "Dropout") p.bind_op(node.name, "reference");
    fwd[b] = run_graph(h, inputs, p, keep);
  }
  for (std::size_t k = 1; k < plans.size(); ++k) {
    const auto& rb = fwd.at(plans[k]);
    std::string first;
    for (const auto& rec : rb.records) {
      for (const auto& o : h.nodes[rec.node].outputs) {
        if (o.empty() || !is_floating(rb.values.at(o).dtype())) continue;
        Drift d = drift(rb.values.at(o), fwd.at(plans[0]).values.at(o));
        if (d.nonfinite || d.rel > 1e-4) {
          first = fmt::format("{} ({}): '{}' drifts {:.3g} relative", h.nodes[rec.node].name,
                              h.nodes[rec.node].op_type, o, d.nonfinite ? INFINITY : d.rel);
          break;
        }
      }
      if (!first.empty()) break;
    }
    fmt::print("first node whose values part (> 1e-4) between {} and {} on the first batch: {}\n",
               plans[0], plans[k], first.empty() ? "none" : first);
    j["first_divergent_node"][plans[k]] = first;
  }
  if (!a.json_file.empty()) {
    std::ofstream(a.json_file) << j.dump(1) << '\n';
    fmt::print("wrote {}\n", a.json_file);
  }
  if (!a.report_dir.empty()) {
    TrainReport rep{a.model, a.loss, {}, &g, nullptr, nullptr, 0};
    for (const auto& b : plans) rep.losses[b] = runs.at(b).losses;
    write_train_report(rep, a.report_dir);
    fmt::print("wrote {}/index.html\n", a.report_dir);
  }
  return 0;
}

int run(TrainArgs& a) {
  apply_hparams(a);
  Graph g = load_onnx(a.model);
  if (!a.compare.empty())
    return compare(a, g, load_tensor_file(a.data), load_tensor_file(a.labels));
  // The plan, its framework bindings wrapped with the injected faults (forward or backward).
  std::vector<FaultSpec> faults, parsed;  // parsed: every --inject, in order
  auto trainable = trainable_initializers(g);
  for (const auto& s : a.inject) {
    FaultSpec f = parse_fault(s);
    parsed.push_back(f);
    if (f.phase != "update") {
      faults.push_back(f);
      continue;
    }
    if (weights_named(g, trainable, f.target).empty())
      fail("--inject '{}': '{}' is no trainable weight, node or op type of {}", s, f.target,
           a.model);
    a.config.update_faults.push_back(f);
  }
  configure_update(a.config, g, a.bind, a.bind_update);
  std::vector<FaultyBinding*> faulty;
  auto make_plan = [&](std::vector<FaultyBinding*>* track) {
    Plan p;
    configure_plan(p, a.bind, a.bind_ops, a.threads);
    for (const auto& b : binding_names()) {
      if (b == "reference") continue;
      std::vector<FaultSpec> mine;
      for (const auto& f : faults)
        if (f.binding.empty() || f.binding == b) mine.push_back(f);
      if (mine.empty()) continue;
      auto fb = std::make_unique<FaultyBinding>(make_binding(b), mine);
      if (track) track->push_back(fb.get());
      p.add_binding(std::move(fb));
    }
    return p;
  };
  Plan plan = make_plan(&faulty);
  check_supported(g, plan);
  std::shared_ptr<TrainCheck> tc;
  if (a.check_every < 1) fail("--check-every {}: must be at least 1", a.check_every);
  if (a.check || a.cmd->count("--check-every"))
    tc = install_train_check(g, a.config, a.check_every);
  Tensor X = load_tensor_file(a.data), Y = load_tensor_file(a.labels);
  a.config.loss = parse_loss(a.loss);
  bool tty = isatty(STDERR_FILENO);
  double running = 0;
  a.config.progress = [&](std::size_t step, std::size_t total, double loss) {
    running = step == 1 ? loss : 0.9 * running + 0.1 * loss;
    if (!tty) return;
    int width = 30, done = static_cast<int>(width * step / total);
    fmt::print(stderr, "\r[{}{}] step {}/{}  loss {:.6g}", std::string(done, '#'),
               std::string(width - done, '.'), step, total, running);
    if (step == total) fmt::print(stderr, "\r\033[K");
  };
  TrainResult r = train(g, X, Y, plan, a.config);
  if (tc && !tc->findings.empty()) {
    // Verification by replacement of the five worst findings, against an all-reference run.
    TrainConfig plain = a.config;
    plain.watch = {};
    plain.progress = {};
    plain.update_binding = "reference";
    plain.update_bind.clear();
    plain.update_faults.clear();
    Plan reference_plan;
    TrainResult ref = train(g, X, Y, reference_plan, plain);
    for (std::size_t i = 0; i < tc->findings.size() && i < 5; ++i)
      verify_train_finding(
          tc->findings[i], g, X, Y, a.config, [&] { return make_plan(nullptr); }, ref.weights,
          r.weights);
  }
  if (tc && !tc->findings.empty()) {
    // A reproducer per finding (`metaop repro DIR` judges it again), with the injected faults
    // that apply to the finding's binding and phase.
    std::string root = !a.repro_dir.empty()    ? a.repro_dir
                       : !a.report_dir.empty() ? a.report_dir + "/repro"
                                               : "metaop-repro";
    Graph h = with_loss(g, a.config.loss, Y.dtype());
    for (auto& f : tc->findings) {
      if (f.inputs.empty()) continue;
      std::vector<std::string> applied;
      for (std::size_t i = 0; i < parsed.size(); ++i)
        if (parsed[i].phase == f.phase &&
            (parsed[i].binding.empty() || parsed[i].binding == f.binding))
          applied.push_back(a.inject[i]);
      f.repro = write_train_reproducer(h, f, a.config.optimizer, applied, a.model, root);
    }
  }
  std::size_t per_epoch = r.losses.size() / static_cast<std::size_t>(a.config.epochs);
  std::map<std::string, int> updated_by;
  for (const auto& [w, b] : r.update_bindings) ++updated_by[b];
  std::string updates;
  for (const auto& [b, n] : updated_by)
    updates += fmt::format("{}{} on {}", updates.empty() ? "" : ", ", n, b);
  fmt::print("{}: {} steps under --bind {} ({} trainable tensors, {} {} update{}), loss {}\n",
             a.model, r.losses.size(), a.bind, r.trainable.size(), a.config.optimizer.kind, updates,
             updated_by.size() == 1 ? "" : "s", a.loss);
  for (int e = 0; e < a.config.epochs; ++e) {
    double s = 0;
    for (std::size_t i = 0; i < per_epoch; ++i) s += r.losses[e * per_epoch + i];
    fmt::print("epoch {:>3}: mean loss {:.8g}\n", e + 1, s / static_cast<double>(per_epoch));
  }
  // The slowest nodes, forward and backward per step, with their largest heap peaks.
  auto slow = slowest(r.profile, 5);
  double steps = static_cast<double>(std::max<std::size_t>(r.losses.size(), 1));
  fmt::print("slowest nodes (per step: forward, backward; largest heap peak of a call):\n");
  for (std::size_t i = 0; i < slow.size(); ++i)
    fmt::print("  {:<40} {:<24} {:>9.3f} ms {:>9.3f} ms  {:>8.2f} MB {:>8.2f} MB\n", slow[i]->node,
               slow[i]->op_type, slow[i]->forward_seconds / steps * 1e3,
               slow[i]->backward_seconds / steps * 1e3, slow[i]->forward_peak / 1e6,
               slow[i]->backward_peak / 1e6);
  std::size_t reached = 0;
  for (auto* fb : faulty)
    for (const auto& [node, note] : fb->log()) {
      fmt::print("injected {}/{}: {}\n", fb->name(), node, note);
      ++reached;
    }
  for (const auto& [w, note] : r.update_fault_log) {
    fmt::print("injected update of {} under {}\n", w, note);
    ++reached;
  }
  if (!a.inject.empty() && reached == 0)
    fmt::print("no injected fault was reached (no node of the plan's bindings matched)\n");
  if (tc) {
    fmt::print(
        "\nchecked {} of {} steps (forward and backward of every node, and every framework "
        "optimizer update, against the reference): {} finding(s)\n",
        tc->checked_steps, r.losses.size(), tc->findings.size());
    for (const auto& f : tc->findings)
      fmt::print(
          "  {:<9} {:<9} {:<9} {} ({})  score {}  step {} ({} checked steps)\n      {}\n{}{}",
          f.phase, f.kind, f.binding, f.node, f.op_type, fmt_score(f.score), f.step, f.steps,
          f.detail, f.verification.empty() ? "" : "      " + f.verification + "\n",
          f.repro.empty() ? "" : "      reproducer: " + f.repro + "\n");
  }
  if (!a.json_file.empty()) {
    nlohmann::json j;
    j["schema"] = "metaop-train/1";
    j["model"] = a.model;
    j["plan"] = a.bind;
    j["loss"] = a.loss;
    j["losses"] = r.losses;
    j["step_seconds"] = r.step_seconds;
    for (const auto& p : r.profile)
      j["node_profile"].push_back({{"node", p.node},
                                   {"op_type", p.op_type},
                                   {"forward_seconds", p.forward_seconds},
                                   {"backward_seconds", p.backward_seconds},
                                   {"forward_peak", p.forward_peak},
                                   {"backward_peak", p.backward_peak},
                                   {"forward_binding", p.forward_binding},
                                   {"backward_binding", p.backward_binding}});
    j["trainable"] = r.trainable;
    j["optimizer"] = a.config.optimizer.kind;
    j["update_bindings"] = r.update_bindings;
    j["findings"] = nlohmann::json::array();
    if (tc) {
      // Worst local score of each node over the checked steps, forward and backward.
      for (std::size_t k = 0; k < g.nodes.size(); ++k)
        j["node_scores"].push_back({{"node", g.nodes[k].name},
                                    {"op_type", g.nodes[k].op_type},
                                    {"forward", tc->forward_scores[k]},
                                    {"backward", tc->backward_scores[k]}});
      for (const auto& [w, score] : tc->update_scores) j["update_scores"][w] = json_number(score);
    }
    if (tc)
      for (const auto& f : tc->findings)
        j["findings"].push_back(
            {{"node", f.node},
             {"op_type", f.op_type},
             {"binding", f.binding},
             {"phase", f.phase},
             {"kind", f.kind},
             {"score", json_number(f.score)},
             {"iteration", f.step},
             {"iterations", f.steps},
             {"verified", f.verified},
             {"verification", f.verification},
             {"repro", f.repro.empty() ? nlohmann::json() : nlohmann::json(f.repro)},
             {"detail", f.detail}});
    std::ofstream(a.json_file) << j.dump(1) << '\n';
    fmt::print("wrote {}\n", a.json_file);
  }
  if (!a.report_dir.empty()) {
    TrainReport rep{a.model,  a.loss,     {{a.bind, r.losses}}, &g,
                    tc.get(), &r.profile, r.losses.size()};
    write_train_report(rep, a.report_dir);
    fmt::print("wrote {}/index.html\n", a.report_dir);
  }
  if (!a.save.empty()) {
    write_file(a.save, with_initializers(a.model, r.weights));
    fmt::print("wrote {} (trained weights)\n", a.save);
  }
  return tc && !tc->findings.empty() ? 1 : 0;
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train", "Train a model under a binding plan, forward and backward node by node");
  a->cmd = cmd;
  cmd->add_option("model", a->model, "ONNX model")->required();
  cmd->add_option("--data", a->data, "Inputs X (.npy, first dim = samples)")->required();
  cmd->add_option("--labels", a->labels, "Labels Y (.npy, first dim = samples)")->required();
  cmd->add_option("--loss", a->loss,
                  "mse, cross_entropy (logits), nll (log-probabilities), bce, bce_with_logits, "
                  "or output (the model's scalar output)")
      ->required();
  auto& o = a->config.optimizer;
  cmd->add_option("--optimizer", o.kind, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr", o.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", o.nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--weight-decay", o.weight_decay, "Weight decay (L2; decoupled for adamw)")
      ->capture_default_str();
  cmd->add_option("--beta1", o.beta1, "Adam's first-moment decay")->capture_default_str();
  cmd->add_option("--beta2", o.beta2, "Adam's second-moment decay")->capture_default_str();
  cmd->add_option("--eps", o.eps, "Adam's epsilon")->capture_default_str();
  cmd->add_option("--epochs", a->config.epochs, "Epochs")->capture_default_str();
  cmd->add_option("--batch-size", a->config.batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--seed", a->config.seed, "Seed of the data shuffling")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--hparams", a->hparams,
                  "JSON object of hyperparameters (optimizer, lr, momentum, nesterov, "
                  "weight_decay, beta1, beta2, eps, epochs, batch_size, seed); flags win");
  cmd->add_option("--json", a->json_file, "Write the per-step losses as JSON");
  cmd->add_option("--save", a->save, "Write the model with its trained weights");
  cmd->add_option("--report", a->report_dir,
                  "Write an HTML report (loss curves; per-node forward and gradient error with "
                  "--check) into this folder");
  cmd->add_option("--repro", a->repro_dir,
                  "Folder for the reproducers of --check's findings (default: REPORT/repro, else "
                  "./metaop-repro)");
  cmd->add_flag("--check", a->check,
                "Check every node's forward and backward against the reference (exit 1 on "
                "findings)");
  cmd->add_option("--check-every", a->check_every, "Check every K-th step (implies --check)")
      ->capture_default_str();
  cmd->add_option("--compare", a->compare,
                  "Train under each of these bindings (B1,B2,...) and report where they diverge");
  cmd->add_option("--inject", a->inject,
                  "Inject a fault: OP:FAULT@BINDING, OP:grad_sign|grad_scale@BINDING:backward, or "
                  "WEIGHT_OR_OP:update_sign|update_scale|update_nan|half_state|stale_state@torch:"
                  "update");
  cmd->add_option("--bind-update", a->bind_update,
                  "Update kernel: BINDING for every weight, or WEIGHT_NODE_OR_OP=BINDING "
                  "(reference or torch; default: --bind's optimizer if it has one, else the "
                  "reference's float64 rule)");
  add_plan_options(cmd, a->bind, a->bind_ops, a->threads);
  cmd->callback([a, &action] { action = [a] { return run(*a); }; });
}

}  // namespace metaop::cli
