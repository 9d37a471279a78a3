#pragma once
// Runs a kernel in a forked child process, so that a framework crash (SIGSEGV, abort) becomes a
// Crash exception in the caller instead of taking the whole run down. Outputs come back over a
// pipe; Unsupported and Error thrown in the child are rethrown with their messages. The
// child's heap peak is carried over into the caller's (tensor/heap.h).
#include <functional>
#include <string>

#include "bindings/binding.h"

namespace metaop {

Tensors run_isolated(const std::string& what, const std::function<Tensors()>& kernel);

// Seconds a kernel run out of process may take before it is killed and reported as a Hang
// (0: no limit). Process-wide; set from --kernel-timeout.
void set_kernel_timeout(double seconds);
double kernel_timeout();

}  // namespace metaop
