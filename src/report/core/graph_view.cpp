#include "report/core/graph_view.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "report/core/html.h"

extern char** environ;

namespace metaop {

namespace {

namespace fs = std::filesystem;

// A string as a DOT quoted string's contents.
std::string dot_quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

std::string shape_label(const Graph& g, const std::string& value) {
  const ValueInfo* vi = g.find_value_info(value);
  if (!vi || !vi->dims) return "";
  std::vector<std::string> dims;
  for (auto d : *vi->dims) dims.push_back(d < 0 ? "?" : std::to_string(d));
  return dims.empty() ? "scalar" : fmt::format("{}", fmt::join(dims, "x"));
}

// The scope parts of a node's name: "/layer1/layer1.0/conv1/Conv" -> layer1, layer1.0, conv1.
std::vector<std::string> scope_of(const std::string& name) {
  std::vector<std::string> parts;
  if (name.empty() || name[0] != '/') return parts;
  std::stringstream in(name.substr(1));
  for (std::string p; std::getline(in, p, '/');) parts.push_back(p);
  if (!parts.empty()) parts.pop_back();  // the op itself
  return parts;
}

std::string scope_key(const std::vector<std::string>& parts, std::size_t level) {
  std::vector<std::string> kept(
      parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(std::min(level, parts.size())));
  return fmt::format("{}", fmt::join(kept, "/"));
}

// Runs `dot -Tsvg` on `dot_text`; the SVG, or empty with `error` set.
std::string run_dot(const std::string& dot_text, std::string& error) {
  const char* env = std::getenv("METAOP_DOT");
  std::string program = env && *env ? env : "dot";
  fs::path dir =
      fs::temp_directory_path() /
      fmt::format("metaop-dot-{}-{}", ::getpid(), reinterpret_cast<std::uintptr_t>(&dot_text));
  fs::create_directories(dir);
  fs::path in = dir / "graph.dot", out = dir / "graph.svg", err = dir / "stderr.txt";
  std::ofstream(in) << dot_text;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::string tsvg = "-Tsvg";
  std::vector<char*> argv{program.data(), tsvg.data(), nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, program.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  std::string svg;
  if (rc != 0) {
    error = fmt::format(
        "Graphviz's {} could not be started ({}): install graphviz "
        "(scripts/install-deps.sh does) or name it in METAOP_DOT",
        program, std::strerror(rc));
  } else {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::ifstream o(out), e(err);
    std::stringstream so, se;
    so << o.rdbuf();
    se << e.rdbuf();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      svg = so.str();
    } else {
      std::string why = se.str();
      if (why.size() > 300) why.resize(300);
      error = fmt::format("Graphviz's {} failed: {}", program, why);
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  // The document's prologue and DOCTYPE go; the <svg> element stays.
  if (auto at = svg.find("<svg"); at != std::string::npos) svg.erase(0, at);
  return svg;
}

}  // namespace

namespace {

// Which box each node is drawn in: itself ("node-K"), or its name scope ("scope-J") when the
// model has more than kCollapseAbove nodes.
struct Boxes {
  std::vector<std::string> id;                              // per node
  std::vector<std::string> scope;                           // per node; empty: drawn alone
  std::map<std::string, std::vector<std::size_t>> members;  // scope -> its nodes
  bool collapsed = false;
  std::string note;
};

// The deepest scope level at which the model's nodes make at most kCollapseTo boxes with at
// most 3 edges between boxes per box (densely connected blocks, as densenet's, are drawn whole
// rather than as a tangle); 1 when none does; 0 when no node has a scope.
std::size_t collapse_level(const Graph& g, const std::vector<std::vector<std::string>>& scopes) {
  std::size_t deepest = 0;
  for (const auto& s : scopes) deepest = std::max(deepest, s.size());
  std::size_t level = deepest > 0 ? 1 : 0;
  for (std::size_t l = 1; l <= deepest; ++l) {
    std::vector<std::string> box(scopes.size());
    std::map<std::string, std::string> producer;
    for (std::size_t k = 0; k < scopes.size(); ++k) {
      box[k] = scopes[k].empty() ? fmt::format("#{}", k) : scope_key(scopes[k], l);
      for (const auto& o : g.nodes[k].outputs) producer[o] = box[k];
    }
    std::set<std::pair<std::string, std::string>> edges;
    for (std::size_t k = 0; k < scopes.size(); ++k)
      for (const auto& in : g.nodes[k].inputs)
        if (auto it = producer.find(in); it != producer.end() && it->second != box[k])
          edges.insert({it->second, box[k]});
    std::size_t boxes = std::set<std::string>(box.begin(), box.end()).size();
    if (boxes <= kCollapseTo && edges.size() <= 3 * boxes) level = l;
  }
  return level;
}

// Each node's scope; a node without one that only reads initializers (exporters write weight
// Identity and Constant nodes at the top level: densenet121 has 245) takes its first
// consumer's, so that it folds into the block that uses it.
std::vector<std::vector<std::string>> scopes_of(const Graph& g) {
  const std::size_t n = g.nodes.size();
  std::vector<std::vector<std::string>> scopes(n);
  std::map<std::string, std::size_t> consumer;
  for (std::size_t k = 0; k < n; ++k) {
    scopes[k] = scope_of(g.nodes[k].name);
    for (const auto& in : g.nodes[k].inputs)
      if (!in.empty()) consumer.emplace(in, k);
  }
  for (std::size_t k = 0; k < n; ++k) {
    const Node& node = g.nodes[k];
    bool constant = std::all_of(node.inputs.begin(), node.inputs.end(), [&](const auto& in) {
      return in.empty() || g.initializers.count(in) > 0;
    });
    if (!scopes[k].empty() || !constant || node.outputs.empty()) continue;
    auto it = consumer.find(node.outputs[0]);
    if (it != consumer.end()) scopes[k] = scope_of(g.nodes[it->second].name);
  }
  return scopes;
}

Boxes boxes_of(const Graph& g) {
  const std::size_t n = g.nodes.size();
  Boxes b;
  b.id.resize(n);
  b.scope.resize(n);
  if (n > kCollapseAbove) {
    auto scopes = scopes_of(g);
    std::size_t level = collapse_level(g, scopes);
    b.collapsed = level > 0;
    for (std::size_t k = 0; b.collapsed && k < n; ++k)
      if (!scopes[k].empty()) b.scope[k] = scope_key(scopes[k], level);
    b.note = b.collapsed ? fmt::format("{} nodes, drawn by name scope ({} level{} deep)", n, level,
                                       level == 1 ? "" : "s")
                         : fmt::format("{} nodes without name scopes: every node drawn", n);
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (b.scope[k].empty())
      b.id[k] = fmt::format("node-{}", k);
    else
      b.members[b.scope[k]].push_back(k);
  }
  std::size_t j = 0;
  for (auto& [key, ks] : b.members) {
    std::string sid = fmt::format("scope-{}", j++);
    for (auto k : ks) b.id[k] = sid;
  }
  return b;
}

// One box's DOT statement: its label (op type and name, or the scope and its size), fill,
// badge, hover text and link (a scope's: its worst member's).
std::string box_statement(const Graph& g, const Boxes& b, std::size_t k,
                          const std::vector<NodeMark>& marks) {
  auto mark = [&](std::size_t x) { return x < marks.size() ? marks[x] : NodeMark{}; };
  NodeMark m = mark(k);
  std::string label;
  if (!b.scope[k].empty()) {
    const auto& ks = b.members.at(b.scope[k]);
    for (auto x : ks)
      if (mark(x).rank > m.rank) m = mark(x);
    label = fmt::format("{}\n{} nodes", b.scope[k], ks.size());
    if (!m.tooltip.empty()) m.tooltip = fmt::format("{}: {}", b.scope[k], m.tooltip);
  } else {
    label = fmt::format("{}\n{}", g.nodes[k].op_type, g.nodes[k].name);
    if (label.size() > 60) label = label.substr(0, 57) + "...";
  }
  if (!m.badge.empty()) label += fmt::format("\n[{}]", m.badge);
  std::string st =
      fmt::format(" \"{}\" [id=\"{}\", label=\"{}\"", b.id[k], b.id[k], dot_quote(label));
  if (!m.fill.empty()) st += fmt::format(", fillcolor=\"{}\"", dot_quote(m.fill));
  st += fmt::format(", tooltip=\"{}\"", dot_quote(m.tooltip.empty() ? g.nodes[k].name : m.tooltip));
  if (!m.href.empty()) st += fmt::format(", href=\"{}\"", dot_quote(m.href));
  return st + "];\n";
}

// The graph's inputs and the edges between boxes (one per pair of boxes), labelled with the
// value's shape when nodes are drawn one by one.
std::string edge_statements(const Graph& g, const Boxes& b) {
  std::string dot;
  std::map<std::string, std::string> producer;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    std::string iid = fmt::format("input-{}", i);
    producer[g.inputs[i].name] = iid;
    dot += fmt::format(" \"{}\" [id=\"{}\", shape=plaintext, style=\"\", label=\"{}\"];\n", iid,
                       iid, dot_quote(g.inputs[i].name));
  }
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& o : g.nodes[k].outputs)
      if (!o.empty()) producer[o] = b.id[k];
  std::set<std::pair<std::string, std::string>> edges;
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& in : g.nodes[k].inputs) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end() || it->second == b.id[k]) continue;
      if (!edges.insert({it->second, b.id[k]}).second) continue;
      std::string label = b.collapsed ? "" : shape_label(g, in);
      dot += fmt::format(" \"{}\" -> \"{}\"", it->second, b.id[k]);
      if (!label.empty()) dot += fmt::format(" [label=\"{}\"]", dot_quote(label));
      dot += ";\n";
    }
  return dot;
}

}  // namespace

GraphView draw_graph(const Graph& g, const std::vector<NodeMark>& marks) {
  Boxes b = boxes_of(g);
  GraphView v;
  v.note = b.note;
  std::string dot =
      "digraph model {\n rankdir=TB; nodesep=0.25; ranksep=0.3;\n node [shape=box, "
      "style=\"rounded,filled\", fillcolor=white, fontname=\"sans-serif\", fontsize=10, "
      "height=0.3, margin=\"0.08,0.03\"];\n edge [fontname=\"sans-serif\", fontsize=8, "
      "color=\"#888888\", arrowsize=0.5];\n";
  std::set<std::string> drawn;
  for (std::size_t k = 0; k < g.nodes.size(); ++k)
    if (drawn.insert(b.id[k]).second) dot += box_statement(g, b, k, marks);
  dot += edge_statements(g, b) + "}\n";
  v.boxes = drawn.size();
  std::string error;
  v.svg = run_dot(dot, error);
  if (v.svg.empty()) v.note = error;
  return v;
}

std::string graph_legend(const std::vector<std::pair<std::string, std::string>>& entries,
                         const std::string& after) {
  std::string h = "<p>";
  for (const auto& [color, words] : entries)
    h += fmt::format(
        "<span style='display:inline-block;width:12px;height:12px;border:1px solid #999;"
        "background:{};margin:0 4px 0 12px;vertical-align:middle'></span>{}",
        html_escape(color), html_escape(words));
  return h + ". " + html_escape(after) + "</p>";
}

std::string graph_view_html(const GraphView& v, const std::string& legend) {
  std::string h = "<div class='metaop-graph-legend'>" + legend + "</div>";
  if (!v.note.empty()) h += "<p class='metaop-graph-note'>" + html_escape(v.note) + "</p>";
  if (v.svg.empty()) return h;
  // At most 70% of the window's height, less for a small graph (the script sets it).
  h += "<div id='metaop-graph' style='border:1px solid #ccc;height:70vh;overflow:hidden;"
       "cursor:grab'>" +
       v.svg + "</div>";
  // Pan (drag) and zoom (wheel) by the SVG's viewBox.
  h += R"(<script>(function(){
var box=document.getElementById('metaop-graph');var svg=box.querySelector('svg');if(!svg)return;
var nh=svg.height.baseVal.value;svg.removeAttribute('width');svg.removeAttribute('height');
svg.style.width='100%';svg.style.height='100%';
box.style.height=Math.min(nh+10,window.innerHeight*0.7)+'px';
var vb=svg.viewBox.baseVal;var drag=null;
box.addEventListener('wheel',function(e){e.preventDefault();var r=svg.getBoundingClientRect();
var f=e.deltaY>0?1.2:1/1.2;var px=vb.x+(e.clientX-r.left)/r.width*vb.width;
var py=vb.y+(e.clientY-r.top)/r.height*vb.height;vb.x=px-(px-vb.x)*f;vb.y=py-(py-vb.y)*f;
vb.width*=f;vb.height*=f;},{passive:false});
box.addEventListener('mousedown',function(e){drag={x:e.clientX,y:e.clientY};});
window.addEventListener('mouseup',function(){drag=null;});
box.addEventListener('mousemove',function(e){if(!drag)return;var r=svg.getBoundingClientRect();
vb.x-=(e.clientX-drag.x)/r.width*vb.width;vb.y-=(e.clientY-drag.y)/r.height*vb.height;
drag={x:e.clientX,y:e.clientY};});})();</script>)";
  return h;
}

}  // namespace metaop
