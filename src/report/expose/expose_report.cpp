#include "report/expose/expose_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "analysis/core/finding.h"
#include "bindings/factory.h"
#include "graph/onnx_io.h"
#include "report/core/chart.h"
#include "report/core/format.h"
#include "report/core/graph_view.h"
#include "report/core/html.h"
#include "tensor/npy.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

std::string quote(const std::string& s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string("-_./=:,+").find(c) != std::string::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string folder_of(const TargetOutcome& t) {
  std::string node = t.target.node_name;
  node.erase(0, node.find_first_not_of("/._"));
  return safe_file_name((t.exposed ? "exposed_" : "closest_") + node + "_" + t.target.kind);
}

std::string fmt_distance(double d, const std::string& unit) {
  if (!std::isfinite(d)) return "unreachable";
  return fmt::format("{:.4g}{}", d, unit == "binades" ? " binades" : "");
}

}  // namespace

void write_expose_files(ExposeResult& r, const std::string& model_path, const std::string& dir,
                        std::size_t max_closest) {
  // Closest approaches worth keeping: not exposed, moved closer than where they started.
  std::vector<std::size_t> closest;
  for (std::size_t i = 0; i < r.targets.size(); ++i) {
    const auto& t = r.targets[i];
    if (!t.exposed && t.status != TargetStatus::Independent && !t.inputs.empty() &&
        std::isfinite(t.distance) && t.distance < t.start_distance)
      closest.push_back(i);
  }
  std::sort(closest.begin(), closest.end(), [&](auto a, auto b) {
    auto rel = [&](std::size_t i) { return r.targets[i].distance / r.targets[i].start_distance; };
    return rel(a) < rel(b);
  });
  if (closest.size() > max_closest) {
    r.notes.push_back(
        fmt::format("closest points written for the {} closest of {} targets not "
                    "exposed (the JSON has every distance)",
                    max_closest, closest.size()));
    closest.resize(max_closest);
  }
  std::vector<std::size_t> chosen = closest;
  for (std::size_t i = 0; i < r.targets.size(); ++i)
    if (r.targets[i].exposed) chosen.push_back(i);
  for (auto i : chosen) {
    auto& t = r.targets[i];
    fs::path folder = fs::path(dir) / folder_of(t);
    fs::create_directories(folder);
    t.files.clear();
    for (const auto& [name, value] : t.inputs) {
      if (value.dtype() == DType::BFloat16) continue;  // .npy has no bfloat16
      std::string file = (folder / (safe_file_name(name) + ".npy")).string();
      write_npy(file, value);
      t.files.push_back(file);
    }
    if (!t.weights.empty()) {
      std::string file = (folder / "model.onnx").string();
      write_file(file, with_initializers(model_path, t.weights));
      t.files.push_back(file);
    }
    std::ofstream readme(folder / "README.txt");
    if (t.exposed)
      readme << fmt::format(
          "metaop expose: {} ({}) of {} exposed: {}\n\n{}\n\nThe model's non-finite outputs: {}\n"
          "\nReplay on {} (the NaN/INF shows in the nan/inf counts):\n  {}\n",
          t.target.node_name, t.target.kind, model_path, t.target.condition, t.explanation,
          fmt::join(t.nonfinite_outputs, ", "), r.binding, expose_run_command(r, t, model_path));
    else
      readme << fmt::format(
          "metaop expose: the closest point found for {} ({}) of {}: {}\n\ndistance {} (start "
          "{}): {}\n",
          t.target.node_name, t.target.kind, model_path, t.target.condition,
          fmt_distance(t.distance, t.target.unit), fmt_distance(t.start_distance, t.target.unit),
          t.detail);
  }
}

std::string expose_run_command(const ExposeResult& r, const TargetOutcome& t,
                               const std::string& model_path) {
  std::string model = model_path, inputs;
  for (const auto& f : t.files) {
    fs::path p(f);
    if (p.filename() == "model.onnx") {
      model = f;
      continue;
    }
    // The file name is the input's name made safe; match it back to the input.
    for (const auto& [name, value] : t.inputs)
      if (safe_file_name(name) + ".npy" == p.filename().string()) {
        inputs += " --input ";
        inputs += quote(fmt::format("{}={}", name, f));
      }
  }
  return fmt::format("metaop run {}{} --bind {}", quote(model), inputs, r.binding);
}

void print_expose_summary(std::FILE* out, const Graph& g, const ExposeResult& r,
                          const std::string& model_path) {
  std::vector<std::string> boxes;
  for (const auto& v : r.varied) {
    auto [lo, hi] = r.boxes.at(v);
    boxes.push_back(fmt::format("{} [{:.4g}, {:.4g}]", v, lo, hi));
  }
  fmt::print(out, "{}: {} nodes, {} targets; varied: {}; strategy {}, verdict on {}\n", model_path,
             g.nodes.size(), r.targets.size(), fmt::join(boxes, ", "), strategy_name(r.strategy),
             r.binding);
  for (const auto& n : r.notes) fmt::print(out, "note: {}\n", n);
  // One block per node that first produced a non-finite value: the targets exposed there share
  // the verdict (a Log and the Softmax that underflowed into it), earliest first.
  std::vector<const TargetOutcome*> exposed_targets;
  for (const auto& t : r.targets)
    if (t.exposed) exposed_targets.push_back(&t);
  std::stable_sort(exposed_targets.begin(), exposed_targets.end(),
                   [](auto a, auto b) { return a->seconds < b->seconds; });
  std::vector<std::string> firsts;
  for (const auto* t : exposed_targets)
    if (std::find(firsts.begin(), firsts.end(), t->first_node) == firsts.end())
      firsts.push_back(t->first_node);
  for (const auto& first : firsts) {
    std::vector<const TargetOutcome*> group;
    std::vector<std::string> names;
    for (const auto* t : exposed_targets)
      if (t->first_node == first) {
        group.push_back(t);
        names.push_back(
            fmt::format("{} ({} {})", t->target.node_name, t->target.op_type, t->target.kind));
      }
    const TargetOutcome& t = *group.front();
    fmt::print(out, "\nEXPOSED  first non-finite value at {} ({}), after {} steps, {:.3f} s ({})\n",
               t.first_node, t.first_op, t.iterations, t.seconds, t.found_by);
    fmt::print(out, "  {}\n", t.explanation);
    fmt::print(out, "  targets in their zone: {}\n", fmt::join(names, ", "));
    fmt::print(out, "  non-finite outputs: {}\n", fmt::join(t.nonfinite_outputs, ", "));
    if (!t.files.empty())
      fmt::print(out, "  reproduce: {}\n", expose_run_command(r, t, model_path));
  }
  std::size_t exposed = exposed_targets.size();
  std::vector<const TargetOutcome*> rest;
  for (const auto& t : r.targets)
    if (!t.exposed) rest.push_back(&t);
  if (!rest.empty()) {
    fmt::print(out, "\nnot exposed ({}):\n", rest.size());
    std::size_t shown = 0;
    for (const auto* t : rest) {
      if (++shown > 25) {
        fmt::print(out, "  ... {} more (see --json / --report)\n", rest.size() - 25);
        break;
      }
      fmt::print(out, "  {:<32} {:<10} {:<20} {:<12} closest {} (start {}){}\n",
                 t->target.node_name, t->target.op_type, t->target.kind, to_string(t->status),
                 fmt_distance(t->distance, t->target.unit),
                 fmt_distance(t->start_distance, t->target.unit),
                 t->detail.empty() ? "" : ": " + t->detail);
    }
  }
  fmt::print(out,
             "\n{} of {} targets exposed in {:.2f} s ({} steps, {} reference runs, {} verdict "
             "runs on {})\n",
             exposed, r.targets.size(), r.seconds, r.iterations, r.evaluations, r.verifications,
             r.binding);
  if (r.binding_entries > 0)
    fmt::print(out,
               "{} points entered a zone on {} only (its float32 rounding; the float64 "
               "reference stays out)\n",
               r.binding_entries, r.binding);
  fmt::print(out, "stopped by {}\n", r.stop_reason);
}

nlohmann::json expose_to_json(const ExposeResult& r, const std::string& model_path) {
  using nlohmann::json;
  json j;
  j["schema"] = "metaop-expose/1";
  j["model"] = model_path;
  j["binding"] = r.binding;
  j["binding_version"] = binding_version(r.binding);
  j["strategy"] = strategy_name(r.strategy);
  j["vary"] = vary_name(r.vary);
  json boxes = json::object();
  for (const auto& [name, b] : r.boxes) boxes[name] = {json_number(b.first), json_number(b.second)};
  j["varied"] = boxes;
  j["exposed"] = r.exposed();
  j["iterations"] = r.iterations;
  j["evaluations"] = r.evaluations;
  j["verifications"] = r.verifications;
  j["binding_entries"] = r.binding_entries;
  j["seconds"] = r.seconds;
  j["stop_reason"] = r.stop_reason;
  json targets = json::array();
  for (const auto& t : r.targets) {
    json o = {{"node", t.target.node_name},
              {"op_type", t.target.op_type},
              {"kind", t.target.kind},
              {"condition", t.target.condition},
              {"watched", t.target.watched},
              {"exposed", t.exposed},
              {"status", to_string(t.status)},
              {"iterations", t.iterations},
              {"seconds", t.seconds},
              {"distance", json_number(t.distance)},
              {"start_distance", json_number(t.start_distance)},
              {"unit", t.target.unit},
              {"detail", t.detail},
              {"input_files", t.files}};
    if (t.exposed) {
      o["first_nonfinite"] = {{"node", t.first_node}, {"op_type", t.first_op}};
      o["explanation"] = t.explanation;
      o["found_by"] = t.found_by;
      o["nonfinite_outputs"] = t.nonfinite_outputs;
      o["run_command"] =
          t.files.empty() ? json(nullptr) : json(expose_run_command(r, t, model_path));
    } else {
      o["first_nonfinite"] = nullptr;
    }
    targets.push_back(o);
  }
  j["targets"] = targets;
  j["notes"] = r.notes;
  return j;
}

namespace {

// The targets on the graph: exposed ones red (and the node that first gave a non-finite value),
// the others yellow, each with its zone and distance on hover and a link to its row.
std::vector<NodeMark> target_marks(const Graph& g, const ExposeResult& r) {
  std::vector<NodeMark> marks(g.nodes.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    index[g.nodes[k].name] = k;
    marks[k].tooltip = fmt::format("{} ({})", g.nodes[k].name, g.nodes[k].op_type);
  }
  for (std::size_t i = 0; i < r.targets.size(); ++i) {
    const auto& t = r.targets[i];
    auto it = index.find(t.target.node_name);
    if (it == index.end()) continue;
    NodeMark& m = marks[it->second];
    m.tooltip +=
        fmt::format("\n{} {}: {} (distance {}, from {})", t.target.kind, t.target.condition,
                    to_string(t.status), fmt_distance(t.distance, t.target.unit),
                    fmt_distance(t.start_distance, t.target.unit));
    int rank = t.exposed ? 3 : 1;
    if (rank <= m.rank) continue;
    m.rank = rank;
    m.fill = t.exposed ? "#f28b82" : "#fdd663";
    m.badge = t.exposed ? "exposed" : "";
    m.href = fmt::format("#target-{}", i);
    if (!t.exposed) continue;
    if (auto first = index.find(t.first_node);
        first != index.end() && first->second != it->second) {
      NodeMark& f = marks[first->second];
      f.rank = std::max(f.rank, 2);
      f.badge = "first non-finite";
      if (f.fill.empty()) f.fill = "#f6aea9";
      f.tooltip += fmt::format("\nfirst non-finite value when {} is exposed", t.target.node_name);
    }
  }
  return marks;
}

std::string legend_html() {
  return graph_legend({{"#f28b82", "target exposed (NaN/INF reached)"},
                       {"#f6aea9", "first node with a non-finite value"},
                       {"#fdd663", "target not exposed"},
                       {"#ffffff", "no danger zone"}},
                      "Hover a node for its zones; click a target for its row. Drag to pan, "
                      "wheel to zoom.");
}

// The targets, exposed ones first, then by how close the search came; each row "target-I".
std::string targets_table(const ExposeResult& r, const std::string& model_path) {
  std::string h;
  // Exposed targets first, then by how close the search came.
  std::vector<std::size_t> order(r.targets.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
    const auto &x = r.targets[a], &y = r.targets[b];
    if (x.exposed != y.exposed) return x.exposed;
    return x.distance / x.start_distance < y.distance / y.start_distance;
  });
  h += "<h2>Targets</h2><table id='targets'><tr><th>node</th><th>op</th><th>kind</th>"
       "<th>status</th><th>steps</th><th>seconds</th><th>distance (start)</th>"
       "<th>verdict / closest point</th><th>files</th></tr>";
  for (auto i : order) {
    const auto& t = r.targets[i];
    std::string verdict = t.exposed
                              ? fmt::format("first non-finite at {} ({})<br>{}<br><code>{}</code>",
                                            html_escape(t.first_node), html_escape(t.first_op),
                                            html_escape(t.explanation),
                                            html_escape(expose_run_command(r, t, model_path)))
                              : html_escape(t.detail);
    h += fmt::format(
        "<tr id='target-{}' class='target-row'><td>{}</td><td>{}</td><td>{}</td>"
        "<td class='{}'>{}</td><td>{}</td><td>{:.3f}</td><td>{} ({})</td><td>{}</td>"
        "<td><code>{}</code></td></tr>",
        i, html_escape(t.target.node_name), t.target.op_type, t.target.kind, t.exposed ? "bad" : "",
        to_string(t.status), t.iterations, t.seconds, fmt_distance(t.distance, t.target.unit),
        fmt_distance(t.start_distance, t.target.unit), verdict,
        html_escape(fmt::format("{}", fmt::join(t.files, " "))));
  }
  return h + "</table>";
}

}  // namespace

void write_expose_html(const Graph& g, const ExposeResult& r, const std::string& model_path,
                       const std::string& dir) {
  fs::create_directories(dir);
  std::size_t exposed = 0;
  for (const auto& t : r.targets) exposed += t.exposed;
  std::string h = fmt::format(
      "<!doctype html><html><head><meta charset='utf-8'><title>metaop expose: {}</title><style>"
      "body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:"
      "collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;"
      "vertical-align:top}} th{{background:#eee}} .bad{{color:#b00}} .ok{{color:#070}} "
      "code{{font-size:12px}}</style></head><body>",
      html_escape(model_path));
  std::vector<std::string> boxes;
  for (const auto& v : r.varied) {
    auto [lo, hi] = r.boxes.at(v);
    boxes.push_back(fmt::format("{} in [{:.4g}, {:.4g}]", v, lo, hi));
  }
  h += fmt::format(
      "<h1>metaop expose</h1><p><b>{}</b>: {} nodes, {} targets; varied {}; strategy {}; "
      "verdict on {}.</p><p class='{}'>{} of {} targets exposed in {:.2f} s ({} steps, {} "
      "reference runs, {} verdict runs).</p>",
      html_escape(model_path), g.nodes.size(), r.targets.size(),
      html_escape(fmt::format("{}", fmt::join(boxes, ", "))), strategy_name(r.strategy),
      html_escape(r.binding), exposed ? "bad" : "ok", exposed, r.targets.size(), r.seconds,
      r.iterations, r.evaluations, r.verifications);
  for (const auto& n : r.notes) h += "<p><i>note: " + html_escape(n) + "</i></p>";
  h += "<h2>The model</h2>" + graph_view_html(draw_graph(g, target_marks(g, r)), legend_html());

  // Distance over the search, relative to each target's start, on a common grid of steps.
  std::vector<std::size_t> shown;
  for (std::size_t i = 0; i < r.targets.size(); ++i)
    if (r.targets[i].status != TargetStatus::Independent) shown.push_back(i);
  std::sort(shown.begin(), shown.end(), [&](auto a, auto b) {
    return r.targets[a].distance / r.targets[a].start_distance <
           r.targets[b].distance / r.targets[b].start_distance;
  });
  if (shown.size() > 8) shown.resize(8);
  const std::size_t grid = 160;
  double last = static_cast<double>(std::max<std::int64_t>(r.iterations, 1));
  std::vector<ChartSeries> lines;
  for (auto i : shown) {
    const auto& t = r.targets[i];
    ChartSeries line{t.target.node_name + " " + t.target.kind, {}, {}, {}};
    for (std::size_t k = 0; k <= grid; ++k) {
      double at = last * static_cast<double>(k) / grid;
      double v = 1.0;
      for (const auto& [step, rel] : t.history)
        if (static_cast<double>(step) <= at) v = rel;
      line.x.push_back(at);
      line.y.push_back(v > 0 ? v : 1e-13);  // in the zone: drawn at the bottom
      line.labels.push_back(v > 0 ? fmt::format("{:.3g}", v) : "in the zone");
    }
    lines.push_back(std::move(line));
  }
  h += "<h2>Distance to each zone over the search</h2><p>Closest distance so far divided by the "
       "distance at the start point (log scale; the bottom is inside the zone), for the eight "
       "closest targets; hover the chart for every target's value at a step.</p>";
  if (!lines.empty())
    h += svg_chart(Chart{.xlabel = "step",
                         .ylabel = "distance / start distance",
                         .mark = ChartMark::Lines,
                         .lo = -12,
                         .hi = 0.3},
                   lines);
  h += targets_table(r, model_path);
  h += "</body></html>\n";
  std::ofstream(fs::path(dir) / "index.html") << h;
}

}  // namespace metaop
