#include "analysis/core/compare.h"

#include <fmt/format.h>

#include <cmath>

namespace metaop {

Comparison compare_tensors(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  Comparison c;
  if (actual.dtype() != expected.dtype()) {
    c.ok = false;
    c.reason = fmt::format("dtype {} but expected {}", dtype_name(actual.dtype()),
                           dtype_name(expected.dtype()));
    return c;
  }
  if (actual.shape() != expected.shape()) {
    c.ok = false;
    c.reason = fmt::format("shape {} but expected {}", shape_str(actual.shape()),
                           shape_str(expected.shape()));
    return c;
  }
  bool exact = !is_floating(actual.dtype());
  auto a = actual.to_f64(), e = expected.to_f64();
  for (std::size_t i = 0; i < a.size(); ++i) {
    bool bad;
    double err = std::fabs(a[i] - e[i]);
    if (std::isnan(a[i]) || std::isnan(e[i])) {
      bad = std::isnan(a[i]) != std::isnan(e[i]);
    } else if (std::isinf(a[i]) || std::isinf(e[i])) {
      bad = a[i] != e[i];
    } else {
      bad = exact ? a[i] != e[i] : err > atol + rtol * std::fabs(e[i]);
      c.max_abs_err = std::max(c.max_abs_err, err);
      if (e[i] != 0) c.max_rel_err = std::max(c.max_rel_err, err / std::fabs(e[i]));
    }
    if (bad) {
      if (c.ok) c.reason = fmt::format("element {} is {:.9g}, expected {:.9g}", i, a[i], e[i]);
      c.ok = false;
      ++c.mismatches;
    }
  }
  if (!c.ok)
    c.reason = fmt::format("{} of {} elements differ; first: {}", c.mismatches, a.size(), c.reason);
  return c;
}

}  // namespace metaop
