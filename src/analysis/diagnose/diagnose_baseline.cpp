#include "analysis/diagnose/diagnose_baseline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analysis/diagnose/diagnose_monitor.h"

namespace metaop {

namespace {

// Per column (every element of a sample), the mean and the standard deviation over the samples.
struct Columns {
  std::vector<double> mean, sd;
};

Columns column_stats(const Tensor& Y) {
  Columns c;
  if (Y.rank() < 1 || Y.dim(0) == 0) return c;
  auto v = Y.to_f64();
  auto n = static_cast<std::size_t>(Y.dim(0)), k = v.size() / n;
  c.mean.assign(k, 0);
  c.sd.assign(k, 0);
  for (std::size_t i = 0; i < v.size(); ++i) c.mean[i % k] += v[i];
  for (auto& m : c.mean) m /= static_cast<double>(n);
  for (std::size_t i = 0; i < v.size(); ++i) {
    double d = v[i] - c.mean[i % k];
    c.sd[i % k] += d * d;
  }
  for (auto& s : c.sd) s = std::sqrt(s / static_cast<double>(n));
  return c;
}

// -(m log m + (1 - m) log(1 - m)), 0 log 0 = 0.
double binary_entropy(double m) {
  double h = 0;
  if (m > 0) h -= m * std::log(m);
  if (m < 1) h -= (1 - m) * std::log1p(-m);
  return h;
}

void class_labels(StaticChecks& c, const Tensor& Y) {
  if (Y.dtype() != DType::Int64 && Y.dtype() != DType::Int32) return;  // soft labels: none
  std::map<std::int64_t, double> count;
  double n = 0;
  for (auto l : Y.to_i64())
    if (l >= 0) {  // negative labels are ignored by the loss
      count[l] += 1;
      n += 1;
    }
  if (n == 0) return;
  double h = 0;
  for (const auto& [label, k] : count) h -= k / n * std::log(k / n);
  c.trivial_loss = h;
  c.trivial_what =
      fmt::format("the entropy of the {} classes' frequencies, predicting them whatever the input",
                  count.size());
}

void binary_labels(StaticChecks& c, const Tensor& Y) {
  if (!is_floating(Y.dtype())) return;
  auto cols = column_stats(Y);
  if (cols.mean.empty()) return;
  double h = 0;
  for (double m : cols.mean) {
    if (!(m >= 0 && m <= 1)) return;  // labels outside [0, 1]: a definite fault of their own
    h += binary_entropy(m);
  }
  c.trivial_loss = h / static_cast<double>(cols.mean.size());
  c.trivial_what = "the binary entropy of each label's mean, predicting it whatever the input";
}

void regression_targets(StaticChecks& c, const Tensor& Y) {
  if (!is_floating(Y.dtype())) return;
  auto cols = column_stats(Y);
  if (cols.mean.empty()) return;
  double var = 0, scale = 0;
  for (std::size_t j = 0; j < cols.mean.size(); ++j) {
    var += cols.sd[j] * cols.sd[j];
    if (std::max(std::fabs(cols.mean[j]), cols.sd[j]) >= scale) {
      scale = std::max(std::fabs(cols.mean[j]), cols.sd[j]);
      c.target_mean = cols.mean[j];
      c.target_sd = cols.sd[j];
    }
  }
  if (!std::isfinite(var)) return;
  c.trivial_loss = var / static_cast<double>(cols.mean.size());
  c.trivial_what = "the targets' variance, predicting their mean whatever the input";
  c.target_scale = scale;
}

// The group of each sample (axis 0 of X) whose input is identical, bit for bit, to the others'
// of its group, numbered from 0 in order of first appearance; `groups`: how many.
std::vector<std::int64_t> input_groups(const Tensor& X, std::int64_t& groups) {
  auto n = static_cast<std::size_t>(X.dim(0));
  std::size_t row = n ? X.nbytes() / n : 0;
  const auto* p = reinterpret_cast<const char*>(X.raw());
  std::unordered_map<std::size_t, std::vector<std::size_t>> first_of;  // hash -> first samples
  std::vector<std::int64_t> group(n);
  groups = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char* r = p + i * row;
    auto& seen = first_of[std::hash<std::string_view>{}(std::string_view(r, row))];
    std::int64_t g = -1;
    for (std::size_t j : seen)
      if (std::memcmp(p + j * row, r, row) == 0) g = group[j];
    if (g < 0) {
      g = groups++;
      seen.push_back(i);
    }
    group[i] = g;
  }
  return group;
}

// The lowest mean loss a predictor that gives every sample of a group one prediction can reach:
// per group and per label position (or target column), the labels' entropy (class labels), the
// binary entropy of their mean (bce) or their variance (mse). NaN for a loss without one.
double group_floor(const std::vector<std::int64_t>& group, std::int64_t groups, const Tensor& Y,
                   LossKind loss) {
  auto n = static_cast<std::size_t>(Y.dim(0));
  if (n == 0 || n != group.size()) return NAN;
  std::size_t k = static_cast<std::size_t>(Y.numel()) / n,
              cells = static_cast<std::size_t>(groups) * k;
  if (loss == LossKind::CrossEntropy || loss == LossKind::NLL) {
    if (Y.dtype() != DType::Int64 && Y.dtype() != DType::Int32) return NAN;
    auto v = Y.to_i64();
    std::vector<std::map<std::int64_t, double>> count(cells);
    double total = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] >= 0) {  // negative labels are ignored by the loss
        count[static_cast<std::size_t>(group[i / k]) * k + i % k][v[i]] += 1;
        total += 1;
      }
    double h = 0;
    for (const auto& cell : count) {
      double m = 0;
      for (const auto& [label, c] : cell) m += c;
      for (const auto& [label, c] : cell) h -= c * std::log(c / m);
    }
    return total > 0 ? h / total : NAN;
  }
  if (loss == LossKind::Output || !is_floating(Y.dtype())) return NAN;
  auto v = Y.to_f64();
  std::vector<double> sum(cells), sq(cells), size(cells);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::size_t cell = static_cast<std::size_t>(group[i / k]) * k + i % k;
    sum[cell] += v[i];
    size[cell] += 1;
  }
  double total = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::size_t cell = static_cast<std::size_t>(group[i / k]) * k + i % k;
    double d = v[i] - sum[cell] / size[cell];
    sq[cell] += d * d;
  }
  for (std::size_t cell = 0; cell < cells; ++cell) {
    if (size[cell] == 0) continue;
    double m = sum[cell] / size[cell];
    if (loss == LossKind::MSE)
      total += sq[cell];
    else if (m >= 0 && m <= 1)
      total += size[cell] * binary_entropy(m);
    else
      return NAN;  // labels outside [0, 1]: a definite fault of their own
  }
  return total / static_cast<double>(v.size());
}

}  // namespace

void duplicate_inputs(StaticChecks& c, const Tensor& X, const Tensor& Y, LossKind loss,
                      const std::string& input) {
  if (X.rank() < 1 || X.dim(0) < 2 || !Y.defined() || Y.rank() < 1 || Y.dim(0) != X.dim(0)) return;
  c.samples = X.dim(0);
  auto group = input_groups(X, c.distinct_inputs);
  if (c.distinct_inputs == c.samples) return;
  c.floor_loss = group_floor(group, c.distinct_inputs, Y, loss);
  std::vector<std::int64_t> size(static_cast<std::size_t>(c.distinct_inputs));
  for (auto g : group) ++size[static_cast<std::size_t>(g)];
  std::int64_t repeated = 0;  // samples whose input another sample has too
  for (auto s : size) repeated += s > 1 ? s : 0;
  std::string what =
      c.distinct_inputs == 1
          ? fmt::format("all {} samples of input '{}' are identical", c.samples, input)
          : fmt::format(
                "the {} samples of input '{}' have {} distinct inputs ({} samples share "
                "theirs with another)",
                c.samples, input, c.distinct_inputs, repeated);
  double trivial = c.trivial_loss, margin = DiagnoseThresholds{}.chance_margin;
  if (!(c.floor_loss > 0) || !(trivial > 0)) {
    if (2 * c.distinct_inputs <= c.samples)
      c.notes.push_back(what + ", with the same labels: the data hold fewer examples than samples");
    return;
  }
  std::string floor = fmt::format(
      "identical inputs carry different labels, so no model can reach a loss below {:.4g} "
      "({:.3g} times the trivial predictor's {:.4g})",
      c.floor_loss, c.floor_loss / trivial, trivial);
  if (c.floor_loss < margin * trivial) {
    c.notes.push_back(what + "; " + floor);
    return;
  }
  Diagnosis d;
  d.category = "data";
  d.input = input;
  d.definite = true;
  d.score = 1;
  d.evidence = fmt::format(
      "{}: {}, at chance level (a run must end below {:g} times it): the labels do not follow "
      "from these inputs -- check how the inputs are loaded (a batch or a sample repeated, a "
      "transform that erases them)",
      what, floor, margin);
  c.definite.push_back(std::move(d));
}

void baseline_checks(StaticChecks& checks, const Tensor& Y, LossKind loss) {
  if (!Y.defined()) return;
  switch (loss) {
    case LossKind::CrossEntropy:
    case LossKind::NLL:
      class_labels(checks, Y);
      break;
    case LossKind::BCE:
    case LossKind::BCEWithLogits:
      binary_labels(checks, Y);
      break;
    case LossKind::MSE:
      regression_targets(checks, Y);
      break;
    case LossKind::Output:
      break;
  }
}

Tensor standardized_targets(const Tensor& Y) {
  auto cols = column_stats(Y);
  auto v = Y.to_f64();
  std::size_t k = cols.mean.size();
  for (std::size_t i = 0; k > 0 && i < v.size(); ++i) {
    double sd = cols.sd[i % k] > 0 ? cols.sd[i % k] : 1;
    v[i] = (v[i] - cols.mean[i % k]) / sd;
  }
  return Tensor::from_f64(v, Y.shape(), Y.dtype());
}

}  // namespace metaop
