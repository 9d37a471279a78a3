#pragma once
// The worker's side of an isolated binding (isolate.h): the loop a worker process runs.
#include "bindings/binding.h"
#include "bindings/isolate_wire.h"

namespace metaop::isolate {

// Answers MetaOp's requests on `sock` with `b`'s kernels (and its update kernels), the tensors
// going both ways through `region`, large outputs written in the arena on `arena_fd` (mapped
// within `arena_reserve` bytes of addresses), until MetaOp closes its end; then exits the process.
[[noreturn]] void serve(Binding& b, int sock, Region region, int arena_fd,
                        std::size_t arena_reserve);

}  // namespace metaop::isolate
