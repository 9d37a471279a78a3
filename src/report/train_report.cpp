#include "report/train_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "ops/kernel_util.h"
#include "report/check_report.h"
#include "report/html.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop {

void write_train_report(const TrainReport& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> colors{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  std::string h = fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop train: {}</title><style>"
      "body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}}"
      "</style></head><body><h1>metaop train</h1><p><b>{}</b>, loss {}.</p>",
      html_escape(r.model), html_escape(r.model), html_escape(r.loss));
  std::vector<std::pair<std::string, std::vector<double>>> curves(r.losses.begin(), r.losses.end());
  double lo = 0, hi = 0;
  bool first = true;
  for (const auto& [plan, l] : r.losses)
    for (double v : l)
      if (v > 0 && std::isfinite(v)) {
        double e = std::log10(v);
        lo = first ? e : std::min(lo, e);
        hi = first ? e : std::max(hi, e);
        first = false;
      }
  h += "<h2>Loss per step</h2>";
  h += svg_plot(curves, colors, std::floor(lo), std::ceil(hi) + (hi == lo ? 1 : 0), 0, "loss",
                "step");
  if (r.check && r.graph) {
    std::vector<double> fwd, bwd;
    for (std::size_t k = 0; k < r.graph->nodes.size(); ++k) {
      fwd.push_back(r.check->forward_scores[k]);
      bwd.push_back(r.check->backward_scores[k]);
    }
    h += fmt::format(
        "<h2>Error along the model</h2><p>Worst local score of each node over the {} checked "
        "steps: its forward, and its backward (the gradients it returns), against the float64 "
        "reference on the same inputs, as a multiple of the error model's tolerance (above the "
        "red line: a finding).</p>",
        r.check->checked_steps);
    h += svg_plot({{"forward", fwd}, {"backward", bwd}}, colors, -6, 4, 1, "local score",
                  "node (graph order)");
    if (!r.check->update_scores.empty()) {
      std::vector<double> upd;
      std::string names;
      for (const auto& [w, score] : r.check->update_scores) {
        upd.push_back(score);
        names += (names.empty() ? "" : ", ") + html_escape(w);
      }
      h += fmt::format(
          "<h2>Updates</h2><p>Worst score of each weight's update by a framework's optimizer "
          "(new weight and optimizer state against the float64 rule on the same weight, "
          "gradient and state), over the checked steps. Weights in order: {}.</p>",
          names);
      h += svg_plot({{"update", upd}}, colors, -6, 4, 1, "local score", "weight");
    }
    h += fmt::format("<h2>Findings ({})</h2>", r.check->findings.size());
    if (r.check->findings.empty()) {
      h += "<p class='ok'>Every checked forward, backward and update is within its error "
           "model.</p>";
    } else {
      h += "<table><tr><th>phase</th><th>kind</th><th>binding</th><th>node</th><th>op</th>"
           "<th>score</th><th>step</th><th>detail</th><th>verification</th><th>reproducer</th>"
           "</tr>";
      for (const auto& f : r.check->findings)
        h += fmt::format(
            "<tr><td>{}</td><td class='bad'>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.phase, f.kind, f.binding, html_escape(f.node), f.op_type, fmt_score(f.score), f.step,
            html_escape(f.detail), html_escape(f.verification), html_escape(f.repro));
      h += "</table>";
    }
  }
  if (r.profile && r.steps > 0) {
    auto slow = slowest(*r.profile, 25);
    h += "<h2>Time and memory per node</h2><p>The 25 slowest nodes: mean time per step of the "
         "forward and the backward, and the largest heap peak of one call (bytes allocated above "
         "the level before it).</p><table><tr><th>node</th><th>op</th><th>forward [ms]</th>"
         "<th>backward [ms]</th><th>forward peak [MB]</th><th>backward peak [MB]</th>"
         "<th>bindings</th></tr>";
    double steps = static_cast<double>(r.steps);
    for (const auto* p : slow)
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.2f}</td><td>{:.2f}</td>"
          "<td>{} / {}</td></tr>",
          html_escape(p->node), p->op_type, p->forward_seconds / steps * 1e3,
          p->backward_seconds / steps * 1e3, p->forward_peak / 1e6, p->backward_peak / 1e6,
          p->forward_binding, p->backward_binding.empty() ? "-" : p->backward_binding);
    h += "</table>";
  }
  h += "</body></html>\n";
  write_file((std::filesystem::path(dir) / "index.html").string(), h);
}

nlohmann::json optimizer_to_json(const OptimizerConfig& c) {
  return {{"kind", c.kind},
          {"lr", c.lr},
          {"momentum", c.momentum},
          {"nesterov", c.nesterov},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps}};
}

OptimizerConfig optimizer_from_json(const nlohmann::json& j) {
  OptimizerConfig c;
  c.kind = j.at("kind").get<std::string>();
  c.lr = j.at("lr").get<double>();
  c.momentum = j.at("momentum").get<double>();
  c.nesterov = j.at("nesterov").get<bool>();
  c.weight_decay = j.at("weight_decay").get<double>();
  c.beta1 = j.at("beta1").get<double>();
  c.beta2 = j.at("beta2").get<double>();
  c.eps = j.at("eps").get<double>();
  return c;
}

std::string write_train_reproducer(const Graph& h, const TrainFinding& f,
                                   const OptimizerConfig& optimizer,
                                   const std::vector<std::string>& inject, const std::string& model,
                                   const std::string& root) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(root) /
                 safe_file_name(fmt::format("{}_{}_{}_{}", f.binding, f.phase, f.kind, f.node));
  fs::create_directories(dir);
  nlohmann::json j;
  j["schema"] = "metaop-repro/1";
  j["phase"] = f.phase;
  j["kind"] = f.kind;
  j["binding"] = f.binding;
  j["node"] = f.node;
  j["op_type"] = f.op_type;
  j["model"] = model;
  j["step"] = f.step;
  j["detail"] = f.detail;
  j["inject"] = inject;
  // Files named after the values: ROLE_INDEX_NAME.npy; null for an omitted or absent tensor.
  auto save = [&](const std::string& role, const Tensors& ts,
                  const std::vector<std::string>& names) {
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].defined()) {
        list.push_back(nullptr);
        continue;
      }
      std::string file = safe_file_name(
          fmt::format("{}_{}_{}.npy", role, i, i < names.size() ? names[i] : std::string()));
      // .npy has no bfloat16: such tensors are stored as float32 (exactly) and listed in
      // "bfloat16", for `metaop repro` to convert back.
      bool bf16 = ts[i].dtype() == DType::BFloat16;
      write_npy((dir / file).string(), bf16 ? ts[i].to(DType::Float32) : ts[i]);
      if (bf16) j["bfloat16"].push_back(file);
      list.push_back(file);
    }
    j["files"][role] = list;
  };
  std::string what;
  if (f.phase == "update") {
    std::vector<std::string> names{"weight", "grad"};
    for (const auto& s : optimizer_slots(optimizer)) names.push_back(s);
    save("inputs", f.inputs, names);
    names.erase(names.begin() + 1);
    save("got", f.got, names);
    j["optimizer"] = optimizer_to_json(optimizer);
    what = fmt::format(
        "the {} update of weight '{}' at step {}: inputs_0 is the weight before the step, "
        "inputs_1 its gradient, the others the optimizer's state before the step (none at the "
        "first step); got_* are what {} made of them (the new weight, then the new state)",
        optimizer.kind, f.node, f.step, f.binding);
  } else {
    std::size_t k = 0;
    while (k < h.nodes.size() && h.nodes[k].name != f.node) ++k;
    if (k == h.nodes.size()) fail("reproducer: node '{}' is not in {}", f.node, h.path);
    const Node& node = h.nodes[k];
    SubgraphSpec spec;
    spec.nodes = {k};
    for (std::size_t i = 0; i < node.inputs.size() && i < f.inputs.size(); ++i)
      if (!node.inputs[i].empty() && f.inputs[i].defined())
        spec.values[node.inputs[i]] = f.inputs[i];
    const Tensors& outs = f.phase == "backward" ? f.outputs : f.got;
    for (std::size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i)
      if (!node.outputs[i].empty() && outs[i].defined()) spec.values[node.outputs[i]] = outs[i];
    write_file((dir / "model.onnx").string(), export_subgraph(h, spec));
    save("inputs", f.inputs, node.inputs);
    if (f.phase == "backward") {
      save("outputs", f.outputs, node.outputs);
      save("output_grads", f.output_grads, node.outputs);
      save("got", f.got, node.inputs);
    } else {
      save("got", f.got, node.outputs);
    }
    what = f.phase == "backward"
               ? fmt::format(
                     "the backward of node '{}' ({}) at step {}: model.onnx is the node "
                     "alone, inputs_* its inputs, outputs_* its forward outputs, "
                     "output_grads_* the gradients that reached them; got_* are the input "
                     "gradients {} computed",
                     f.node, f.op_type, f.step, f.binding)
               : fmt::format(
                     "the forward of node '{}' ({}) at step {}: model.onnx is the node "
                     "alone, inputs_* its inputs; got_* are its outputs under {}",
                     f.node, f.op_type, f.step, f.binding);
  }
  write_file((dir / "repro.json").string(), dump_json(j));
  std::string inject_text;
  for (const auto& s : inject) inject_text += " (injected: " + printable(s) + ")";
  write_file(
      (dir / "README.txt").string(),
      fmt::format(
          "metaop train finding: {} {} under {}{} in {}\n\n{}\n{}\n\nThis folder holds {}.\n\n"
          "Judge it again against the float64 reference and the error model (exit 1 when the "
          "defect reproduces):\n  metaop repro .\nor under another binding:\n  metaop repro . "
          "--bind reference\n",
          f.phase, f.kind, f.binding, inject_text, printable(model), printable(f.detail, 4000),
          printable(f.verification, 4000), printable(what, 4000)));
  return dir.string();
}

}  // namespace metaop
