// Element-wise binary meta operators with numpy broadcasting, one row each: arithmetic,
// comparisons and logic. A row holds the float64 function (built per node, for attributes and
// the input dtype), its partial derivatives, its error model and its probe edge points; PRelu,
// whose slope broadcasts per channel before opset 7, has a block of its own below.
#include <cmath>
#include <cstring>
#include <limits>
#include <source_location>

#include "ops/danger.h"
#include "ops/kernel_util.h"
#include "ops/vjp_util.h"
#include "tensor/text.h"

namespace metaop {

namespace {

using BinaryFn = std::function<double(double, double)>;
// (dy/da, dy/db) at (a, b), y = f(a, b).
using BinaryDeriv = std::pair<double, double> (*)(double a, double b, double y);

struct BinaryRow {
  std::source_location where;  // the row (ops --where): here()
  const char* name;
  // The function for this node and input dtype (attributes, integer semantics).
  BinaryFn (*make)(const KernelContext& c, DType t);
  bool bool_output = false;     // comparisons and logic
  bool same_dtype = true;       // Pow's exponent may have another dtype
  BinaryDeriv deriv = nullptr;  // nullptr: not differentiable
  // The derivatives are exact on float32 operands (1, -1, the other operand): the VJP's float32
  // twin (triage) is g times them rounded once, summed over broadcasting in float32.
  bool exact_deriv = false;
  double ulps = 0;  // 0: exact
  const char* doc = "exact (no rounding beyond the result's)";
  std::vector<double> critical = {0};             // probe edge points of both inputs
  std::vector<DangerZone> (*danger)() = nullptr;  // where finite inputs give NaN or infinity
  std::vector<CaseSpec> cases = {};  // sample cases the node tests lack (ops/manifest.h)
  Undefined undefined = {};          // inputs where ONNX leaves it undefined
  ExplainWords explain = {};         // expose's words for its outputs
  std::vector<DType> dtypes = {};    // ONNX's dtypes of the data, where none is floating
};

// Before opset 7, binary ops broadcast only with broadcast=1, aligning B with A's dims
// starting at `axis` (default: trailing dims). Returns B reshaped for numpy broadcasting.
Tensor legacy_broadcast(const KernelContext& c, const Tensor& a, const Tensor& b) {
  if (attr_i(c, "broadcast") == 0) {
    if (a.shape() != b.shape())
      fail("{}: shapes {} and {} differ and broadcast=0 (opset {})", c.node.label(),
           shape_str(a.shape()), shape_str(b.shape()), c.opset);
    return b;
  }
  std::int64_t axis = attr_i_or(c, "axis", a.rank() - b.rank());
  if (axis < 0) axis += a.rank();
  if (axis < 0 || axis + b.rank() > a.rank())
    fail("{}: cannot align {} with {} at axis {}", c.node.label(), shape_str(b.shape()),
         shape_str(a.shape()), axis);
  Shape s(static_cast<std::size_t>(axis), 1);
  s.insert(s.end(), b.shape().begin(), b.shape().end());
  s.resize(static_cast<std::size_t>(a.rank()), 1);
  return b.reshaped(s);
}

// ---- undefined inputs

// An integer tensor's values (empty for floating point and bool); uint64's as their bits in an
// int64, which keeps 0 (the one value the checks here ask of an unsigned divisor).
std::vector<std::int64_t> integer_values(const Tensor& t) {
  DType d = t.dtype();
  if (is_floating(d) || d == DType::Bool) return {};
  if (d != DType::UInt64) return t.to_i64();
  std::vector<std::int64_t> v(static_cast<std::size_t>(t.numel()));
  if (t.nbytes()) std::memcpy(v.data(), t.raw(), t.nbytes());
  return v;
}

// The least value of a signed integer type (0 for the others: no overflowing quotient).
std::int64_t lowest_of(DType t) {
  return static_cast<std::int64_t>(integer_lowest(t));
}

// Whether a[i] == lowest meets b[j] == -1 under broadcasting; returns the output index or -1.
std::int64_t lowest_meets_minus_one(const Tensor& a, const Tensor& b) {
  std::int64_t lowest = lowest_of(a.dtype());
  auto av = integer_values(a), bv = integer_values(b);
  if (lowest == 0 || std::find(av.begin(), av.end(), lowest) == av.end() ||
      std::find(bv.begin(), bv.end(), -1) == bv.end())
    return -1;
  std::size_t rank = std::max(a.shape().size(), b.shape().size());
  auto padded = [&](const Shape& s) {
    Shape p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  Shape sa = padded(a.shape()), sb = padded(b.shape()), out(rank);
  for (std::size_t d = 0; d < rank; ++d) out[d] = std::max(sa[d], sb[d]);
  auto st_a = strides_of(sa), st_b = strides_of(sb);
  std::int64_t n = shape_numel(out);
  std::vector<std::int64_t> idx(rank, 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t ia = 0, ib = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      ia += (sa[d] == 1 ? 0 : idx[d]) * st_a[d];
      ib += (sb[d] == 1 ? 0 : idx[d]) * st_b[d];
    }
    if (av[static_cast<std::size_t>(ia)] == lowest && bv[static_cast<std::size_t>(ib)] == -1)
      return k;
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return -1;
}

// Integer inputs of Div or Mod, both non-empty.
bool integer_division(const Tensors& in) {
  if (in.size() < 2 || !in[0].defined() || !in[1].defined()) return false;
  if (is_floating(in[0].dtype()) || is_floating(in[1].dtype()) || in[0].dtype() == DType::Bool)
    return false;
  return in[0].numel() > 0 && in[1].numel() > 0;
}

// Integer Div and Mod by zero, and the lowest value divided by -1 (a quotient one past the
// largest), are undefined in ONNX and a SIGFPE in C++ kernels: refused for every binding, naming
// the node and the element. The lowest integer modulo -1 is 0 (the reference's answer), but C++
// computes it with the same instruction as the quotient, which overflows: SIGFPE in framework
// kernels, which decline it.
Undefined integer_division_undefined() {
  Undefined u;
  u.refuse = [](const Node& node, const Tensors& in) -> std::string {
    if (!integer_division(in)) return "";
    const Tensor &a = in[0], &b = in[1];
    auto bv = integer_values(b);
    for (std::size_t i = 0; i < bv.size(); ++i)
      if (bv[i] == 0)
        return fmt::format("{}: integer {} by zero (divisor '{}' is 0 at {}): undefined in ONNX",
                           node.label(), node.op_type == "Div" ? "division" : "modulo",
                           printable(node.inputs[1]),
                           index_str(b.shape(), static_cast<std::int64_t>(i)));
    if (node.op_type != "Div") return "";
    if (std::int64_t k = lowest_meets_minus_one(a, b); k >= 0)
      return fmt::format(
          "{}: integer division {} / -1 at output element {} overflows {} (undefined in ONNX)",
          node.label(), lowest_of(a.dtype()), k, dtype_name(a.dtype()));
    return "";
  };
  u.crashes = [](const Node& node, const Tensors& in) -> std::string {
    if (!integer_division(in) || node.op_type != "Mod") return "";
    std::int64_t k = lowest_meets_minus_one(in[0], in[1]);
    if (k < 0) return "";
    return fmt::format(
        "{}: {} modulo -1 at output element {} crashes C++ kernels (SIGFPE); the reference "
        "computes it (0)",
        node.label(), lowest_of(in[0].dtype()), k);
  };
  return u;
}

// ---- danger zones beyond the shapes ops/danger.h builds

// Sites of a broadcasting binary op whose output is 0 exactly because an input is 0 there (no
// rounding can make them nonzero, so they cannot underflow).
danger::ExactZero zero_operand() {
  return [](const KernelContext&, const Tensors& in, const Tensors& out) {
    const Shape& os = out[0].shape();
    std::vector<bool> exact(static_cast<std::size_t>(shape_numel(os)), false);
    for (std::size_t k = 0; k < 2 && k < in.size(); ++k) {
      auto v = in[k].to_f64();
      auto m = broadcast_map(in[k].shape(), os);
      for (std::size_t i = 0; i < exact.size(); ++i)
        if (v[static_cast<std::size_t>(m[i])] == 0) exact[i] = true;
    }
    return exact;
  };
}

// Pow's base (input 0) where pow(a, b) is NaN (a < 0, b not an integer) or inf (a = 0, b < 0).
DangerZone pow_domain() {
  DangerZone z;
  z.kind = DangerKind::PowDomain;
  z.index = 0;
  z.condition = "negative base with a non-integer exponent (NaN), or 0 to a negative power (inf)";
  struct Sites {
    std::vector<double> a, b;
    std::vector<std::int64_t> ma, mb;
  };
  auto sites = [](const Tensors& in, const Tensors& out) {
    Sites s{in[0].to_f64(), in[1].to_f64(), broadcast_map(in[0].shape(), out[0].shape()),
            broadcast_map(in[1].shape(), out[0].shape())};
    return s;
  };
  // Below 0 means strictly below: the largest float32 under 0 is -2^-149.
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto dist = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b) || std::isinf(b)) return inf;
    bool integral = std::nearbyint(b) == b;
    if (integral) return b < 0 ? std::fabs(a) : inf;
    return b < 0 ? std::max(0.0, a) : std::max(0.0, a + std::ldexp(1.0, -149));
  };
  z.distances = [sites, dist](const KernelContext&, const Tensors& in, const Tensors& out) {
    Sites s = sites(in, out);
    ZoneDistances r;
    r.element = s.ma;
    for (std::size_t i = 0; i < s.ma.size(); ++i)
      r.distance.push_back(dist(s.a[s.ma[i]], s.b[s.mb[i]]));
    r.slope = [s](std::size_t site) {
      std::vector<double> g(s.a.size(), 0.0);
      double a = s.a[s.ma[site]], b = s.b[s.mb[site]];
      bool by_magnitude = std::nearbyint(b) == b;
      g[static_cast<std::size_t>(s.ma[site])] =
          by_magnitude ? (a > 0 ? 1.0 : (a < 0 ? -1.0 : 0.0)) : 1.0;
      return g;
    };
    return r;
  };
  z.describe = [sites, dist](const KernelContext&, const Tensors& in, const Tensors& out,
                             std::size_t site) {
    Sites s = sites(in, out);
    double a = s.a[s.ma[site]], b = s.b[s.mb[site]];
    if (dist(a, b) > 0) return fmt::format("base {:.9g}, exponent {:.9g}", a, b);
    if (a == 0) return fmt::format("0 to the negative power {:.9g}", b);
    return fmt::format("negative base {:.9g} with non-integer exponent {:.9g}", a, b);
  };
  return z;
}

template <double (*F)(double, double)>
BinaryFn plain(const KernelContext&, DType) {
  return F;
}

double add(double a, double b) {
  return a + b;
}
double sub(double a, double b) {
  return a - b;
}
double mul(double a, double b) {
  return a * b;
}
double eq(double a, double b) {
  return a == b;
}
double lt(double a, double b) {
  return a < b;
}
double le(double a, double b) {
  return a <= b;
}
double gt(double a, double b) {
  return a > b;
}
double ge(double a, double b) {
  return a >= b;
}
// The bitwise ops of opset 18, on the integers' two's-complement bits (values through double, as
// every integer here: exact up to 2^53).
BinaryFn bitwise(const KernelContext& c, DType t) {
  if (is_floating(t) || t == DType::Bool)
    fail("{}: bitwise ops take integers, not {}", c.node.label(), dtype_name(t));
  const std::string& op = c.node.op_type;
  const int which = op == "BitwiseAnd" ? 0 : op == "BitwiseOr" ? 1 : 2;
  return [which](double a, double b) {
    auto x = static_cast<std::int64_t>(a), y = static_cast<std::int64_t>(b);
    return static_cast<double>(which == 0 ? (x & y) : which == 1 ? (x | y) : (x ^ y));
  };
}

// BitShift (opset 11): unsigned integers shifted left or right; bits shifted past the type's
// width are lost (as NumPy's shifts of unsigned types lose them). The values stay exact through
// the float64 path up to 2^53; uint64 shifts are exact where the result is below that.
BinaryFn bitshift(const KernelContext& c, DType t) {
  if (!is_unsigned(t))
    throw Unsupported(
        fmt::format("{}: BitShift of {} (the ONNX text defines it for unsigned "
                    "integers)",
                    c.node.label(), dtype_name(t)));
  const bool left = attr_s(c, "direction") == "LEFT";
  if (!left && attr_s(c, "direction") != "RIGHT")
    fail("{}: direction '{}': LEFT or RIGHT", c.node.label(), attr_s(c, "direction"));
  const auto bits = static_cast<std::uint64_t>(dtype_size(t) * 8);
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  return [left, bits, mask](double a, double b) {
    auto x = static_cast<std::uint64_t>(a), y = static_cast<std::uint64_t>(b);
    if (y >= bits) return 0.0;
    return static_cast<double>((left ? x << y : x >> y) & mask);
  };
}

// Integers of both signs, for the bitwise ops' cases.
CaseInput int32s(Shape s, std::vector<std::int64_t> v) {
  return {std::move(s), DType::Int32, std::move(v)};
}

double land(double a, double b) {
  return a != 0 && b != 0;
}
double lor(double a, double b) {
  return a != 0 || b != 0;
}
double lxor(double a, double b) {
  return (a != 0) != (b != 0);
}

// clang-format off
// Arithmetic.
std::vector<BinaryRow> arithmetic_rows() {
  return {
      // IEEE basic operations are correctly rounded (0.5 ulp) and the reference rounds once more.
      {.where = here(), .name = "Add", .make = plain<add>,
       .deriv = [](double, double, double) { return std::pair{1.0, 1.0}; },
       .exact_deriv = true,
       .ulps = 1, .doc = "1 ulp (correctly rounded)",
       .danger = [] { return std::vector<DangerZone>{danger::output_overflow()}; },
        .explain = {.form = ExplainForm::arithmetic, .symbol = "+", .cancellation = true}},
      {.where = here(), .name = "Sub", .make = plain<sub>,
       .deriv = [](double, double, double) { return std::pair{1.0, -1.0}; },
       .exact_deriv = true,
       .ulps = 1, .doc = "1 ulp (correctly rounded)",
       .danger = [] { return std::vector<DangerZone>{danger::output_overflow()}; },
        .explain = {.form = ExplainForm::arithmetic, .symbol = "-", .cancellation = true}},
      {.where = here(), .name = "Mul", .make = plain<mul>,
       .deriv = [](double a, double b, double) { return std::pair{b, a}; },
       .exact_deriv = true,
       .ulps = 1, .doc = "1 ulp (correctly rounded)",
       .danger = [] {
         return std::vector<DangerZone>{
             danger::output_overflow(),
             danger::output_underflow("product of nonzero factors rounds to 0", zero_operand())};
       },
        .explain = {.form = ExplainForm::arithmetic, .symbol = "*", .telling = true, .zero_operand_telling = true}},
      // Integer division truncates toward zero (the conversion to int does the truncation).
      {.where = here(), .name = "Div",
       .make = [](const KernelContext&, DType) { return BinaryFn([](double a, double b) { return a / b; }); },
       .deriv = [](double a, double b, double) { return std::pair{1 / b, -a / (b * b)}; },
       .ulps = 2, .doc = "2 ulp (correctly rounded, or x * (1/y))", .critical = {0, 1, -1},
       .danger = [] {
         return std::vector<DangerZone>{danger::divisor(
             1, 0, "divisor reaches 0, or gets small enough for the quotient to overflow")};
       },
        .undefined = integer_division_undefined(),
        .explain = {.form = ExplainForm::arithmetic, .symbol = "/", .telling = true}},
      {.where = here(), .name = "Pow",
       .make = [](const KernelContext&, DType) { return BinaryFn([](double a, double b) { return std::pow(a, b); }); },
       .same_dtype = false,
       .deriv = [](double a, double b, double y) {
         return std::pair{b == 0 ? 0.0 : b * std::pow(a, b - 1), a > 0 ? std::log(a) * y : 0.0};
       },
       .ulps = 4, .doc = "4 ulp (elementary function)", .critical = {0, 1, -1, 0.5, 2},
       .danger = [] {
         return std::vector<DangerZone>{
             pow_domain(), danger::output_overflow(),
             danger::output_underflow("nonzero power rounds to 0", zero_operand())};
       },
        .cases = {{13, {case_input::floats({2, 3, 4}, 0.5, 2), case_input::floats({2, 3, 4})}}},
        .explain = {.form = ExplainForm::arithmetic, .symbol = "^", .telling = true}},
      {.where = here(), .name = "Mod",
       .make = [](const KernelContext& c, DType t) {
         bool fmod = attr_i(c, "fmod") != 0;
         if (!fmod && is_floating(t))
           fail("{}: fmod=0 is not allowed for floating-point inputs", c.node.label());
         return BinaryFn([fmod](double a, double b) {
           double m = std::fmod(a, b);
           if (!fmod && m != 0 && ((m < 0) != (b < 0))) m += b;  // sign of the divisor (Python)
           return m;
         });
       },
       .deriv = [](double a, double b, double) { return std::pair{1.0, -std::trunc(a / b)}; },
       .critical = {0, 1, -1},
       .danger = [] {
         return std::vector<DangerZone>{danger::divisor(1, -2, "divisor reaches 0 (NaN)")};
       },
        .undefined = integer_division_undefined()},
  };
}

// Comparisons, logic and the bitwise ops.
std::vector<BinaryRow> logic_rows() {
  return {
      {.where = here(), .name = "Equal", .make = plain<eq>, .bool_output = true,
        .cases = {{13, {case_input::whole({2, 3, 4, 5}), case_input::whole({2, 3, 4, 5})}}}},
      {.where = here(), .name = "Less", .make = plain<lt>, .bool_output = true},
      {.where = here(), .name = "LessOrEqual", .make = plain<le>, .bool_output = true},
      {.where = here(), .name = "Greater", .make = plain<gt>, .bool_output = true},
      {.where = here(), .name = "GreaterOrEqual", .make = plain<ge>, .bool_output = true},
      {.where = here(), .name = "And", .make = plain<land>, .bool_output = true, .critical = {}, .dtypes = {DType::Bool}},
      {.where = here(), .name = "Or", .make = plain<lor>, .bool_output = true, .critical = {}, .dtypes = {DType::Bool}},
      {.where = here(), .name = "Xor", .make = plain<lxor>, .bool_output = true, .critical = {}, .dtypes = {DType::Bool}},
      {.where = here(), .name = "BitwiseAnd", .make = bitwise, .critical = {},
        .cases = {{18, {int32s({2, 3}, {-1, 0, 5, 12, -128, 2147483647}), int32s({2, 3}, {7, -1, 3, 10, 255, -2})}}},
        .dtypes = integer_dtypes()},
      {.where = here(), .name = "BitwiseOr", .make = bitwise, .critical = {},
        .cases = {{18, {int32s({2, 3}, {-1, 0, 5, 12, -128, 2147483647}), int32s({2, 3}, {7, -1, 3, 10, 255, -2})}}},
        .dtypes = integer_dtypes()},
      {.where = here(), .name = "BitwiseXor", .make = bitwise, .critical = {},
        .cases = {{18, {int32s({2, 3}, {-1, 0, 5, 12, -128, 2147483647}), int32s({2, 3}, {7, -1, 3, 10, 255, -2})}}},
        .dtypes = integer_dtypes()},
      // Shifts of 0 to 9: bits shifted out, and a shift past the width.
      {.where = here(), .name = "BitShift", .make = bitshift, .critical = {},
        .cases = {{11, {CaseInput{{2, 3}, DType::UInt8, {255, 1, 128, 37, 200, 3}}, CaseInput{{2, 3}, DType::UInt8, {0, 7, 1, 3, 9, 8}}}, {{"direction", Attribute::of_string("LEFT")}}},
                  {11, {CaseInput{{2, 3}, DType::UInt8, {255, 1, 128, 37, 200, 3}}, CaseInput{{2, 3}, DType::UInt8, {0, 7, 1, 3, 9, 8}}}, {{"direction", Attribute::of_string("RIGHT")}}}},
        .dtypes = {DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64}},
  };
}

// Every binary op, in the order they are registered.
const std::vector<BinaryRow>& binary_rows() {
  static const std::vector<BinaryRow> rows = [] {
    std::vector<BinaryRow> all = arithmetic_rows();
    for (auto& row : logic_rows()) all.push_back(std::move(row));
    return all;
  }();
  return rows;
}
// clang-format on

Tensors binary_forward(const BinaryRow& row, const KernelContext& c, const Tensors& in) {
  const Tensor& a = input(c, in, 0);
  Tensor b = input(c, in, 1);
  if (row.same_dtype) check_same_dtype(c, in);
  if (c.opset < 7) b = legacy_broadcast(c, a, b);
  BinaryFn f = row.make(c, a.dtype());
  DType dt = row.bool_output ? DType::Bool : a.dtype();
  return {broadcast_apply(c, {&a, &b}, dt, [&](const double* v) { return f(v[0], v[1]); })};
}

// g * dy/da and g * dy/db, summed back over broadcasting. With `f32` (rows with exact_deriv),
// the products rounded to float32 and the sums in float32 in that order: the float32 twin.
Tensors binary_vjp(BinaryDeriv d, const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads, const SumOrder* f32 = nullptr) {
  if (c.opset < 7)
    throw Unsupported(c.node.label() + ": no reference VJP for legacy broadcasting (opset < 7)");
  const Tensor &a = in[0], &b = in[1];
  const Shape& os = out[0].shape();
  auto va = a.to_f64(), vb = b.to_f64(), y = out[0].to_f64(), g = grad_of(grads, out, 0);
  auto ma = broadcast_map(a.shape(), os), mb = broadcast_map(b.shape(), os);
  std::vector<double> ga(g.size()), gb(g.size());
  auto times = [f32](double gi, double di) {
    return f32 ? static_cast<float>(gi) * static_cast<float>(di) : gi * di;
  };
  for (std::size_t i = 0; i < g.size(); ++i) {
    auto [da, db] = d(va[ma[i]], vb[mb[i]], y[i]);
    ga[i] = g[i] == 0 ? 0 : times(g[i], da);
    gb[i] = g[i] == 0 ? 0 : times(g[i], db);
  }
  auto back = [&](const std::vector<double>& part, const Tensor& like) {
    return grad_like(
        f32 ? unbroadcast_f32(part, os, like.shape(), *f32) : unbroadcast(part, os, like.shape()),
        like);
  };
  Tensors r(in.size());
  if (is_floating(a.dtype())) r[0] = back(ga, a);
  if (is_floating(b.dtype())) r[1] = back(gb, b);
  return r;
}

void add_row(OpRegistry& r, const BinaryRow& row) {
  using namespace error_models;
  auto b = r.op(
      row.name, Family::elementwise,
      [row](const KernelContext& c, const Tensors& in) { return binary_forward(row, c, in); },
      row.where);
  b.error(row.ulps == 0 ? exact(row.doc) : ulp(row.ulps, row.doc), row.where);
  auto critical = row.critical;
  b.domain(Domain({0, 1}, [critical](const KernelContext&) { return critical; }), row.where);
  if (row.danger) b.danger(row.danger(), row.where);
  b.inputs(InputRoles::combine(), row.where);  // every binary op combines activations
  if (!row.cases.empty()) b.cases(row.cases, row.where);
  if (row.undefined.refuse || row.undefined.crashes) b.undefined(row.undefined, row.where);
  if (row.explain.form != ExplainForm::value || row.explain.telling)
    b.explain(row.explain, row.where);
  if (!row.dtypes.empty()) b.dtypes(row.dtypes, row.where);
  if (row.deriv)
    b.vjp([d = row.deriv](const KernelContext& c, const Tensors& in, const Tensors& out,
                          const Tensors& grads) { return binary_vjp(d, c, in, out, grads); },
          row.where);
  if (row.exact_deriv)
    b.vjp_float32(
        [d = row.deriv](const KernelContext& c, const Tensors& in, const Tensors& out,
                        const Tensors& grads,
                        SumOrder order) { return binary_vjp(d, c, in, out, grads, &order); },
        "g times the derivative (1, -1 or the other operand), summed over the broadcast axes",
        "a wider accumulator for the sums over broadcasting", row.where);
}

// ---- PRelu: y = x < 0 ? x * slope : x, the slope broadcast to x (per channel before opset 7).

Tensors prelu(const KernelContext& c, const Tensors& in) {
  const Tensor& x = input(c, in, 0);
  Tensor s = input(c, in, 1);
  // Before opset 7 a 1-D slope holds one value per channel (axis 1).
  if (c.opset < 7 && s.rank() == 1 && x.rank() > 2 && s.numel() == x.dim(1)) {
    Shape sh(static_cast<std::size_t>(x.rank() - 1), 1);
    sh[0] = s.numel();
    s = s.reshaped(sh);
  }
  return {broadcast_apply(c, {&x, &s}, x.dtype(),
                          [](const double* v) { return v[0] < 0 ? v[0] * v[1] : v[0]; })};
}

// At x = 0 the gradient of x may be anything between the slope and 1.
std::vector<GradientSet> prelu_subgradient(const KernelContext&, const Tensors& in,
                                           const Tensors& out, const Tensors& grads) {
  std::vector<GradientSet> sets(in.size());
  const Shape& os = out[0].shape();
  if (in[0].shape() != os) return sets;
  auto x = in[0].to_f64(), s = in[1].to_f64(), g = grad_of(grads, out, 0);
  auto ms = broadcast_map(in[1].shape(), os);
  GradientSet set;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] != 0) continue;
    if (set.lo.empty()) set.lo.assign(x.size(), NAN), set.hi.assign(x.size(), NAN);
    double p = g[i] * s[ms[i]], q = g[i];
    set.lo[i] = std::min(p, q);
    set.hi[i] = std::max(p, q);
  }
  sets[0] = std::move(set);
  return sets;
}

void register_prelu(OpRegistry& r) {
  r.op("PRelu", Family::elementwise, prelu)
      .error(error_models::ulp(1, "1 ulp (correctly rounded)"))
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return binary_vjp(
            [](double x, double s, double) {
              return x < 0 ? std::pair{s, x} : std::pair{1.0, 0.0};
            },
            c, in, out, grads);
      })
      .subgradient(prelu_subgradient)
      .domain(Domain({0, 1}, [](const KernelContext&) { return std::vector<double>{0}; }))
      .danger({danger::output_overflow()})
      .cases({{13, {case_input::floats({2, 3, 4, 5}), case_input::floats({3, 1, 1})}},
              {13,
               {case_input::floats({2, 3, 4, 5}),
                case_input::floats({1})}}});  // a slope above 1 scales like a product
}

}  // namespace

void register_binary_ops(OpRegistry& r) {
  for (const auto& row : binary_rows()) add_row(r, row);
  register_prelu(r);
}

}  // namespace metaop
