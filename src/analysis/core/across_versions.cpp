#include "analysis/core/across_versions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "bindings/factory.h"

namespace metaop {

namespace {

std::vector<long> version_numbers(const std::string& v) {
  std::vector<long> parts;
  std::size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    long n = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])))
      n = n * 10 + (v[i++] - '0');
    parts.push_back(n);
    if (i < v.size() && v[i] == '.' && i + 1 < v.size() &&
        std::isdigit(static_cast<unsigned char>(v[i + 1])))
      ++i;
    else
      break;
  }
  return parts;
}

std::string version_of(const std::string& binding) {
  const BindingInfo* b = find_binding_info(binding);
  return b ? b->version : std::string();
}

}  // namespace

int compare_versions(const std::string& a, const std::string& b) {
  auto x = version_numbers(a), y = version_numbers(b);
  for (std::size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    long p = i < x.size() ? x[i] : 0, q = i < y.size() ? y[i] : 0;
    if (p != q) return p < q ? -1 : 1;
  }
  return 0;
}

std::vector<VersionGroup> version_groups(const std::vector<std::string>& bindings) {
  std::vector<VersionGroup> groups;
  for (const auto& name : bindings) {
    const BindingInfo* b = find_binding_info(name);
    if (!b || b->framework.empty() || name == "reference") continue;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const VersionGroup& x) { return x.framework == b->framework; });
    if (g == groups.end()) {
      groups.push_back({b->framework, {}});
      g = groups.end() - 1;
    }
    if (std::find(g->bindings.begin(), g->bindings.end(), name) == g->bindings.end())
      g->bindings.push_back(name);
  }
  std::erase_if(groups, [](const VersionGroup& g) { return g.bindings.size() < 2; });
  for (auto& g : groups)
    std::stable_sort(g.bindings.begin(), g.bindings.end(),
                     [](const std::string& a, const std::string& b) {
                       return compare_versions(version_of(a), version_of(b)) < 0;
                     });
  return groups;
}

const char* to_string(VersionState s) {
  switch (s) {
    case VersionState::Present:
      return "present";
    case VersionState::Absent:
      return "absent";
    case VersionState::NotRun:
      return "not run";
  }
  return "?";
}

std::string across_versions_word(const std::vector<VersionState>& states) {
  if (states.empty()) return "mixed";
  bool all_present = std::all_of(states.begin(), states.end(),
                                 [](VersionState s) { return s == VersionState::Present; });
  if (all_present) return "present";
  // One change along the versions, every version having run the node.
  if (std::any_of(states.begin(), states.end(),
                  [](VersionState s) { return s == VersionState::NotRun; }))
    return "mixed";
  std::size_t changes = 0;
  for (std::size_t i = 1; i < states.size(); ++i) changes += states[i] != states[i - 1];
  if (changes != 1) return "mixed";
  return states.front() == VersionState::Present ? "fixed" : "new";
}

std::string across_versions_phrase(const VersionGroup& group,
                                   const std::vector<VersionState>& states) {
  std::string word = across_versions_word(states);
  auto label = [&](std::size_t i) {
    std::string v = version_of(group.bindings[i]);
    auto numbers = version_numbers(v);
    return numbers.empty() ? group.bindings[i]
                           : fmt::format("{} ({})", group.bindings[i], fmt::join(numbers, "."));
  };
  if (word == "present") return fmt::format("present in {}", fmt::join(group.bindings, " and "));
  if (word == "fixed" || word == "new") {
    // The first version where the state changed.
    std::size_t i = 1;
    while (states[i] == states[i - 1]) ++i;
    return fmt::format("{} in {}", word, label(i));
  }
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < states.size(); ++i)
    parts.push_back(fmt::format("{} in {}", to_string(states[i]), label(i)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace metaop
