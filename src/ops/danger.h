#pragma once
// Danger zones: where a meta operator turns finite inputs into NaN or INF, or into the zeros
// that do it one op later. Each op declares its zones next to its domain
// (OpRegistry::set_danger); for a node and its values a zone gives every site's distance to the
// zone (0: inside) and the derivative of one site's distance with respect to the value it
// watches, which `metaop expose` (src/analysis/expose) drives to 0 through the graph's VJPs.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace metaop {

struct KernelContext;
struct Node;
using Tensors = std::vector<Tensor>;

enum class DangerKind {
  ZeroDivisor,        // a divisor (Div, Reciprocal, Mod) reaches 0, or small enough to overflow
  LogDomain,          // the argument of a logarithm reaches 0 (-inf) or goes below it (NaN)
  SqrtDomain,         // the argument of a square root goes below 0 (NaN)
  InverseTrigDomain,  // the argument of asin, acos, atanh or acosh leaves its domain
  PowDomain,          // a negative base with a non-integer exponent, or 0 to a negative power
  Overflow,           // a result beyond the largest finite value of its dtype (inf)
  UnderflowToZero,    // a nonzero result rounds to 0 (harmful once a log or a divisor reads it)
  ZeroVariance,       // a normalization with epsilon 0 meets a group of equal values (0/0)
};

std::string danger_kind_name(DangerKind k);  // zero_divisor, log_domain, ...
std::vector<DangerKind> danger_kinds();

struct ZoneDistances {
  // One per site (an element, or a reduced group); 0 inside the zone, +inf where the site
  // cannot enter it (an integral exponent, a factor that is exactly 0).
  std::vector<double> distance;
  // Per site: the element of the watched value it concerns (the group's first for groups).
  std::vector<std::int64_t> element;
  // d distance[site] / d watched value, dense over the watched value (float64).
  std::function<std::vector<double>(std::size_t site)> slope;
};

struct DangerZone {
  DangerKind kind = DangerKind::Overflow;
  bool watches_output = false;  // the value whose distance is measured: an output or an input
  int index = 0;                // which input (or output)
  std::string condition;        // "input reaches 0 or below", for `metaop ops --danger`
  std::string unit = "value";   // distance unit: "value" (the watched value's) or "binades"
  // The exact result stays finite inside the zone; only kernels that evaluate the op naively
  // overflow there (Softplus as log(1 + exp(x))). The verdict on a binding decides.
  bool kernel_dependent = false;
  // Whether the zone exists for this node at all (e.g. a normalization with epsilon > 0 never
  // divides by 0); empty: always.
  std::function<bool(const KernelContext&)> applies;
  std::function<ZoneDistances(const KernelContext&, const Tensors& in, const Tensors& out)>
      distances;
  // How site `site` stands with respect to the zone, in a few words with the values
  // ("reached 0 (x = 0)", "overflowed: 91.2 > 88.72").
  std::function<std::string(const KernelContext&, const Tensors& in, const Tensors& out,
                            std::size_t site)>
      describe;
};

using DangerZones = std::vector<DangerZone>;

// Limits of a floating dtype.
double largest_finite(DType t);
double smallest_subnormal(DType t);

// Zone builders for the common shapes; each op picks its own in its family file.
namespace danger {

// Element-wise on input `input`: x < t (strict) or x <= t.
DangerZone below(DangerKind k, int input, double t, bool strict, std::string condition);
// Element-wise on input `input`: |x| > t (strict) or |x| >= t.
DangerZone abs_above(DangerKind k, int input, double t, bool strict, std::string condition);
// Element-wise on input `input`: x > t (strict) or x >= t.
DangerZone above(DangerKind k, int input, double t, bool strict, std::string condition);
// A broadcasting quotient: divisor input `divisor` at 0 or so small that |dividend / divisor|
// overflows. dividend -1: the dividend is 1 (Reciprocal); -2: only 0 itself is in the zone
// (fmod, whose result stays finite for tiny divisors).
DangerZone divisor(int divisor, int dividend, std::string condition);
// Output `output` beyond the dtype's largest finite value; distance in binades.
DangerZone output_overflow(int output = 0);
// Output `output` rounded to 0 from a nonzero exact value; distance in binades. `exact_zero`
// marks the sites that are 0 exactly (a zero factor), which cannot underflow.
using ExactZero =
    std::function<std::vector<bool>(const KernelContext&, const Tensors& in, const Tensors& out)>;
DangerZone output_underflow(std::string condition, const ExactZero& exact_zero = {},
                            int output = 0);
// Groups of input `input` (flat element lists) whose sum is <= 0 (log of a sum).
using Groups =
    std::function<std::vector<std::vector<std::int64_t>>(const KernelContext&, const Tensors& in)>;
DangerZone group_sum_below_zero(DangerKind k, int input, const Groups& groups,
                                std::string condition);
// Groups of input `input` masked whole: every value -inf (a softmax of a row masked with -inf:
// its sum of exponentials is 0, 0/0). Distance: the group's values above -inf, in "elements"
// (no slope: a mask comes from a comparison, which `metaop expose` crosses with boundary moves).
DangerZone group_all_masked(DangerKind k, int input, const Groups& groups, std::string condition);
// Groups of input `input` whose values are all equal (standard deviation 0); distance: the
// group's standard deviation (its Gauss-Newton step lands on the group mean).
DangerZone group_constant(int input, const Groups& groups, std::string condition);

}  // namespace danger

}  // namespace metaop
