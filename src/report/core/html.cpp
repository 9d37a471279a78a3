#include "report/core/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace metaop {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// One SVG line chart: x = node position in run order, y = log10 of the value (or the value),
// clamped.
std::string svg_plot(const std::vector<std::pair<std::string, std::vector<double>>>& lines,
                     const std::vector<std::string>& colors, double lo, double hi, double threshold,
                     const std::string& ylabel, const std::string& xlabel, PlotScale scale) {
  const double W = 900, H = 220, L = 50, B = 25;
  bool log = scale == PlotScale::Log10;
  std::size_t n = 0;
  for (const auto& [name, v] : lines) n = std::max(n, v.size());
  auto X = [&](std::size_t i) { return L + (W - L - 10) * (n > 1 ? double(i) / (n - 1) : 0.5); };
  auto Y = [&](double v) {
    double l = !log ? v : v > 0 ? std::log10(v) : lo;
    if (!std::isfinite(l)) l = log ? hi : lo;
    l = std::clamp(l, lo, hi);
    return (H - B) - (H - B - 10) * (l - lo) / (hi - lo);
  };
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='plot'>"
      "<rect x='{}' y='0' width='{}' height='{}' fill='#fafafa' stroke='#ccc'/>",
      W, H, L, W - L - 10, H - B);
  // Grid: every second decade, or quarters of a linear range.
  for (double e = lo; e <= hi + 1e-9; e += log ? 2 : (hi - lo) / 4) {
    double v = log ? std::pow(10, e) : e;
    s += fmt::format(
        "<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#eee'/>"
        "<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{}</text>",
        L, W - 10, Y(v), Y(v), L - 4, Y(v) + 3,
        log ? fmt::format("1e{:g}", e) : fmt::format("{:g}", e));
  }
  if (threshold > 0)
    s += fmt::format(
        "<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#d33' stroke-dasharray='4 3'/>", L,
        W - 10, Y(threshold), Y(threshold));
  for (std::size_t k = 0; k < lines.size(); ++k) {
    std::string pts;
    for (std::size_t i = 0; i < lines[k].second.size(); ++i)
      pts += fmt::format("{:.1f},{:.1f} ", X(i), Y(lines[k].second[i]));
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.2' points='{}'/>",
                     colors[k % colors.size()], pts);
    s += fmt::format("<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>", L + 8 + 110 * k, 14,
                     colors[k % colors.size()], html_escape(lines[k].first));
  }
  s += fmt::format(
      "<text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>"
      "<text x='12' y='{}' font-size='11' transform='rotate(-90 12 {})' "
      "text-anchor='middle'>{}</text></svg>",
      (W + L) / 2, H - 6, html_escape(xlabel), H / 2, H / 2, html_escape(ylabel));
  return s;
}

}  // namespace metaop
