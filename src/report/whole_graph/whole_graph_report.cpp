#include "report/whole_graph/whole_graph_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bindings/factory.h"
#include "graph/onnx_io.h"
#include "report/core/format.h"
#include "report/core/html.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

std::string fmt_rel(double v) {
  return std::isfinite(v) ? fmt::format("{:.3g}", v) : std::string("inf");
}

std::string describe(const TensorVerdict& t) {
  if (!t.mismatch.empty()) return fmt::format("'{}': {}", t.value, t.mismatch);
  // Non-finite values in absolute terms: how many of the output's elements each run gives, and
  // how many of those the reference does not have.
  std::string nonfinite;
  if (t.whole_nonfinite_values || t.nbn_nonfinite_values || t.ref_nonfinite_values)
    nonfinite = fmt::format(
        "; non-finite values: {} of {} whole ({} where the reference is finite or the reverse), "
        "{} node by node ({}), {} in the reference",
        t.whole_nonfinite_values, t.elements, t.whole_nonfinite, t.nbn_nonfinite_values,
        t.nbn_nonfinite, t.ref_nonfinite_values);
  return fmt::format("'{}': whole {} vs node-by-node {} (yardstick {}){}", t.value,
                     fmt_rel(t.whole), fmt_rel(t.node_by_node), fmt_rel(t.yardstick), nonfinite);
}

nlohmann::json tensor_json(const TensorVerdict& t) {
  return {{"value", t.value},
          {"whole", json_number(t.whole)},
          {"node_by_node", json_number(t.node_by_node)},
          {"yardstick", json_number(t.yardstick)},
          {"whole_nonfinite", t.whole_nonfinite},
          {"node_by_node_nonfinite", t.nbn_nonfinite},
          {"elements", t.elements},
          {"whole_nonfinite_values", t.whole_nonfinite_values},
          {"node_by_node_nonfinite_values", t.nbn_nonfinite_values},
          {"reference_nonfinite_values", t.ref_nonfinite_values},
          {"mismatch", t.mismatch},
          {"bad", t.bad}};
}

}  // namespace

void print_whole_graph_summary(std::FILE* out, const WholeGraphResult& r, double factor) {
  fmt::print(out,
             "whole-graph mode (rule: an output's normwise error over {:g} x max(node-by-node "
             "error, 2^-20), or non-finite where node by node is not):\n",
             factor);
  for (const auto& v : r.verdicts) {
    double worst = 0, nbn = 0;
    for (const auto& t : v.outputs) {
      worst = std::max(worst, t.whole);
      nbn = std::max(nbn, t.node_by_node);
    }
    if (v.status == WholeGraphStatus::Ok || v.status == WholeGraphStatus::Discrepancy)
      fmt::print(out,
                 "  {:<9} sample {} level {:<8} {:<11} whole {} node-by-node {} ({:.2f} s whole, "
                 "{:.2f} s node by node)\n",
                 v.binding, v.sample, v.level, to_string(v.status), fmt_rel(worst), fmt_rel(nbn),
                 v.seconds_whole, v.seconds_node_by_node);
    else
      fmt::print(out, "  {:<9} sample {} level {:<8} {}: {}\n", v.binding, v.sample, v.level,
                 to_string(v.status), v.detail);
    for (const auto& t : v.outputs)
      if (t.bad) fmt::print(out, "      {}\n", describe(t));
    if (!v.reduction) continue;
    const Reduction& red = *v.reduction;
    fmt::print(out,
               "    localized by reduction: first shown at '{}'; {} framework runs to localize "
               "({} prefixes + {} windows; budget ceil(log2 {}) + 4 = {}), {} on levels, {} to "
               "verify; {} node-by-node yardstick runs\n",
               red.first_value, red.prefix_runs + red.window_runs, red.prefix_runs, red.window_runs,
               red.nodes, red.budget, red.level_runs, red.verify_runs, red.node_by_node_runs);
    if (!red.note.empty()) {
      fmt::print(out, "    not reduced: {}\n", red.note);
      continue;
    }
    std::vector<std::string> parts;
    parts.reserve(red.window.size());
    for (std::size_t i = 0; i < red.window.size(); ++i)
      parts.push_back(fmt::format("{} ({})", red.window[i], red.window_ops[i]));
    fmt::print(out, "    reduced model: {} node(s): {}\n", red.window.size(),
               fmt::join(parts, " -> "));
    std::vector<std::string> lv;
    lv.reserve(red.levels_tried.size());
    for (const auto& [l, s] : red.levels_tried)
      lv.push_back(fmt::format("{} {}", l, s ? "shows it" : "quiet"));
    fmt::print(out, "    introduced at level '{}' ({}); {}\n", red.level, fmt::join(lv, ", "),
               describe(red.evidence));
    fmt::print(out, "    {}{}\n", red.verified ? "verified: " : "NOT verified: ", red.verification);
    if (!red.repro.empty()) fmt::print(out, "    reproducer: {}\n", red.repro);
  }
}

std::string whole_graph_html(const WholeGraphResult& r, double factor) {
  std::string h = fmt::format(
      "<h2>Whole-graph verdicts</h2><p>Each binding ran the model whole, as its users run it; an "
      "output is a discrepancy when its normwise error is over {:g} x max(node-by-node error, "
      "2^-20), or non-finite where node by node it is not.</p><table id='whole-graph'><tr>"
      "<th>binding</th><th>sample</th><th>level</th><th>verdict</th><th>whole</th>"
      "<th>node by node</th><th>outputs</th></tr>",
      factor);
  for (const auto& v : r.verdicts) {
    double worst = 0, nbn = 0;
    std::size_t bad = 0;
    for (const auto& t : v.outputs) {
      worst = std::max(worst, t.whole);
      nbn = std::max(nbn, t.node_by_node);
      bad += t.bad;
    }
    bool ok = v.status == WholeGraphStatus::Ok;
    h += fmt::format(
        "<tr class='{}'><td>{}</td><td>{}</td><td>{}</td><td><b>{}</b></td><td>{}</td>"
        "<td>{}</td><td>{} of {} bad</td></tr>",
        ok ? "ok" : "bad", html_escape(v.binding), v.sample, html_escape(v.level),
        to_string(v.status), fmt_rel(worst), fmt_rel(nbn), bad, v.outputs.size());
  }
  return h + "</table><pre>" +
         html_escape(printed([&](std::FILE* f) { print_whole_graph_summary(f, r, factor); })) +
         "</pre>";
}

nlohmann::json whole_graph_to_json(const WholeGraphResult& r, double factor) {
  nlohmann::json j;
  j["rule"] = {{"factor", factor}, {"floor", 0x1p-20}};
  j["verdicts"] = nlohmann::json::array();
  for (const auto& v : r.verdicts) {
    nlohmann::json e{{"binding", v.binding},
                     {"binding_version", binding_version(v.binding)},
                     {"sample", v.sample},
                     {"level", v.level},
                     {"status", to_string(v.status)},
                     {"detail", v.detail},
                     {"runs_at", v.runs_at},
                     {"seconds_whole", v.seconds_whole},
                     {"seconds_node_by_node", v.seconds_node_by_node}};
    e["outputs"] = nlohmann::json::array();
    for (const auto& t : v.outputs) e["outputs"].push_back(tensor_json(t));
    if (v.reduction) {
      const Reduction& red = *v.reduction;
      nlohmann::json levels = nlohmann::json::array();
      for (const auto& [l, s] : red.levels_tried) levels.push_back({{"level", l}, {"shows", s}});
      e["reduction"] = {{"nodes", red.nodes},
                        {"prefix_runs", red.prefix_runs},
                        {"window_runs", red.window_runs},
                        {"level_runs", red.level_runs},
                        {"verify_runs", red.verify_runs},
                        {"node_by_node_runs", red.node_by_node_runs},
                        {"budget", red.budget},
                        {"first_value", red.first_value},
                        {"window", red.window},
                        {"window_ops", red.window_ops},
                        {"level", red.level},
                        {"levels_tried", levels},
                        {"evidence", tensor_json(red.evidence)},
                        {"verified", red.verified},
                        {"verification", red.verification},
                        {"repro", red.repro},
                        {"note", red.note}};
    }
    j["verdicts"].push_back(e);
  }
  return j;
}

std::string write_whole_graph_reproducer(const WholeGraphVerdict& v, const std::string& root,
                                         const std::vector<std::string>& extra_args) {
  if (!v.reduction) return "";  // nothing was reduced: no reproducer
  const Reduction& red = *v.reduction;
  fs::path dir = fs::path(root) / safe_file_name("whole_" + v.binding + "_" + red.window.back());
  fs::create_directories(dir);
  SubgraphSpec spec;
  for (std::size_t i = 0; i < red.graph.nodes.size(); ++i) spec.nodes.push_back(i);
  for (const auto& [n, t] : red.inputs) spec.values[n] = t;
  for (const auto& [n, t] : red.reference) spec.values[n] = t;
  write_file((dir / "model.onnx").string(), export_subgraph(red.graph, spec));
  std::string args;
  for (const auto& [n, t] : red.inputs) {
    std::string file = "input_" + safe_file_name(n) + ".npy";
    write_npy((dir / file).string(), t);
    args += " --input ";
    args += shell_quote(fmt::format("{}={}", n, file));
  }
  for (const auto& [n, t] : red.reference)
    write_npy((dir / ("reference_" + safe_file_name(n) + ".npy")).string(), t);
  for (const auto& a : extra_args) args += " " + a;
  std::string level_arg = v.level_option.empty() ? "" : " " + v.level_option + " " + red.level;
  write_file(
      (dir / "README.txt").string(),
      fmt::format(
          "metaop check --whole-graph: {} {}.\n"
          "Reduced to {} node(s) ({}), fed the float64 reference's values of their inputs\n"
          "(input_*.npy); reference_*.npy are the reference's outputs. Introduced at level "
          "'{}'.\n\n"
          "Show it:\n  metaop check model.onnx --whole-graph --bind {}{}{}\n",
          v.binding,
          v.status == WholeGraphStatus::Refused
              ? fmt::format("refuses the model whole at its optimization levels from '{}' on, "
                            "and runs it at level '{}'",
                            red.level, v.runs_at)
              : "computes the model whole worse than node by node",
          red.window.size(), fmt::join(red.window_ops, " -> "), red.level, v.binding, level_arg,
          args));
  return dir.string();
}

}  // namespace metaop
