// What the speed benchmarks share: the wall time of a call, and the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
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

}  // namespace metaop::bench
