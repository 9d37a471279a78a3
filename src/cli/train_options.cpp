#include "cli/train_options.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/host.h"
#include "cli/inputs.h"
#include "cli/plan_options.h"
#include "cli/process_options.h"
#include "graph/onnx_io.h"

namespace metaop::cli {

namespace {

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
  static const std::set<std::string> known = {
      "optimizer", "lr",     "momentum",   "nesterov", "weight_decay", "beta1", "beta2",
      "eps",       "epochs", "batch_size", "seed",     "lr_schedule",  "freeze"};
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k)) fail("--hparams {}: unknown key '{}'", a.hparams, k);
    std::string flag = k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (a.cmd->count("--" + flag)) continue;
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
      if (k == "lr_schedule") a.lr_schedule = v.get<std::string>();
      if (k == "freeze")
        a.config.frozen = v.is_string() ? std::vector<std::string>{v.get<std::string>()}
                                        : v.get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      fail("--hparams {}: key '{}': {}", a.hparams, k, e.what());
    }
  }
}

}  // namespace

void add_train_options(CLI::App* cmd, TrainArgs& a) {
  a.cmd = cmd;
  cmd->add_option("model", a.model, "ONNX model")->required();
  cmd->add_option("--data", a.data, "Inputs X (.npy, first dim = samples)")->required();
  cmd->add_option("--labels", a.labels, "Labels Y (.npy, first dim = samples)")->required();
  cmd->add_option("--loss", a.loss,
                  "mse, cross_entropy (logits), nll (log-probabilities), bce, bce_with_logits, "
                  "or output (the model's scalar output)")
      ->required();
  auto& o = a.config.optimizer;
  cmd->add_option("--optimizer", o.kind, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr", o.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", o.nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--weight-decay", o.weight_decay, "Weight decay (L2; decoupled for adamw)")
      ->capture_default_str();
  cmd->add_option("--beta1", o.beta1, "Adam's first-moment decay")->capture_default_str();
  cmd->add_option("--beta2", o.beta2, "Adam's second-moment decay")->capture_default_str();
  cmd->add_option("--eps", o.eps, "Adam's epsilon")->capture_default_str();
  cmd->add_option("--lr-schedule", a.lr_schedule,
                  "Learning-rate schedule, stepped after each epoch as PyTorch's: step:N:GAMMA "
                  "(StepLR), exp:GAMMA (ExponentialLR), cosine (CosineAnnealingLR over the "
                  "epochs) or none")
      ->capture_default_str();
  cmd->add_option("--freeze", a.config.frozen,
                  "Weights left untrained (frozen layers): weight names, node names or op "
                  "types, comma-separated or repeated")
      ->delimiter(',');
  cmd->add_option("--epochs", a.config.epochs, "Epochs")->capture_default_str();
  cmd->add_option("--batch-size", a.config.batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--seed", a.config.seed, "Seed of the data shuffling")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--hparams", a.hparams,
                  "JSON object of hyperparameters (optimizer, lr, momentum, nesterov, "
                  "weight_decay, beta1, beta2, eps, lr_schedule, freeze, epochs, batch_size, "
                  "seed); flags win");
}

void add_train_plan_options(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--inject", a.inject,
                  "Inject a fault: OP:FAULT@BINDING, OP:grad_sign|grad_scale@BINDING:backward, or "
                  "WEIGHT_OR_OP:update_sign|update_scale|update_nan|half_state|stale_state@torch:"
                  "update");
  cmd->add_option("--bind-update", a.bind_update,
                  "Update kernel: BINDING for every weight, or WEIGHT_NODE_OR_OP=BINDING "
                  "(reference or torch; default: --bind's optimizer if it has one, else the "
                  "reference's float64 rule)");
  add_plan_options(cmd, a.bind, a.bind_ops, a.threads);
}

void add_threshold_options(CLI::App* cmd, DiagnoseThresholds& t) {
  auto* g = "Thresholds (docs/diagnose.md)";
  auto opt = [&](const char* name, auto& v, const char* what) {
    cmd->add_option(name, v, what)->capture_default_str()->group(g);
  };
  opt("--vanish-ratio", t.vanish_ratio,
      "Vanishing gradient: first/last layer gradient-norm ratio below (AUTOTRAINER)");
  opt("--vanish-first", t.vanish_first,
      "Vanishing gradient: and the first layer's gradient norm below (AUTOTRAINER)");
  opt("--explode-ratio", t.explode_ratio,
      "Exploding gradient: first/last layer gradient-norm ratio above (AUTOTRAINER)");
  opt("--dead-fraction", t.dead_fraction,
      "Dying ReLU: share of units at 0 for every sample of a window, at least (AUTOTRAINER)");
  opt("--saturated-fraction", t.saturated_fraction,
      "Saturation: share of saturated Sigmoid/Tanh values over a window, above (DeepDiagnosis)");
  opt("--saturation-preactivation", t.saturation_preactivation,
      "Saturation: |pre-activation| beyond this (DeepDiagnosis)");
  opt("--saturation-output", t.saturation_output, "Saturation: output this close to an asymptote");
  opt("--slow-gain", t.slow_gain,
      "Slow convergence: best epoch's loss gain, relative to the first epoch's loss, below "
      "(AUTOTRAINER)");
  opt("--stagnation-epochs", t.stagnation_epochs,
      "Stagnant loss: epochs over which the mean loss stays unchanged (DeepDiagnosis)");
  opt("--stagnation-change", t.stagnation_change,
      "Stagnant loss: relative spread of those epochs' mean losses below");
  opt("--loss-growth", t.loss_growth, "Exploding loss: a step's loss above this x the first's");
  opt("--converged", t.converged,
      "Loss below this share of the first epoch's: converged (not judged slow or stagnant)");
  opt("--update-ratio-high", t.update_ratio_high,
      "Update-to-weight ratio above which the learning rate is high (DeepDiagnosis)");
  opt("--update-ratio-low", t.update_ratio_low,
      "Update-to-weight ratio below which the learning rate is low (DeepDiagnosis)");
  opt("--chance-margin", t.chance_margin,
      "Chance level: the last epoch's loss at or above this share of the trivial predictor's "
      "(label frequencies, targets' mean); a repair must end below it too");
  opt("--oscillation-rise", t.oscillation_rise,
      "Oscillating loss: the epochs' mean losses rise again, in all, by at least this share of "
      "the first epoch's");
  opt("--window", t.window, "Steps per monitoring window (0: one epoch)");
}

TrainSetup make_train_setup(TrainArgs& a) {
  apply_hparams(a);
  TrainSetup s;
  s.model = a.model;
  s.loss = a.loss;
  s.data_path = a.data;
  s.labels_path = a.labels;
  s.graph = load_onnx(a.model);
  s.config = a.config;
  s.bind = a.bind;
  s.bind_update = a.bind_update;
  s.inject = a.inject;
  s.make_plan = [bind_ops = a.bind_ops, threads = a.threads](const std::string& bind) {
    Plan p;
    configure_plan(p, bind, bind_ops, threads);
    return p;
  };
  s.X = load_tensor_file(a.data);
  s.Y = load_tensor_file(a.labels);
  s.config.loss = parse_loss(a.loss);
  s.config.schedule = parse_lr_schedule(a.lr_schedule);
  trained_weights(s.graph, s.config);  // a --freeze that names nothing fails here, naming it
  validate(s.config.optimizer);
  for (const auto& w : optimizer_warnings(s.config.optimizer))
    fmt::print(stderr, "metaop: warning: {}\n", w);
  if (progress_shown()) {
    auto running = std::make_shared<double>(0.0);
    s.config.progress = [running](std::size_t step, std::size_t total, double loss) {
      *running = step == 1 ? loss : 0.9 * *running + 0.1 * loss;
      double share = static_cast<double>(step) / static_cast<double>(total);
      auto text = fmt::format("step {}/{}  loss {:.6g}", step, total, *running);
      if (host()) {
        show_progress(text, share);
        return;
      }
      int width = 30, done = static_cast<int>(width * share);
      fmt::print(stderr, "\r[{}{}] {}", std::string(done, '#'), std::string(width - done, '.'),
                 text);
      if (step == total) end_progress();
    };
  }
  return s;
}

}  // namespace metaop::cli
