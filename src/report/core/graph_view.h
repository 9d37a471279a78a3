#pragma once
// The model as a graph in the HTML reports: laid out by Graphviz (`dot`, Debian's graphviz; the
// METAOP_DOT environment variable names another) into inline SVG, every node a group with the id
// "node-K" (K: its index in the graph), filled by what the report says of it, with its hover text
// and a link to its section; edges labelled with the shapes shape inference gives. Pan with the
// mouse, zoom with the wheel (a few lines of script in the page). Models of more than
// kCollapseAbove nodes are drawn by name scope ("/layer1/layer1.0/conv1/Conv" is in "layer1",
// then "layer1/layer1.0", ...) at the deepest level that makes at most kCollapseTo boxes (a
// top-level node that only reads weights joins its consumer's scope); a box stands for its
// nodes and takes the worst mark among them.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace metaop {

constexpr std::size_t kCollapseAbove = 400, kCollapseTo = 200;

struct NodeMark {
  int rank = 0;         // how bad: the box of several nodes takes the highest's mark
  std::string fill;     // CSS colour; empty: white
  std::string badge;    // a word under the op type ("crash", "NaN", "unsupported")
  std::string tooltip;  // hover text
  std::string href;     // the node's section ("#finding-3"), or empty
};

struct GraphView {
  std::string svg;        // empty when it could not be drawn
  std::string note;       // why not, or what was collapsed
  std::size_t boxes = 0;  // boxes drawn (nodes, or scopes when collapsed)
};

// `marks` has one entry per node of `g` (or is empty: no marks).
GraphView draw_graph(const Graph& g, const std::vector<NodeMark>& marks);

// A legend: a colour swatch and its words per entry, then `after` (escaped).
std::string graph_legend(const std::vector<std::pair<std::string, std::string>>& entries,
                         const std::string& after);

// The view in a scrollable frame with its pan-and-zoom script and `legend` (HTML) above it.
std::string graph_view_html(const GraphView& v, const std::string& legend);

}  // namespace metaop
