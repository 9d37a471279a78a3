#include "cli/train_options.h"

#include <fmt/core.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/inputs.h"
#include "cli/plan_options.h"
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
  cmd->add_option("--epochs", a.config.epochs, "Epochs")->capture_default_str();
  cmd->add_option("--batch-size", a.config.batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--seed", a.config.seed, "Seed of the data shuffling")->capture_default_str();
  cmd->add_option("--hparams", a.hparams,
                  "JSON object of hyperparameters (optimizer, lr, momentum, nesterov, "
                  "weight_decay, beta1, beta2, eps, epochs, batch_size, seed); flags win");
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

TrainSetup make_train_setup(TrainArgs& a) {
  apply_hparams(a);
  TrainSetup s;
  s.model = a.model;
  s.loss = a.loss;
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
  if (isatty(STDERR_FILENO)) {
    auto running = std::make_shared<double>(0.0);
    s.config.progress = [running](std::size_t step, std::size_t total, double loss) {
      *running = step == 1 ? loss : 0.9 * *running + 0.1 * loss;
      int width = 30, done = static_cast<int>(width * step / total);
      fmt::print(stderr, "\r[{}{}] step {}/{}  loss {:.6g}", std::string(done, '#'),
                 std::string(width - done, '.'), step, total, *running);
      if (step == total) fmt::print(stderr, "\r\033[K");
    };
  }
  return s;
}

}  // namespace metaop::cli
