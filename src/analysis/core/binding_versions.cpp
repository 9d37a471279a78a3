// Findings' JSON names the framework version beside the binding (finding.h), from the bindings'
// descriptions; kept apart from finding.cpp so that the readers of untrusted files build without
// the bindings (tests/fuzz).
#include "analysis/core/finding.h"
#include "bindings/factory.h"

namespace metaop {

namespace {

[[maybe_unused]] const bool registered = [] {
  set_binding_version_lookup(&binding_version);
  return true;
}();

}  // namespace

}  // namespace metaop
