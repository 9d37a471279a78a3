// The report charts (report/core/chart.h): what a reader relies on in the SVG.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "report/core/chart.h"

namespace metaop {
namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Chart, LabelsEveryDecadeOfALogAxis) {
  Chart c{.xlabel = "node", .ylabel = "local score", .lo = -6, .hi = 4};
  std::string svg = svg_chart(c, {{"torch", {1e-3, 2.0}, {}, {}}});
  for (int e = -6; e <= 4; ++e) {
    std::string label = e == 0   ? ">1</text>"
                        : e == 1 ? ">10</text>"
                                 : "10<tspan dy='-5' font-size='8'>" + std::to_string(e) + "<";
    EXPECT_NE(svg.find(label), std::string::npos) << "decade " << e;
  }
  // Past twelve decades, every other one is labelled (each still has its grid line).
  Chart wide{.xlabel = "node", .ylabel = "error", .lo = -20, .hi = 4};
  std::string w = svg_chart(wide, {{"x", {1.0}, {}, {}}});
  EXPECT_EQ(count(w, "font-size='8'>"), 12u);
  EXPECT_EQ(count(w, "stroke='#e4e4e4'"), 25u);
}

TEST(Chart, PointsCarryTheirNamesAndMarkValuesOffTheScale) {
  Chart c{.xlabel = "node", .ylabel = "score", .lo = -6, .hi = 4, .threshold = 1};
  c.categories = {"/a/Conv", "/b/Relu", "/c/Add", "/d/Exp"};
  std::string svg = svg_chart(c, {{"torch", {0.5, NAN, 0, 1e9}, {}, {}}});
  EXPECT_NE(svg.find("<title>torch at /a/Conv: 0.5</title>"), std::string::npos);
  // NaN: a red triangle at the top; 0 on a log scale: a ring at the bottom; above the range: a
  // triangle in the series' colour.
  EXPECT_NE(svg.find("fill='#d33' stroke='#1f77b4'><title>torch at /b/Relu: NaN"),
            std::string::npos);
  EXPECT_NE(svg.find("fill='none' stroke='#1f77b4'><title>torch at /c/Add: 0</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("fill='#1f77b4' stroke='#1f77b4'><title>torch at /d/Exp: 1e+09"),
            std::string::npos);
  // Four categories fit as tick labels under the plot; the threshold is drawn and named.
  EXPECT_NE(svg.find(">/d/Exp</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke='#d33' stroke-dasharray='5 3'"), std::string::npos);
  EXPECT_NE(svg.find(">threshold 1</text>"), std::string::npos);
}

TEST(Chart, LinesHaveAHoverColumnPerStepWithEverySeries) {
  Chart c{.xlabel = "step", .ylabel = "loss", .mark = ChartMark::Lines, .x_offset = 1};
  std::string svg =
      svg_chart(c, {{"loss", {2.0, 1.0, INFINITY}, {}, {}}, {"other", {3.0, 2.0, 1.0}, {}, {}}});
  EXPECT_EQ(count(svg, "class='column'"), 3u);
  EXPECT_NE(svg.find("<title>step 1\nloss: 2\nother: 3</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>step 3\nloss: inf\nother: 1</title>"), std::string::npos);
  // The infinite loss breaks its line and is marked at the top.
  EXPECT_NE(svg.find("fill='#d33'"), std::string::npos);
  // Many steps: at most 1500 columns, each covering several steps.
  std::vector<double> many(4000, 1.0);
  std::string big = svg_chart(c, {{"loss", many, {}, {}}});
  EXPECT_EQ(count(big, "class='column'"), 1334u);  // every third step
}

TEST(Chart, BarsPerCategory) {
  Chart c{.xlabel = "weight", .ylabel = "update score", .mark = ChartMark::Bars, .lo = -6, .hi = 4};
  c.categories = {"fc1.weight", "fc2.weight"};
  std::string svg = svg_chart(c, {{"update", {0.1, 3}, {}, {"fc1: 0.1", "fc2: 3"}}});
  EXPECT_EQ(count(svg, "<rect x="), 2u + 1u + 1u);  // two bars, the frame, the legend swatch
  EXPECT_NE(svg.find("<title>fc2: 3</title>"), std::string::npos);
  EXPECT_NE(svg.find(">fc1.weight</text>"), std::string::npos);
}

TEST(Chart, LinearTicksAreWholeMultiplesOfTheirStep) {
  // Error against input values from -1 to 1: ticks at multiples of 0.2 or 0.5, 0 printed as 0.
  Chart c{.xlabel = "x", .ylabel = "share", .y_scale = PlotScale::Linear};
  std::vector<double> x, y;
  for (int i = 0; i <= 20; ++i) {
    x.push_back(-1 + 0.1 * i);
    y.push_back(0.05 * i);
  }
  std::string svg = svg_chart(c, {{"s", y, x, {}}});
  EXPECT_EQ(svg.find("e-1"), std::string::npos);
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">-1</text>"), std::string::npos);
  EXPECT_EQ(scale_for({{"loss", {1.1, 1.05, 1.09}, {}, {}}}), PlotScale::Linear);
  EXPECT_EQ(scale_for({{"loss", {2.3, 0.01, INFINITY}, {}, {}}}), PlotScale::Log10);
  EXPECT_EQ(scale_for({{"norm", {0, 1e-3, 1}, {}, {}}}), PlotScale::Linear);
}

TEST(Chart, EpochMarks) {
  auto m = epoch_marks(10, 4);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::pair<double, std::string>{3.5, "epoch 2"}));
  EXPECT_EQ(m[1], (std::pair<double, std::string>{7.5, "epoch 3"}));
  EXPECT_TRUE(epoch_marks(4, 4).empty());
  EXPECT_TRUE(epoch_marks(10, 0).empty());
  EXPECT_LE(epoch_marks(1000, 1).size(), 20u);
  Chart c{.xlabel = "step", .ylabel = "loss", .mark = ChartMark::Lines, .x_marks = m};
  EXPECT_EQ(count(svg_chart(c, {{"loss", std::vector<double>(10, 1.0), {}, {}}}), ">epoch "), 2u);
}

}  // namespace
}  // namespace metaop
