// What the unit test files share: scratch paths, seeded values, nodes and their reference run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/registry.h"

namespace metaop::unit {

inline std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "metaop_unit_tests";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline Node make_node(const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs) {
  Node n;
  n.name = op + "_test";
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

inline Tensors run_ref(const Node& n, const Tensors& in, std::int64_t opset = 13) {
  return OpRegistry::instance().find(n.op_type)->reference(KernelContext{n, opset}, in);
}

}  // namespace metaop::unit
