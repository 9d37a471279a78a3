#pragma once
// `metaop probe`: an op-level sweep. For each op, the ONNX node tests of that op (their attribute
// settings and shapes) are run with data inputs replaced by edge values -- zeros, signed
// subnormals, tiny and huge magnitudes up to overflow, NaN and infinities, windows and rows
// that are all -inf (element-wise ops also at lengths across SIMD widths), and the op's own
// critical points (from its meta operator's Domain) exactly and one ULP on either side -- and
// every binding is judged against the reference with the op's error model, as `check` does.
// The update ("update" among the ops) is probed the same way: each framework's optimizer on
// edge-value weights, gradients and states, against the float64 rule.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/core/accuracy.h"
#include "analysis/core/finding.h"
#include "ops/optimizer.h"

namespace metaop {

struct ProbeFinding;

struct ProbeOptions {
  std::vector<std::string> ops;       // empty: every op with a data input, and "update"
  std::vector<std::string> bindings;  // framework bindings to judge
  std::vector<DType> dtypes;          // empty: any; else the data inputs' dtype must be one
  std::string testdata;               // folder of ONNX node tests (.../data/node)
  AccumulationBound bound;
  std::function<void(const std::string&)> progress;
  // Results as they go: each case's outcome under every binding is appended to this file as
  // one JSON line when the case is done, so that a killed run loses at most the case it was
  // in. With `resume`, the cases the journal holds are not run again; their outcomes are
  // read back (counts and findings, the worst with its reproducer's folder), so the result
  // equals an uninterrupted run's. Empty: no journal.
  std::string journal;
  bool resume = false;
  // Writes the reproducer of a finding as soon as it is the worst of its (op, binding, kind)
  // (once every binding has run that case, so that it says what the others gave);
  // returns its folder (kept in ProbeFinding::repro).
  std::function<std::string(const ProbeFinding&)> reproducer;
};

struct ProbeFinding : FindingCore {  // phase: forward, or update (op_type update:<setting>)
  std::string test, pattern;         // node test and input pattern
  int cases = 0;                     // cases of this (op, binding, kind) that failed
  // The worst case, for the reproducer: its one-node graph and values (for an update: no graph;
  // inputs weight, gradient and state, outputs the new weight and state).
  Graph graph;
  Tensors inputs, reference_outputs, binding_outputs;
  std::size_t worst_output = 0;  // the worst element (Score's), -1: none (crashes, hangs)
  std::int64_t worst_index = -1;
  OptimizerConfig optimizer;
  long step = 0;
};

struct ProbeResult {
  int cases = 0;  // (test, pattern) pairs run
  std::map<std::string, std::map<std::string, std::map<std::string, int>>>
      counts;                          // op -> binding -> {ok, finding, unsupported} -> count
  std::vector<ProbeFinding> findings;  // one per (op, binding, kind), the worst; ranked
};

// Input patterns: the values each data input cycles through (input k takes element
// (i / P^k) mod P of a pattern of P values, so pairs of inputs meet every combination).
std::vector<std::pair<std::string, std::vector<double>>> probe_patterns(
    const std::vector<double>& critical);

ProbeResult probe(const ProbeOptions& options);

}  // namespace metaop
