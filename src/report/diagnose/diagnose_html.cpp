#include "report/diagnose/diagnose_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "report/core/chart.h"
#include "report/core/format.h"
#include "report/core/graph_view.h"
#include "report/core/html.h"
#include "report/core/repro.h"
#include "tensor/npy.h"

namespace metaop {

namespace {

// Series over the steps as lines, epochs marked, steps counted from 1.
Chart step_chart(const MonitorRecord& rec, std::string ylabel, PlotScale scale = PlotScale::Log10) {
  return Chart{.xlabel = "step",
               .ylabel = std::move(ylabel),
               .mark = ChartMark::Lines,
               .y_scale = scale,
               .x_marks = epoch_marks(rec.losses.size(), rec.steps_per_epoch),
               .x_offset = 1};
}

// Shares in [0, 1] per step, on a linear scale, with the threshold.
std::string share_plot(const MonitorRecord& rec, const std::vector<ChartSeries>& lines,
                       double threshold, const std::string& ylabel) {
  Chart c = step_chart(rec, ylabel, PlotScale::Linear);
  c.lo = 0;
  c.hi = 1;
  c.threshold = threshold;
  c.threshold_label = fmt::format("threshold {:g}", threshold);
  return svg_chart(c, lines);
}

// The model as a graph: the place of each diagnosis red (linked to its row), the nodes
// where symptoms show yellow, each with what was found there on hover.
std::string graph_section(const TrainSetup& s, const DiagnoseResult& r) {
  const Graph& g = s.graph;
  std::vector<NodeMark> marks(g.nodes.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    index[g.nodes[k].name] = k;
    marks[k].tooltip = fmt::format("{} ({})", g.nodes[k].name, g.nodes[k].op_type);
  }
  for (const auto& x : r.run.record.symptoms) {
    auto it = index.find(x.node);
    if (it == index.end()) continue;
    NodeMark& m = marks[it->second];
    m.tooltip += fmt::format("\nsymptom {} at step {}: {}", x.kind, x.step, x.detail);
    if (m.rank >= 1) continue;
    m.rank = 1;
    m.fill = "#fdd663";
    m.badge = x.kind;
  }
  const auto& ds = r.diagnoses();
  for (std::size_t i = 0; i < ds.size(); ++i) {
    auto it = index.find(ds[i].node);
    if (it == index.end()) continue;
    NodeMark& m = marks[it->second];
    m.tooltip += fmt::format("\ndiagnosis {}: {}", ds[i].category, ds[i].evidence);
    if (m.rank >= 2) continue;
    m.rank = 2;
    m.fill = "#f28b82";
    m.badge = ds[i].category;
    m.href = fmt::format("#diagnosis-{}", i + 1);
  }
  return "<h2>The model</h2>" +
         graph_view_html(draw_graph(g, marks),
                         graph_legend({{"#f28b82", "the place of a diagnosis"},
                                       {"#fdd663", "where a symptom shows"},
                                       {"#ffffff", "nothing found"}},
                                      "Hover a node for what was found there; click a "
                                      "diagnosis's place for its row. Drag to pan, wheel to "
                                      "zoom."));
}

std::string diagnosis_rows(const DiagnoseResult& r) {
  std::string h =
      "<table><tr><th>#</th><th>category</th><th>place</th><th>explains</th><th>evidence</th>"
      "<th>fix</th><th>repair</th></tr>";
  const auto& ds = r.diagnoses();
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto& d = ds[i];
    std::string where = d.category == "hyperparameter" ? d.hyperparameter
                        : d.category == "data"         ? d.input
                        : d.category == "loss"         ? d.loss + " " + d.node
                        : d.category == "framework"
                            ? fmt::format("{} of {} under {}", phase_text(d), d.node, d.binding)
                            : d.node;
    h += fmt::format(
        "<tr id='diagnosis-{}'><td>{}</td><td class='bad'>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td class='{}'>{}</td></tr>",
        i + 1, i + 1, d.category, html_escape(where),
        html_escape(d.symptoms.empty() ? (d.definite ? "static check" : "")
                                       : fmt::format("{}", fmt::join(d.symptoms, ", "))),
        html_escape(d.evidence), html_escape(d.fix.description), d.fix_verified ? "ok" : "bad",
        html_escape(d.fix_result));
  }
  return h + "</table>";
}

}  // namespace

void write_diagnose_html(const TrainSetup& s, const DiagnoseResult& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const auto& rec = r.run.record;
  std::string h = fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop diagnose: {}</title>"
      "<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}}"
      "</style></head><body><h1>metaop diagnose</h1><p><b>{}</b>, loss {}, {} {:g}, {} of {} "
      "steps under {}: <b class='{}'>{}</b>.</p>",
      html_escape(s.model), html_escape(s.model), html_escape(s.loss), s.config.optimizer.kind,
      s.config.optimizer.lr, rec.losses.size(), rec.total, html_escape(s.bind),
      r.healthy() ? "ok" : "bad",
      r.healthy() ? "healthy"
                  : fmt::format("{} symptom(s), {} diagnosis(es)", rec.symptoms.size(),
                                r.diagnoses().size()));
  h += graph_section(s, r);
  std::vector<ChartSeries> losses{{"loss", rec.losses, {}, {}}};
  Chart loss = step_chart(rec, "loss", scale_for(losses));
  if (std::isfinite(rec.trivial_loss) && rec.trivial_loss > 0) {
    loss.threshold = rec.trivial_loss;
    loss.threshold_label =
        fmt::format("trivial predictor ({}): {:.4g}", rec.trivial_what, rec.trivial_loss);
  }
  h += "<h2>Loss per step</h2>" + svg_chart(loss, losses);
  if (!rec.accuracies.empty()) {
    Chart acc = step_chart(rec, "accuracy", PlotScale::Linear);
    acc.lo = 0;
    acc.hi = 1;
    h += "<h2>Accuracy per step</h2><p>The share of each batch's samples predicted right.</p>" +
         svg_chart(acc, {{"accuracy", rec.accuracies, {}, {}}});
  }
  std::vector<ChartSeries> grads;
  for (const auto& w : rec.weights)
    if (w.kernel) grads.push_back({w.weight, w.grad_norm, {}, {}});
  if (!grads.empty())
    h += "<h2>Gradient norm of each layer's weight</h2><p>L2 norm per step (first layers "
         "first); hover the chart for every layer's value at a step.</p>" +
         svg_chart(step_chart(rec, "gradient norm"), grads);
  const auto& t = rec.thresholds;
  std::vector<ChartSeries> dead, sat;
  for (const auto& a : rec.activations)
    (a.op_type == "Relu" ? dead : sat).push_back({a.node, a.per_step, {}, {}});
  if (!dead.empty())
    h += fmt::format(
             "<h2>Dead ReLU units</h2><p>Per step, the share of units (axis 1) whose output is 0 "
             "for every sample of the batch; the dashed line is the threshold over a window "
             "({:g}).</p>",
             t.dead_fraction) +
         share_plot(rec, dead, t.dead_fraction, "dead share");
  if (!sat.empty())
    h += fmt::format(
             "<h2>Saturated Sigmoid and Tanh values</h2><p>Per step, the share of "
             "values within {:g} of an asymptote or with a pre-activation beyond "
             "+-{:g}.</p>",
             t.saturation_output, t.saturation_preactivation) +
         share_plot(rec, sat, t.saturated_fraction, "saturated share");
  h += fmt::format("<h2>Symptoms ({})</h2>", rec.symptoms.size());
  if (rec.symptoms.empty()) {
    h += "<p class='ok'>No symptom at any step.</p>";
  } else {
    h += "<table><tr><th>kind</th><th>step</th><th>node</th><th>value</th><th>threshold</th>"
         "<th>detail</th></tr>";
    for (const auto& x : rec.symptoms)
      h += fmt::format(
          "<tr><td class='bad'>{}</td><td>{}</td><td>{}</td><td>{:.4g}</td>"
          "<td>{:g}</td><td>{}</td></tr>",
          x.kind, x.step, html_escape(x.node), x.value, x.threshold, html_escape(x.detail));
    h += "</table>";
  }
  if (!r.split.note.empty())
    h += "<h2>Model or framework</h2><p>" + html_escape(r.split.note) + "</p>";
  h += fmt::format("<h2>Diagnoses ({})</h2>", r.diagnoses().size());
  h += r.diagnoses().empty() ? "<p class='ok'>None.</p>" : diagnosis_rows(r);
  for (const auto& n : r.run.checks.notes) h += "<p>Note: " + html_escape(n) + "</p>";
  h += "</body></html>\n";
  std::ofstream(std::filesystem::path(dir) / "index.html") << h;
}

std::vector<std::string> write_repaired(const DiagnoseResult& r, const TrainSetup& s,
                                        const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& a : r.repairs) {
    if (!a.verified) continue;
    const Diagnosis& d = r.diagnoses().at(a.diagnosis);
    fs::path p =
        fs::path(dir) / safe_file_name(fmt::format(
                            "{}_{}_{}", out.size() + 1, d.category,
                            d.category == "hyperparameter" ? d.hyperparameter : d.node + d.input));
    fs::create_directories(p);
    const TrainSetup& t = a.setup;
    const auto& o = t.config.optimizer;
    nlohmann::json hp = {{"optimizer", o.kind},
                         {"lr", o.lr},
                         {"momentum", o.momentum},
                         {"nesterov", o.nesterov},
                         {"weight_decay", o.weight_decay},
                         {"beta1", o.beta1},
                         {"beta2", o.beta2},
                         {"eps", o.eps},
                         {"lr_schedule", t.config.schedule.text()},
                         {"freeze", t.config.frozen},
                         {"epochs", t.config.epochs},
                         {"batch_size", t.config.batch_size},
                         {"seed", t.config.seed}};
    std::ofstream(p / "hparams.json") << hp.dump(1) << '\n';
    std::string model = s.model, data = s.data_path, labels = s.labels_path;
    std::vector<std::string> files{"hparams.json"};
    if (a.graph_changed) {
      SubgraphSpec spec;
      for (std::size_t k = 0; k < t.graph.nodes.size(); ++k) spec.nodes.push_back(k);
      write_file((p / "model.onnx").string(), export_subgraph(t.graph, spec));
    } else if (a.weights_changed) {
      write_file((p / "model.onnx").string(), with_initializers(s.model, t.graph.initializers));
    }
    if (a.graph_changed || a.weights_changed) {
      model = (p / "model.onnx").string();
      files.push_back("model.onnx");
    }
    if (a.data_changed) {
      write_npy((p / "x.npy").string(), t.X);
      nlohmann::json st = {
          {"axis", 1}, {"mean", r.run.checks.feature_mean}, {"std", r.run.checks.feature_std}};
      std::ofstream(p / "standardization.json") << st.dump(1) << '\n';
      data = (p / "x.npy").string();
      files.push_back("x.npy");
      files.push_back("standardization.json");
    }
    if (a.labels_changed) {
      write_npy((p / "y.npy").string(), t.Y);
      labels = (p / "y.npy").string();
      files.push_back("y.npy");
    }
    std::string extra;
    if (d.category == "framework")
      extra = d.phase == Phase::Update ? fmt::format(" --bind-update {}=reference", d.node)
                                       : fmt::format(" --bind-op {}=reference", d.node);
    std::ofstream readme(p / "README.txt");
    readme << fmt::format(
        "metaop diagnose: a verified repair of {}\n\nDiagnosis: {} {}\nEvidence: {}\nChange: "
        "{}\nResult: {}\n\nFiles: {}\n\nTrain the repaired setup (with your other options as "
        "before):\n"
        "  metaop train {} --data {} --labels {} --loss {} --hparams {}{}\n",
        s.model, d.category, d.category == "hyperparameter" ? d.hyperparameter : d.node + d.input,
        d.evidence, a.description, a.result, fmt::join(files, ", "), model, data, labels, t.loss,
        (p / "hparams.json").string(), extra);
    if (a.data_changed)
      readme << "\nx.npy is the training data standardized per feature (axis 1) with the mean "
                "and standard deviation in standardization.json; apply the same to inputs at "
                "inference.\n";
    out.push_back(p.string());
  }
  return out;
}

void write_framework_reproducers(DiagnoseResult& r, const TrainSetup& s, const std::string& root) {
  auto& findings = r.split.check->findings;
  for (auto& d : r.diagnoses()) {
    if (d.category != "framework") continue;
    for (std::size_t i = 0; i < findings.size(); ++i) {
      auto& f = findings[i];
      if (f.node != d.node || f.binding != d.binding || f.phase != d.phase || f.inputs.empty())
        continue;
      if (f.repro.empty())
        f.repro = write_train_reproducer(r.split.training_graph, f, s.config.optimizer,
                                         r.split.applied.at(i), s.model, root);
      d.repro = f.repro;
      break;
    }
  }
}

}  // namespace metaop
