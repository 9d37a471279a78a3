#pragma once
// The meta-operator registry: one row per ONNX operator. Each concern attaches to the row
// separately (reference forward, error model; gradient and input domain as they arrive), so
// adding an op means adding its entry in one family file.
#include <functional>
#include <map>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "ops/error_model.h"
#include "ops/manifest.h"

namespace metaop {

using ReferenceForward = std::function<Tensors(const KernelContext&, const Tensors&)>;
// Vector-Jacobian product in float64: the gradients of the inputs (an undefined tensor for an
// input that is not differentiable) given the inputs, the forward outputs and the outputs'
// gradients (undefined for outputs that receive none), each rounded once to its input's dtype.
using ReferenceVjp = std::function<Tensors(const KernelContext&, const Tensors& inputs,
                                           const Tensors& outputs, const Tensors& output_grads)>;

// Where an op's gradient is not unique -- at a kink of a piecewise function (ReLU at 0) or a
// tie of a selection (MaxPool, ReduceMax, TopK, variadic Max) -- every subgradient is a correct
// answer. Per input gradient: the closed interval [lo, hi] each element may take (lo and hi
// empty: the reference's value is the only correct one), and groups of elements whose sum is
// fixed (a tie's gradient may move among its elements but is neither lost nor given twice;
// group -1: none; `group` empty: no such constraint).
struct GradientSet {
  std::vector<double> lo, hi;
  std::vector<std::int64_t> group;
};
using SubgradientFn =
    std::function<std::vector<GradientSet>(const KernelContext&, const Tensors& inputs,
                                           const Tensors& outputs, const Tensors& output_grads)>;

// The order in which a float32 evaluation adds the terms of a sum (multiplies the factors of a
// product): a definition that writes a sum leaves it open, and whether a partial sum overflows
// depends on it. `written`: the order of the elements; `positives_first`: the positive terms,
// then the negative ones (the partial sums reach the sum of the positive terms; for a product,
// the largest magnitudes first); `negatives_first`: the other way round (for a product, the
// smallest magnitudes first).
enum class SumOrder { written, positives_first, negatives_first };
// The float32 sum of `terms` added in `order` (float32 twins of ops that sum).
float float32_sum(std::vector<float> terms, SumOrder order);
using Float32Evaluate =
    std::function<Tensors(const KernelContext&, const Tensors&, SumOrder order)>;

// Thrown by a float32 twin whose evaluation loses the result on these inputs (an intermediate
// overflows where the exact one does not): the definition's float32 limit, which triage reports
// as such however the kernel then fails.
class Float32Lost : public Error {
 public:
  using Error::Error;
};

// How triage (analysis/core/triage.h) evaluates the op's definition faithfully in float32: a
// finding whose kernel is no worse than that evaluation is a float32 limit of the formula, not a
// defect of the kernel.
struct Float32Definition {
  enum class How {
    undeclared,  // not declared: findings of the op are not triaged
    rounded,     // one operation (or a data movement): its float32 evaluation is the exact
                 // result rounded once, the reference itself
    twin,        // `evaluate` computes the definition as the ONNX text writes it, in float32
  };
  How how = How::undeclared;
  Float32Evaluate evaluate;  // twin: float32 inputs in, the outputs in the reference's dtypes
  std::string formula;       // the definition as `evaluate` computes it, in words
  std::string better;        // how a kernel avoids the limit (scaled norms, expm1 ...)
};

// A float32 twin of an op's VJP: the inputs, outputs and output gradients in, the inputs'
// gradients out (in the reference VJP's dtypes), computed as the reference VJP's formula with
// every operation rounded to float32, its sums in `order`.
using Float32VjpEvaluate =
    std::function<Tensors(const KernelContext&, const Tensors& inputs, const Tensors& outputs,
                          const Tensors& output_grads, SumOrder order)>;

// How triage evaluates the op's VJP faithfully in float32 (backward findings of `train --check`):
// `rounded` where each gradient element is one operation on exact values (a data movement, g
// times an exact derivative, g / n), `twin` where it takes sums (products' VJPs, gradients summed
// over broadcasting or repeated copies).
struct Float32Vjp {
  Float32Definition::How how = Float32Definition::How::undeclared;
  Float32VjpEvaluate evaluate;  // twin
  std::string formula;          // the VJP as `evaluate` computes it, in words
  std::string better;           // how a kernel avoids the limit
};

// A choice the ONNX text leaves open (how NaN propagates through a max, which length a formula
// divides by ...): a finding it explains is a `convention`, not a defect.
struct Convention {
  std::string name;  // a word: nan-propagation, subnormal-inputs ...
  std::string onnx;  // what the ONNX text says, or leaves unsaid
  // Whether the choice explains the case: the node, the inputs, the reference's outputs and the
  // binding's, and per output which elements are outside the error model.
  std::function<bool(const KernelContext& c, const Tensors& in, const Tensors& ref,
                     const Tensors& got, const std::vector<std::vector<bool>>& bad)>
      applies;
};

struct MetaOp {
  MetaOp(std::string t, Family f, ReferenceForward r)
      : type(std::move(t)), family(f), reference(std::move(r)) {}
  std::string type;
  Family family;
  // The ONNX domain the op belongs to: empty for the default one (ai.onnx), else its name
  // ("ai.onnx.preview.training"). A node runs on the op only when its domain is this one.
  std::string onnx_domain;
  // Inputs as given (any dtype); computes in float64 and rounds once to the output dtype.
  ReferenceForward reference;
  ErrorModel error;           // attached after registration, in the same family file
  Domain domain;              // likewise (defaults: input 0 is data, no critical points)
  ReferenceVjp vjp;           // likewise; empty: not differentiable (integer, boolean, shape ops)
  SubgradientFn subgradient;  // empty: the gradient is unique wherever it exists
  // The manifest (ops/manifest.h): which inputs are data, sample cases, undefined inputs,
  // training mode, applicable faults, expose's words.
  InputRoles inputs;
  std::vector<CaseSpec> cases;
  Undefined undefined;
  TrainingMode training;
  std::vector<std::string> faults;  // op-specific planted faults that apply (fault_catalog())
  ExplainWords explain;
  // The dtypes ONNX defines the op's data for, where it defines it for no floating type (And:
  // bool; BitShift: the unsigned integers); empty: the floating types (and maybe others). A
  // binding that runs the node as it comes claims these.
  std::vector<DType> dtypes;
  // Triage: the op's definition evaluated in float32, and the choices ONNX leaves open.
  Float32Definition float32;
  Float32Vjp vjp_float32;  // the VJP's, for backward findings
  std::vector<Convention> conventions;
  // Where each concern was declared ("forward", "error model", "vjp" ...): metaop ops --where.
  std::vector<std::pair<std::string, std::source_location>> where;
};

class OpRegistry;

// One op's concerns declared in one block, each recording where:
//   r.op("Softmax", Family::reduce, softmax).error(...).vjp(...).backward_error(...).domain(...);
// The caller's file and line, for rows of op tables: `{.where = here(), .name = ...}` (a default
// member initializer would record the end of the table instead, with GCC 12).
inline std::source_location here(std::source_location l = std::source_location::current()) {
  return l;
}

class OpBuilder {
 public:
  using Where = std::source_location;
  OpBuilder(OpRegistry& r, std::string type) : r_(r), type_(std::move(type)) {}
  OpBuilder& error(ErrorModel m, Where where = Where::current());
  OpBuilder& vjp(ReferenceVjp f, Where where = Where::current());
  OpBuilder& backward_error(VjpMagnitudeFn f, std::string doc, double ulps = 4,
                            Where where = Where::current());
  OpBuilder& domain(Domain d, Where where = Where::current());
  OpBuilder& subgradient(SubgradientFn f, Where where = Where::current());
  OpBuilder& danger(DangerZones zones, Where where = Where::current());
  // The manifest (ops/manifest.h).
  OpBuilder& inputs(InputRoles roles, Where where = Where::current());
  OpBuilder& cases(std::vector<CaseSpec> cases, Where where = Where::current());
  OpBuilder& undefined(Undefined u, Where where = Where::current());
  OpBuilder& training(TrainingMode t, Where where = Where::current());
  OpBuilder& faults(std::vector<std::string> names, Where where = Where::current());
  OpBuilder& explain(ExplainWords words, Where where = Where::current());
  OpBuilder& dtypes(std::vector<DType> types, Where where = Where::current());
  // Triage (Float32Definition): a float32 twin of the definition, or "rounded once".
  OpBuilder& float32(Float32Evaluate twin, std::string formula, std::string better,
                     Where where = Where::current());
  OpBuilder& float32_rounded(Where where = Where::current());
  // Triage of backward findings (Float32Vjp): the VJP's float32 twin, or "rounded once".
  OpBuilder& vjp_float32(Float32VjpEvaluate twin, std::string formula, std::string better,
                         Where where = Where::current());
  OpBuilder& vjp_float32_rounded(Where where = Where::current());
  // The VJP of an op that only moves elements of its `data_inputs` (data_movement_vjp,
  // ops/vjp_util.h) and its float32 twin: the same adjoint, its sums of repeated copies in float32.
  OpBuilder& data_movement_vjp(std::vector<int> data_inputs = {0}, std::vector<int> zero_fill = {},
                               Where where = Where::current());
  OpBuilder& conventions(std::vector<Convention> c, Where where = Where::current());
  OpBuilder& onnx_domain(std::string domain, Where where = Where::current());

 private:
  // Sets one concern of the op (`field`) and records where it was declared.
  template <class D>
  OpBuilder& declare(D MetaOp::*field, D value, const char* concern, Where where);
  OpRegistry& r_;
  std::string type_;
};

class OpRegistry {
 public:
  static const OpRegistry& instance();
  const MetaOp* find(const std::string& type) const;
  std::vector<std::string> types() const;
  // Each concern records where it is declared (the caller's file and line).
  using Where = std::source_location;
  // Adds an op with its float64 reference; its other concerns follow on the builder.
  OpBuilder op(std::string type, Family family, ReferenceForward reference,
               Where where = Where::current());
  // The builder of an op already added (ops declared as table rows).
  OpBuilder amend(const std::string& type);
  void add(MetaOp op, Where where = Where::current());
  // Declares the error model of an op already added.
  void set_error_model(const std::string& type, ErrorModel model, Where where = Where::current());
  void set_domain(const std::string& type, Domain domain, Where where = Where::current());
  // The op's danger zones (ops/danger.h), kept apart from set_domain's other fields.
  void set_danger(const std::string& type, DangerZones zones, Where where = Where::current());
  void set_vjp(const std::string& type, ReferenceVjp vjp, Where where = Where::current());
  void set_subgradient(const std::string& type, SubgradientFn fn, Where where = Where::current());
  // After set_error_model: the VJP's own error magnitudes, for ops that need more than the
  // generic bound, how they are derived, and the ULPs added to them.
  void set_backward_error_model(const std::string& type, VjpMagnitudeFn fn, std::string doc,
                                double ulps = 4, Where where = Where::current());

 private:
  OpRegistry() = default;
  friend class OpBuilder;
  MetaOp& at(const std::string& type, const char* concern);
  std::map<std::string, MetaOp> ops_;
};

// Fails (an internal error naming `what` and the key) unless `type` is a registered meta op.
// Every table or list keyed by op type outside the registry (binding kernels, the fault catalog)
// checks its keys with it, so that a misspelled key is an error rather than an op silently
// "unsupported".
void require_registered(const std::string& type, const std::string& what);

// One registration function per family file.
void register_elementwise_ops(OpRegistry& r);
void register_unary_ops(OpRegistry& r);   // called by register_elementwise_ops
void register_binary_ops(OpRegistry& r);  // likewise
void register_linear_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_pool_ops(OpRegistry& r);
void register_norm_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_softmax_ops(OpRegistry& r);  // called by register_reduce_ops
void register_shape_ops(OpRegistry& r);
void register_index_ops(OpRegistry& r);
void register_resize_ops(OpRegistry& r);
void register_loss_ops(OpRegistry& r);
void register_recurrent_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
void register_signal_ops(OpRegistry& r);
void register_grid_sample_ops(OpRegistry& r);
void register_quantized_ops(OpRegistry& r);
void register_detection_ops(OpRegistry& r);
void register_det_ops(OpRegistry& r);
void register_ngram_ops(OpRegistry& r);
void register_training_ops(OpRegistry& r);
// After every family: the float32 definitions and conventions of the ops whose rows do not
// declare them (ops/float32.cpp).
void register_float32_definitions(OpRegistry& r);
// Then the float32 evaluations of the VJPs that their family files do not declare
// (ops/float32_vjp.cpp).
void register_float32_vjps(OpRegistry& r);

}  // namespace metaop
