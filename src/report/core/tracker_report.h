#pragma once
// report.md of a reproducer folder: a forward finding written for the framework's issue
// tracker, standing on its own: a title with the values, the class and why, the versions (the
// framework's build and the CPU's instruction sets), the one-node graph in text, the input,
// the observed value against the exact one (the ONNX definition in float64, the formula the
// float32 evaluation follows) and the command that shows it without MetaOp. It names no path
// of the machine that wrote it.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "analysis/core/finding.h"
#include "graph/graph.h"

namespace metaop {

using Tensors = std::vector<Tensor>;

struct TrackerCase {
  const Node* node = nullptr;
  std::int64_t opset = 0;
  Tensors inputs;         // the node's inputs (initializers included), in node order
  std::vector<bool> fed;  // which of them are files of the folder (the others are in the model)
  std::vector<std::string> input_files;  // the file of each fed input, in node order
  Tensors reference, got;                // the reference's outputs (rounded once) and the binding's
  std::string framework;  // the framework's name as its users know it ("onnxruntime")
  // The framework-native script: what it needs ("onnxruntime and numpy") and the commands that
  // run it in the folder, one per line; "" without one.
  std::string script_needs, script_commands;
};

std::string tracker_report(const FindingCore& f, const TrackerCase& c);

// The CPU's model name and the SIMD instruction sets it has (from /proc/cpuinfo), for reports;
// "unknown CPU" where that cannot be read.
std::string cpu_description();

// The CPU's feature flags as /proc/cpuinfo names them (avx2, avx512f, avx512_bf16 ...); empty
// where that cannot be read.
std::set<std::string> cpu_flags();

}  // namespace metaop
