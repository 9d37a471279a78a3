#pragma once
// Heap accounting for per-kernel memory: every allocation through malloc and its relatives
// (and so C++ new, and the frameworks' allocators built on them) is counted by the replacements
// in heap.cpp, which forward to glibc's allocator. The executor reads the bytes in use before
// and after a kernel and the peak in between.
#include <cstdint>
#include <string>

namespace metaop {

// Bytes in use (as malloc_usable_size counts them) by blocks allocated since start-up.
// False in builds without the malloc replacement (METAOP_NO_MALLOC_HOOKS): every figure is 0.
bool heap_accounting();
std::int64_t heap_in_use();
// The highest heap_in_use() since the last reset_heap_peak().
std::int64_t heap_peak();
// Starts a new peak at the current level.
void reset_heap_peak();
// Raises the peak to `level` if it is higher: for a kernel that ran in a child process (its
// allocations are the child's), the level before it plus the child's own peak.
void raise_heap_peak(std::int64_t level);

// Writes a pattern into large blocks (4 kB and more) when they are freed: their first and last
// 64 bytes and 64 bytes at every kilobyte (framework workers: an output a kernel leaves unwritten,
// or any stretch of it longer than a kilobyte, then shows as garbage, not as whatever the memory
// held before).
void set_heap_poison(bool on);

// Keeps the memory the process frees for its next allocations: blocks under 64 MiB come from the
// heap rather than from their own mappings, and the heap is not trimmed until 256 MiB of it are
// free. Kernels allocate and free buffers of the same sizes node after node; handed back to the
// system each time, every one costs page faults again (a quarter of resnet50's run time node by
// node on torch). Called first by metaop and the benchmarks; workers inherit it.
void keep_freed_memory();

// The memory budget of the process (--max-memory; default half of physical memory), for what
// it allocates after the budget is set (the libraries' start-up allocations aside). Tensors
// check it before they allocate (check_budget, with a message naming what and how much), and
// the allocator refuses any large block (64 MiB and more) that would take the heap in use past
// it, so that a kernel sizing a buffer from untrusted dims gets std::bad_alloc instead of
// taking the machine's memory.
void set_memory_budget(std::int64_t bytes);  // 0: the default
std::int64_t memory_budget();
std::int64_t physical_memory();
// Fails (Error) when `bytes` more would take the heap in use past the budget; `what` names the
// value (and the caller adds the node).
void check_budget(std::int64_t bytes, const std::string& what);
// The size of the last block the allocator refused for the budget (0: none), for messages
// after a std::bad_alloc.
std::int64_t refused_allocation();
// "1.6 GB", "512 kB": sizes for people.
std::string format_bytes(std::int64_t bytes);

}  // namespace metaop
