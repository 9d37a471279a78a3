// How good is the oracle? Per meta operator, on the binding test cases (the ONNX node tests,
// the synthetic cases and their seeded random variants):
//   tightness:   the worst score of correct kernels -- the frameworks' results that are within
//                the error model -- i.e. how much of the tolerance honest rounding uses;
//   sensitivity: perturbations planted on the reference's own result (relative 1e-5, 1e-4,
//                1e-3 everywhere; 1e-3 of the largest magnitude at one element; outputs at
//                x = 0 off by 1e-3; gradients scaled by 1.01 and 1.05; a gradient at x = 0 off
//                by 1% of |g|, one at a kink outside the subgradient interval), and which of
//                them the op's model catches. A perturbation is *required* where it is larger
//                than 10 times the largest error an honest kernel made on that case.
// Prints a Markdown table (docs/error-models.md) and, with --json, every row.
//
// Usage: bench_oracle NODE_TESTS_DIR [--bindings torch,onednn,opencv-4.6,ort] [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "analysis/core/accuracy.h"
#include "analysis/core/node_cases.h"
#include "bindings/binding.h"
#include "bindings/factory.h"
#include "ops/registry.h"

using namespace metaop;

namespace {

// Normwise error of `got` against `ref` over floating outputs: max|g - r| / max|r|.
double normwise(const Tensors& got, const Tensors& ref) {
  double err = 0, scale = 0;
  for (std::size_t o = 0; o < ref.size() && o < got.size(); ++o) {
    if (!ref[o].defined() || !got[o].defined() || !is_floating(ref[o].dtype())) continue;
    if (got[o].shape() != ref[o].shape()) return INFINITY;
    auto g = got[o].to_f64(), r = ref[o].to_f64();
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!std::isfinite(g[i]) || !std::isfinite(r[i])) continue;
      err = std::max(err, std::fabs(g[i] - r[i]));
      scale = std::max(scale, std::fabs(r[i]));
    }
  }
  return scale > 0 ? err / scale : (err > 0 ? INFINITY : 0);
}

// A copy of the floating outputs with `f(value, index, max|r|)` applied element-wise.
template <typename F>
Tensors perturbed(const Tensors& ref, F f) {
  Tensors out = ref;
  for (auto& t : out) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    auto v = t.to_f64();
    double scale = 0;
    for (double x : v)
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    for (std::size_t i = 0; i < v.size(); ++i)
      if (std::isfinite(v[i])) v[i] = f(v[i], i, scale);
    // Rounded in float64, so that the perturbation is not lost to the output's rounding.
    t = Tensor::from_f64(v, t.shape(), DType::Float64).to(t.dtype());
  }
  return out;
}

struct Tally {
  int required = 0, caught_required = 0, tried = 0, caught = 0;
  void add(bool is_required, bool is_caught) {
    ++tried;
    caught += is_caught;
    if (is_required) {
      ++required;
      caught_required += is_caught;
    }
  }
};

struct OpRow {
  double tightness = 0;     // worst honest score
  double honest_error = 0;  // worst honest normwise error
  int honest = 0, defects = 0;
  double bwd_tightness = 0, bwd_honest_error = 0;
  std::map<std::string, Tally> tally;  // perturbation -> counts
};

const std::vector<std::string> kForward = {"rel 1e-5", "rel 1e-4", "rel 1e-3", "one element",
                                           "at x = 0"};
const std::vector<std::string> kBackward = {"grad x1.01", "grad x1.05", "grad at x = 0",
                                            "grad at a kink"};

// Forward: each binding's result, and the planted perturbations of the reference.
void judge_forward(const Node& node, std::int64_t opset, const Tensors& in,
                   std::vector<std::unique_ptr<Binding>>& bindings, OpRow& row) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op) return;
  KernelContext ctx{node, opset};
  Tensors ref = op->reference(ctx, in);
  auto tol = tolerances(*op, ctx, in, ref);
  double honest = 0;
  for (auto& b : bindings) {
    if (!b->supports(node.op_type).forward) continue;
    Tensors got;
    try {
      got = b->forward(node, opset, in);
    } catch (const std::exception&) {
      continue;
    }
    Score s = score_outputs(got, ref, tol);
    if (s.bad()) {
      ++row.defects;
      continue;
    }
    ++row.honest;
    row.tightness = std::max(row.tightness, s.score);
    honest = std::max(honest, normwise(got, ref));
  }
  row.honest_error = std::max(row.honest_error, honest);
  auto plant = [&](const std::string& name, double size, const Tensors& wrong) {
    if (normwise(wrong, ref) == 0) return;  // nothing moved (all zeros, integer outputs)
    row.tally[name].add(size > 10 * honest, score_outputs(wrong, ref, tol).bad());
  };
  for (auto [name, eps] : {std::pair{"rel 1e-5", 1e-5}, {"rel 1e-4", 1e-4}, {"rel 1e-3", 1e-3}})
    plant(name, eps,
          perturbed(ref, [eps](double v, std::size_t, double) { return v * (1 + eps); }));
  // The element of largest magnitude, off by 1e-3 of it.
  plant("one element", 1e-3, perturbed(ref, [](double v, std::size_t, double scale) {
          return std::fabs(v) == scale ? v + 1e-3 * scale : v;
        }));
  // Element-wise ops: the outputs where input 0 is exactly zero, off by 1e-3 (of max(1, |y|)).
  if (op->family == Family::elementwise && !in.empty() && in[0].defined() &&
      is_floating(in[0].dtype()) && !ref.empty() && ref[0].defined() &&
      ref[0].numel() == in[0].numel()) {
    auto x = in[0].to_f64();
    if (std::count(x.begin(), x.end(), 0.0) > 0)
      plant("at x = 0", 1e-3, perturbed(ref, [&x](double v, std::size_t i, double scale) {
              return x[i] == 0 ? v + 1e-3 * std::max(1.0, scale) : v;
            }));
  }
}

// Backward: each binding's VJP for random output gradients, and planted perturbations of the
// reference VJP.
void judge_backward(const Node& node, std::int64_t opset, const Tensors& in, std::uint64_t seed,
                    std::vector<std::unique_ptr<Binding>>& bindings, OpRow& row) {
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  if (!op || !op->vjp) return;
  KernelContext ctx{node, opset};
  Tensors outs = op->reference(ctx, in);
  if (outs.empty() || !outs[0].defined() || !is_floating(outs[0].dtype())) return;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> gv(static_cast<std::size_t>(outs[0].numel()));
  for (auto& v : gv) v = u(rng);
  Tensors g(outs.size());
  g[0] = Tensor::from_f64(gv, outs[0].shape(), outs[0].dtype());
  Tensors ref;
  try {
    ref = op->vjp(ctx, in, outs, g);
  } catch (const Unsupported&) {
    return;
  }
  double honest = 0;
  for (auto& b : bindings) {
    if (!b->supports(node.op_type).backward) continue;
    try {
      Tensors got = b->backward(node, opset, in, outs, g);
      LocalCheck lc = check_local_backward(node, opset, in, outs, g, got);
      if (lc.score.bad()) continue;
      row.bwd_tightness = std::max(row.bwd_tightness, lc.score.score);
      honest = std::max(honest, normwise(got, ref));
    } catch (const std::exception&) {
    }
  }
  row.bwd_honest_error = std::max(row.bwd_honest_error, honest);
  auto plant = [&](const std::string& name, double size, const Tensors& wrong) {
    if (normwise(wrong, ref) == 0) return;
    bool caught = check_local_backward(node, opset, in, outs, g, wrong).score.bad();
    row.tally[name].add(size > 10 * honest, caught);
  };
  for (double f : {1.01, 1.05})
    plant(fmt::format("grad x{:g}", f), f - 1,
          perturbed(ref, [f](double v, std::size_t, double) { return v * f; }));
  if (op->family != Family::elementwise || in.empty() || !in[0].defined() ||
      in[0].numel() != outs[0].numel() || ref.empty() || !ref[0].defined())
    return;
  auto x = in[0].to_f64();
  std::vector<double> kinks;
  if (op->domain.kinks) kinks = op->domain.kinks(ctx);
  bool zero_is_kink = std::count(kinks.begin(), kinks.end(), 0.0) > 0;
  // At x = 0 where 0 is a smooth point: the gradient off by 1% of |g|.
  if (!zero_is_kink && std::count(x.begin(), x.end(), 0.0) > 0) {
    Tensors wrong = ref;
    auto v = ref[0].to_f64();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (x[i] == 0) v[i] += 0.01 * std::max(std::fabs(gv[i]), 1e-3);
    wrong[0] = Tensor::from_f64(v, ref[0].shape(), DType::Float64).to(ref[0].dtype());
    double scale = 0;
    for (double r : ref[0].to_f64()) scale = std::max(scale, std::fabs(r));
    plant("grad at x = 0", scale > 0 ? 0.01 / scale : 1, wrong);
  }
  // At a kink: above the largest one-sided derivative by 10% of |g|.
  if (op->subgradient && !kinks.empty()) {
    auto sets = op->subgradient(ctx, in, outs, g);
    if (!sets.empty() && !sets[0].hi.empty()) {
      Tensors wrong = ref;
      auto v = ref[0].to_f64();
      bool any = false;
      for (std::size_t i = 0; i < v.size(); ++i)
        if (!std::isnan(sets[0].hi[i])) {
          v[i] = sets[0].hi[i] + 0.1 * std::fabs(gv[i]);
          any = true;
        }
      if (any) {
        wrong[0] = Tensor::from_f64(v, ref[0].shape(), DType::Float64).to(ref[0].dtype());
        plant("grad at a kink", 1, wrong);
      }
    }
  }
}

std::string cell(const Tally* t) {
  if (!t || t->tried == 0) return "";
  if (t->required == 0) return fmt::format("({}/{})", t->caught, t->tried);
  return fmt::format("{}/{}{}", t->caught_required, t->required,
                     t->caught_required < t->required ? " **miss**" : "");
}

// NODE_TESTS_DIR [--bindings LIST] [--json FILE].
struct Options {
  std::string dir, json_path;
  std::vector<std::string> names = {"torch", "onednn", "opencv-4.6", "ort"};
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.dir = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--json") {
      o.json_path = argv[i + 1];
    } else if (flag == "--bindings") {
      o.names.clear();
      std::string list = argv[i + 1];
      for (std::size_t p = 0; p != std::string::npos;) {
        auto q = list.find(',', p);
        o.names.push_back(list.substr(p, q == std::string::npos ? q : q - p));
        p = q == std::string::npos ? q : q + 1;
      }
    }
  }
  return o;
}

// Every op's row: each case's inputs as given and randomized, forward and backward.
std::map<std::string, OpRow> judge_cases(const std::string& dir,
                                         std::vector<std::unique_ptr<Binding>>& bindings) {
  std::map<std::string, OpRow> rows;
  for (const auto& [op, cases] : node_cases_by_op(dir)) {
    OpRow& row = rows[op];
    for (const auto& c : cases) {
      const Node& node = c.graph.nodes[0];
      for (std::size_t k = 0; k < c.input_sets.size(); ++k) {
        Tensors given = node_inputs(c.graph, c.input_sets[k]);
        for (int variant = 0; variant < 2; ++variant) {
          Tensors in = variant == 0 ? given : randomized(node, given, 17 + k);
          try {
            judge_forward(node, c.graph.opset, in, bindings, row);
            judge_backward(node, c.graph.opset, in, 11 + k, bindings, row);
          } catch (const std::exception&) {
            // Inputs the reference rejects (unsupported dtypes, strings): no judgement.
          }
        }
      }
    }
  }
  return rows;
}

// The table: per op, tightness, honest error and, per perturbation, required caught of
// required (or, in parentheses, caught of tried where none was required); the summary after
// it; every row in JSON to `json_path` unless empty.
void print_table(const std::map<std::string, OpRow>& rows, const std::string& json_path) {
  fmt::print("| op | honest cases | worst honest score (forward / backward) | honest error |");
  for (const auto& p : kForward) fmt::print(" {} |", p);
  for (const auto& p : kBackward) fmt::print(" {} |", p);
  fmt::print("\n|---|---|---|---|{}\n", std::string((kForward.size() + kBackward.size()) * 4, '-'));
  std::vector<double> tight;
  int misses = 0, loose = 0;
  nlohmann::json out = nlohmann::json::array();
  int exact = 0;
  for (const auto& [op, r] : rows) {
    if (r.honest == 0 && r.tally.empty()) continue;
    // Exact models (data movement, comparisons, selections) admit no error at all: nothing of
    // their tolerance is unused.
    const ErrorModel& em = OpRegistry::instance().find(op)->error;
    bool rounding = em.ulps > 0 || em.magnitude;
    exact += !rounding;
    // Ops whose honest kernels were exact on every case (correctly rounded Add, Sqrt ...) say
    // nothing about slack: left out of the median.
    if (r.honest > 0 && rounding && r.honest_error > 0) {
      tight.push_back(r.tightness);
      loose += r.tightness < 1e-3;
    }
    fmt::print("| {} | {} | {:.2g} / {:.2g} | {:.1e} |", op, r.honest, r.tightness, r.bwd_tightness,
               r.honest_error);
    nlohmann::json j = {{"op", op},
                        {"honest", r.honest},
                        {"defects", r.defects},
                        {"tightness", r.tightness},
                        {"backward_tightness", r.bwd_tightness},
                        {"honest_error", r.honest_error},
                        {"backward_honest_error", r.bwd_honest_error}};
    for (const auto* list : {&kForward, &kBackward})
      for (const auto& p : *list) {
        auto it = r.tally.find(p);
        const Tally* t = it == r.tally.end() ? nullptr : &it->second;
        fmt::print(" {} |", cell(t));
        if (t) {
          misses += t->required - t->caught_required;
          j[p] = {{"required", t->required},
                  {"caught_required", t->caught_required},
                  {"tried", t->tried},
                  {"caught", t->caught}};
        }
      }
    fmt::print("\n");
    out.push_back(j);
  }
  std::sort(tight.begin(), tight.end());
  double median = tight.empty() ? 0 : tight[tight.size() / 2];
  fmt::print(
      "\n{} ops with an exact model; {} ops whose model allows rounding and whose honest kernels "
      "rounded: median worst honest score {:.3g} (lowest {:.3g}), {} below 1e-3 (a tolerance "
      "more than 1000x the worst honest error); {} required perturbations missed\n",
      exact, tight.size(), median, tight.empty() ? 0.0 : tight.front(), loose, misses);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_oracle NODE_TESTS_DIR [--bindings LIST] [--json FILE]\n");
    return 2;
  }
  Options o = parse_options(argc, argv);
  std::vector<std::unique_ptr<Binding>> bindings;
  bindings.reserve(o.names.size());
  for (const auto& n : o.names) bindings.push_back(make_binding(n));
  print_table(judge_cases(o.dir, bindings), o.json_path);
  return 0;
}
