#pragma once
// Heap accounting for per-kernel memory: every allocation through malloc and its relatives
// (and so C++ new, and the frameworks' allocators built on them) is counted by the replacements
// in heap.cpp, which forward to glibc's allocator. The executor reads the bytes in use before
// and after a kernel and the peak in between.
#include <cstdint>

namespace metaop {

// False in builds without the malloc replacement (the sanitizer build): every figure is 0.
bool heap_accounting();
// Bytes in use (as malloc_usable_size counts them) by blocks allocated since start-up.
std::int64_t heap_in_use();
// The highest heap_in_use() since the last reset_heap_peak().
std::int64_t heap_peak();
// Starts a new peak at the current level.
void reset_heap_peak();
// Raises the peak to `level` if it is higher: for a kernel that ran in a child process (its
// allocations are the child's), the level before it plus the child's own peak.
void raise_heap_peak(std::int64_t level);

}  // namespace metaop
