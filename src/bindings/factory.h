#pragma once
// The bindings by name: the one place that knows every framework binding (each lives in its own
// library target, docs/design.md "Layers"). Framework bindings are made isolated in worker
// processes unless the user asked for them in process (isolate.h).
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

// Intra-op threads of every framework and of the reference's BLAS (process-wide); 1 by default,
// for reproducible comparisons.
void set_threads(int n);

// The bindings by name: reference, torch, onednn, opencv, ort, ort-wasm.
std::vector<std::string> binding_names();
std::unique_ptr<Binding> make_binding(const std::string& name);

}  // namespace metaop
