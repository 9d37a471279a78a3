#pragma once
// The bindings by name: the ones built into MetaOp (the float64 reference; ONNX Runtime, which
// runs in its own Node.js worker) and the framework plugins (plugin.h), each described without
// loading its framework. Framework bindings are made isolated in worker processes unless the
// user asked for them in process (isolate.h).
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"
#include "bindings/plugin.h"

namespace metaop {

// Intra-op threads of every framework and of the reference's BLAS (process-wide); 1 by default,
// for reproducible comparisons.
void set_threads(int n);

// Every binding: the built-in ones first, then the plugins' in the order found.
const std::vector<BindingInfo>& binding_infos();
// nullptr when no binding has that name.
const BindingInfo* find_binding_info(const std::string& name);
std::vector<std::string> binding_names();
// The framework's version a binding runs ("2.15.0" for torch), as reports and reproducers name
// it beside the binding; empty for a name that is not a binding.
std::string binding_version(const std::string& name);
// Fails naming the binding, the available ones and any plugin that could not be loaded.
const BindingInfo& binding_info(const std::string& name);
std::unique_ptr<Binding> make_binding(const std::string& name);

}  // namespace metaop
