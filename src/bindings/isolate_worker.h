#pragma once
// The worker's side of an isolated binding (isolate.h): the loop a worker process runs.
#include "bindings/binding.h"
#include "bindings/isolate_wire.h"

namespace metaop::isolate {

// Answers MetaOp's requests on `sock` with `b`'s kernels, the tensors going both ways through
// `region`, until MetaOp closes its end; then exits the process.
[[noreturn]] void serve(Binding& b, int sock, Region region);

}  // namespace metaop::isolate
