#pragma once
// Triage of a finding (FindingClass, analysis/core/finding.h): is the kernel worse than a
// faithful float32 evaluation of the op's definition (a defect), no worse (a float32 limit of the
// formula, with the better algorithm named), or explained by a choice the ONNX text leaves open
// (a convention)? The op's manifest declares both (Float32Definition and Convention,
// ops/registry.h); an op that declares no float32 evaluation leaves its findings untriaged.
#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "analysis/core/finding.h"
#include "ops/registry.h"

namespace metaop {

struct Triage {
  FindingClass cls = FindingClass::Untriaged;
  std::string basis;  // why, in words
  // Sets f's class and basis.
  void apply_to(FindingCore& f) && {
    f.cls = cls;
    f.class_basis = std::move(basis);
  }
};

// Triage of a numerical finding: `got`, the binding's outputs on `in`, judged against the
// reference `ref` with tolerances `tol`. The op's conventions come first (a convention that
// applies explains the finding), then subnormal inputs (a kernel whose outputs are the
// definition's with subnormal inputs read as zero follows a convention too), then the op's float32
// evaluation on the same inputs, in each order its sums may take (SumOrder): a float32 limit when
// every element outside the model is outside it in one of those evaluations too, and there that
// evaluation either lost the result (non-finite, or a relative error of 2^-12 or more: half of
// float32's digits) or is at most 4 times better than the kernel; else a defect (the basis names
// the element where the kernel is worse). Data in float64 leaves a twin untriaged (its faithful
// evaluation is not float32's).
Triage triage(const MetaOp& op, const KernelContext& ctx, const Tensors& in, const Tensors& ref,
              const std::vector<std::vector<double>>& tol, const Tensors& got);

// The same for a node of a graph whose forward was scored by check_local (accuracy.h): its
// registered op, the reference and tolerances kept there.
struct LocalCheck;
Triage triage_local(const Node& node, std::int64_t opset, const Tensors& in, const LocalCheck& lc,
                    const Tensors& got);

// The same for a node's backward call, scored by check_local_backward (accuracy.h): `in`, `out`
// and `grads` the forward's inputs, outputs and output gradients, `got` the kernel's input
// gradients. The faithful evaluation is the op's VJP in float32 (Float32Vjp, ops/registry.h):
// the reference VJP's formula with every operation rounded, or, where each gradient element is
// one operation on exact values, the exact gradient rounded once; subnormal inputs or gradients
// read as zero are a convention. An op whose VJP declares none leaves its findings untriaged.
Triage triage_backward(const Node& node, std::int64_t opset, const Tensors& in, const Tensors& out,
                       const Tensors& grads, const LocalCheck& lc, const Tensors& got);

// The same for a framework optimizer's step of `weight`, scored by check_update
// (analysis/core/train_check.h): `in` the weight, gradient and state before the step, `got` the
// new weight and state; the faithful evaluation is the optimizer's algorithm as PyTorch's
// documentation writes it, in the weight's dtype (ops/optimizer.h, faithful_update). Float64
// weights stay untriaged.
struct OptimizerConfig;
Triage triage_update(const OptimizerConfig& c, long t, const std::string& weight, const Tensors& in,
                     const LocalCheck& lc, const Tensors& got);

// Crashes and hangs are defects; unsupported ops and hazards get no class. Sets f.cls and
// f.class_basis for those kinds (numerical findings are triaged with triage()).
void triage_non_numerical(FindingCore& f);

// Whether a finding of this class fails the run (exit status 1): defect and untriaged always,
// float32-limit with `float32_limits` (--fail-on-float32-limit), convention never. Findings
// without a class (unsupported ops never count; hazards always do) keep their old rule.
bool fails_run(const FindingCore& f, bool float32_limits);

// The findings per class, those without one by their kind (unsupported, hazard): the JSON's
// `classes` of check and probe.
template <typename Findings>
std::map<std::string, int> class_tally(const Findings& findings) {
  std::map<std::string, int> per_class;
  for (const FindingCore& f : findings)
    ++per_class[f.cls != FindingClass::None ? to_string(f.cls) : to_string(f.kind)];
  return per_class;
}

// ": 2 defect, 1 float32-limit, 3 unsupported": class_tally in words, "" for none.
template <typename Findings>
std::string class_counts(const Findings& findings) {
  std::string out;
  for (const auto& [c, n] : class_tally(findings))
    out += fmt::format("{}{} {}", out.empty() ? ": " : ", ", n, c);
  return out;
}

}  // namespace metaop
