#include "report/train/train_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "graph/onnx_io.h"
#include "report/core/chart.h"
#include "report/core/format.h"
#include "report/core/graph_view.h"
#include "report/core/html.h"

namespace metaop {

namespace {

// The page's head: title, style and the model's name and loss.
std::string page_head(const TrainReport& r) {
  return fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop train: {}</title><style>"
      "body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}}"
      "</style></head><body><h1>metaop train</h1><p><b>{}</b>, loss {}.</p>",
      html_escape(r.model), html_escape(r.model), html_escape(r.loss));
}

// The loss curves of every plan on a log scale spanning their values, epochs marked.
std::string loss_section(const TrainReport& r) {
  std::vector<ChartSeries> curves;
  std::size_t steps = 0;
  for (const auto& [plan, l] : r.losses) {
    curves.push_back({plan, l, {}, {}});
    steps = std::max(steps, l.size());
  }
  Chart c{.xlabel = "step",
          .ylabel = "loss",
          .mark = ChartMark::Lines,
          .y_scale = scale_for(curves),
          .x_marks = epoch_marks(steps, r.steps_per_epoch),
          .x_offset = 1};
  return "<h2>Loss per step</h2>" + svg_chart(c, curves);
}

// Each node's worst forward and backward score along the graph, a point per node.
std::string error_section(const TrainReport& r) {
  const Graph& g = *r.graph;
  Chart c = score_chart("node (graph order)");
  ChartSeries fwd{"forward", {}, {}, {}}, bwd{"backward", {}, {}, {}};
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    c.categories.push_back(g.nodes[k].name);
    std::string where = fmt::format("{} ({})", g.nodes[k].name, g.nodes[k].op_type);
    fwd.y.push_back(r.check->forward_scores[k]);
    fwd.labels.push_back(where + ": forward score " + fmt_score(fwd.y.back()));
    bwd.y.push_back(r.check->backward_scores[k]);
    bwd.labels.push_back(where + ": backward score " + fmt_score(bwd.y.back()));
  }
  return fmt::format(
             "<h2>Error along the model</h2><p>Worst local score of each node over the {} "
             "checked steps: its forward, and its backward (the gradients it returns), against "
             "the float64 reference on the same inputs, as a multiple of the error model's "
             "tolerance (above the red line: a finding). Hover a point for its node.</p>",
             r.check->checked_steps) +
         svg_chart(c, {fwd, bwd});
}

// Each weight's worst update score as a bar ("" when no update was checked).
std::string update_section(const TrainReport& r) {
  if (r.check->update_scores.empty()) return "";
  Chart c = score_chart("weight", "update score", ChartMark::Bars);
  ChartSeries upd{"update", {}, {}, {}};
  for (const auto& [w, score] : r.check->update_scores) {
    c.categories.push_back(w);
    upd.y.push_back(score);
    upd.labels.push_back(w + ": update score " + fmt_score(score));
  }
  return "<h2>Updates</h2><p>Worst score of each weight's update by a framework's optimizer "
         "(new weight and optimizer state against the float64 rule on the same weight, "
         "gradient and state), over the checked steps.</p>" +
         svg_chart(c, {upd});
}

// The check's findings as a table.
std::string findings_section(const TrainReport& r) {
  std::string h = fmt::format("<h2>Findings ({})</h2>", r.check->findings.size());
  if (r.check->findings.empty())
    return h +
           "<p class='ok'>Every checked forward, backward and update is within its error "
           "model.</p>";
  h += "<table><tr><th>phase</th><th>kind</th><th>binding</th><th>node</th><th>op</th>"
       "<th>score</th><th>step</th><th>detail</th><th>verification</th><th>reproducer</th>"
       "</tr>";
  for (std::size_t i = 0; i < r.check->findings.size(); ++i) {
    const auto& f = r.check->findings[i];
    h += fmt::format(
        "<tr id='train-finding-{}'><td>{}</td><td class='bad'>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        i, f.phase, f.kind, f.binding, html_escape(f.node), f.op_type, fmt_score(f.score), f.step,
        html_escape(f.detail), html_escape(f.verification), html_escape(f.repro));
  }
  h += "</table>";
  return h;
}

// The model as a graph (report/core/graph_view.h): each node with a finding red (its phases as
// the badge) and linked to the findings table, its worst forward and backward scores on hover.
std::string graph_section(const TrainReport& r) {
  const Graph& g = *r.graph;
  std::vector<NodeMark> marks(g.nodes.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    index[g.nodes[k].name] = k;
    double fwd = k < r.check->forward_scores.size() ? r.check->forward_scores[k] : 0;
    double bwd = k < r.check->backward_scores.size() ? r.check->backward_scores[k] : 0;
    marks[k].tooltip =
        fmt::format("{} ({}); worst local score forward {}, backward {}", g.nodes[k].name,
                    g.nodes[k].op_type, fmt_score(fwd), fmt_score(bwd));
    if (std::max(fwd, bwd) > 0.5) marks[k].fill = "#e6f4ea";
  }
  for (std::size_t i = 0; i < r.check->findings.size(); ++i) {
    const auto& f = r.check->findings[i];
    auto it = index.find(f.node);
    if (it == index.end()) continue;
    NodeMark& m = marks[it->second];
    m.tooltip += fmt::format("\n{} {} under {}: score {} (step {})", f.phase, f.kind, f.binding,
                             fmt_score(f.score), f.step);
    m.badge += fmt::format("{}{}", m.badge.empty() ? "" : ", ", to_string(f.phase));
    if (m.rank > 0) continue;
    m.rank = 1;
    m.fill = "#f28b82";
    m.href = fmt::format("#train-finding-{}", i);
  }
  return "<h2>The model</h2>" +
         graph_view_html(
             draw_graph(g, marks),
             graph_legend({{"#f28b82", "a finding (forward, backward or update)"},
                           {"#e6f4ea", "within its error models, a local score over 0.5"},
                           {"#ffffff", "within its error models"}},
                          "Hover a node for its worst scores; click a marked one for its "
                          "finding. Drag to pan, wheel to zoom."));
}

// The 25 slowest nodes' mean time per step and heap peaks.
std::string profile_section(const TrainReport& r) {
  auto slow = slowest(*r.profile, 25);
  std::string h =
      "<h2>Time and memory per node</h2><p>The 25 slowest nodes: mean time per step of the "
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
  return h;
}

}  // namespace

void write_train_report(const TrainReport& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::string h = page_head(r);
  h += loss_section(r);
  if (r.check && r.graph) {
    h += graph_section(r);
    h += error_section(r);
    h += update_section(r);
    h += findings_section(r);
  }
  if (r.profile && r.steps > 0) h += profile_section(r);
  h += "</body></html>\n";
  write_file((std::filesystem::path(dir) / "index.html").string(), h);
}

}  // namespace metaop
