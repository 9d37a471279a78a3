// Minimized inputs (analysis/core/minimize.h): delta debugging keeps the finding and shrinks
// what does not carry it, dimensions shared across inputs together, within its budget.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis/core/minimize.h"
#include "tensor/error.h"

using namespace metaop;

namespace {

Tensor f32(const std::vector<double>& v, Shape s) {
  return Tensor::from_f64(v, std::move(s), DType::Float32);
}

Tensor iota_f32(Shape s, double start = 0) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return f32(v, std::move(s));
}

bool has_above(const Tensor& t, double x) {
  auto v = t.to_f64();
  return std::any_of(v.begin(), v.end(), [&](double e) { return e > x; });
}

}  // namespace

TEST(Minimize, TakeAlongPicksSlicesInOrder) {
  Tensor t = iota_f32({2, 3, 2});
  Tensor s = take_along(t, 1, {2, 0});
  EXPECT_EQ(s.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s.to_f64(), (std::vector<double>{4, 5, 0, 1, 10, 11, 6, 7}));
  EXPECT_THROW(take_along(t, 1, {3}), Error);
  EXPECT_THROW(take_along(t, 3, {0}), Error);
}

// An element-wise op's finding carried by one element of x (a huge value) with y of the same
// shape: both shrink together to one element (a lone x of another shape is refused), the value
// stays huge but gets shorter.
TEST(Minimize, ElementwiseFindingShrinksToOneElementOfEachInput) {
  Tensor x = iota_f32({4, 6});
  std::vector<double> v = x.to_f64();
  v[13] = 3.7189e20;
  x = f32(v, {4, 6});
  Tensor y = iota_f32({4, 6}, 100);
  auto shows = [](const Tensors& in) {
    return in[0].shape() == in[1].shape() && has_above(in[0], 1e20);
  };
  MinimizeOptions opt;
  opt.free = {true, true};
  MinimizeResult r = minimize_inputs({x, y}, opt, shows);
  ASSERT_TRUE(r.shown);
  EXPECT_FALSE(r.exhausted);
  EXPECT_EQ(r.inputs[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(r.inputs[1].shape(), (Shape{1, 1}));
  EXPECT_EQ(r.inputs[0].f64_at(0), static_cast<double>(static_cast<float>(4e20)));
  EXPECT_EQ(r.inputs[1].f64_at(0), 0);  // the value that does not matter becomes 0
  EXPECT_TRUE(shows(r.inputs));
  EXPECT_FALSE(r.steps.empty());
}

// A matrix product's inner dimension is x's last and w's first: it shrinks only when both go
// together (one size's dimensions across inputs), and the marker that carries the finding stays.
TEST(Minimize, SharedInnerDimensionShrinksTogether) {
  Tensor x = iota_f32({3, 8});
  Tensor w = iota_f32({8, 5});
  std::vector<double> v = w.to_f64();
  v[6 * 5 + 2] = -1;  // w[6, 2]
  w = f32(v, {8, 5});
  auto shows = [](const Tensors& in) {
    if (in[0].rank() != 2 || in[1].rank() != 2 || in[0].dim(1) != in[1].dim(0)) return false;
    auto e = in[1].to_f64();
    return std::any_of(e.begin(), e.end(), [](double d) { return d < 0; });
  };
  MinimizeOptions opt;
  opt.free = {true, true};
  MinimizeResult r = minimize_inputs({x, w}, opt, shows);
  ASSERT_TRUE(r.shown);
  EXPECT_EQ(r.inputs[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(r.inputs[1].shape(), (Shape{1, 1}));
  EXPECT_EQ(r.inputs[1].f64_at(0), -1);
}

// Inputs that are not free (an initializer, indices) keep their shape and values, and the
// budget bounds the runs.
TEST(Minimize, FixedInputsStayAndTheBudgetHolds) {
  Tensor x = iota_f32({16}, 1);
  Tensor fixed = iota_f32({16});
  auto shows = [](const Tensors& in) { return in[1].numel() == 16 && has_above(in[0], 10); };
  MinimizeOptions opt;
  opt.free = {true, false};
  MinimizeResult r = minimize_inputs({x, fixed}, opt, shows);
  EXPECT_EQ(r.inputs[0].numel(), 1);
  EXPECT_EQ(r.inputs[1].to_f64(), fixed.to_f64());
  opt.budget = 3;
  MinimizeResult short_run = minimize_inputs({x, fixed}, opt, shows);
  EXPECT_LE(short_run.calls, 3);
  EXPECT_TRUE(short_run.exhausted);
  EXPECT_TRUE(shows(short_run.inputs));
}

TEST(Minimize, AFindingThatDoesNotShowIsLeftAsGiven) {
  Tensor x = iota_f32({4});
  MinimizeOptions opt;
  opt.free = {true};
  MinimizeResult r = minimize_inputs({x}, opt, [](const Tensors&) { return false; });
  EXPECT_FALSE(r.shown);
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.inputs[0].to_f64(), x.to_f64());
}
