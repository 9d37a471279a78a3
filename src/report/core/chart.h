#pragma once
// Charts of the offline HTML reports, as inline SVG without scripts: points, lines or bars of
// named series, every point's name and value in its hover text (an SVG <title>), log axes with
// each decade labelled, a threshold line, and marks on the x axis (epochs).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace metaop {

enum class PlotScale { Log10, Linear };

// Points: one dot per value (nodes, weights: things that are not a continuum). Lines: a line per
// series (steps), hover text per column of the chart. Bars: one bar per value and series.
enum class ChartMark { Points, Lines, Bars };

struct ChartSeries {
  std::string name{};
  std::vector<double> y{};
  std::vector<double> x{};            // empty: 0, 1, 2, ...
  std::vector<std::string> labels{};  // hover text per value; empty or "": "NAME at X: Y"
};

struct Chart {
  std::string xlabel{}, ylabel{};
  ChartMark mark = ChartMark::Points;
  PlotScale y_scale = PlotScale::Log10;
  // The y axis's range (decade exponents on a log scale); NaN: from the finite values (and the
  // threshold). Values outside are drawn at the edge, non-finite ones at the top, marked.
  double lo = NAN, hi = NAN;
  double threshold = NAN;  // a dashed red line, with its label at the right
  std::string threshold_label{};
  std::vector<std::pair<double, std::string>> x_marks{};  // dashed vertical lines with a label
  // The name of each x position (node names, weights): tick labels when they fit, else the
  // points' hover text names them. With categories, Points and Bars take x as the position.
  std::vector<std::string> categories{};
  // An x value shown on the axis and in hover text as its position + x_offset (steps from 1).
  double x_offset = 0;
};

std::string svg_chart(const Chart& chart, const std::vector<ChartSeries>& series);

// A chart of scores (error / the error model's tolerance): log axis from 1e-6 to 1e4, the
// tolerance (1) as the threshold line.
Chart score_chart(std::string xlabel, std::string ylabel = "local score",
                  ChartMark mark = ChartMark::Points);

// Linear when a finite value is zero or negative, or when the positive ones span at most a
// factor of `ratio` (a loss that moves within a decade reads better on a linear axis); else
// Log10.
PlotScale scale_for(const std::vector<ChartSeries>& series, double ratio = 20);

// Vertical marks at the start of each epoch after the first ("epoch 2" ...), at most `most`
// of them (every k-th epoch past that), for a chart of `steps` steps.
std::vector<std::pair<double, std::string>> epoch_marks(std::size_t steps,
                                                        std::size_t steps_per_epoch,
                                                        std::size_t most = 20);

}  // namespace metaop
