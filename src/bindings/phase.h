#pragma once
// The three phases of a kernel's work in training: a node's forward, its backward (the VJP), and
// a weight's update (the optimizer's step). Faults are planted per phase (fault_injection.h) and
// every finding names its phase (analysis/core/finding.h).
#include <fmt/core.h>

#include <string_view>

namespace metaop {

enum class Phase { Forward, Backward, Update };

// The words of the command line, the JSON documents, the probe journal and repro.json: forward,
// backward, update.
const char* to_string(Phase p);
// The reverse; fails (Error) on any other word, as
// "WHERE: phase 'WORD' (expected forward, backward or update)".
Phase parse_phase(std::string_view word, std::string_view where);

}  // namespace metaop

template <>
struct fmt::formatter<metaop::Phase> : fmt::formatter<std::string_view> {
  auto format(metaop::Phase p, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(metaop::to_string(p), ctx);
  }
};
