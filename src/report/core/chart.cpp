#include "report/core/chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <limits>

#include "report/core/html.h"

namespace metaop {

namespace {

// Red is kept for the threshold and non-finite marks.
const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#17becf"};
constexpr std::size_t kColors = sizeof kPalette / sizeof kPalette[0];
constexpr double kWidth = 900, kLeft = 62, kRight = 16, kTop = 26;
constexpr double kPlotHeight = 190;
constexpr std::size_t kMostCategoryTicks = 40, kMostColumns = 1500;

// 1, 2 or 5 times a power of ten, near span / target.
double nice_step(double span, double target) {
  double raw = span / target;
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  double p = std::pow(10, std::floor(std::log10(raw)));
  double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.4g}", v);
}

// 10 to the power e, the exponent raised.
std::string decade_text(double e) {
  if (e == 0) return "1";
  if (e == 1) return "10";
  return fmt::format("10<tspan dy='-5' font-size='8'>{:g}</tspan>", e);
}

std::string shorten(const std::string& s, std::size_t most) {
  return s.size() <= most ? s : s.substr(0, most - 1) + "\u2026";
}

struct Axes {
  const Chart& c;
  bool log, bands;
  double lo = 0, hi = 1;      // y range (exponents on a log scale)
  double xmin = 0, xmax = 1;  // continuous x range
  std::size_t positions = 1;  // bands: how many
  double bottom = 0;          // the plot's lower edge in pixels
  double plot_width() const { return kWidth - kLeft - kRight; }
  double band() const { return plot_width() / static_cast<double>(positions); }
  // The pixel of x value (or position) x: a band's centre, or the continuous scale.
  double X(double x) const {
    if (bands) return kLeft + (x + 0.5) * band();
    return kLeft + plot_width() * (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5);
  }
  // The pixel of value v, clamped to the plot; `where`: -1 below the range (or not positive on
  // a log scale), 1 above it, 2 not finite, 0 inside.
  double Y(double v, int* where = nullptr) const {
    int w = 0;
    double l = v;
    if (!std::isfinite(v)) {
      w = 2;
      l = hi;
    } else if (log) {
      l = v > 0 ? std::log10(v) : lo;
      if (v <= 0) w = -1;
    }
    if (w == 0 && l < lo) w = -1;
    if (w == 0 && l > hi) w = 1;
    l = std::clamp(l, lo, hi);
    if (where) *where = w;
    return bottom - kPlotHeight * (l - lo) / (hi - lo);
  }
};

double x_of(const ChartSeries& s, std::size_t i) {
  return s.x.empty() ? static_cast<double>(i) : s.x[i];
}

// The y range from the finite values and the threshold, unless the chart gives it.
void y_range(Axes& a, const std::vector<ChartSeries>& series) {
  double lo = INFINITY, hi = -INFINITY;
  auto take = [&](double v) {
    if (!std::isfinite(v) || (a.log && v <= 0)) return;
    double l = a.log ? std::log10(v) : v;
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  };
  for (const auto& s : series)
    for (double v : s.y) take(v);
  take(a.c.threshold);
  if (!std::isfinite(lo)) lo = hi = 0;
  if (a.log) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
    if (hi <= lo) hi = lo + 1;
  } else {
    if (hi <= lo) {
      lo -= lo == 0 ? 0 : std::fabs(lo) * 0.5;
      hi += hi == 0 ? 1 : std::fabs(hi) * 0.5;
    }
    double step = nice_step(hi - lo, 5);
    lo = std::floor(lo / step) * step;
    hi = std::ceil(hi / step) * step;
  }
  a.lo = std::isnan(a.c.lo) ? lo : a.c.lo;
  a.hi = std::isnan(a.c.hi) ? hi : a.c.hi;
  if (a.hi <= a.lo) a.hi = a.lo + 1;
}

std::string y_axis(const Axes& a) {
  std::string s;
  if (a.log) {
    // Every decade gets a line; labels on each decade while they fit, else every k-th.
    double span = a.hi - a.lo;
    double every = std::max(1.0, std::ceil(span / 12));
    for (double e = std::ceil(a.lo); e <= a.hi + 1e-9; ++e) {
      double y = a.Y(std::pow(10, e));
      s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#e4e4e4'/>", kLeft,
                       kWidth - kRight, y, y);
      if (std::fmod(e - std::ceil(a.lo), every) == 0)
        s += fmt::format("<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{}</text>",
                         kLeft - 5, y + 3, decade_text(e));
    }
    return s;
  }
  double step = nice_step(a.hi - a.lo, 5);
  for (double k = std::ceil(a.lo / step - 1e-9); k * step <= a.hi + step * 1e-6; ++k) {
    double v = std::fabs(k) < 0.5 ? 0.0 : k * step;
    double y = a.Y(v);
    s += fmt::format(
        "<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#e4e4e4'/>"
        "<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{:g}</text>",
        kLeft, kWidth - kRight, y, y, kLeft - 5, y + 3, v);
  }
  return s;
}

// Tick labels under the plot: the categories' names when they fit (slanted), else numbers.
std::string x_axis(const Axes& a, double* label_room) {
  std::string s;
  const auto& cats = a.c.categories;
  if (a.bands && !cats.empty() && cats.size() <= kMostCategoryTicks) {
    std::size_t longest = 0;
    for (std::size_t i = 0; i < cats.size(); ++i) {
      std::string name = shorten(cats[i], 24);
      longest = std::max(longest, name.size());
      double x = a.X(static_cast<double>(i));
      s += fmt::format(
          "<text x='{:.1f}' y='{:.1f}' font-size='9' text-anchor='end' "
          "transform='rotate(-40 {:.1f} {:.1f})'>{}</text>",
          x, a.bottom + 12, x, a.bottom + 12, html_escape(name));
    }
    *label_room = 14 + 4.6 * static_cast<double>(longest);
    return s;
  }
  double from = a.bands ? 0 : a.xmin, to = a.bands ? static_cast<double>(a.positions - 1) : a.xmax;
  double step = nice_step(to - from, 8);
  if (a.bands) step = std::max(1.0, std::round(step));
  // Ticks at whole multiples of the step (of the shown value x + x_offset).
  for (double k = std::ceil((from + a.c.x_offset) / step - 1e-9);
       k * step - a.c.x_offset <= to + step * 1e-6; ++k) {
    double shown = std::fabs(k) < 0.5 ? 0.0 : k * step;
    double px = a.X(shown - a.c.x_offset);
    s += fmt::format(
        "<line x1='{:.1f}' x2='{:.1f}' y1='{:.1f}' y2='{:.1f}' stroke='#999'/>"
        "<text x='{:.1f}' y='{:.1f}' font-size='10' text-anchor='middle'>{:g}</text>",
        px, px, a.bottom, a.bottom + 4, px, a.bottom + 15, shown);
  }
  *label_room = 20;
  return s;
}

// The hover text of value i of series s.
std::string hover(const Chart& c, const ChartSeries& s, std::size_t i, bool bands) {
  if (i < s.labels.size() && !s.labels[i].empty()) return s.labels[i];
  double x = x_of(s, i);
  std::string where = bands && x >= 0 && x < static_cast<double>(c.categories.size())
                          ? c.categories[static_cast<std::size_t>(x)]
                          : fmt::format("{} {:g}", c.xlabel, x + c.x_offset);
  return fmt::format("{}{}{}: {}", s.name, s.name.empty() ? "" : " at ", where, value_text(s.y[i]));
}

// A value off the scale: a triangle at the top (not finite, or above) or a ring at the bottom.
std::string off_scale_mark(double x, double y, int where, const std::string& color,
                           const std::string& title) {
  if (where < 0)
    return fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='2.6' fill='none' stroke='{}'><title>{}</title>"
        "</circle>",
        x, y, color, title);
  return fmt::format(
      "<path d='M{:.1f} {:.1f}l-4 7h8z' fill='{}' stroke='{}'><title>{}</title></path>", x, y,
      where == 2 ? "#d33" : color, color, title);
}

std::string points(const Axes& a, const std::vector<ChartSeries>& series) {
  std::string s;
  std::size_t total = 0;
  for (const auto& ser : series) total += ser.y.size();
  double r = total > 600 ? 1.8 : 2.6;
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& ser = series[k];
    const char* color = kPalette[k % kColors];
    for (std::size_t i = 0; i < ser.y.size(); ++i) {
      double x = x_of(ser, i);
      if (!std::isfinite(x)) continue;
      int where = 0;
      double px = a.X(x), py = a.Y(ser.y[i], &where);
      std::string title = html_escape(hover(a.c, ser, i, a.bands));
      s += where != 0 ? off_scale_mark(px, py, where, color, title)
                      : fmt::format(
                            "<circle cx='{:.1f}' cy='{:.1f}' r='{}' fill='{}'><title>{}</title>"
                            "</circle>",
                            px, py, r, color, title);
    }
  }
  return s;
}

std::string bars(const Axes& a, const std::vector<ChartSeries>& series) {
  std::string s;
  double width = a.band() * 0.8 / static_cast<double>(std::max<std::size_t>(series.size(), 1));
  double base = a.log ? a.bottom : a.Y(std::clamp(0.0, a.lo, a.hi));
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& ser = series[k];
    const char* color = kPalette[k % kColors];
    for (std::size_t i = 0; i < ser.y.size(); ++i) {
      int where = 0;
      double px = a.X(x_of(ser, i)) - a.band() * 0.4 + width * static_cast<double>(k);
      double py = a.Y(ser.y[i], &where);
      s += fmt::format(
          "<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'{}><title>{}"
          "</title></rect>",
          px, std::min(py, base), std::max(width - 1, 1.0), std::max(std::fabs(base - py), 1.0),
          color, where == 2 ? " stroke='#d33' stroke-width='2'" : "",
          html_escape(hover(a.c, ser, i, true)));
    }
  }
  return s;
}

// A line per series (broken where a value is not finite, marked there), and a transparent
// column per x (at most kMostColumns, each then covering several) whose hover text gives every
// series' value there. The series share their x.
std::string lines(const Axes& a, const std::vector<ChartSeries>& series) {
  std::string s;
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& ser = series[k];
    const char* color = kPalette[k % kColors];
    std::string pts;
    auto flush = [&] {
      if (!pts.empty())
        s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.3' points='{}'/>",
                         color, pts);
      pts.clear();
    };
    for (std::size_t i = 0; i < ser.y.size(); ++i) {
      int where = 0;
      double px = a.X(x_of(ser, i)), py = a.Y(ser.y[i], &where);
      if (where == 2) {
        flush();
        s += off_scale_mark(px, py, where, color, html_escape(hover(a.c, ser, i, false)));
        continue;
      }
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
    }
    flush();
  }
  if (series.empty() || series[0].y.empty()) return s;
  const auto& first = series[0];
  std::size_t n = first.y.size();
  std::size_t stride = (n + kMostColumns - 1) / kMostColumns;
  double column = n > 1 ? (a.X(x_of(first, n - 1)) - a.X(x_of(first, 0))) / double(n - 1) : 8;
  s += "<g fill='transparent'>";
  for (std::size_t i = 0; i < n; i += stride) {
    std::string text = fmt::format("{} {:g}", a.c.xlabel, x_of(first, i) + a.c.x_offset);
    for (const auto& ser : series)
      if (i < ser.y.size())
        text += fmt::format(
            "\n{}: {}", ser.name,
            i < ser.labels.size() && !ser.labels[i].empty() ? ser.labels[i] : value_text(ser.y[i]));
    double x0 = a.X(x_of(first, i)) - column / 2;
    s += fmt::format(
        "<rect class='column' x='{:.1f}' y='{}' width='{:.1f}' height='{}'><title>{}</title>"
        "</rect>",
        std::max(x0, kLeft), kTop, column * static_cast<double>(stride), kPlotHeight,
        html_escape(text));
  }
  return s + "</g>";
}

}  // namespace

std::string svg_chart(const Chart& c, const std::vector<ChartSeries>& series) {
  Axes a{c, c.y_scale == PlotScale::Log10, false};
  bool positions = true;
  std::size_t longest = 0;
  a.xmin = INFINITY;
  a.xmax = -INFINITY;
  for (const auto& s : series) {
    positions = positions && s.x.empty();
    longest = std::max(longest, s.y.size());
    for (std::size_t i = 0; i < s.y.size(); ++i)
      if (double x = x_of(s, i); std::isfinite(x)) {
        a.xmin = std::min(a.xmin, x);
        a.xmax = std::max(a.xmax, x);
      }
  }
  if (!std::isfinite(a.xmin)) a.xmin = 0, a.xmax = 1;
  a.bands = c.mark != ChartMark::Lines && (positions || !c.categories.empty());
  a.positions = std::max<std::size_t>({longest, c.categories.size(), 1});
  a.bottom = kTop + kPlotHeight;
  y_range(a, series);

  double label_room = 0;
  std::string xticks = x_axis(a, &label_room);
  double height = a.bottom + label_room + 18;
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{:.0f}' class='chart'>"
      "<rect x='{}' y='{}' width='{}' height='{}' fill='#fafafa' stroke='#ccc'/>",
      kWidth, height, kLeft, kTop, kWidth - kLeft - kRight, kPlotHeight);
  s += y_axis(a) + xticks;
  for (const auto& [x, label] : c.x_marks) {
    double px = a.bands ? kLeft + x * a.band() : a.X(x);
    if (px < kLeft || px > kWidth - kRight) continue;
    s += fmt::format(
        "<line x1='{:.1f}' x2='{:.1f}' y1='{}' y2='{}' stroke='#888' stroke-dasharray='2 3'/>"
        "<text x='{:.1f}' y='{}' font-size='9' fill='#555'>{}</text>",
        px, px, kTop, a.bottom, px + 2, kTop + 9, html_escape(label));
  }
  if (std::isfinite(c.threshold) && (!a.log || c.threshold > 0)) {
    double y = a.Y(c.threshold);
    s += fmt::format(
        "<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#d33' stroke-dasharray='5 3'/>"
        "<text x='{}' y='{:.1f}' font-size='9' fill='#d33' text-anchor='end'>{}</text>",
        kLeft, kWidth - kRight, y, y, kWidth - kRight - 2, y - 3,
        html_escape(c.threshold_label.empty() ? "threshold " + value_text(c.threshold)
                                              : c.threshold_label));
  }
  switch (c.mark) {
    case ChartMark::Points:
      s += points(a, series);
      break;
    case ChartMark::Bars:
      s += bars(a, series);
      break;
    case ChartMark::Lines:
      s += lines(a, series);
      break;
  }
  // Legend along the top; axis names.
  double at = kLeft + 4;
  for (std::size_t k = 0; k < series.size() && k < 12; ++k) {
    std::string name = shorten(series[k].name, 40);
    s += fmt::format(
        "<rect x='{:.0f}' y='8' width='10' height='10' fill='{}'/><text x='{:.0f}' y='17' "
        "font-size='11'>{}</text>",
        at, kPalette[k % kColors], at + 14, html_escape(name));
    at += 24 + 6.2 * static_cast<double>(name.size());
  }
  if (series.size() > 12)
    s += fmt::format("<text x='{:.0f}' y='17' font-size='11'>and {} more</text>", at,
                     series.size() - 12);
  s += fmt::format(
      "<text x='{}' y='{:.0f}' font-size='11' text-anchor='middle'>{}</text>"
      "<text x='14' y='{}' font-size='11' transform='rotate(-90 14 {})' "
      "text-anchor='middle'>{}</text></svg>",
      (kWidth + kLeft) / 2, height - 4, html_escape(c.xlabel), kTop + kPlotHeight / 2,
      kTop + kPlotHeight / 2, html_escape(c.ylabel + (a.log ? " (log scale)" : "")));
  return s;
}

Chart score_chart(std::string xlabel, std::string ylabel, ChartMark mark) {
  return Chart{.xlabel = std::move(xlabel),
               .ylabel = std::move(ylabel),
               .mark = mark,
               .lo = -6,
               .hi = 4,
               .threshold = 1,
               .threshold_label = "error model's tolerance (1)"};
}

PlotScale scale_for(const std::vector<ChartSeries>& series, double ratio) {
  double lo = INFINITY, hi = 0;
  for (const auto& s : series)
    for (double v : s.y) {
      if (!std::isfinite(v)) continue;
      if (v <= 0) return PlotScale::Linear;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  return hi > lo * ratio ? PlotScale::Log10 : PlotScale::Linear;
}

std::vector<std::pair<double, std::string>> epoch_marks(std::size_t steps,
                                                        std::size_t steps_per_epoch,
                                                        std::size_t most) {
  std::vector<std::pair<double, std::string>> marks;
  if (steps_per_epoch == 0 || steps <= steps_per_epoch || most == 0) return marks;
  std::size_t epochs = (steps + steps_per_epoch - 1) / steps_per_epoch;
  std::size_t every = (epochs - 1 + most - 1) / most;
  for (std::size_t e = 1; e < epochs; e += every)
    marks.emplace_back(static_cast<double>(e * steps_per_epoch) - 0.5,
                       fmt::format("epoch {}", e + 1));
  return marks;
}

}  // namespace metaop
