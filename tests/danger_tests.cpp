// Unit tests of the danger zones (ops/danger.h) and of `metaop expose`'s search on small graphs:
// one test per zone kind (distance 0 exactly where the reference leaves the finite numbers,
// the slope against finite differences), a sweep of every element-wise op over edge values
// (every non-finite result from finite inputs lies in a declared zone, and every point inside a
// NaN/INF zone gives one), the reverse pass's gradients for graph inputs, and the search itself
// on a buggy graph and its fixed twin. Linked into metaop_unit_tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "analysis/expose/expose.h"
#include "engine/autodiff.h"
#include "engine/executor.h"
#include "ops/registry.h"

using namespace metaop;

namespace {

Node node_of(const std::string& op, std::size_t inputs, std::size_t outputs = 1) {
  Node n;
  n.name = "/" + op;
  n.op_type = op;
  for (std::size_t i = 0; i < inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (std::size_t i = 0; i < outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  return n;
}

Tensor f32(const std::vector<double>& v, Shape s = {}) {
  if (s.empty()) s = {static_cast<std::int64_t>(v.size())};
  return Tensor::from_f64(v, s, DType::Float32);
}

struct Probe {
  Tensors out;
  std::vector<ZoneDistances> zones;  // one per declared zone, in declaration order
};

// Runs the reference of `n` on `in` and evaluates each of its op's danger zones.
Probe probe(const Node& n, const Tensors& in, std::int64_t opset = 17) {
  const MetaOp* op = OpRegistry::instance().find(n.op_type);
  KernelContext c{n, opset};
  Probe p;
  p.out = op->reference(c, in);
  for (const auto& z : op->domain.danger) p.zones.push_back(z.distances(c, in, p.out));
  return p;
}

const DangerZone& zone_of(const std::string& op, DangerKind k) {
  for (const auto& z : OpRegistry::instance().find(op)->domain.danger)
    if (z.kind == k) return z;
  throw std::runtime_error(op + " declares no zone of kind " + danger_kind_name(k));
}

std::size_t zone_index(const std::string& op, DangerKind k) {
  const auto& zs = OpRegistry::instance().find(op)->domain.danger;
  for (std::size_t i = 0; i < zs.size(); ++i)
    if (zs[i].kind == k) return i;
  throw std::runtime_error(op + " declares no zone of kind " + danger_kind_name(k));
}

// The zone's slope at `site` against central differences of its distance, moving element `e`
// of the watched input `input` (the distance is evaluated in float64, away from kinks).
void expect_slope(const Node& n, Tensors in, std::size_t zone, std::size_t site, int input,
                  std::int64_t e, double h) {
  const MetaOp* op = OpRegistry::instance().find(n.op_type);
  const DangerZone& z = op->domain.danger[zone];
  ASSERT_FALSE(z.watches_output);
  KernelContext c{n, 17};
  auto d_at = [&](double x) {
    Tensors moved = in;
    auto v = in[static_cast<std::size_t>(input)].to_f64();
    v[static_cast<std::size_t>(e)] = x;
    moved[static_cast<std::size_t>(input)] =
        Tensor::from_f64(v, in[static_cast<std::size_t>(input)].shape(), DType::Float64);
    return z.distances(c, moved, op->reference(c, moved)).distance[site];
  };
  for (auto& t : in) t = t.to(DType::Float64);
  double x = in[static_cast<std::size_t>(input)].f64_at(e);
  double numeric = (d_at(x + h) - d_at(x - h)) / (2 * h);
  auto slope = z.distances(c, in, op->reference(c, in)).slope(site);
  EXPECT_NEAR(slope[static_cast<std::size_t>(e)], numeric, 1e-6 * std::max(1.0, std::fabs(numeric)))
      << n.op_type << " " << danger_kind_name(z.kind);
}

}  // namespace

TEST(DangerZones, ZeroDivisor) {
  // Div: b = 0 (a/0 and 0/0), and b small enough that a/b overflows float32.
  Node n = node_of("Div", 2);
  auto p = probe(n, {f32({1, 0, 1e30, 1, 1}), f32({0, 0, 1e-9, 0.5, -0.25})});
  auto& d = p.zones[zone_index("Div", DangerKind::ZeroDivisor)].distance;
  auto y = p.out[0].to_f64();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d[i], 0) << i;
    EXPECT_FALSE(std::isfinite(y[i])) << i;
  }
  EXPECT_NEAR(d[3], 0.5, 1e-12);
  EXPECT_NEAR(d[4], 0.25, 1e-12);
  expect_slope(n, {f32({1, 0, 1e30, 1, 1}), f32({0, 0, 1e-9, 0.5, -0.25})}, 0, 4, 1, 4, 1e-4);
  // Reciprocal overflows for subnormal inputs too.
  auto r = probe(node_of("Reciprocal", 1), {f32({1e-39, 1e-37})});
  EXPECT_EQ(r.zones[0].distance[0], 0);
  EXPECT_TRUE(std::isinf(r.out[0].f64_at(0)));
  EXPECT_GT(r.zones[0].distance[1], 0);
  EXPECT_TRUE(std::isfinite(r.out[0].f64_at(1)));
}

TEST(DangerZones, LogDomain) {
  auto p = probe(node_of("Log", 1), {f32({0, -1, 1e-30, 2})});
  auto& d = p.zones[0].distance;
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[1], 0);
  EXPECT_NEAR(d[2], 1e-30, 1e-36);
  EXPECT_NEAR(d[3], 2, 1e-12);
  EXPECT_TRUE(std::isinf(p.out[0].f64_at(0)));
  EXPECT_TRUE(std::isnan(p.out[0].f64_at(1)));
  expect_slope(node_of("Log", 1), {f32({0.5})}, 0, 0, 0, 0, 1e-4);
  // ReduceLogSum: the sum of a group, not an element.
  Node rls = node_of("ReduceLogSum", 1);
  rls.attrs["axes"] = Attribute::of_ints({1});
  auto q = probe(rls, {f32({0, 0, 0, 1, -2, 0.5}, {2, 3})}, 13);
  EXPECT_EQ(q.zones[0].distance[0], 0);  // all terms 0: log(0)
  EXPECT_EQ(q.zones[0].distance[1], 0);  // sum -0.5: NaN
  EXPECT_FALSE(std::isfinite(q.out[0].f64_at(0)));
  auto s = probe(rls, {f32({0, 0, 0.25, 1, 2, 0.5}, {2, 3})}, 13);
  EXPECT_NEAR(s.zones[0].distance[0], 0.25, 1e-12);
  EXPECT_EQ(s.zones[0].slope(1), (std::vector<double>{0, 0, 0, 1, 1, 1}));
}

TEST(DangerZones, SqrtDomain) {
  // Strictly below 0: sqrt(0) is 0, the largest float32 under 0 already gives NaN.
  auto p = probe(node_of("Sqrt", 1), {f32({-1.4e-45, 0, 1})});
  auto& d = p.zones[0].distance;
  EXPECT_EQ(d[0], 0);
  EXPECT_TRUE(std::isnan(p.out[0].f64_at(0)));
  EXPECT_GT(d[1], 0);
  EXPECT_EQ(p.out[0].f64_at(1), 0);
  EXPECT_NEAR(d[2], 1, 1e-12);
}

TEST(DangerZones, InverseTrigDomain) {
  double above1 = std::nextafter(1.0f, 2.0f);
  auto a = probe(node_of("Acos", 1), {f32({1, above1, -above1, 0.5})});
  EXPECT_GT(a.zones[0].distance[0], 0);
  EXPECT_EQ(a.zones[0].distance[1], 0);
  EXPECT_EQ(a.zones[0].distance[2], 0);
  EXPECT_TRUE(std::isnan(a.out[0].f64_at(1)));
  EXPECT_NEAR(a.zones[0].distance[3], 1 + (above1 - 1) - 0.5, 1e-7);
  expect_slope(node_of("Acos", 1), {f32({-0.5})}, 0, 0, 0, 0, 1e-4);
  // Atanh: |x| = 1 itself is in the zone (inf).
  auto t = probe(node_of("Atanh", 1), {f32({1, -1, 0.9})});
  EXPECT_EQ(t.zones[0].distance[0], 0);
  EXPECT_TRUE(std::isinf(t.out[0].f64_at(0)));
  EXPECT_GT(t.zones[0].distance[2], 0);
  // Acosh: below 1.
  auto h = probe(node_of("Acosh", 1), {f32({1, std::nextafter(1.0f, 0.0f)})});
  EXPECT_GT(h.zones[0].distance[0], 0);
  EXPECT_EQ(h.zones[0].distance[1], 0);
  EXPECT_TRUE(std::isnan(h.out[0].f64_at(1)));
}

TEST(DangerZones, PowDomain) {
  Node n = node_of("Pow", 2);
  auto p = probe(n, {f32({-2, -2, 0, 0, 2, 0.5}), f32({0.5, 2, -1, 0.5, 0.5, 0.5})});
  auto& d = p.zones[zone_index("Pow", DangerKind::PowDomain)].distance;
  EXPECT_EQ(d[0], 0);  // (-2)^0.5: NaN
  EXPECT_TRUE(std::isnan(p.out[0].f64_at(0)));
  EXPECT_TRUE(std::isinf(d[1]));  // (-2)^2: an integral exponent, never NaN
  EXPECT_EQ(d[2], 0);             // 0^-1: inf
  EXPECT_TRUE(std::isinf(p.out[0].f64_at(2)));
  EXPECT_GT(d[3], 0);  // 0^0.5 = 0 is fine; any negative base is not
  EXPECT_NEAR(d[4], 2, 1e-12);
  expect_slope(n, {f32({0.5}), f32({0.5})}, zone_index("Pow", DangerKind::PowDomain), 0, 0, 0,
               1e-4);
}

TEST(DangerZones, Overflow) {
  // Exp overflows float32 above log(FLT_MAX) = 88.7228...; distance in binades of the output.
  auto p = probe(node_of("Exp", 1), {f32({88.7f, 88.73f, 0})});
  auto& d = p.zones[zone_index("Exp", DangerKind::Overflow)].distance;
  EXPECT_NEAR(d[0], (88.7228391 - 88.7f) / std::log(2.0), 1e-4);
  EXPECT_EQ(d[1], 0);
  EXPECT_TRUE(std::isinf(p.out[0].f64_at(1)));
  EXPECT_NEAR(d[2], 128, 1e-6);
  // MatMul: output-based, so any product that overflows is in.
  Node mm = node_of("MatMul", 2);
  auto q = probe(mm, {f32({1e20, 1e20}, {1, 2}), f32({1e19, 1e19}, {2, 1})});
  EXPECT_EQ(q.zones[0].distance[0], 0);
  EXPECT_TRUE(std::isinf(q.out[0].f64_at(0)));
  // An infinite input is not an overflow of this node.
  auto r = probe(node_of("Add", 2), {f32({INFINITY}), f32({1})});
  EXPECT_TRUE(std::isinf(r.zones[0].distance[0]));
}

TEST(DangerZones, UnderflowToZero) {
  auto p = probe(node_of("Exp", 1), {f32({-104.0f, -100.0f})});
  auto& d = p.zones[zone_index("Exp", DangerKind::UnderflowToZero)].distance;
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(p.out[0].f64_at(0), 0);
  EXPECT_GT(d[1], 0);
  // Mul: a product of nonzero factors that rounds to 0 is in; an exact zero factor is not.
  auto m = probe(node_of("Mul", 2), {f32({1e-30, 0, 1e-20}), f32({1e-30, 5, 1e-20})});
  auto& dm = m.zones[zone_index("Mul", DangerKind::UnderflowToZero)].distance;
  EXPECT_EQ(dm[0], 0);
  EXPECT_TRUE(std::isinf(dm[1]));
  EXPECT_GT(dm[2], 0);
  // Softmax: a logit gap beyond about 104 rounds the probability to 0.
  Node sm = node_of("Softmax", 1);
  sm.attrs["axis"] = Attribute::of_int(-1);
  auto s = probe(sm, {f32({0, 120, 0, 50}, {2, 2})});
  EXPECT_EQ(s.zones[0].distance[0], 0);
  EXPECT_GT(s.zones[0].distance[2], 0);
}

TEST(DangerZones, ZeroVariance) {
  Node ln = node_of("LayerNormalization", 2);
  ln.attrs["axis"] = Attribute::of_int(-1);
  ln.attrs["epsilon"] = Attribute::of_float(0);
  const DangerZone& z = zone_of("LayerNormalization", DangerKind::ZeroVariance);
  EXPECT_TRUE(z.applies(KernelContext{ln, 17}));
  Node safe = ln;
  safe.attrs["epsilon"] = Attribute::of_float(1e-5);
  EXPECT_FALSE(z.applies(KernelContext{safe, 17}));  // with epsilon > 0 no group divides by 0
  Tensors in{f32({3, 3, 3, 1, 2, 4}, {2, 3}), f32({1, 1, 1})};
  auto p = probe(ln, in);
  EXPECT_EQ(p.zones[0].distance[0], 0);
  EXPECT_TRUE(std::isnan(p.out[0].f64_at(0)));
  EXPECT_GT(p.zones[0].distance[1], 0);
  expect_slope(ln, in, 0, 1, 0, 4, 1e-5);
  // The Gauss-Newton step on the standard deviation lands on the group's mean.
  auto v = in[0].to_f64();
  auto g = p.zones[0].slope(1);
  double sd = p.zones[0].distance[1], norm = 0;
  for (double x : g) norm += x * x;
  for (std::size_t i = 3; i < 6; ++i) EXPECT_NEAR(v[i] - sd * g[i] / norm, 7.0 / 3, 1e-12);
  // BatchNormalization in inference: var + epsilon reaching 0.
  Node bn = node_of("BatchNormalization", 5);
  bn.attrs["epsilon"] = Attribute::of_float(0);
  auto b = probe(bn, {f32({1, 2}, {1, 2, 1}), f32({1, 1}), f32({0, 0}), f32({0, 0}), f32({0, 1})});
  EXPECT_EQ(b.zones[1].distance[0], 0);
  EXPECT_FALSE(std::isfinite(b.out[0].f64_at(0)));
  EXPECT_GT(b.zones[1].distance[1], 0);
}

// Every element-wise op (one or two inputs) over edge values: a non-finite result from finite
// inputs lies in a declared zone of a NaN/INF kind, and a point inside such a zone gives a
// non-finite result (kernel-dependent zones aside, whose exact result stays finite).
TEST(DangerZones, ElementwiseOpsDeclareEveryWayToNonFinite) {
  std::vector<double> edges{0,      -0.0,  1e-45, -1e-45, 1e-39,     -1e-39,     1e-30, -1e-30,
                            0.5,    -0.5,  1,     -1,     1.0000001, -1.0000001, 2,     -2,
                            0.4545, 3,     88.7,  88.73,  89.5,      -89.5,      -104,  -110,
                            1e19,   -1e19, 1e30,  -1e30,  3.4e38,    -3.4e38};
  const auto& reg = OpRegistry::instance();
  std::size_t checked = 0;
  for (const auto& type : reg.types()) {
    const MetaOp* op = reg.find(type);
    if (op->family != Family::elementwise || type == "Cast" || type == "CastLike" ||
        type == "Dropout")
      continue;
    static const std::set<std::string> binary = {"Add",   "Sub", "Mul", "Div", "Pow", "Mod",
                                                 "PRelu", "Max", "Min", "Sum", "Mean"};
    std::size_t arity = binary.count(type) ? 2 : 1;
    {
      Node n = node_of(type, arity);
      if (type == "Mod") n.attrs["fmod"] = Attribute::of_int(1);
      std::vector<double> a, b;
      for (double x : edges)
        for (double y : arity == 2 ? edges : std::vector<double>{0}) {
          a.push_back(x);
          b.push_back(y);
        }
      Tensors in{f32(a)};
      if (arity == 2) in.push_back(f32(b));
      Probe p;
      try {
        p = probe(n, in);
      } catch (const Error&) {
        continue;  // not this arity
      }
      if (p.out.empty() || !is_floating(p.out[0].dtype())) continue;
      ++checked;
      auto av = in[0].to_f64();  // as rounded to float32
      auto y = p.out[0].to_f64();
      for (std::size_t i = 0; i < y.size(); ++i) {
        bool in_nan_zone = false, kernel_only = false;
        for (std::size_t z = 0; z < p.zones.size(); ++z) {
          const DangerZone& dz = op->domain.danger[z];
          if (dz.kind == DangerKind::UnderflowToZero || p.zones[z].distance[i] != 0) continue;
          (dz.kernel_dependent ? kernel_only : in_nan_zone) = true;
        }
        std::string at = fmt::format("{}({}{}) = {}", type, av[i],
                                     arity == 2 ? fmt::format(", {}", in[1].f64_at(i)) : "", y[i]);
        if (!std::isfinite(y[i]))
          EXPECT_TRUE(in_nan_zone) << at << ": non-finite outside every declared zone";
        else
          EXPECT_FALSE(in_nan_zone) << at << ": inside a zone yet finite";
        (void)kernel_only;
      }
    }
  }
  EXPECT_GT(checked, 40u);
}

// The reverse pass gives gradients for graph inputs, not only initializers: d log(x * w) / dx.
TEST(DangerZones, BackwardReachesGraphInputs) {
  Graph g;
  g.path = "grad_graph";
  g.opset = 13;
  g.nodes.push_back(node_of("Mul", 0));
  g.nodes.back().inputs = {"x", "w"};
  g.nodes.back().outputs = {"p"};
  g.nodes.push_back(node_of("Log", 0));
  g.nodes.back().inputs = {"p"};
  g.nodes.back().outputs = {"y"};
  g.initializers["w"] = f32({2, 3});
  ValueInfo xi;
  xi.name = "x";
  xi.dtype = DType::Float32;
  xi.onnx_elem_type = 1;
  xi.dims = std::vector<std::int64_t>{2};
  g.inputs.push_back(xi);
  ValueInfo yi = xi;
  yi.name = "y";
  g.outputs.push_back(yi);
  Plan plan;
  RunOptions keep;
  keep.keep_all = true;
  RunResult fwd = run_graph(g, {{"x", f32({0.5, 4})}}, plan, keep);
  auto br = run_backward(g, fwd, {{"y", f32({1, 1})}}, plan, {"x", "w"});
  ASSERT_TRUE(br.grads.count("x"));
  EXPECT_NEAR(br.grads.at("x").f64_at(0), 1 / 0.5, 1e-6);
  EXPECT_NEAR(br.grads.at("x").f64_at(1), 1 / 4.0, 1e-6);
  EXPECT_NEAR(br.grads.at("w").f64_at(1), 1 / 3.0, 1e-6);
}

namespace {

// x [2, 8] -> MatMul W [8, 4] -> Softmax -> Log (or LogSoftmax, the fixed twin).
Graph classifier(bool fixed) {
  Graph g;
  g.path = fixed ? "log_softmax" : "log_of_softmax";
  g.opset = 13;
  auto add = [&](const std::string& op, std::vector<std::string> ins, std::string out) {
    Node n;
    n.name = "/" + op;
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = {std::move(out)};
    if (op == "Softmax" || op == "LogSoftmax") n.attrs["axis"] = Attribute::of_int(-1);
    g.nodes.push_back(n);
  };
  add("MatMul", {"x", "W"}, "z");
  if (fixed) {
    add("LogSoftmax", {"z"}, "y");
  } else {
    add("Softmax", {"z"}, "p");
    add("Log", {"p"}, "y");
  }
  std::vector<double> w;
  w.reserve(32);
  for (int i = 0; i < 32; ++i) w.push_back(((i * 7) % 11 - 5) / 2.0);  // |w| up to 2.5
  g.initializers["W"] = f32(w, {8, 4});
  ValueInfo xi;
  xi.name = "x";
  xi.dtype = DType::Float32;
  xi.onnx_elem_type = 1;
  xi.dims = std::vector<std::int64_t>{2, 8};
  g.inputs.push_back(xi);
  ValueInfo yi;
  yi.name = "y";
  yi.dtype = DType::Float32;
  yi.onnx_elem_type = 1;
  yi.dims = std::vector<std::int64_t>{2, 4};
  g.outputs.push_back(yi);
  return g;
}

}  // namespace

TEST(Expose, FindsLogOfSoftmaxAndStaysQuietOnTheTwin) {
  Tensor x =
      f32({0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.0, 0.1, 0.2, 0.1, -0.3, 0.0, 0.1, 0.2, -0.1, 0.3},
          {2, 8});
  ExposeOptions opt;
  opt.binding = "reference";
  opt.clip = {-10, 10};
  opt.iterations = 300;
  for (auto strategy : {ExposeStrategy::Gradient, ExposeStrategy::Grist}) {
    opt.strategy = strategy;
    ExposeResult bug = expose_model(classifier(false), {{"x", x}}, opt);
    ASSERT_TRUE(bug.exposed()) << strategy_name(strategy);
    bool log_exposed = false;
    for (const auto& t : bug.targets)
      if (t.target.op_type == "Log" && t.exposed) {
        log_exposed = true;
        EXPECT_EQ(t.first_node, "/Log");
        EXPECT_NE(t.explanation.find("Softmax /Softmax underflowed to 0"), std::string::npos)
            << t.explanation;
        // The exposing point stays in the clip box and reproduces the NaN/INF.
        for (double v : t.inputs.at("x").to_f64()) EXPECT_TRUE(v >= -10 && v <= 10);
        Plan plan;
        auto y = run_graph(classifier(false), t.inputs, plan).outputs.at("y").to_f64();
        EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](double v) { return !std::isfinite(v); }));
      }
    EXPECT_TRUE(log_exposed);
    ExposeResult twin = expose_model(classifier(true), {{"x", x}}, opt);
    EXPECT_FALSE(twin.exposed()) << strategy_name(strategy);
  }
}

TEST(Expose, TargetsComeFromTheOps) {
  auto targets = expose_targets(classifier(false));
  std::vector<std::string> kinds;
  kinds.reserve(targets.size());
  for (const auto& t : targets) kinds.push_back(t.op_type + ":" + t.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"MatMul:overflow", "Softmax:underflow_to_zero",
                                             "Softmax:zero_divisor", "Log:log_domain"}));
  EXPECT_EQ(targets[3].watched, "p");
}

TEST(Expose, BadOptionsAreErrors) {
  Tensor x(DType::Float32, {2, 8});
  ExposeOptions opt;
  opt.binding = "reference";
  opt.iterations = -1;
  EXPECT_THROW(expose_model(classifier(false), {{"x", x}}, opt), Error);
  opt.iterations = 10;
  opt.vary = ExposeVary::Weights;
  opt.weight_radius = -1;
  EXPECT_THROW(expose_model(classifier(false), {{"x", x}}, opt), Error);
}
