#include "analysis/core/minimize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

#include "tensor/error.h"

namespace metaop {

Tensor take_along(const Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& index) {
  if (dim < 0 || dim >= t.rank())
    fail("take_along: dimension {} of a rank-{} tensor", dim, t.rank());
  Shape shape = t.shape();
  const std::int64_t n = shape[static_cast<std::size_t>(dim)];
  for (auto i : index)
    if (i < 0 || i >= n) fail("take_along: index {} outside dimension {} of {}", i, dim, n);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<std::size_t>(d)];
  for (std::int64_t d = dim + 1; d < t.rank(); ++d) inner *= shape[static_cast<std::size_t>(d)];
  shape[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(index.size());
  Tensor out = Tensor::empty(t.dtype(), shape);
  const std::size_t row = static_cast<std::size_t>(inner) * dtype_size(t.dtype());
  std::byte* dst = out.raw();
  for (std::int64_t o = 0; o < outer; ++o)
    for (auto i : index) {
      if (row) std::memcpy(dst, t.raw() + static_cast<std::size_t>(o * n + i) * row, row);
      dst += row;
    }
  return out;
}

namespace {

// One dimension of one input: a member of a group that is shrunk with one set of indices.
struct Axis {
  std::size_t input;
  std::int64_t dim;
  bool operator==(const Axis&) const = default;
};

class Minimizer {
 public:
  Minimizer(const MinimizeOptions& opt, const Shows& shows, MinimizeResult& r)
      : opt_(opt), shows_(shows), r_(r) {}

  bool test(const Tensors& candidate) {
    if (out_of_budget()) return false;
    ++r_.calls;
    return shows_(candidate);
  }

  bool out_of_budget() const { return r_.calls >= opt_.budget; }

  // The groups of axes to shrink together, largest first: broadcasting's aligned dimensions
  // (counted from the back) of one size, then one size's dimensions anywhere, then each alone.
  std::vector<std::vector<Axis>> groups() const {
    std::vector<std::vector<Axis>> out;
    const Tensors& in = r_.inputs;
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<Axis>> aligned;  // (from back, n)
    std::map<std::int64_t, std::vector<Axis>> by_size;
    std::vector<std::vector<Axis>> alone;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (!free(i)) continue;
      for (std::int64_t d = 0; d < in[i].rank(); ++d) {
        std::int64_t n = in[i].dim(d);
        if (n < 2) continue;
        aligned[{in[i].rank() - d, n}].push_back({i, d});
        by_size[n].push_back({i, d});
        alone.push_back({{i, d}});
      }
    }
    for (auto& [k, g] : aligned)
      if (g.size() > 1) out.push_back(g);
    for (auto& [n, g] : by_size)
      if (g.size() > 1 && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    out.insert(out.end(), alone.begin(), alone.end());
    return out;
  }

  Tensors sliced(const std::vector<Axis>& g, const std::vector<std::int64_t>& keep) const {
    Tensors c = r_.inputs;
    for (const Axis& a : g) c[a.input] = take_along(c[a.input], a.dim, keep);
    return c;
  }

  // ddmin over the group's indices: a subset, then a complement, at growing granularity.
  bool shrink(const std::vector<Axis>& g) {
    const std::int64_t n = r_.inputs[g[0].input].dim(g[0].dim);
    for (const Axis& a : g)
      if (r_.inputs[a.input].dim(a.dim) != n) return false;  // an earlier group changed it
    std::vector<std::int64_t> keep(static_cast<std::size_t>(n));
    std::iota(keep.begin(), keep.end(), 0);
    std::size_t parts = 2;
    bool any = false;
    Tensors best;
    while (keep.size() >= 2 && !out_of_budget()) {
      std::vector<std::vector<std::int64_t>> chunks(parts);
      for (std::size_t k = 0; k < keep.size(); ++k)
        chunks[k * parts / keep.size()].push_back(keep[k]);
      bool reduced = false;
      for (const auto& c : chunks) {
        Tensors cand = sliced(g, c);
        if (test(cand)) {
          keep = c, best = std::move(cand), parts = 2, reduced = true;
          break;
        }
      }
      if (!reduced && parts > 2)
        for (std::size_t k = 0; k < chunks.size(); ++k) {
          std::vector<std::int64_t> rest;
          for (std::size_t m = 0; m < chunks.size(); ++m)
            if (m != k) rest.insert(rest.end(), chunks[m].begin(), chunks[m].end());
          Tensors cand = sliced(g, rest);
          if (test(cand)) {
            keep = rest, best = std::move(cand), parts = std::max<std::size_t>(parts - 1, 2);
            reduced = true;
            break;
          }
        }
      if (reduced) {
        any = true;
        continue;
      }
      if (parts >= keep.size()) break;
      parts = std::min(parts * 2, keep.size());
    }
    if (!any) return false;
    r_.inputs = std::move(best);
    std::string who;
    for (const Axis& a : g)
      who += fmt::format("{}input {} dim {}", who.empty() ? "" : ", ", a.input, a.dim);
    r_.steps.push_back(fmt::format("{}: {} -> {}", who, n, keep.size()));
    return true;
  }

  // Simpler values one element at a time: 0, 1, then fewer significant digits; passes until
  // one changes nothing (an element may need the others simpler first: a kernel's fast path
  // for a vector of small values).
  void simplify() {
    std::int64_t total = 0;
    for (std::size_t i = 0; i < r_.inputs.size(); ++i)
      if (free(i)) total += r_.inputs[i].numel();
    if (total > opt_.simplify_up_to) return;
    int changed = 0;
    for (bool again = true; again && !out_of_budget();) {
      again = false;
      for (std::size_t i = 0; i < r_.inputs.size(); ++i) {
        if (!free(i)) continue;
        for (std::int64_t e = 0; e < r_.inputs[i].numel() && !out_of_budget(); ++e)
          if (simplify_element(i, e)) {
            ++changed;
            again = true;
          }
      }
    }
    if (changed) r_.steps.push_back(fmt::format("{} value(s) made simpler", changed));
  }

 private:
  // Element e of input i replaced by the simplest value that still shows it; false if none does.
  bool simplify_element(std::size_t i, std::int64_t e) {
    std::vector<double> v = r_.inputs[i].to_f64();
    for (double s : simpler(v[static_cast<std::size_t>(e)], r_.inputs[i].dtype())) {
      v[static_cast<std::size_t>(e)] = s;
      Tensors cand = r_.inputs;
      cand[i] = Tensor::from_f64(v, r_.inputs[i].shape(), r_.inputs[i].dtype());
      if (test(cand)) {
        r_.inputs = std::move(cand);
        return true;
      }
    }
    return false;
  }

  bool free(std::size_t i) const {
    return i < opt_.free.size() && opt_.free[i] && r_.inputs[i].defined() &&
           is_floating(r_.inputs[i].dtype());
  }

  // The simpler values to try for `x` in `dtype`, simplest first, each different from x and
  // simpler than it: none for 0, only 0 for 1.
  static std::vector<double> simpler(double x, DType dtype) {
    std::vector<double> out;
    if (x == 0) return out;
    auto add = [&](double s) {
      double r = Tensor::scalar(s, dtype).f64_at(0);
      bool same = r == x || (std::isnan(r) && std::isnan(x));
      if (!same && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    };
    add(0);
    if (x == 1) return out;
    add(1);
    if (std::isfinite(x))
      for (int digits = 1; digits <= 6; ++digits)
        add(std::strtod(fmt::format("{:.{}e}", x, digits - 1).c_str(), nullptr));
    return out;
  }

  const MinimizeOptions& opt_;
  const Shows& shows_;
  MinimizeResult& r_;
};

}  // namespace

MinimizeResult minimize_inputs(const Tensors& inputs, const MinimizeOptions& opt,
                               const Shows& shows) {
  MinimizeResult r;
  r.inputs = inputs;
  Minimizer m(opt, shows, r);
  r.shown = m.test(inputs);
  if (!r.shown) return r;
  // Shrinking one group can let another shrink further: passes until none does.
  for (bool progress = true; progress && !m.out_of_budget();) {
    progress = false;
    for (const auto& g : m.groups()) progress = m.shrink(g) || progress;
  }
  m.simplify();
  r.exhausted = m.out_of_budget();
  return r;
}

}  // namespace metaop
