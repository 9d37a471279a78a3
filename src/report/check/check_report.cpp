#include "report/check/check_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "analysis/core/accuracy.h"
#include "analysis/core/triage.h"
#include "bindings/factory.h"
#include "graph/onnx_io.h"
#include "report/core/chart.h"
#include "report/core/format.h"
#include "report/core/graph_view.h"
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

namespace {

// Where a finding goes on the page: defects (crashes and hangs first), untriaged ones,
// float32 limits, conventions, hazards; unsupported nodes last (collapsed).
int page_order(const Finding& f) {
  if (f.kind == FindingKind::Unsupported) return 9;
  if (f.kind == FindingKind::Crash || f.kind == FindingKind::Hang) return 0;
  switch (f.cls) {
    case FindingClass::Defect:
      return 1;
    case FindingClass::Untriaged:
      return 2;
    case FindingClass::Float32Limit:
      return 3;
    case FindingClass::Convention:
      return 4;
    case FindingClass::None:
      break;
  }
  return f.defect() ? 1 : 5;
}

// The class colours of the page, the graph's legend and its nodes.
const char* class_color(const Finding& f) {
  switch (page_order(f)) {
    case 0:
    case 1:
      return "#f28b82";  // defect (crash and hang too)
    case 2:
      return "#d7aefb";  // untriaged
    case 3:
      return "#fdd663";  // float32-limit
    case 4:
      return "#aecbfa";  // convention
    case 9:
      return "#dadce0";  // unsupported: the reference ran it
    default:
      return "#e6c9a8";  // hazard
  }
}

std::string class_word(const Finding& f) {
  if (f.kind == FindingKind::Unsupported) return "unsupported";
  if (f.cls != FindingClass::None) return to_string(f.cls);
  return to_string(f.kind);
}

// Each node's mark on the graph: its worst finding's class colour, a badge for crashes,
// non-finite values and reference fallbacks, its worst local score per binding on hover.
std::vector<NodeMark> node_marks(const Graph& g, const CheckResult& r,
                                 const std::vector<const Finding*>& ordered,
                                 std::map<std::string, NodeSeries>& ser) {
  std::vector<NodeMark> marks(g.nodes.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) index[g.nodes[k].name] = k;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    std::string scores;
    double worst = 0;
    for (const auto& b : r.bindings) {
      auto it = ser[b].score.find(k);
      if (it == ser[b].score.end()) continue;
      bool fell_back = ser[b].ran_on.at(k) != b;
      scores +=
          fmt::format("; {} {}", b, fell_back ? "ran on the reference" : fmt_score(it->second));
      if (!fell_back) worst = std::max(worst, it->second);
    }
    marks[k].tooltip = fmt::format("{} ({}){}", g.nodes[k].name, g.nodes[k].op_type,
                                   scores.empty() ? "" : "; worst local score" + scores);
    // Within its error models: paler the further below the threshold.
    marks[k].fill = worst > 0.5 ? "#e6f4ea" : "#ffffff";
  }
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const Finding& f = *ordered[i];
    auto it = index.find(f.node_name);
    if (it == index.end()) continue;
    NodeMark& m = marks[it->second];
    int rank = 10 - page_order(f);
    m.tooltip += fmt::format("\n{} under {} ({}): score {}", class_word(f), f.binding,
                             to_string(f.phase), fmt_score(f.score));
    if (rank <= m.rank) continue;
    m.rank = rank;
    m.fill = class_color(f);
    m.href = fmt::format("#finding-{}", i);
    m.badge = f.kind == FindingKind::Crash         ? "crash"
              : f.kind == FindingKind::Hang        ? "hang"
              : f.kind == FindingKind::Nonfinite   ? "NaN/INF"
              : f.kind == FindingKind::Unsupported ? "unsupported: " + f.binding
                                                   : "";
  }
  return marks;
}

std::string legend_html() {
  return graph_legend({{"#f28b82",
                        "defect (crash, hang; [whole-graph]: in a whole-graph discrepancy's "
                        "reduced model)"},
                       {"#d7aefb", "untriaged"},
                       {"#fdd663", "float32-limit"},
                       {"#aecbfa", "convention"},
                       {"#dadce0", "unsupported (ran on the reference)"},
                       {"#e6f4ea", "within its error model, local score over 0.5"},
                       {"#ffffff", "within its error model"}},
                      "Hover a node for its scores; click a marked one for its section. Drag "
                      "to pan, wheel to zoom.");
}

// For a finding of an element-wise op: each element's score (error / its tolerance) against the
// value of the data input it came from (the first of the output's shape), the threshold as a
// line; "" for other ops, or when no input matches the output element for element. Up to 600
// elements evenly spread, and the 50 worst.
std::string error_vs_input(const Graph& g, const Finding& f) {
  const MetaOp* op = OpRegistry::instance().find(f.op_type);
  if (op == nullptr || op->family != Family::elementwise || !f.numerical() ||
      f.node >= g.nodes.size() || f.binding_outputs.empty() || f.inputs.empty())
    return "";
  const Node& node = g.nodes[f.node];
  const Tensor& got = f.binding_outputs[0];
  std::size_t data = f.inputs.size();
  for (int d : op->domain.data_inputs) {
    auto k = static_cast<std::size_t>(d);
    if (k < f.inputs.size() && f.inputs[k].defined() && is_floating(f.inputs[k].dtype()) &&
        got.defined() && f.inputs[k].shape() == got.shape()) {
      data = k;
      break;
    }
  }
  if (data == f.inputs.size() || got.numel() == 0) return "";
  LocalCheck local;
  try {
    local = check_local(node, g.opset, f.inputs, f.binding_outputs);
  } catch (const std::exception&) {
    return "";  // the reference cannot run these inputs again: no plot rather than a wrong one
  }
  if (local.reference.empty() || local.tol.empty() ||
      local.tol[0].size() != static_cast<std::size_t>(got.numel()))
    return "";
  auto x = f.inputs[data].to_f64(), r = local.reference[0].to_f64(), b = got.to_f64();
  const auto& tol = local.tol[0];
  std::vector<double> score(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    bool same = (std::isnan(r[i]) && std::isnan(b[i])) || r[i] == b[i];
    score[i] = same ? 0
               : std::isfinite(r[i]) != std::isfinite(b[i]) || std::isnan(b[i])
                   ? INFINITY
                   : std::fabs(b[i] - r[i]) / tol[i];
  }
  std::vector<std::size_t> shown;
  std::size_t stride = std::max<std::size_t>(1, (b.size() + 599) / 600);  // at most 600
  for (std::size_t i = 0; i < b.size(); i += stride) shown.push_back(i);
  std::vector<std::size_t> worst(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) worst[i] = i;
  std::size_t most = std::min<std::size_t>(50, worst.size());
  std::partial_sort(worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(most), worst.end(),
                    [&](auto p, auto q) { return score[p] > score[q]; });
  shown.insert(shown.end(), worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(most));
  std::sort(shown.begin(), shown.end());
  shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
  const std::string& name = node.inputs[data];
  ChartSeries pts{f.binding, {}, {}, {}};
  for (auto i : shown) {
    pts.x.push_back(x[i]);
    pts.y.push_back(score[i]);
    pts.labels.push_back(fmt::format("{} = {:.9g}: reference {:.9g}, {} {:.9g}, score {}", name,
                                     x[i], r[i], f.binding, b[i], fmt_score(score[i])));
  }
  Chart c = score_chart(fmt::format("{} (input {} of {})", name, data, f.op_type), "score");
  double top = 0;
  for (double v : pts.y)
    if (std::isfinite(v) && v > 0) top = std::max(top, v);
  c.hi = std::max(1.0, std::ceil(std::log10(std::max(top, 1.0))));
  c.lo = std::min(-3.0, c.hi - 8);
  return fmt::format(
             "<details open><summary>error against input value ({} of {} elements; exact ones "
             "at the bottom, non-finite mismatches as red triangles at the top)</summary>",
             shown.size(), b.size()) +
         svg_chart(c, {pts}) + "</details>";
}

// One section per finding: what, where, the worst element, class, verification, reproducer.
std::string finding_section(const Graph& g, const Finding& f, std::size_t i) {
  std::string h = fmt::format(
      "<section class='finding' id='finding-{}'><h3><span style='background:{};padding:0 6px'>"
      "{}</span> {} under {} &mdash; {} ({}), {}</h3><table>",
      i, class_color(f), class_word(f), html_escape(f.node_name), html_escape(f.binding),
      to_string(f.kind), to_string(f.phase), html_escape(f.op_type));
  auto row = [&](const char* what, const std::string& value) {
    if (!value.empty())
      h += fmt::format("<tr><th>{}</th><td>{}</td></tr>", what, html_escape(value));
  };
  row("score", fmt_score(f.score) + " (x the error model's tolerance)");
  row("worst element", f.detail);
  row("class", f.class_basis);
  row("verification", (f.verified ? "verified: " : "not verified: ") + f.verification);
  if (f.numerical())
    row("model output error",
        fmt::format("{:.3g} with this kernel, {:.3g} with the reference in its place",
                    f.model_error_before, f.model_error_after));
  row("across versions", f.across_versions);
  row("reproducer", f.repro);
  row("minimized", f.minimized);
  h += "</table>" + error_vs_input(g, f);
  if (!f.repro.empty()) {
    std::ifstream readme(fs::path(f.repro) / "README.txt");
    std::stringstream text;
    text << readme.rdbuf();
    if (!text.str().empty())
      h += "<details><summary>the reproducer's README (its commands)</summary><pre>" +
           html_escape(text.str()) + "</pre></details>";
  }
  return h + "</section>";
}

}  // namespace

namespace {

// Why a binding lacks a node, without what is the node's own: its name ("node 'X' (Op): ") and
// the shapes in brackets, so that nodes that fail for one reason share one row.
std::string common_reason(const Finding& f) {
  std::string r = f.detail;
  std::string own = fmt::format("node '{}' ({}): ", f.node_name, f.op_type);
  if (auto at = r.find(own); at != std::string::npos) r.erase(at, own.size());
  std::string out;
  for (std::size_t i = 0; i < r.size(); ++i) {
    std::size_t close = r[i] == '[' ? r.find(']', i) : std::string::npos;
    if (close != std::string::npos &&
        r.find_first_not_of("0123456789, ?x-", i + 1) == close) {  // a shape: [1, 64, 56, 56]
      out += "[...]";
      i = close;
      continue;
    }
    out += r[i];
  }
  return out;
}

// The findings table (unsupported nodes one row per binding, op type and reason), then a
// section per other finding.
std::string findings_html(const Graph& g, const CheckResult& r,
                          const std::vector<const Finding*>& ordered) {
  std::string h = fmt::format("<h2>Findings ({})</h2>", r.findings.size());
  if (r.findings.empty()) return h + "<p class='ok'>Every kernel is within its error model.</p>";
  h += "<table id='findings'><tr><th>class</th><th>kind</th><th>binding</th><th>phase</th>"
       "<th>node</th><th>op</th><th>score</th><th>verified</th><th>reproducer</th></tr>";
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::string>> lacking;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const Finding& f = *ordered[i];
    if (f.kind == FindingKind::Unsupported) {
      lacking[{f.binding, f.op_type, common_reason(f)}].push_back(f.node_name);
      continue;
    }
    h += fmt::format(
        "<tr class='finding-row'><td style='background:{}'>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td><a href='#finding-{}'>{}</a></td><td>{}</td><td>{}</td><td>{}</td>"
        "<td><code>{}</code></td></tr>",
        class_color(f), class_word(f), to_string(f.kind), html_escape(f.binding),
        to_string(f.phase), i, html_escape(f.node_name), html_escape(f.op_type), fmt_score(f.score),
        f.defect() ? (f.verified ? "yes" : "no") : "-", html_escape(f.repro));
  }
  for (const auto& [key, nodes] : lacking) {
    const auto& [binding, op, why] = key;
    h += fmt::format(
        "<tr class='unsupported-row'><td style='background:#dadce0'>unsupported</td>"
        "<td colspan='8'>{} x{} under {} ran on the reference: {}<br><small>{}</small></td></tr>",
        html_escape(op), nodes.size(), html_escape(binding), html_escape(why),
        html_escape(fmt::format("{}", fmt::join(nodes, ", "))));
  }
  h += "</table>";
  for (std::size_t i = 0; i < ordered.size(); ++i)
    if (ordered[i]->kind != FindingKind::Unsupported) h += finding_section(g, *ordered[i], i);
  return h;
}

// The local score and propagated error of each node, per binding: a point per node in run
// order, its name, op and value on hover; the local score's threshold (1) as a line.
std::string charts_html(const Graph& g, const CheckResult& r,
                        std::map<std::string, NodeSeries>& ser) {
  const auto& order = ser["reference"].order;
  Chart local = score_chart("node (run order)");
  Chart drift{.xlabel = "node (run order)", .ylabel = "propagated rel. error", .lo = -10, .hi = 0};
  for (auto n : order) local.categories.push_back(g.nodes[n].name);
  drift.categories = local.categories;
  std::vector<ChartSeries> l, d;
  for (const auto& b : r.bindings) {
    const auto& ns = ser[b];
    ChartSeries ls{b, {}, {}, {}}, ds{b, {}, {}, {}};
    for (std::size_t i = 0; i < order.size(); ++i) {
      auto n = order[i];
      if (!ns.score.count(n)) continue;
      std::string where = fmt::format("{} ({}) under {}", g.nodes[n].name, g.nodes[n].op_type, b);
      ds.x.push_back(static_cast<double>(i));
      ds.y.push_back(ns.drift.at(n));
      ds.labels.push_back(where + fmt::format(": propagated error {:.3g}", ns.drift.at(n)));
      if (ns.ran_on.at(n) != b) continue;  // ran on the reference: no local score
      ls.x.push_back(static_cast<double>(i));
      ls.y.push_back(ns.score.at(n));
      ls.labels.push_back(where + ": local score " + fmt_score(ns.score.at(n)));
    }
    l.push_back(std::move(ls));
    d.push_back(std::move(ds));
  }
  return "<h2>Error along the model</h2><p>Local score: each kernel against the float64 "
         "reference on its own inputs, as a multiple of its error model's tolerance (above the "
         "red line: a finding; nodes a binding ran on the reference are left out). Propagated "
         "error: each value against the end-to-end reference run, relative to its largest "
         "magnitude. Hover a point for its node.</p>" +
         svg_chart(local, l) + svg_chart(drift, d);
}

// The slowest 25 nodes by the reference's time, each binding's time and heap peak beside it.
std::string time_table_html(const Graph& g, const CheckResult& r,
                            std::map<std::string, NodeSeries>& ser) {
  std::string h =
      "<h2>Time and memory per node</h2><p>Mean time over samples, and the largest heap peak "
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
  return h + "</table>";
}

// Model Explorer's node data (a GraphNodeData document: "results" by the node's first output
// tensor, each the node's worst local score over the bindings with its colour on this page;
// "thresholds" colour the rest by score), so that a model opened there is coloured the same.
nlohmann::json model_explorer_data(const Graph& g, const CheckResult& r,
                                   const std::vector<NodeMark>& marks,
                                   std::map<std::string, NodeSeries>& ser) {
  nlohmann::json results = nlohmann::json::object();
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].outputs.empty() || g.nodes[k].outputs[0].empty()) continue;
    double worst = 0;
    for (const auto& b : r.bindings) {
      auto it = ser[b].score.find(k);
      if (it != ser[b].score.end() && ser[b].ran_on.at(k) == b) worst = std::max(worst, it->second);
    }
    // JSON has no infinity: non-finite scores as 1e300.
    nlohmann::json e = {{"value", std::isfinite(worst) ? worst : 1e300}};
    if (marks[k].rank > 0) e["bgColor"] = marks[k].fill;
    results[g.nodes[k].outputs[0]] = e;
  }
  return {{"results", results},
          {"thresholds",
           {{{"value", 0.5}, {"bgColor", "#ffffff"}}, {{"value", 1}, {"bgColor", "#e6f4ea"}}}}};
}

}  // namespace

void write_html_report(const Graph& g, const CheckResult& r, const std::string& dir,
                       const CheckReportExtra& extra) {
  fs::create_directories(dir);
  auto ser = series(r);
  std::vector<const Finding*> ordered;
  ordered.reserve(r.findings.size());
  for (const auto& f : r.findings) ordered.push_back(&f);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Finding* a, const Finding* b) {
    return page_order(*a) < page_order(*b);
  });
  std::size_t defects = 0;
  for (const auto& f : r.findings) defects += f.defect();
  std::string h = fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop check: {}</title><style>"
      "body{{font-family:sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}} "
      "code,pre{{font-size:12px}} pre{{background:#f6f6f6;padding:6px;overflow-x:auto}} "
      "section.finding{{margin:1em 0}} #metaop-graph svg a{{cursor:pointer}}</style></head><body>"
      "<h1>metaop check</h1><p><b>{}</b>: {} nodes, opset {}, {} sample(s), bindings {}.</p>"
      "<p class='{}'><b>{} finding(s){}</b>{}</p>",
      html_escape(r.model), html_escape(r.model), g.nodes.size(), g.opset, r.samples,
      html_escape(fmt::format("{}", fmt::join(r.bindings, ", "))), defects ? "bad" : "ok",
      r.findings.size(), html_escape(class_counts(r.findings)),
      r.findings.empty() ? ": every kernel within its error model" : "");
  if (!extra.verdict.empty()) h += "<p class='bad'><b>" + html_escape(extra.verdict) + "</b></p>";
  h += extra.html;
  auto marks = node_marks(g, r, ordered, ser);
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    if (std::find(extra.nodes.begin(), extra.nodes.end(), g.nodes[k].name) != extra.nodes.end()) {
      marks[k].tooltip += "\nin a whole-graph discrepancy's reduced model";
      if (marks[k].rank >= 10) continue;  // its own defect shows first
      marks[k].rank = 10;
      marks[k].fill = "#f28b82";
      marks[k].badge = "whole-graph";
      marks[k].href = "#whole-graph";
    }
  h += "<h2>The model</h2>" + graph_view_html(draw_graph(g, marks), legend_html()) +
       "<p>The same colours for Model Explorer: <code>model_explorer.json</code> beside this page "
       "(its node data, by each node's first output).</p>";
  h += findings_html(g, r, ordered);
  h += charts_html(g, r, ser);
  h += time_table_html(g, r, ser);
  h += "<h2>As printed</h2><pre>" +
       html_escape(printed([&](std::FILE* f) { print_check_summary(f, g, r); })) +
       "</pre></body></html>\n";
  write_file((fs::path(dir) / "index.html").string(), h);
  write_file((fs::path(dir) / "model_explorer.json").string(),
             model_explorer_data(g, r, marks, ser).dump(1) + "\n");
}

}  // namespace metaop
