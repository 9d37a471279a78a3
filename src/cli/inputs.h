#pragma once
// Model inputs from the command line: files bound by name or position, or seeded random
// values for inputs not given.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace metaop::cli {

struct InputSpec {
  std::vector<std::string> args;  // FILE or NAME=FILE
  bool random = false;
  std::uint64_t seed = 0;
  std::pair<double, double> range{-1.0, 1.0};
};

std::pair<double, double> parse_range(const std::string& s);
Tensor load_tensor_file(const std::string& path);
// Returns the inputs and, for messages, where each came from.
std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> gather_inputs(
    const Graph& g, const InputSpec& spec);

// The graph with its If, Loop and Scan nodes inlined as they run on `inputs`
// (engine/control_flow.h); prints what each did on stderr.
Graph inline_for_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs);

}  // namespace metaop::cli
