#include "report/check/check_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "analysis/core/triage.h"
#include "bindings/factory.h"
#include "graph/onnx_io.h"
#include "report/core/format.h"
#include "report/core/html.h"
#include "tensor/text.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

// Per binding, per node: the worst local score and propagated drift over the samples.
struct NodeSeries {
  std::vector<std::size_t> order;         // nodes in run order
  std::map<std::size_t, double> score;    // node -> worst local score
  std::map<std::size_t, double> drift;    // node -> worst relative propagated error
  std::map<std::size_t, double> seconds;  // node -> mean time
  std::map<std::size_t, double> peak_mb;  // node -> largest heap peak of its kernel, MB
  std::map<std::size_t, std::string> ran_on;
};

std::map<std::string, NodeSeries> series(const CheckResult& r) {
  std::map<std::string, NodeSeries> s;
  std::map<std::string, int> runs;
  for (const auto& run : r.runs) {
    auto& ns = s[run.binding];
    ++runs[run.binding];
    for (const auto& n : run.nodes) {
      if (!ns.score.count(n.node)) ns.order.push_back(n.node);
      ns.score[n.node] = std::max(ns.score[n.node], n.local.score);
      double d = n.propagated.nonfinite ? INFINITY : n.propagated.rel;
      ns.drift[n.node] = std::max(ns.drift[n.node], d);
      ns.seconds[n.node] += n.seconds;
      ns.peak_mb[n.node] = std::max(ns.peak_mb[n.node], static_cast<double>(n.heap_peak) / 1e6);
      ns.ran_on[n.node] = n.ran_on;
    }
  }
  for (auto& [b, ns] : s)
    for (auto& [n, t] : ns.seconds) t /= runs[b];
  return s;
}

}  // namespace

namespace {

// Per binding: nodes, fallbacks to the reference, the worst local score, the output drift and
// the time against the reference's.
void print_binding_table(std::FILE* out, const CheckResult& r,
                         std::map<std::string, NodeSeries>& ser) {
  fmt::print(out, "\n{:<10} {:>6} {:>9} {:>12} {:>14} {:>10} {:>8}\n", "binding", "nodes",
             "fallback", "worst local", "output drift", "time [ms]", "x ref");
  double ref_time = 0;
  for (const auto& [n, t] : ser["reference"].seconds) ref_time += t;
  std::vector<std::string> names{"reference"};
  names.insert(names.end(), r.bindings.begin(), r.bindings.end());
  for (const auto& b : names) {
    const auto& ns = ser[b];
    std::size_t fallback = 0;
    double worst = 0, total = 0, out_drift = 0;
    for (auto n : ns.order) {
      fallback += ns.ran_on.at(n) != b;
      worst = std::max(worst, ns.score.at(n));
      total += ns.seconds.at(n);
    }
    for (const auto& run : r.runs)
      if (run.binding == b)
        out_drift = std::max(out_drift, run.output.nonfinite ? INFINITY : run.output.rel);
    fmt::print(out, "{:<10} {:>6} {:>9} {:>12} {:>14} {:>10.2f} {:>8.2f}\n", b, ns.order.size(),
               b == "reference" ? 0 : fallback, b == "reference" ? "-" : fmt_score(worst),
               b == "reference" ? "-" : fmt::format("{:.3g}", out_drift), total * 1e3,
               ref_time > 0 ? total / ref_time : 0.0);
  }
}

// One finding's lines: what, where, the worst element, class, verification, its folders.
void print_finding(std::FILE* out, const Finding& f) {
  fmt::print(out, "  {:<11} {:<9} {} ({})  score {}{}\n", f.kind, f.binding, printable(f.node_name),
             printable(f.op_type, 64), fmt_score(f.score),
             f.verified ? "  verified" : "  not verified");
  fmt::print(out, "      {}\n", printable(f.detail, 4000));
  if (f.cls != FindingClass::None)
    fmt::print(out, "      class {}: {}\n", to_string(f.cls), printable(f.class_basis, 4000));
  if (!f.verification.empty() && f.numerical())
    fmt::print(out, "      {} (model output error {:.3g} -> {:.3g})\n",
               printable(f.verification, 4000), f.model_error_before, f.model_error_after);
  if (!f.repro.empty()) fmt::print(out, "      reproducer: {}\n", printable(f.repro, 4000));
  if (!f.minimized.empty()) fmt::print(out, "      minimized: {}\n", printable(f.minimized, 4000));
  if (!f.across_versions.empty()) fmt::print(out, "      across versions: {}\n", f.across_versions);
}

// The five slowest nodes per framework binding, with the reference's time for scale.
void print_slowest(std::FILE* out, const Graph& g, const CheckResult& r,
                   std::map<std::string, NodeSeries>& ser) {
  for (const auto& b : r.bindings) {
    const auto& ns = ser[b];
    std::vector<std::size_t> nodes = ns.order;
    std::sort(nodes.begin(), nodes.end(),
              [&](auto x, auto y) { return ns.seconds.at(x) > ns.seconds.at(y); });
    nodes.resize(std::min<std::size_t>(nodes.size(), 5));
    fmt::print(out, "\nslowest nodes under {}:\n", b);
    for (auto n : nodes) {
      double ref = ser["reference"].seconds.count(n) ? ser["reference"].seconds.at(n) : 0;
      fmt::print(out, "  {:<40} {:<18} {:>9.3f} ms  {:>8.2f} MB peak  (reference {:.3f} ms)\n",
                 printable(g.nodes[n].name, 80), printable(g.nodes[n].op_type, 64),
                 ns.seconds.at(n) * 1e3, ns.peak_mb.at(n), ref * 1e3);
    }
  }
}

}  // namespace

void print_check_summary(std::FILE* out, const Graph& g, const CheckResult& r) {
  auto ser = series(r);
  fmt::print(out, "{}: {} nodes, opset {}; {} sample(s); bindings: {}\n", printable(r.model),
             g.nodes.size(), g.opset, r.samples, fmt::join(r.bindings, ", "));
  print_binding_table(out, r, ser);
  std::size_t defects = 0;
  for (const auto& f : r.findings) defects += f.defect();
  fmt::print(out, "\n{} finding(s){}", r.findings.size(), class_counts(r.findings));
  if (r.findings.empty()) fmt::print(out, ": every kernel within its error model\n");
  fmt::print(out, "\n");
  // Defects one by one; ops a binding lacks, counted per binding and op type.
  std::map<std::string, std::map<std::string, int>> unsupported;
  std::size_t shown = 0;
  for (const auto& f : r.findings) {
    if (!f.defect()) {
      ++unsupported[f.binding][f.op_type];
      continue;
    }
    if (++shown > 30) {
      fmt::print(out, "  ... {} more findings (see --json / --report)\n", defects - 30);
      break;
    }
    print_finding(out, f);
  }
  for (const auto& [b, ops] : unsupported) {
    std::vector<std::string> items;
    for (const auto& [op, n] : ops) items.push_back(fmt::format("{} x{}", printable(op, 64), n));
    fmt::print(out, "  unsupported under {} (ran on the reference): {}\n", b,
               fmt::join(items, ", "));
  }
  for (const auto& [where, what] : r.fault_log)
    fmt::print(out, "  injected {}: {}\n", printable(where), printable(what, 4000));
  print_slowest(out, g, r, ser);
}

nlohmann::json check_to_json(const Graph& g, const CheckResult& r) {
  using nlohmann::json;
  json j;
  j["schema"] = "metaop-check/1";
  j["model"] = r.model;
  j["opset"] = g.opset;
  j["samples"] = r.samples;
  j["bindings"] = r.bindings;
  json nodes = json::array();
  for (const auto& n : g.nodes) nodes.push_back({{"name", n.name}, {"op_type", n.op_type}});
  j["nodes"] = nodes;
  json findings = json::array();
  for (const auto& f : r.findings) {
    json o = verified_finding_json(f);
    o["node"] = f.node_name;
    o["sample"] = f.sample;
    if (!f.output.empty()) {
      o["output"] = f.output;
      o["index"] = f.index;
      o["reference_value"] = json_number(f.reference_value);
      o["binding_value"] = json_number(f.binding_value);
      o["tolerance"] = json_number(f.tolerance);
    }
    if (f.numerical()) {
      o["model_error_before"] = json_number(f.model_error_before);
      o["model_error_after"] = json_number(f.model_error_after);
    }
    if (!f.across_versions.empty())
      o["across_versions"] = {{"verdict", f.across_versions_word},
                              {"phrase", f.across_versions},
                              {"bindings", f.versions}};
    findings.push_back(o);
  }
  j["findings"] = findings;
  j["classes"] = class_tally(r.findings);
  json runs = json::array();
  for (const auto& run : r.runs) {
    json rn = {{"binding", run.binding},
               {"binding_version", binding_version(run.binding)},
               {"sample", run.sample},
               {"seconds", run.seconds},
               {"output_error", json_number(run.output.rel)},
               {"output_nonfinite", run.output.nonfinite}};
    json ns = json::array();
    for (const auto& n : run.nodes) {
      json e = {{"node", g.nodes[n.node].name}, {"ran_on", n.ran_on},
                {"seconds", n.seconds},         {"output_bytes", n.output_bytes},
                {"heap_delta", n.heap_delta},   {"heap_peak", n.heap_peak}};
      if (run.binding != "reference") {
        e["local"] = {{"score", json_number(n.local.score)},
                      {"max_abs_err", json_number(n.local.max_abs_err)},
                      {"max_ulp_err", json_number(n.local.max_ulp_err)},
                      {"over", n.local.over},
                      {"nonfinite", n.local.nonfinite}};
        e["propagated"] = {{"max_abs_err", json_number(n.propagated.max_abs_err)},
                           {"rel", json_number(n.propagated.rel)},
                           {"nonfinite", n.propagated.nonfinite}};
      }
      if (!n.fallback.empty()) e["fallback"] = n.fallback;
      if (!n.crash.empty()) e["crash"] = n.crash;
      ns.push_back(e);
    }
    rn["nodes"] = ns;
    runs.push_back(rn);
  }
  j["runs"] = runs;
  if (!r.fault_log.empty()) j["injected"] = r.fault_log;
  return j;
}

void write_html_report(const Graph& g, const CheckResult& r, const std::string& dir) {
  fs::create_directories(dir);
  auto ser = series(r);
  std::string h = fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop check: {}</title><style>"
      "body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}} "
      "code{{font-size:12px}}</style></head><body>",
      html_escape(r.model));
  h += fmt::format(
      "<h1>metaop check</h1><p><b>{}</b>: {} nodes, opset {}, {} sample(s), "
      "bindings {}.</p>",
      html_escape(r.model), g.nodes.size(), g.opset, r.samples,
      html_escape(fmt::format("{}", fmt::join(r.bindings, ", "))));
  std::vector<std::string> colors{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  std::vector<std::pair<std::string, std::vector<double>>> local, drift;
  for (const auto& b : r.bindings) {
    const auto& ns = ser[b];
    std::vector<double> l, d;
    for (auto n : ns.order) {
      l.push_back(ns.score.at(n));
      d.push_back(ns.drift.at(n));
    }
    local.emplace_back(b, l);
    drift.emplace_back(b, d);
  }
  h += "<h2>Error along the model</h2><p>Local score: each kernel against the float64 reference "
       "on its own inputs, as a multiple of its error model's tolerance (above the red line: a "
       "finding). Propagated error: each value against the end-to-end reference run, relative "
       "to its largest magnitude.</p>";
  h += svg_plot(local, colors, -6, 4, 1, "local score");
  h += svg_plot(drift, colors, -10, 0, 0, "propagated rel. error");

  h += fmt::format("<h2>Findings ({})</h2>", r.findings.size());
  if (r.findings.empty())
    h += "<p class='ok'>Every kernel is within its error model.</p>";
  else {
    h += "<table><tr><th>kind</th><th>class</th><th>binding</th><th>node</th><th>op</th>"
         "<th>score</th><th>verified</th><th>detail</th><th>reproducer</th></tr>";
    for (const auto& f : r.findings)
      h += fmt::format(
          "<tr><td class='{}'>{}</td><td title='{}'>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td>{}<br><i>{}</i></td><td><code>{}</code></td></tr>",
          f.defect() ? "bad" : "", f.kind, html_escape(f.class_basis), to_string(f.cls), f.binding,
          html_escape(f.node_name), f.op_type, fmt_score(f.score),
          f.defect() ? (f.verified ? "yes" : "no") : "-", html_escape(f.detail),
          html_escape(f.verification), html_escape(f.repro));
    h += "</table>";
  }
  h += "<h2>Time and memory per node</h2><p>Mean time over samples, and the largest heap peak "
       "of the kernel (bytes allocated above the level before it, outputs and temporaries); the "
       "slowest 25 nodes by the reference's time.</p><table><tr><th>node</th><th>op</th>"
       "<th>reference [ms]</th>";
  for (const auto& b : r.bindings) h += fmt::format("<th>{} [ms]</th><th>{} peak [MB]</th>", b, b);
  h += "</tr>";
  auto order = ser["reference"].order;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return ser["reference"].seconds.at(a) > ser["reference"].seconds.at(b);
  });
  order.resize(std::min<std::size_t>(order.size(), 25));
  for (auto n : order) {
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td>", html_escape(g.nodes[n].name),
                     g.nodes[n].op_type, ser["reference"].seconds.at(n) * 1e3);
    for (const auto& b : r.bindings) {
      auto& s = ser[b].seconds;
      h += s.count(n)
               ? fmt::format("<td>{:.3f}{}</td><td>{:.2f}</td>", s.at(n) * 1e3,
                             ser[b].ran_on.at(n) != b ? " (fallback)" : "", ser[b].peak_mb.at(n))
               : "<td>-</td><td>-</td>";
    }
    h += "</tr>";
  }
  h += "</table></body></html>\n";
  write_file((fs::path(dir) / "index.html").string(), h);
}

}  // namespace metaop
