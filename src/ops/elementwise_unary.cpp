// Element-wise unary meta operators, one row each: the float64 function and its derivative, the
// attributes they read (with the schema's defaults), the forward and backward error models, and the
// domain (the probe's edge points, the true kinks). Every row is registered the same way: the
// reference widens x exactly, computes f(x) in float64 and rounds once; the VJP is g * f'(x);
// at a kink any value between the one-sided derivatives is a correct gradient.
//
// The backward error model of a row (docs/error-models.md, "Element-wise backward"): a kernel
// computes g * d with d its float32 value of f'(x), from x or from the rounded y = f(x) it
// returned; so |error| <= u |g| (|f'| + D(x, y)) + 1 ulp, where |f'| is the product's rounding
// and D, in units of u, the rounding of the derivative's own formula plus its sensitivity to
// y's rounding (|dD/dy| |y| times the forward's ulps + 1), written per row.
#include <cmath>
#include <source_location>

#include "ops/conventions.h"
#include "ops/kernel_util.h"
#include "ops/vjp_util.h"
#include "tensor/text.h"

namespace metaop {

namespace {

using Attrs = const double*;  // the row's attribute values, in the order of UnaryRow::attrs

struct UnaryRow {
  std::source_location where;  // the row (ops --where): here()
  const char* name;
  std::vector<const char*> attrs = {};  // float attributes; the schema gives their defaults
  double (*f)(double x, Attrs a) = nullptr;
  // dy/dx at x, with y = f(x) as the kernel returned it; nullptr: not differentiable.
  double (*df)(double x, double y, Attrs a) = nullptr;
  double ulps = 0;  // forward: ULPs of the exact result (0: exact)
  // Forward: the rounding magnitude (units of u) of branch conditions on rounded affine terms.
  double (*fmag)(double x, Attrs a) = nullptr;
  const char* doc = nullptr;  // the forward model in words (default from ulps)
  // Backward: D(x, y) above; nullptr: 0 (f' is a constant or exact).
  double (*dmag)(double x, double y, Attrs a) = nullptr;
  const char* ddoc = "|g| |f'|";                       // the backward magnitude in words
  std::vector<double> (*critical)(Attrs a) = nullptr;  // the probe's edge points
  std::vector<double> (*kinks)(Attrs a) = nullptr;     // where f' jumps
  // How far (units of u) from a kink a rounded branch condition may decide the other side.
  double (*kink_width)(double x, Attrs a) = nullptr;
  bool float_only = true;
  // Where finite inputs give NaN/INF or the zeros that do it one op later (for `metaop
  // expose`); nullptr: nowhere.
  DangerZones (*danger)() = nullptr;
  std::vector<CaseSpec> cases = {};  // sample cases the node tests lack (ops/manifest.h)
  ExplainWords explain = {};         // expose's words for its outputs
  // Triage (Float32Definition): the definition as the ONNX text writes it, in float32, where it
  // takes more than one rounding (nullptr: one function or operation, rounded once), the text of
  // that formula and how a kernel avoids its float32 limit.
  float (*f32)(float x, Attrs a) = nullptr;
  const char* formula = nullptr;
  const char* better = nullptr;
  // The definition branches on a comparison of x, which NaN fails: ONNX leaves open whether NaN
  // takes that branch or propagates (the reference propagates it).
  bool nan_branch = false;
  // A string attribute read as one more number after `attrs` (Gelu's approximate): its name and
  // each value's code (Unsupported for a value the row does not know).
  const char* string_attr = nullptr;
  double (*string_code)(const KernelContext& c, const std::string& value) = nullptr;
  // Triage of backward findings (Float32Vjp): f'(x) as kernels compute it in float32, from x or
  // the output y, and that formula in words; nullptr: without `dmag`, g f'(x) is one operation on
  // an exact derivative (rounded once), with it the VJP declares no float32 evaluation.
  float (*df32)(float x, float y, Attrs a) = nullptr;
  const char* dformula = nullptr;
};

constexpr double kPi = 3.14159265358979323846;
constexpr double kTwoOverSqrtPi = 1.1283791670955126;

double sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}
double softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
// Relative rounding of 1 - x^2 (or x^2 - 1) computed in float32 from an exact x: x^2 rounds by
// u x^2, the difference by u |1 - x^2|.
double one_minus_square_rel(double x) {
  double d = std::fabs(1 - x * x);
  return (x * x + d) / d;
}

std::vector<double> signs(Attrs) {
  return {0, 1, -1};
}
std::vector<double> at_zero(Attrs) {
  return {0};
}
std::vector<double> saturating(Attrs) {
  return {0, 9, -9, 20, -20, 88.7228, -88.7228};
}

// Danger zones of the rows (ops/danger.h).
DangerZones overflows() {
  return {danger::output_overflow()};
}
DangerZones exp_zones() {
  return {danger::output_overflow(),
          danger::output_underflow("exp(x) rounds to 0 (x below -103.97)")};
}
DangerZones log_zones() {
  return {
      danger::below(DangerKind::LogDomain, 0, 0, false, "input reaches 0 (-inf) or below (NaN)")};
}
DangerZones sqrt_zones() {
  return {danger::below(DangerKind::SqrtDomain, 0, 0, true, "input below 0 (NaN)")};
}
DangerZones reciprocal_zones() {
  return {danger::divisor(0, -1, "input reaches 0, or a subnormal whose reciprocal overflows")};
}
DangerZones asin_acos_zones() {
  return {danger::abs_above(DangerKind::InverseTrigDomain, 0, 1, true, "|input| above 1 (NaN)")};
}
DangerZones atanh_zones() {
  return {danger::abs_above(DangerKind::InverseTrigDomain, 0, 1, false,
                            "|input| reaches 1 (inf) or above (NaN)")};
}
DangerZones acosh_zones() {
  return {danger::below(DangerKind::InverseTrigDomain, 0, 1, true, "input below 1 (NaN)")};
}
DangerZones sigmoid_zones() {
  return {danger::output_underflow("sigmoid(x) rounds to 0 (x below about -103.3 in float32)")};
}
// The exact softplus is finite for every finite x; kernels that compute log(1 + exp(x)) as
// written overflow above 88.72.
DangerZones softplus_zones() {
  DangerZone z = danger::above(DangerKind::Overflow, 0, 88.72283935546875, false,
                               "input above 88.72: exp(x) overflows in kernels that compute "
                               "log(1 + exp(x)) as written");
  z.kernel_dependent = true;
  return {z};
}

// clang-format off
// Exact: no rounding beyond the result's.
std::vector<UnaryRow> exact_rows() {
  return {
      {.where = here(), .name = "Neg", .f = [](double x, Attrs) { return -x; },
       .df = [](double, double, Attrs) { return -1.0; }, .critical = signs, .float_only = false,
        .explain = {.form = ExplainForm::unary}},
      {.where = here(), .name = "Abs", .f = [](double x, Attrs) { return std::fabs(x); },
       .df = [](double x, double, Attrs) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); },
       .critical = signs, .kinks = at_zero, .float_only = false,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary}},
      {.where = here(), .name = "Sign", .f = [](double x, Attrs) { return double((x > 0) - (x < 0)); },
       .df = [](double, double, Attrs) { return 0.0; }, .critical = signs, .float_only = false,
        .cases = {{13, {case_input::floats({2, 3, 4, 5})}}}, .nan_branch = true},
      {.where = here(), .name = "Floor", .f = [](double x, Attrs) { return std::floor(x); },
       .df = [](double, double, Attrs) { return 0.0; }, .critical = signs},
      {.where = here(), .name = "Ceil", .f = [](double x, Attrs) { return std::ceil(x); },
       .df = [](double, double, Attrs) { return 0.0; }, .critical = signs},
      // Round half to even, as ONNX specifies (the default rounding mode of nearbyint).
      {.where = here(), .name = "Round", .f = [](double x, Attrs) { return std::nearbyint(x); },
       .df = [](double, double, Attrs) { return 0.0; },
       .critical = [](Attrs) { return std::vector<double>{0.5, 1.5, 2.5, -0.5, -1.5, 8388608.5}; },
        .cases = {{13, {case_input::floats({2, 3, 4, 5})}}}},
      {.where = here(), .name = "Identity", .f = [](double x, Attrs) { return x; },
       .df = [](double, double, Attrs) { return 1.0; }, .float_only = false,
        .explain = {.form = ExplainForm::relay}},
      {.where = here(), .name = "Not", .f = [](double x, Attrs) { return x == 0 ? 1.0 : 0.0; }, .float_only = false},
      {.where = here(), .name = "Relu", .f = [](double x, Attrs) { return x > 0 ? x : 0.0; },
       .df = [](double x, double, Attrs) { return x > 0 ? 1.0 : 0.0; }, .critical = signs,
       .kinks = at_zero, .float_only = false,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .clamps_to = 0.0, .telling = true},
        .nan_branch = true},
      {.where = here(), .name = "ThresholdedRelu", .attrs = {"alpha"},
       .f = [](double x, Attrs a) { return x > a[0] ? x : 0.0; },
       .df = [](double x, double, Attrs a) { return x > a[0] ? 1.0 : 0.0; },
       .critical = [](Attrs a) { return std::vector<double>{a[0]}; },
       .kinks = [](Attrs a) { return std::vector<double>{a[0]}; }, .nan_branch = true},
  };
}

// Correctly rounded.
std::vector<UnaryRow> correctly_rounded_rows() {
  return {
      {.where = here(), .name = "Sqrt", .f = [](double x, Attrs) { return std::sqrt(x); },
       .df = [](double, double y, Attrs) { return 0.5 / y; }, .ulps = 1,
       .doc = "1 ulp (correctly rounded)",
       .dmag = [](double, double y, Attrs) { return 1 / std::fabs(y); },
       .ddoc = "|g| (|f'| + 1/|y|): 0.5/y's sensitivity to y's rounding", .critical = at_zero,
       .danger = sqrt_zones,
        .explain = {.form = ExplainForm::unary},
        .df32 = [](float, float y, Attrs) { return 0.5f / y; }, .dformula = "g (0.5 / y)"},
      {.where = here(), .name = "Reciprocal", .f = [](double x, Attrs) { return 1.0 / x; },
       .df = [](double, double y, Attrs) { return -y * y; }, .ulps = 1,
       .doc = "1 ulp (correctly rounded)",
       .dmag = [](double, double y, Attrs) { return 5 * y * y; },
       .ddoc = "|g| (|f'| + 5 y^2): y*y, and y's rounding twice", .critical = at_zero,
       .danger = reciprocal_zones,
        .explain = {.form = ExplainForm::unary},
        .df32 = [](float, float y, Attrs) { return -(y * y); }, .dformula = "g (-(y y))"},
      {.where = here(), .name = "LeakyRelu", .attrs = {"alpha"},
       .f = [](double x, Attrs a) { return x >= 0 ? x : a[0] * x; },
       .df = [](double x, double, Attrs a) { return x < 0 ? a[0] : 1.0; }, .ulps = 1,
       .doc = "1 ulp (correctly rounded)", .critical = signs, .kinks = at_zero,
       .danger = overflows,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}}},
  };
}

// Elementary functions: libm and vectorized versions (SLEEF, oneDNN) are within a few
// ULPs; 4 covers the 3.5-ulp variants.
std::vector<UnaryRow> elementary_rows() {
  return {
      {.where = here(), .name = "Exp", .f = [](double x, Attrs) { return std::exp(x); },
       .df = [](double, double y, Attrs) { return y; }, .ulps = 4,
       .dmag = [](double, double y, Attrs) { return 5 * std::fabs(y); },
       .ddoc = "|g| (|f'| + 5|y|): y or exp(x), 4 ulp apart",
       // Float32 limits: exp overflows above 88.72 and underflows to subnormal below -87.34.
       .critical = [](Attrs) { return std::vector<double>{0, 88.7228, -87.3365, -103.97}; },
       .danger = exp_zones,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .underflow = {0}, .telling = true},
        .df32 = [](float, float y, Attrs) { return y; }, .dformula = "g y"},
      {.where = here(), .name = "Log", .f = [](double x, Attrs) { return std::log(x); },
       .df = [](double x, double, Attrs) { return 1 / x; }, .ulps = 4,
       .critical = [](Attrs) { return std::vector<double>{0, 1}; }, .danger = log_zones,
        .explain = {.form = ExplainForm::unary}},
      {.where = here(), .name = "Erf", .f = [](double x, Attrs) { return std::erf(x); },
       .df = [](double x, double, Attrs) { return kTwoOverSqrtPi * std::exp(-x * x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return kTwoOverSqrtPi * std::exp(-x * x) * (x * x + 6);
       },
       .ddoc = "|g| |f'| (x^2 + 7): exp(-x^2) of a rounded x^2", .critical = saturating},
      {.where = here(), .name = "Sin", .f = [](double x, Attrs) { return std::sin(x); },
       .df = [](double x, double, Attrs) { return std::cos(x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 4 * std::fabs(std::cos(x)); },
       .ddoc = "|g| 5|cos x|",
       .critical = [](Attrs) { return std::vector<double>{kPi, 0, 1e5}; },
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}}},
      {.where = here(), .name = "Cos", .f = [](double x, Attrs) { return std::cos(x); },
       .df = [](double x, double, Attrs) { return -std::sin(x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 4 * std::fabs(std::sin(x)); },
       .ddoc = "|g| 5|sin x|",
       .critical = [](Attrs) { return std::vector<double>{kPi / 2, 0, 1e5}; }},
      // Tan has no danger zone: no float32 or float64 value is close enough to an odd multiple
      // of pi/2 for tan to overflow (|tan(float(pi/2))| is about 2.3e7).
      {.where = here(), .name = "Tan", .f = [](double x, Attrs) { return std::tan(x); },
       .df = [](double, double y, Attrs) { return 1 + y * y; }, .ulps = 4,
       .dmag = [](double, double y, Attrs) { return 1 + 12 * y * y; },
       .ddoc = "|g| (|f'| + 1 + 12 y^2): 1 + y*y, and y's rounding",
       .critical = [](Attrs) { return std::vector<double>{kPi / 2, -kPi / 2, 0}; }},
  };
}

// Elementary functions: inverse trigonometric and hyperbolic.
std::vector<UnaryRow> inverse_and_hyperbolic_rows() {
  return {
      {.where = here(), .name = "Asin", .f = [](double x, Attrs) { return std::asin(x); },
       .df = [](double x, double, Attrs) { return 1 / std::sqrt(1 - x * x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return (0.5 * one_minus_square_rel(x) + 2) / std::sqrt(1 - x * x);
       },
       .ddoc = "|g| |f'| (3 + (x^2 + |1 - x^2|) / (2|1 - x^2|)): 1 - x*x cancels",
       .critical = [](Attrs) { return std::vector<double>{-1, 1, 0}; }, .danger = asin_acos_zones},
      {.where = here(), .name = "Acos", .f = [](double x, Attrs) { return std::acos(x); },
       .df = [](double x, double, Attrs) { return -1 / std::sqrt(1 - x * x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return (0.5 * one_minus_square_rel(x) + 2) / std::sqrt(1 - x * x);
       },
       .ddoc = "|g| |f'| (3 + (x^2 + |1 - x^2|) / (2|1 - x^2|)): 1 - x*x cancels",
       .critical = [](Attrs) { return std::vector<double>{-1, 1, 0}; }, .danger = asin_acos_zones},
      {.where = here(), .name = "Atan", .f = [](double x, Attrs) { return std::atan(x); },
       .df = [](double x, double, Attrs) { return 1 / (1 + x * x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 3 / (1 + x * x); },
       .ddoc = "|g| 4|f'|: 1/(1 + x*x)", .critical = saturating},
      {.where = here(), .name = "Sinh", .f = [](double x, Attrs) { return std::sinh(x); },
       .df = [](double x, double, Attrs) { return std::cosh(x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 4 * std::cosh(x); }, .ddoc = "|g| 5|f'|",
       .critical = [](Attrs) { return std::vector<double>{0, 89.4159, -89.4159}; },
       .danger = overflows},
      {.where = here(), .name = "Cosh", .f = [](double x, Attrs) { return std::cosh(x); },
       .df = [](double x, double, Attrs) { return std::sinh(x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 4 * std::fabs(std::sinh(x)); },
       .ddoc = "|g| 5|f'|",
       .critical = [](Attrs) { return std::vector<double>{0, 89.4159, -89.4159}; },
       .danger = overflows},
      {.where = here(), .name = "Asinh", .f = [](double x, Attrs) { return std::asinh(x); },
       .df = [](double x, double, Attrs) { return 1 / std::sqrt(x * x + 1); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 3 / std::sqrt(x * x + 1); },
       .ddoc = "|g| 4|f'|: 1/sqrt(x*x + 1)", .critical = saturating},
      {.where = here(), .name = "Acosh", .f = [](double x, Attrs) { return std::acosh(x); },
       .df = [](double x, double, Attrs) { return 1 / std::sqrt(x * x - 1); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return (0.5 * one_minus_square_rel(x) + 2) / std::sqrt(x * x - 1);
       },
       .ddoc = "|g| |f'| (3 + (x^2 + |x^2 - 1|) / (2|x^2 - 1|)): x*x - 1 cancels",
       .critical = [](Attrs) { return std::vector<double>{1}; }, .danger = acosh_zones},
      {.where = here(), .name = "Atanh", .f = [](double x, Attrs) { return std::atanh(x); },
       .df = [](double x, double, Attrs) { return 1 / (1 - x * x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return (one_minus_square_rel(x) + 1) / std::fabs(1 - x * x);
       },
       .ddoc = "|g| |f'| (2 + (x^2 + |1 - x^2|) / |1 - x^2|): 1 - x*x cancels",
       .critical = [](Attrs) { return std::vector<double>{-1, 1, 0}; }, .danger = atanh_zones},
  };
}

// Activations.
std::vector<UnaryRow> activation_rows() {
  return {
      {.where = here(), .name = "Sigmoid", .f = [](double x, Attrs) { return sigmoid(x); },
       .df = [](double, double y, Attrs) { return y * (1 - y); }, .ulps = 4,
       .dmag = [](double, double y, Attrs) {
         return 2 * std::fabs(y * (1 - y)) + 5 * std::fabs(y * (1 - 2 * y));
       },
       .ddoc = "|g| (3|f'| + 5|y (1 - 2y)|): y (1 - y), and y's rounding", .critical = saturating,
       .danger = sigmoid_zones,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .underflow = {0}, .saturation = {1}, .telling = true},
        .f32 = [](float x, Attrs) { return 1.0f / (1.0f + std::exp(-x)); },
        .formula = "1 / (1 + exp(-x))",
        .better = "exp(x) / (1 + exp(x)) for x < 0 keeps the small results",
        .df32 = [](float, float y, Attrs) { return y * (1.0f - y); }, .dformula = "g (y (1 - y))"},
      {.where = here(), .name = "Tanh", .f = [](double x, Attrs) { return std::tanh(x); },
       .df = [](double, double y, Attrs) { return 1 - y * y; }, .ulps = 4,
       .dmag = [](double, double y, Attrs) { return std::fabs(1 - y * y) + 11 * y * y; },
       .ddoc = "|g| (2|f'| + 11 y^2): 1 - y*y, and y's rounding", .critical = saturating,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .saturation = {1, -1}, .telling = true},
        .df32 = [](float, float y, Attrs) { return 1.0f - y * y; }, .dformula = "g (1 - y y)"},
      {.where = here(), .name = "Softplus", .f = [](double x, Attrs) { return softplus(x); },
       .df = [](double x, double, Attrs) { return sigmoid(x); }, .ulps = 4,
       .dmag = [](double x, double, Attrs) { return 6 * sigmoid(x); },
       .ddoc = "|g| 7|f'|: exp(x) / (exp(x) + 1)",
       .critical = [](Attrs) { return std::vector<double>{0, 20, -20, 88.7228, -103.97}; },
       .danger = softplus_zones,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .underflow = {0}},
        .f32 = [](float x, Attrs) { return std::log(std::exp(x) + 1.0f); },
        .formula = "log(exp(x) + 1)",
        .better = "x + log1p(exp(-x)) for x > 0 does not overflow, log1p(exp(x)) keeps small "
                  "results"},
      {.where = here(), .name = "Softsign", .f = [](double x, Attrs) { return x / (1.0 + std::fabs(x)); },
       .df = [](double x, double, Attrs) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); },
       .ulps = 4,
       .dmag = [](double x, double, Attrs) {
         return 3 / ((1 + std::fabs(x)) * (1 + std::fabs(x)));
       },
       .ddoc = "|g| 4|f'|: 1/(1 + |x|)^2", .critical = saturating,
        .f32 = [](float x, Attrs) { return x / (1.0f + std::fabs(x)); },
        .formula = "x / (1 + |x|)", .better = "none needed"},
  };
}

// Activations built on exp(x) - 1: Elu, Selu, Celu.
std::vector<UnaryRow> exponential_activation_rows() {
  return {
      {.where = here(), .name = "Elu", .attrs = {"alpha"},
       .f = [](double x, Attrs a) { return x >= 0 ? x : a[0] * std::expm1(x); },
       .df = [](double x, double, Attrs a) { return x < 0 ? a[0] * std::exp(x) : 1.0; },
       .ulps = 4,
       .dmag = [](double x, double y, Attrs a) {
         return x < 0 ? 5 * std::fabs(a[0] * std::exp(x)) + 5 * std::fabs(y) : 0.0;
       },
       .ddoc = "|g| (|f'| + 5|f'| + 5|y| for x < 0): alpha exp(x) or y + alpha",
       .critical = signs, .kinks = at_zero,
        .cases = {{13, {case_input::whole({2, 3, 4, 5})}}},
        .f32 = [](float x, Attrs a) {
          return x < 0 ? static_cast<float>(a[0]) * (std::exp(x) - 1.0f) : x;
        },
        .formula = "alpha (exp(x) - 1) for x < 0, x otherwise",
        .better = "expm1(x) keeps the small results exp(x) - 1 cancels", .nan_branch = true},
      {.where = here(), .name = "Selu", .attrs = {"alpha", "gamma"},
       .f = [](double x, Attrs a) { return x > 0 ? a[1] * x : a[1] * a[0] * std::expm1(x); },
       .df = [](double x, double, Attrs a) { return x <= 0 ? a[1] * a[0] * std::exp(x) : a[1]; },
       .ulps = 4,
       .dmag = [](double x, double y, Attrs a) {
         return x <= 0 ? 5 * std::fabs(a[1] * a[0] * std::exp(x)) + 5 * std::fabs(y) : 1.0;
       },
       .ddoc = "|g| (|f'| + 5|f'| + 5|y| for x <= 0, + 1 above): gamma alpha exp(x) or y + "
               "gamma alpha",
       .critical = signs, .kinks = at_zero, .danger = overflows,
        .f32 = [](float x, Attrs a) {
          float alpha = static_cast<float>(a[0]), gamma = static_cast<float>(a[1]);
          return x <= 0 ? gamma * (alpha * std::exp(x) - alpha) : gamma * x;
        },
        .formula = "gamma (alpha exp(x) - alpha) for x <= 0, gamma x otherwise",
        .better = "gamma alpha expm1(x) keeps the small results alpha exp(x) - alpha cancels",
        .nan_branch = true},
      // Continuously differentiable: both one-sided derivatives at 0 are 1.
      {.where = here(), .name = "Celu", .attrs = {"alpha"},
       .f = [](double x, Attrs a) {
         return std::max(0.0, x) + std::min(0.0, a[0] * std::expm1(x / a[0]));
       },
       .df = [](double x, double, Attrs a) { return x < 0 ? std::exp(x / a[0]) : 1.0; },
       .ulps = 4,
       .dmag = [](double x, double y, Attrs a) {
         return x < 0 ? std::exp(x / a[0]) * (5 + std::fabs(x / a[0])) + 5 * std::fabs(y / a[0])
                      : 0.0;
       },
       .ddoc = "|g| (|f'| + |f'| (5 + |x/alpha|) + 5|y/alpha| for x < 0): exp of a rounded "
               "x/alpha, or y/alpha + 1",
       .critical = signs,
        .f32 = [](float x, Attrs a) {
          float alpha = static_cast<float>(a[0]);
          return std::max(0.0f, x) + std::min(0.0f, alpha * (std::exp(x / alpha) - 1.0f));
        },
        .formula = "max(0, x) + min(0, alpha (exp(x / alpha) - 1))",
        .better = "alpha expm1(x / alpha) keeps the small results exp(x / alpha) - 1 cancels",
        .nan_branch = true},
  };
}

// Activations, continued: the hard (clamped) ones and Shrink.
std::vector<UnaryRow> piecewise_activation_rows() {
  return {
      // alpha*x + beta is rounded before the clamp: cancellation near the kinks is allowed, and
      // the rounded sum may decide which side of a kink x is on.
      {.where = here(), .name = "HardSigmoid", .attrs = {"alpha", "beta"},
       .f = [](double x, Attrs a) { return std::max(0.0, std::min(1.0, a[0] * x + a[1])); },
       .df = [](double x, double, Attrs a) {
         double t = a[0] * x + a[1];
         return t > 0 && t < 1 ? a[0] : 0.0;
       },
       .ulps = 2,
       .fmag = [](double x, Attrs a) { return 2 * (std::fabs(a[0] * x) + std::fabs(a[1])); },
       .doc = "2(|alpha*x| + |beta|) (affine step), 2 ulp",
       .critical = [](Attrs a) {
         return a[0] != 0 ? std::vector<double>{-a[1] / a[0], (1 - a[1]) / a[0]}
                          : std::vector<double>{};
       },
       .kinks = [](Attrs a) {
         return a[0] != 0 ? std::vector<double>{-a[1] / a[0], (1 - a[1]) / a[0]}
                          : std::vector<double>{};
       },
       .kink_width = [](double x, Attrs a) {
         return 2 * (std::fabs(a[0] * x) + std::fabs(a[1])) / std::fabs(a[0]);
       },
       .f32 = [](float x, Attrs a) {
         return std::max(0.0f, std::min(1.0f, static_cast<float>(a[0]) * x +
                                                   static_cast<float>(a[1])));
       },
       .formula = "max(0, min(1, alpha x + beta))", .better = "none needed",
       .nan_branch = true},
      {.where = here(), .name = "HardSwish",
       .f = [](double x, Attrs) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); },
       .df = [](double x, double, Attrs) { return x < -3 ? 0.0 : (x > 3 ? 1.0 : (2 * x + 3) / 6); },
       .ulps = 2,
       .fmag = [](double x, Attrs) { return 2 * std::fabs(x) * (std::fabs(x / 6) + 0.5); },
       .doc = "2|x|(|x/6| + 1/2) (affine step), 2 ulp",
       .dmag = [](double x, double, Attrs) {
         return std::fabs(x) <= 3 ? 2 * (std::fabs(x) / 3 + 0.5) : 0.0;
       },
       .ddoc = "|g| (|f'| + 2(|x|/3 + 1/2) for |x| <= 3): x/3 + 1/2",
       .critical = [](Attrs) { return std::vector<double>{-3, 3, 0}; },
       .kinks = [](Attrs) { return std::vector<double>{-3, 3}; },
       .kink_width = [](double x, Attrs) { return 12 * (std::fabs(x) / 6 + 0.5); },
        .cases = {{14, {case_input::whole({2, 3, 4, 5})}}},
        .f32 = [](float x, Attrs) {
          return x * std::max(0.0f, std::min(1.0f, (1.0f / 6.0f) * x + 0.5f));
        },
        .formula = "the function body: x HardSigmoid(x, alpha 1/6, beta 1/2)",
        .better = "the formula as written: x (x + 3) / 6 overflows where it does not",
        .nan_branch = true},
      {.where = here(), .name = "Shrink", .attrs = {"lambd", "bias"},
       .f = [](double x, Attrs a) { return x < -a[0] ? x + a[1] : (x > a[0] ? x - a[1] : 0.0); },
       .df = [](double x, double, Attrs a) { return x < -a[0] || x > a[0] ? 1.0 : 0.0; },
       .ulps = 1, .fmag = [](double x, Attrs a) { return std::fabs(x) + std::fabs(a[1]); },
       .doc = "|x| + |bias| (x -+ bias), 1 ulp",
       .critical = [](Attrs a) { return std::vector<double>{a[0], -a[0]}; },
       .kinks = [](Attrs a) { return std::vector<double>{a[0], -a[0]}; }, .float_only = false,
       .nan_branch = true},
  };
}

// clang-format on

// Smooth activations of newer opsets: Mish (18), Gelu (20).
// Gelu: 0.5 x (1 + erf(x / sqrt 2)), or with approximate = tanh
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); Phi and phi are the normal CDF and density.
constexpr double kSqrtTwoOverPi = 0.7978845608028654, kGeluCubic = 0.044715;
double gelu_approximate(const KernelContext& c, const std::string& v) {
  if (v == "none") return 0;
  if (v == "tanh") return 1;
  throw Unsupported(fmt::format("{}: approximate '{}'", c.node.label(), printable(v, 64)));
}
double gelu_tanh_inner(double x) {
  return kSqrtTwoOverPi * (x + kGeluCubic * x * x * x);
}
// 0.5 (1 + tanh z) = sigmoid(2z), which keeps the small results of z < 0.
double gelu(double x, Attrs a) {
  if (a[0] != 0) return x * sigmoid(2 * gelu_tanh_inner(x));
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // erfc keeps the small results for x < 0
}
// d/dx: Phi(x) + x phi(x); with tanh, 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3c x^2).
double gelu_slope_parts(double x, Attrs a, double& second) {
  if (a[0] != 0) {
    double h = sigmoid(2 * gelu_tanh_inner(x));  // 0.5 (1 + t); 1 - t^2 = 4 h (1 - h)
    second = 2 * x * h * (1 - h) * kSqrtTwoOverPi * (1 + 3 * kGeluCubic * x * x);
    return h;
  }
  second = x * std::exp(-0.5 * x * x) / std::sqrt(2 * kPi);
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
double gelu_df(double x, double, Attrs a) {
  double second = 0;
  double first = gelu_slope_parts(x, a, second);
  return first + second;
}
// Mish: x tanh(softplus(x)); d/dx = t + x (1 - t^2) sigmoid(x), t = tanh(softplus(x)).
double mish(double x, Attrs) {
  return x * std::tanh(softplus(x));
}
double mish_df(double x, double, Attrs) {
  double t = std::tanh(softplus(x));
  return t + x * (1 - t * t) * sigmoid(x);
}

// clang-format off
std::vector<UnaryRow> smooth_activation_rows() {
  return {
      // A float32 kernel: softplus (4 ulp), tanh of it (4 ulp; its condition number
      // s (1 - t^2) / t is at most 1), the product (1/2 ulp): 8 ulp, rounded up.
      {.where = here(), .name = "Mish", .f = mish, .df = mish_df, .ulps = 9,
       .doc = "9 ulp: softplus and tanh (4 ulp each, tanh's condition number at most 1) and a "
              "product",
       .dmag = [](double x, double, Attrs) {
         double t = std::tanh(softplus(x));
         return 9 * std::fabs(t) + 9 * std::fabs(x * (1 - t * t) * sigmoid(x)) *
                                        one_minus_square_rel(t);
       },
       .ddoc = "|g| (|f'| + 9|t| + 9|x (1 - t^2) sigmoid(x)| (t^2 + |1 - t^2|) / |1 - t^2|): t "
               "and sigmoid 9 ulp, 1 - t^2 from a rounded t",
       .critical = [](Attrs) { return std::vector<double>{0, -1.19, 20, -20, 88.7228, -103.97}; },
        .cases = {{18, {case_input::whole({2, 3, 4, 5})}}},
        .explain = {.form = ExplainForm::unary, .underflow = {0}},
        .f32 = [](float x, Attrs) { return x * std::tanh(std::log(1.0f + std::exp(x))); },
        .formula = "x tanh(ln(1 + exp(x)))",
        .better = "log1p(exp(x)) keeps softplus's small results for x < 0, and x + "
                  "log1p(exp(-x)) avoids exp's overflow for x > 88"},
      // A float32 kernel: x / sqrt 2 (1/2 ulp), erf or erfc of it (4 ulp, and the argument's
      // rounding times erf's condition number, under 1/2 ulp for x >= 0), 1 + erf, the two
      // products (1 ulp): 6 ulp where the result is not small (x >= 0); erf-based kernels lose
      // the small results of x < 0, which the float32 definition loses too (triage).
      {.where = here(), .name = "Gelu", .f = gelu, .df = gelu_df, .ulps = 6,
       .doc = "6 ulp: x / sqrt 2, erf (4 ulp) and the products (tanh form alike)",
       .dmag = [](double x, double, Attrs a) {
         double second = 0;
         double first = gelu_slope_parts(x, a, second);
         return 6 * std::fabs(first) + 8 * std::fabs(second);
       },
       .ddoc = "|g| (|f'| + 6|Phi(x)| + 8|x phi(x)|): erf (or tanh) and exp 4 ulp, their "
               "products",
       .critical = [](Attrs) { return std::vector<double>{0, -3, 3, -10, 10, -20, 20}; },
        .cases = {{20, {case_input::whole({2, 3, 4, 5})}},
                  {20, {case_input::whole({2, 3, 4, 5})}, {{"approximate", Attribute::of_string("tanh")}}}},
        .explain = {.form = ExplainForm::unary, .underflow = {0}},
        .f32 = [](float x, Attrs a) {
          if (a[0] != 0)
            return 0.5f * x *
                   (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
          return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
        },
        .formula = "0.5 x (1 + erf(x / sqrt 2)) (approximate = tanh: 0.5 x (1 + tanh(sqrt(2 / "
                   "pi) (x + 0.044715 x^3))))",
        .better = "0.5 x erfc(-x / sqrt 2) keeps the small results of x < 0",
        .string_attr = "approximate", .string_code = gelu_approximate},
  };
}

// clang-format on

// Every unary op, section by section, in the order they are registered.
const std::vector<UnaryRow>& unary_rows() {
  static const std::vector<UnaryRow> rows = [] {
    using Section = std::vector<UnaryRow> (*)();
    std::vector<UnaryRow> all;
    for (Section section :
         {exact_rows, correctly_rounded_rows, elementary_rows, inverse_and_hyperbolic_rows,
          activation_rows, exponential_activation_rows, piecewise_activation_rows,
          smooth_activation_rows})
      for (auto& row : section()) all.push_back(std::move(row));
    return all;
  }();
  return rows;
}

std::vector<double> attrs_of(const UnaryRow& row, const KernelContext& c) {
  std::vector<double> a;
  a.reserve(row.attrs.size());
  for (const char* name : row.attrs) a.push_back(attr_f(c, name));
  if (row.string_attr) a.push_back(row.string_code(c, attr_s(c, row.string_attr)));
  return a;
}

// Per element: the interval of correct gradients where x sits on (or within rounding of) a kink.
SubgradientFn kink_subgradient(const UnaryRow& row) {
  return
      [row](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        std::vector<GradientSet> sets(in.size());
        if (!is_floating(in[0].dtype())) return sets;
        auto a = attrs_of(row, c);
        auto kinks = row.kinks(a.data());
        if (kinks.empty()) return sets;
        double u = unit_roundoff(in[0].dtype());
        auto x = in[0].to_f64(), g = grad_of(grads, out, 0);
        GradientSet s;
        for (std::size_t j = 0; j < x.size(); ++j) {
          double width = row.kink_width ? row.kink_width(x[j], a.data()) * u : 0;
          for (double k : kinks) {
            if (!(std::fabs(x[j] - k) <= width)) continue;
            double below = std::nextafter(k, -INFINITY), above = std::nextafter(k, INFINITY);
            double dl = row.df(below, row.f(below, a.data()), a.data());
            double dr = row.df(above, row.f(above, a.data()), a.data());
            if (s.lo.empty()) {
              s.lo.assign(x.size(), NAN);
              s.hi.assign(x.size(), NAN);
            }
            double p = g[j] * dl, q = g[j] * dr;
            s.lo[j] = std::min(p, q);
            s.hi[j] = std::max(p, q);
            break;
          }
        }
        sets[0] = std::move(s);
        return sets;
      };
}

// Triage: the row's definition in float32 (or "rounded once") and its NaN convention.
void add_triage(OpRegistry& r, const UnaryRow& row) {
  if (row.f32)
    r.amend(row.name).float32(
        [row](const KernelContext& c, const Tensors& in, SumOrder) {
          const Tensor& x = input(c, in, 0);
          auto a = attrs_of(row, c);
          auto v = x.to_f64();
          for (auto& e : v) e = row.f32(static_cast<float>(e), a.data());
          return Tensors{Tensor::from_f64(v, x.shape(), x.dtype())};
        },
        row.formula, row.better, row.where);
  else
    r.amend(row.name).float32_rounded(row.where);
  if (row.nan_branch) r.amend(row.name).conventions({nan_propagation()}, row.where);
  if (row.df32)
    r.amend(row.name).vjp_float32(
        [row](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
              SumOrder) {
          const Tensor& x = input(c, in, 0);
          auto a = attrs_of(row, c);
          auto v = x.to_f64(), y = out.at(0).to_f64(), g = grad_of(grads, out, 0);
          for (std::size_t i = 0; i < v.size(); ++i) {
            auto gi = static_cast<float>(g[i]);
            v[i] = gi == 0 ? 0.0f
                           : gi * row.df32(static_cast<float>(v[i]), static_cast<float>(y[i]),
                                           a.data());
          }
          return Tensors{grad_like(v, x)};
        },
        fmt::format("the VJP {} as kernels compute it from the output", row.dformula),
        "none known for the derivative's cancellation; a wider type for it", row.where);
  else if (row.df && !row.dmag)
    r.amend(row.name).vjp_float32_rounded(row.where);
}

void add_row(OpRegistry& r, const UnaryRow& row) {
  r.add({row.name, Family::elementwise,
         [row](const KernelContext& c, const Tensors& in) {
           const Tensor& x = input(c, in, 0);
           if (row.float_only) require_float(c, x, "input");
           auto a = attrs_of(row, c);
           auto v = x.to_f64();
           // NaN in, NaN out, as numpy (ONNX's reference semantics) and IEEE functions do; the
           // comparisons in piecewise definitions would drop it otherwise.
           for (auto& e : v) e = std::isnan(e) ? e : row.f(e, a.data());
           return Tensors{Tensor::from_f64(v, x.shape(), x.dtype())};
         }},
        row.where);

  using namespace error_models;
  std::string doc = row.doc         ? row.doc
                    : row.ulps == 0 ? "exact (no rounding beyond the result's)"
                    : row.ulps == 4 ? "4 ulp (elementary function)"
                                    : fmt::format("{:g} ulp", row.ulps);
  if (row.fmag) {
    r.set_error_model(row.name,
                      condition(
                          [row](const KernelContext& c, const Tensors& in, const Tensors&,
                                const AccumulationBound&) {
                            auto a = attrs_of(row, c);
                            auto x = in[0].to_f64();
                            for (auto& v : x) v = row.fmag(v, a.data());
                            return Magnitudes{x};
                          },
                          doc, row.ulps),
                      row.where);
  } else {
    r.set_error_model(row.name, row.ulps == 0 ? exact(doc) : ulp(row.ulps, doc), row.where);
  }
  auto points = [row](std::vector<double> (*of)(Attrs)) -> Domain::Points {
    if (!of) return {};
    return [row, of](const KernelContext& c) {
      auto a = attrs_of(row, c);
      return of(a.data());
    };
  };
  r.set_domain(row.name, Domain({0}, points(row.critical), points(row.kinks)), row.where);
  if (row.danger) r.set_danger(row.name, row.danger(), row.where);
  if (!row.cases.empty()) r.amend(row.name).cases(row.cases, row.where);
  if (row.explain.form != ExplainForm::value) r.amend(row.name).explain(row.explain, row.where);
  add_triage(r, row);
  if (!row.df) return;

  r.set_vjp(
      row.name,
      [row](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        Tensors res(in.size());
        if (!is_floating(in[0].dtype())) return res;
        auto a = attrs_of(row, c);
        auto x = in[0].to_f64(), y = out[0].to_f64(), g = grad_of(grads, out, 0);
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = g[i] == 0 ? 0 : g[i] * row.df(x[i], y[i], a.data());
        res[0] = grad_like(g, in[0]);
        return res;
      },
      row.where);
  r.set_backward_error_model(
      row.name,
      [row](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads,
            const AccumulationBound&) {
        Magnitudes m(in.size());
        if (!is_floating(in[0].dtype())) return m;
        auto a = attrs_of(row, c);
        auto x = in[0].to_f64(), y = out[0].to_f64(), g = grad_of(grads, out, 0);
        m[0].resize(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
          double d = std::fabs(row.df(x[i], y[i], a.data()));
          if (row.dmag) d += row.dmag(x[i], y[i], a.data());
          m[0][i] = g[i] == 0 ? 0 : std::fabs(g[i]) * d;
        }
        return m;
      },
      row.ddoc, 1, row.where);
  if (row.kinks) r.set_subgradient(row.name, kink_subgradient(row), row.where);
}

}  // namespace

void register_unary_ops(OpRegistry& r) {
  for (const auto& row : unary_rows()) add_row(r, row);
  r.amend("Not").dtypes({DType::Bool});  // the one row ONNX defines for bool alone
}

}  // namespace metaop
