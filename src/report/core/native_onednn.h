#pragma once
// reproduce_onednn.cpp, the oneDNN reproducer's framework-native program: a small C++ program
// that runs a finding's node as the oneDNN primitives MetaOp's oneDNN bindings (onednn,
// onednn-2.6) make for it, on the folder's .npy inputs, and prints oneDNN's value, the exact one
// and the error in ULPs (native/reproduce_onednn.cpp.in is its fixed part). The primitive's
// parameters come from the same readers the binding uses (ops/params.h, ops/window.h,
// ops/kernel_util.h); the op-to-algorithm names are restated here, and the ctest
// native_repro_onednn holds one op of each family to the binding's values.
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace metaop {

struct Node;

// One output of the node as the program judges it: its name, the reference's file and the file
// of what the binding gave when the finding was made.
struct NativeOutput {
  std::string name, exact, recorded;
};

// The whole program for a forward finding of `node` (opset `opset`) on `in` (initializers
// included), whose files are `input_files` (one per node input, "" for an omitted one), under
// the dispatch variables `environment` (ONEDNN_MAX_CPU_ISA); "" when the program has no
// primitive for the op (the README then says so).
std::string onednn_program(const Node& node, std::int64_t opset, const std::vector<Tensor>& in,
                           const std::vector<std::string>& input_files,
                           const std::vector<NativeOutput>& outputs,
                           const std::map<std::string, std::string>& environment);

}  // namespace metaop
