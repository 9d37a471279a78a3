#include "analysis/diagnose/diagnose_baseline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

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

}  // namespace

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
