// What the speed benchmarks share: the wall time of a call, and the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace metaop::bench {

template <typename F>
double seconds(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The model benchmarks' arguments: MODELS_DIR [ARCH] [REPEAT] (defaults resnet50, 5 repeats);
// nullopt after printing the usage when MODELS_DIR is missing.
struct ModelArgs {
  std::string dir, arch;
  int repeat;
};
inline std::optional<ModelArgs> model_args(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODELS_DIR [ARCH] [REPEAT]\n", argv[0]);
    return std::nullopt;
  }
  return ModelArgs{argv[1], argc > 2 ? argv[2] : "resnet50", argc > 3 ? std::stoi(argv[3]) : 5};
}

}  // namespace metaop::bench
