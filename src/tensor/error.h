#pragma once
// One exception type for every user-facing failure. The message must name the file, node or
// value at fault; the CLI prints it as one line and exits with code 2.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace metaop {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Something MetaOp does not handle (an operator, attribute value, dtype or mode). Distinct from
// Error: "unsupported" is a normal, recorded answer, never a crash.
class Unsupported : public Error {
 public:
  using Error::Error;
};

// The binding cannot run here at all: its plugin does not load, its worker cannot start, its
// framework finds no device. Not a finding about a node: the run ends (exit 2) with the reason.
class BindingUnavailable : public Error {
 public:
  using Error::Error;
};

// A framework kernel that crashed (a signal such as SIGSEGV, or abort) while running a node.
// A finding in its own right; the run goes on with the other nodes.
class Crash : public Error {
 public:
  using Error::Error;
};

// A framework kernel that did not finish within the kernel timeout (--kernel-timeout); its
// process was killed. A finding of its own kind ("hang"); the run goes on.
class Hang : public Crash {
 public:
  using Crash::Crash;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace metaop
