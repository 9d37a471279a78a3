#include "ops/manifest.h"

#include <algorithm>

namespace metaop {

const char* family_name(Family f) {
  switch (f) {
    case Family::elementwise:
      return "elementwise";
    case Family::linear:
      return "linear";
    case Family::conv:
      return "conv";
    case Family::pool:
      return "pool";
    case Family::norm:
      return "norm";
    case Family::reduce:
      return "reduce";
    case Family::shape:
      return "shape";
    case Family::index:
      return "index";
    case Family::loss:
      return "loss";
  }
  return "?";
}

bool moves_data(Family f) {
  return f == Family::shape || f == Family::index;
}

std::uint64_t case_seed(const std::string& op, std::size_t n) {
  // FNV-1a over the op's name, then the case number: fixed, whatever the platform's std::hash.
  std::uint64_t h = 14695981039346656037ULL;
  auto mix = [&h](unsigned char b) {
    h ^= b;
    h *= 1099511628211ULL;
  };
  for (char ch : op) mix(static_cast<unsigned char>(ch));
  mix(0);
  for (int k = 0; k < 8; ++k) mix(static_cast<unsigned char>((n >> (8 * k)) & 0xff));
  return h;
}

bool InputRoles::is_data(std::size_t k, DType dtype) const {
  if (std::find(data.begin(), data.end(), static_cast<int>(k)) != data.end()) return true;
  return floating_are_data && is_floating(dtype);
}

bool InputRoles::is_kept(std::size_t k) const {
  return std::find(kept.begin(), kept.end(), static_cast<int>(k)) != kept.end();
}

InputRoles InputRoles::all(int n) {
  InputRoles r;
  r.data.clear();
  for (int k = 0; k < n; ++k) r.data.push_back(k);
  return r;
}

}  // namespace metaop
