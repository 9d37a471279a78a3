#include "report/train_report.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "report/html.h"

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
    h += fmt::format("<h2>Findings ({})</h2>", r.check->findings.size());
    if (r.check->findings.empty()) {
      h += "<p class='ok'>Every checked forward and backward is within its error model.</p>";
    } else {
      h += "<table><tr><th>phase</th><th>kind</th><th>binding</th><th>node</th><th>op</th>"
           "<th>score</th><th>step</th><th>detail</th><th>verification</th></tr>";
      for (const auto& f : r.check->findings)
        h += fmt::format(
            "<tr><td>{}</td><td class='bad'>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            f.phase, f.kind, f.binding, html_escape(f.node), f.op_type,
            std::isfinite(f.score) ? fmt::format("{:.3g}", f.score) : "inf", f.step,
            html_escape(f.detail), html_escape(f.verification));
      h += "</table>";
    }
  }
  h += "</body></html>\n";
  std::ofstream(std::filesystem::path(dir) / "index.html") << h;
}

}  // namespace metaop
