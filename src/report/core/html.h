#pragma once
// Pieces of the offline HTML reports: escaping and inline SVG line charts (no scripts).
#include <string>
#include <utility>
#include <vector>

namespace metaop {

std::string html_escape(const std::string& s);

enum class PlotScale { Log10, Linear };

// One SVG line chart of named series: x = position in the series, y = log10 of the value clamped
// to [lo, hi] (non-positive values at the bottom, non-finite ones at the top) or, Linear, the
// value clamped to [lo, hi] (non-finite ones at the bottom); a dashed line at `threshold` when it
// is positive.
std::string svg_plot(const std::vector<std::pair<std::string, std::vector<double>>>& lines,
                     const std::vector<std::string>& colors, double lo, double hi, double threshold,
                     const std::string& ylabel, const std::string& xlabel = "node (run order)",
                     PlotScale scale = PlotScale::Log10);

}  // namespace metaop
