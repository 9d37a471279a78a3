#include "ops/danger.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "ops/kernel_util.h"

namespace metaop {

namespace {
constexpr double kInfinity = std::numeric_limits<double>::infinity();
}

std::string danger_kind_name(DangerKind k) {
  switch (k) {
    case DangerKind::ZeroDivisor:
      return "zero_divisor";
    case DangerKind::LogDomain:
      return "log_domain";
    case DangerKind::SqrtDomain:
      return "sqrt_domain";
    case DangerKind::InverseTrigDomain:
      return "inverse_trig_domain";
    case DangerKind::PowDomain:
      return "pow_domain";
    case DangerKind::Overflow:
      return "overflow";
    case DangerKind::UnderflowToZero:
      return "underflow_to_zero";
    case DangerKind::ZeroVariance:
      return "zero_variance";
  }
  return "?";
}

std::vector<DangerKind> danger_kinds() {
  return {DangerKind::ZeroDivisor,       DangerKind::LogDomain,   DangerKind::SqrtDomain,
          DangerKind::InverseTrigDomain, DangerKind::PowDomain,   DangerKind::Overflow,
          DangerKind::UnderflowToZero,   DangerKind::ZeroVariance};
}

double largest_finite(DType t) {
  switch (t) {
    case DType::Float64:
      return std::numeric_limits<double>::max();
    case DType::Float16:
      return 65504.0;
    case DType::BFloat16:
      return 3.3895313892515355e38;
    default:
      return std::numeric_limits<float>::max();
  }
}

double smallest_subnormal(DType t) {
  switch (t) {
    case DType::Float64:
      return std::numeric_limits<double>::denorm_min();
    case DType::Float16:
      return std::ldexp(1.0, -24);
    case DType::BFloat16:
      return std::ldexp(1.0, -133);
    default:
      return std::numeric_limits<float>::denorm_min();
  }
}

namespace danger {

namespace {

// The neighbours of t in dtype `dt` (float32 spacing for the narrower dtypes too: their
// thresholds are exact float32 values).
double next_below(double t, DType dt) {
  if (dt == DType::Float64) return std::nextafter(t, -kInfinity);
  return std::nextafter(static_cast<float>(t), -std::numeric_limits<float>::infinity());
}
double next_above(double t, DType dt) {
  if (dt == DType::Float64) return std::nextafter(t, kInfinity);
  return std::nextafter(static_cast<float>(t), std::numeric_limits<float>::infinity());
}

std::vector<double> unit_vector(std::size_t n, std::int64_t at, double v) {
  std::vector<double> s(n, 0.0);
  if (at >= 0 && static_cast<std::size_t>(at) < n) s[static_cast<std::size_t>(at)] = v;
  return s;
}

// Enough digits to tell a value from the threshold next to it (1.0000001 from 1).
std::string num(double v) {
  return fmt::format("{:.9g}", v);
}

// An element-wise zone on one input: distance d(x) and its derivative dd/dx.
// `inside(x)` says how x stands in the zone, in a few words.
DangerZone elementwise(DangerKind k, int input, std::string condition,
                       const std::function<double(double, DType)>& dist,
                       const std::function<double(double)>& deriv,
                       const std::function<std::string(double)>& inside) {
  DangerZone z;
  z.kind = k;
  z.index = input;
  z.condition = std::move(condition);
  z.distances = [input, dist, deriv](const KernelContext& c, const Tensors& in, const Tensors&) {
    const Tensor& x = metaop::input(c, in, static_cast<std::size_t>(input));
    auto v = x.to_f64();
    ZoneDistances r;
    r.distance.resize(v.size());
    r.element.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      r.distance[i] = std::isnan(v[i]) ? kInfinity : dist(v[i], x.dtype());
      r.element[i] = static_cast<std::int64_t>(i);
    }
    r.slope = [v, deriv](std::size_t site) {
      return unit_vector(v.size(), static_cast<std::int64_t>(site), deriv(v[site]));
    };
    return r;
  };
  z.describe = [input, dist, inside](const KernelContext& c, const Tensors& in, const Tensors&,
                                     std::size_t site) {
    const Tensor& x = metaop::input(c, in, static_cast<std::size_t>(input));
    double v = x.f64_at(static_cast<std::int64_t>(site));
    double d = dist(v, x.dtype());
    return d == 0 ? inside(v) : fmt::format("input = {}, {} away", num(v), num(d));
  };
  return z;
}

double sign_or(double x, double zero) {
  return x > 0 ? 1.0 : (x < 0 ? -1.0 : zero);
}

}  // namespace

DangerZone below(DangerKind k, int input, double t, bool strict, std::string condition) {
  return elementwise(
      k, input, std::move(condition),
      [t, strict](double x, DType dt) {
        double edge = strict ? next_below(t, dt) : t;
        return std::max(0.0, x - edge);
      },
      [](double) { return 1.0; },
      [t](double x) {
        return x == t ? fmt::format("input reached {}", num(t))
                      : fmt::format("input went below {} ({})", num(t), num(x));
      });
}

DangerZone above(DangerKind k, int input, double t, bool strict, std::string condition) {
  return elementwise(
      k, input, std::move(condition),
      [t, strict](double x, DType dt) {
        double edge = strict ? next_above(t, dt) : t;
        return std::max(0.0, edge - x);
      },
      [](double) { return -1.0; },
      [t](double x) {
        return x == t ? fmt::format("input reached {}", num(t))
                      : fmt::format("input exceeded {} ({})", num(t), num(x));
      });
}

DangerZone abs_above(DangerKind k, int input, double t, bool strict, std::string condition) {
  return elementwise(
      k, input, std::move(condition),
      [t, strict](double x, DType dt) {
        double edge = strict ? next_above(t, dt) : t;
        return std::max(0.0, edge - std::fabs(x));
      },
      [](double x) { return -sign_or(x, 1.0); },
      [t](double x) {
        return std::fabs(x) == t ? fmt::format("|input| reached {} ({})", num(t), num(x))
                                 : fmt::format("|input| exceeded {} ({})", num(t), num(x));
      });
}

DangerZone divisor(int divisor, int dividend, std::string condition) {
  DangerZone z;
  z.kind = DangerKind::ZeroDivisor;
  z.index = divisor;
  z.condition = std::move(condition);
  // |b| <= |a| / largest: the quotient overflows (or is 0/0 or a/0).
  auto dist = [dividend](double a, double b, DType dt) {
    if (std::isnan(a) || std::isnan(b) || std::isinf(b)) return kInfinity;
    if (dividend == -2) return std::fabs(b);
    if (std::isinf(a)) return kInfinity;
    return std::max(0.0, std::fabs(b) - std::fabs(a) / largest_finite(dt));
  };
  struct Sites {
    std::vector<double> a, b;
    std::vector<std::int64_t> ma, mb;
    DType dt;
  };
  auto sites = [divisor, dividend](const KernelContext& c, const Tensors& in, const Tensors& out) {
    Sites s;
    const Tensor& b = input(c, in, static_cast<std::size_t>(divisor));
    s.dt = b.dtype();
    Shape os = out.empty() || !out[0].defined() ? b.shape() : out[0].shape();
    s.b = b.to_f64();
    s.mb = broadcast_map(b.shape(), os);
    if (dividend >= 0) {
      const Tensor& a = input(c, in, static_cast<std::size_t>(dividend));
      s.a = a.to_f64();
      s.ma = broadcast_map(a.shape(), os);
    } else {
      s.a = {1.0};
      s.ma.assign(s.mb.size(), 0);
    }
    return s;
  };
  z.distances = [sites, dist](const KernelContext& c, const Tensors& in, const Tensors& out) {
    Sites s = sites(c, in, out);
    ZoneDistances r;
    r.distance.resize(s.mb.size());
    r.element = s.mb;
    for (std::size_t i = 0; i < s.mb.size(); ++i)
      r.distance[i] = dist(s.a[s.ma[i]], s.b[s.mb[i]], s.dt);
    std::size_t n = s.b.size();
    r.slope = [s, n](std::size_t site) {
      double b = s.b[s.mb[site]];
      return unit_vector(n, s.mb[site], sign_or(b, 0.0));
    };
    return r;
  };
  z.describe = [sites, dist, dividend](const KernelContext& c, const Tensors& in,
                                       const Tensors& out, std::size_t site) {
    Sites s = sites(c, in, out);
    double a = s.a[s.ma[site]], b = s.b[s.mb[site]], d = dist(a, b, s.dt);
    if (d > 0) return fmt::format("divisor = {}, {} away", num(b), num(d));
    if (b == 0)
      return dividend >= 0 ? fmt::format("divisor reached 0 (dividend {})", num(a))
                           : std::string("divisor reached 0");
    return fmt::format("divisor {} is too small for dividend {} (the quotient overflows)", num(b),
                       num(a));
  };
  return z;
}

DangerZone output_overflow(int output) {
  DangerZone z;
  z.kind = DangerKind::Overflow;
  z.watches_output = true;
  z.index = output;
  z.unit = "binades";
  z.condition = "output overflows (beyond the dtype's largest finite value)";
  z.distances = [output](const KernelContext&, const Tensors& in, const Tensors& out) {
    const Tensor& y = out.at(static_cast<std::size_t>(output));
    auto v = y.to_f64();
    // An infinite output from an infinite input did not overflow here.
    bool finite_inputs = true;
    for (const auto& t : in)
      if (t.defined() && is_floating(t.dtype()))
        for (double e : t.to_f64()) finite_inputs &= std::isfinite(e);
    double top = std::log2(largest_finite(y.dtype())), tiny = smallest_subnormal(y.dtype());
    ZoneDistances r;
    r.distance.resize(v.size());
    r.element.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      r.element[i] = static_cast<std::int64_t>(i);
      double a = std::fabs(v[i]);
      r.distance[i] = std::isnan(a)   ? kInfinity
                      : std::isinf(a) ? (finite_inputs ? 0.0 : kInfinity)
                                      : std::max(0.0, top - std::log2(std::max(a, tiny)));
    }
    r.slope = [v, tiny](std::size_t site) {
      double y = v[site];
      double a = std::max(std::fabs(y), tiny);
      return unit_vector(v.size(), static_cast<std::int64_t>(site),
                         -sign_or(y, 1.0) / (a * std::log(2.0)));
    };
    return r;
  };
  z.describe = [output](const KernelContext&, const Tensors&, const Tensors& out,
                        std::size_t site) {
    const Tensor& y = out.at(static_cast<std::size_t>(output));
    double v = y.f64_at(static_cast<std::int64_t>(site));
    if (std::isinf(v)) return fmt::format("overflowed to {}", v > 0 ? "inf" : "-inf");
    return fmt::format("output = {}, {:.3g} binades below overflow", num(v),
                       std::log2(largest_finite(y.dtype())) -
                           std::log2(std::max(std::fabs(v), smallest_subnormal(y.dtype()))));
  };
  return z;
}

DangerZone output_underflow(std::string condition, const ExactZero& exact_zero, int output) {
  DangerZone z;
  z.kind = DangerKind::UnderflowToZero;
  z.watches_output = true;
  z.index = output;
  z.unit = "binades";
  z.condition = std::move(condition);
  z.distances = [output, exact_zero](const KernelContext& c, const Tensors& in,
                                     const Tensors& out) {
    const Tensor& y = out.at(static_cast<std::size_t>(output));
    auto v = y.to_f64();
    std::vector<bool> exact;
    if (exact_zero) exact = exact_zero(c, in, out);
    double bottom = std::log2(smallest_subnormal(y.dtype()));
    ZoneDistances r;
    r.distance.resize(v.size());
    r.element.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      r.element[i] = static_cast<std::int64_t>(i);
      if (!std::isfinite(v[i]) || (i < exact.size() && exact[i]))
        r.distance[i] = kInfinity;
      else
        r.distance[i] = v[i] == 0 ? 0.0 : std::log2(std::fabs(v[i])) - bottom + 1;
    }
    r.slope = [v](std::size_t site) {
      double y = v[site];
      return unit_vector(v.size(), static_cast<std::int64_t>(site),
                         y == 0 ? 0.0 : 1.0 / (y * std::log(2.0)));
    };
    return r;
  };
  z.describe = [output](const KernelContext&, const Tensors&, const Tensors& out,
                        std::size_t site) {
    const Tensor& y = out.at(static_cast<std::size_t>(output));
    double v = y.f64_at(static_cast<std::int64_t>(site));
    if (v == 0) return std::string("underflowed to 0");
    return fmt::format("output = {}, {:.3g} binades above 0", num(v),
                       std::log2(std::fabs(v)) - std::log2(smallest_subnormal(y.dtype())) + 1);
  };
  return z;
}

DangerZone group_all_masked(DangerKind k, int input, const Groups& groups, std::string condition) {
  DangerZone z;
  z.kind = k;
  z.index = input;
  z.unit = "elements";
  z.condition = std::move(condition);
  auto unmasked = [](const std::vector<double>& v, const std::vector<std::int64_t>& g) {
    std::size_t n = 0;
    for (auto e : g) n += !(v[static_cast<std::size_t>(e)] == -kInfinity);
    return n;
  };
  z.distances = [input, groups, unmasked](const KernelContext& c, const Tensors& in,
                                          const Tensors&) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto gs = groups(c, in);
    ZoneDistances r;
    for (const auto& g : gs) {
      r.distance.push_back(static_cast<double>(unmasked(v, g)));
      r.element.push_back(g.empty() ? 0 : g.front());
    }
    r.slope = [n = v.size()](std::size_t) { return std::vector<double>(n, 0.0); };
    return r;
  };
  z.describe = [input, groups, unmasked](const KernelContext& c, const Tensors& in, const Tensors&,
                                         std::size_t site) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto g = groups(c, in).at(site);
    std::size_t n = unmasked(v, g);
    if (n == 0) return fmt::format("all {} values are -inf (masked)", g.size());
    return fmt::format("{} of {} values above -inf", n, g.size());
  };
  return z;
}

DangerZone group_sum_below_zero(DangerKind k, int input, const Groups& groups,
                                std::string condition) {
  DangerZone z;
  z.kind = k;
  z.index = input;
  z.condition = std::move(condition);
  z.distances = [input, groups](const KernelContext& c, const Tensors& in, const Tensors&) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto gs = groups(c, in);
    ZoneDistances r;
    for (const auto& g : gs) {
      double s = 0;
      for (auto e : g) s += v[static_cast<std::size_t>(e)];
      r.distance.push_back(std::isnan(s) ? kInfinity : std::max(0.0, s));
      r.element.push_back(g.empty() ? 0 : g.front());
    }
    std::size_t n = v.size();
    r.slope = [gs, n](std::size_t site) {
      std::vector<double> s(n, 0.0);
      for (auto e : gs[site]) s[static_cast<std::size_t>(e)] = 1;
      return s;
    };
    return r;
  };
  z.describe = [input, groups](const KernelContext& c, const Tensors& in, const Tensors&,
                               std::size_t site) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto gs = groups(c, in);
    double s = 0, zeros = 0;
    for (auto e : gs[site]) {
      s += v[static_cast<std::size_t>(e)];
      zeros += v[static_cast<std::size_t>(e)] == 0;
    }
    if (s > 0) return fmt::format("sum = {}, {} away", num(s), num(s));
    if (zeros == static_cast<double>(gs[site].size()))
      return fmt::format("sum reached 0: all {} terms are 0", gs[site].size());
    return s == 0 ? fmt::format("sum of {} terms reached 0", gs[site].size())
                  : fmt::format("sum of {} terms went below 0 ({})", gs[site].size(), num(s));
  };
  return z;
}

DangerZone group_constant(int input, const Groups& groups, std::string condition) {
  DangerZone z;
  z.kind = DangerKind::ZeroVariance;
  z.index = input;
  z.condition = std::move(condition);
  auto stats = [](const std::vector<double>& v, const std::vector<std::int64_t>& g) {
    double m = 0, s = 0;
    for (auto e : g) m += v[static_cast<std::size_t>(e)];
    m /= static_cast<double>(std::max<std::size_t>(g.size(), 1));
    for (auto e : g)
      s += (v[static_cast<std::size_t>(e)] - m) * (v[static_cast<std::size_t>(e)] - m);
    return std::pair{m, std::sqrt(s / static_cast<double>(std::max<std::size_t>(g.size(), 1)))};
  };
  z.distances = [input, groups, stats](const KernelContext& c, const Tensors& in, const Tensors&) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto gs = groups(c, in);
    ZoneDistances r;
    for (const auto& g : gs) {
      double sd = stats(v, g).second;
      r.distance.push_back(std::isnan(sd) || std::isinf(sd) ? kInfinity : sd);
      r.element.push_back(g.empty() ? 0 : g.front());
    }
    r.slope = [v, gs, stats](std::size_t site) {
      std::vector<double> s(v.size(), 0.0);
      auto [m, sd] = stats(v, gs[site]);
      double n = static_cast<double>(gs[site].size());
      if (sd > 0)
        for (auto e : gs[site])
          s[static_cast<std::size_t>(e)] = (v[static_cast<std::size_t>(e)] - m) / (n * sd);
      return s;
    };
    return r;
  };
  z.describe = [input, groups, stats](const KernelContext& c, const Tensors& in, const Tensors&,
                                      std::size_t site) {
    auto v = metaop::input(c, in, static_cast<std::size_t>(input)).to_f64();
    auto gs = groups(c, in);
    auto [m, sd] = stats(v, gs[site]);
    if (sd == 0)
      return fmt::format("normalized {} equal values ({}) with epsilon 0", gs[site].size(), num(m));
    return fmt::format("standard deviation {}, {} away", num(sd), num(sd));
  };
  return z;
}

}  // namespace danger

}  // namespace metaop
